"""The tensors the sequence batcher adds to each request: control inputs and implicit state.

Control inputs (`sequence_batching.control_input`) tell the model, per batch row, whether the row starts
or ends its sequence, whether it holds a real request (READY), and the sequence's correlation id.
Implicit state (`sequence_batching.state`) carries a model output of one request of a sequence into an
input of the next; a request that starts a sequence gets the initial state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from nereid.backends.base import SEQUENCE_END, SEQUENCE_START, BackendRequest, Outputs
from nereid.datatypes import config_to_wire, deserialize_bytes, numpy_dtype
from nereid.errors import InvalidArgument, ModelConfigError

_Kind = mc.ModelSequenceBatching.Control
_FLAG_KINDS = {
    _Kind.CONTROL_SEQUENCE_START: SEQUENCE_START,
    _Kind.CONTROL_SEQUENCE_END: SEQUENCE_END,
}

State = dict[str, np.ndarray]  # state input name -> the tensor the next request of the sequence gets
_CORRID_CACHE = 4096  # CORRID tensors kept for reuse
_UINT64_MASK = (1 << 64) - 1  # negative gRPC int64 ids wrap as Triton casts them to uint64


@dataclass(frozen=True, slots=True)
class _FlagControl:
    """A START, END or READY input: `values[flag set]` is the row it gets."""

    name: str
    flag: int  # the request flag it reflects; 0 for READY, which is true for every real request
    values: tuple[np.ndarray, np.ndarray]  # (false, true), one row each


@dataclass(frozen=True, slots=True)
class _CorridControl:
    name: str
    dtype: np.dtype
    datatype: str  # the protocol's type name (UINT64, BYTES...), for messages


@dataclass(frozen=True, slots=True)
class _State:
    input_name: str
    output_name: str
    initial: np.ndarray  # one row's initial value (no batch dimension)


class SequenceTensors:
    """Builds each request's control and state inputs and takes the next state from its outputs."""

    def __init__(self, config: mc.ModelConfig, model_dir: Path) -> None:
        self._model = config.name
        self._batched = config.max_batch_size > 0
        self._flags: list[_FlagControl] = []
        self._corrid: _CorridControl | None = None
        batching = config.sequence_batching
        for control_input in batching.control_input:
            control = control_input.control[0]
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                datatype = config_to_wire(mc.DataType.Name(control.data_type))
                self._corrid = _CorridControl(control_input.name, numpy_dtype(datatype), datatype)
                continue
            dtype: np.dtype
            if len(control.int32_false_true):
                pair, dtype = list(control.int32_false_true), np.dtype(np.int32)
            elif len(control.fp32_false_true):
                pair, dtype = list(control.fp32_false_true), np.dtype(np.float32)
            else:
                pair, dtype = list(control.bool_false_true), np.dtype(np.bool_)
            false, true = (self._row(np.array(v, dtype=dtype)) for v in pair)
            self._flags.append(
                _FlagControl(control_input.name, _FLAG_KINDS.get(control.kind, 0), (false, true))
            )
        self._states = [
            _State(s.input_name, s.output_name, _initial_state(config.name, s, model_dir))
            for s in batching.state
        ]
        self.state_outputs = tuple(s.output_name for s in self._states)
        # Every request of a sequence gets the same CORRID tensor: built once, shared (read-only).
        self._corrid_rows: dict[tuple[int | str, int], np.ndarray] = {}

    @property
    def has_state(self) -> bool:
        return bool(self._states)

    def _row(self, value: np.ndarray) -> np.ndarray:
        """One batch row of a scalar control: shape [1, 1] when the model batches, [1] when not."""
        row = value.reshape((1, 1) if self._batched else (1,))
        row.flags.writeable = False  # shared by every request
        return row

    def rows(self, request: BackendRequest) -> int:
        """Batch rows the request carries."""
        if not self._batched or not request.inputs:
            return 1
        return int(next(iter(request.inputs.values())).shape[0])

    def prepare(self, request: BackendRequest, state: State | None) -> BackendRequest:
        """The request as the model sees it: its inputs plus controls and state; its outputs plus the
        state outputs. `state` is the sequence's current state (None: the initial one)."""
        rows = self.rows(request)
        inputs = dict(request.inputs)
        for control in self._flags:
            row = control.values[1 if control.flag == 0 or request.flags & control.flag else 0]
            inputs[control.name] = row if rows == 1 else np.repeat(row, rows, axis=0)
        if self._corrid is not None:
            key = (request.correlation_id, rows)
            corrid = self._corrid_rows.get(key)
            if corrid is None:
                if len(self._corrid_rows) >= _CORRID_CACHE:
                    self._corrid_rows.clear()
                corrid = self._corrid_rows[key] = self._corrid_tensor(
                    self._corrid, request.correlation_id, rows
                )
            inputs[self._corrid.name] = corrid
        if self._states:
            current = state if state is not None and not request.flags & SEQUENCE_START else None
            for s in self._states:
                inputs[s.input_name] = current[s.input_name] if current else self._initial(s, rows)
        outputs = request.outputs
        missing = [name for name in self.state_outputs if name not in outputs]
        if missing:
            outputs = (*outputs, *missing)
        return BackendRequest(
            inputs,
            outputs,
            request.id,
            request.parameters,
            request.correlation_id,
            request.flags,
            request.timeout_us,
            trace=request.trace,  # the pool records the execution on the request's trace
        )

    def _initial(self, state: _State, rows: int) -> np.ndarray:
        if not self._batched:
            return state.initial
        return np.repeat(state.initial[np.newaxis], rows, axis=0)

    def check(self, request: BackendRequest) -> None:
        """Refuse a request whose kind of correlation id (string or number) the CORRID control input does
        not take: string ids need TYPE_STRING, numeric ids one of the integer types."""
        control = self._corrid
        if control is None:
            return
        given = "BYTES" if isinstance(request.correlation_id, str) else "UINT64"
        if (given == "BYTES") != (control.dtype == np.object_):
            raise InvalidArgument(
                f"sequence batching control '{control.name}' data-type is '{given}', but model "
                f"'{self._model}' expects '{control.datatype}'"
            )

    def _corrid_tensor(self, control: _CorridControl, correlation_id: int | str, rows: int) -> np.ndarray:
        shape = (rows, 1) if self._batched else (1,)
        if control.dtype == np.object_:
            tensor = np.full(shape, str(correlation_id).encode(), dtype=np.object_)
        else:
            # Ids wrap into narrower or signed types, as they do when Triton copies them into the tensor.
            number = (
                int(correlation_id) if not isinstance(correlation_id, str) else 0
            )  # check() refused strings
            tensor = np.full(shape, number & _UINT64_MASK, dtype=np.uint64).astype(control.dtype)
        tensor.flags.writeable = False
        return tensor

    def take_state(self, request: BackendRequest, outputs: Outputs, previous: State | None) -> State | None:
        """The state the next request of the sequence gets; state outputs the client did not ask for are
        removed from `outputs`. A model that leaves a state output out keeps the previous value."""
        if not self._states:
            return None
        state: State = dict(previous) if previous else {}
        for s in self._states:
            value = outputs.get(s.output_name)
            if s.output_name not in request.outputs:
                outputs.pop(s.output_name, None)
            if value is not None:
                state[s.input_name] = value
        return state


def _initial_state(model: str, state: mc.ModelSequenceBatching.State, model_dir: Path) -> np.ndarray:
    """One row of the state's initial value: `initial_state` zeros or file contents, else zeros.
    Variable dimensions of a state without an initial_state start at 1."""
    dtype = numpy_dtype(config_to_wire(mc.DataType.Name(state.data_type)))
    if not state.initial_state:
        shape = tuple(d if d > 0 else 1 for d in state.dims)
        return _zeros(shape, dtype)
    initial = state.initial_state[0]
    shape = tuple(initial.dims)
    if any(d < 0 for d in shape):
        raise ModelConfigError(
            f"model '{model}': initial_state '{initial.name}' of state '{state.input_name}' must have fixed dims"
        )
    if initial.WhichOneof("state_data") == "data_file":
        path = model_dir / "initial_state" / initial.data_file
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ModelConfigError(
                f"model '{model}': cannot read the initial state file of state '{state.input_name}': {exc}"
            ) from None
        count = int(np.prod(shape))
        if dtype == np.object_:
            return _string_state(model, state.input_name, raw, count, shape)
        if len(raw) < count * dtype.itemsize:
            raise ModelConfigError(
                f"model '{model}': initial state file '{initial.data_file}' holds {len(raw)} bytes, but "
                f"state '{state.input_name}' of shape {list(shape)} needs {count * dtype.itemsize}"
            )
        # Triton takes the leading bytes of a longer file.
        array = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
        array.flags.writeable = False
        return array
    return _zeros(shape, dtype)


def _string_state(model: str, name: str, raw: bytes, count: int, shape: tuple[int, ...]) -> np.ndarray:
    """A STRING state's initial value from its file. Triton passes the file through unchecked: here a file
    of `count` length-prefixed elements gives those, and any other file is the one element of a
    one-element state."""
    try:
        array = deserialize_bytes(raw, count, "initial state")
    except InvalidArgument:
        if count != 1:
            raise ModelConfigError(
                f"model '{model}': the initial state file of STRING state '{name}' must hold its {count} "
                "elements length-prefixed"
            ) from None
        array = np.array([raw], dtype=np.object_)
    array = array.reshape(shape)
    array.flags.writeable = False
    return array


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    array = np.full(shape, b"", dtype=np.object_) if dtype == np.object_ else np.zeros(shape, dtype=dtype)
    array.flags.writeable = False
    return array
