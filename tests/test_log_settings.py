"""Triton's log lines and log settings: the formats, what shows at which settings, and the logging
extension's checks and texts (the same as Triton 2.51's; tests/differential/test_logging.py compares)."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from nereid.cli import parse_settings
from nereid.errors import InternalError, InvalidArgument, Unavailable, Unsupported
from nereid.log_settings import LogSettings, ServerLog, TritonFormatter, log_at, verbose

# The patterns Triton's own QA tests (qa/L0_logging/log_format_test.py) read log records with.
DEFAULT_RECORD = re.compile(
    r"(?P<level>\w)(?P<month>\d{2})(?P<day>\d{2}) (?P<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) (?P<pid>\d+) "
    r"(?P<file>[\w\.]+):(?P<line>\d+)] (?P<message>.*)",
    re.DOTALL,
)
ISO8601_RECORD = re.compile(
    r"(?P<ISO8601_timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<level>\w+) (?P<pid>\d+) "
    r"(?P<file>.+):(?P<line>\d+)] (?P<message>.*)",
    re.DOTALL,
)


def _record(message: str, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("nereid", level, "/x/server.py", 42, message, (), None)
    record.created = 1_700_000_000.25  # 2023-11-14 22:13:20.25 UTC
    record.__dict__.update(extra)
    return record


def test_default_format_is_tritons() -> None:
    line = TritonFormatter("default").format(_record('model "m" loaded'))
    match = DEFAULT_RECORD.fullmatch(line)
    assert match is not None, line
    assert line.startswith("I1114 22:13:20.250000 ")
    assert (match["file"], match["line"]) == ("server.py", "42")
    assert match["message"] == '"model \\"m\\" loaded"'  # a JSON string, as Triton writes messages


def test_iso8601_format_is_tritons() -> None:
    line = TritonFormatter("ISO8601").format(_record("x", logging.WARNING))
    match = ISO8601_RECORD.fullmatch(line)
    assert match is not None, line
    assert (match["ISO8601_timestamp"], match["level"]) == ("2023-11-14T22:13:20Z", "W")


def test_escaping_keeps_a_message_on_its_line_unless_switched_off() -> None:
    injected = "ok\nI0205 18:34:18.707423 1 file.cc:123] forged \x1b[31m"
    escaped = TritonFormatter("default").format(_record(injected))
    assert "\n" not in escaped and "\\u001b" in escaped
    plain = TritonFormatter("default", escape=False).format(_record(injected))
    assert plain.endswith("] " + injected)


def test_a_table_is_a_multi_line_entry() -> None:
    table = "+---+\n| a |\n+---+"
    line = TritonFormatter("default").format(_record("", triton_object=table))
    assert line.endswith("server.py:42] \n" + table)


def test_levels_show_as_the_settings_say() -> None:
    settings = LogSettings(log_info=False, log_verbose_level=2)
    assert settings.shows(logging.ERROR) and settings.shows(logging.WARNING)
    assert not settings.shows(logging.INFO)
    # verbose messages depend on the verbose level alone, and show with the letter I
    assert settings.shows(verbose(1)) and settings.shows(verbose(2)) and not settings.shows(verbose(3))
    assert TritonFormatter().format(_record("v", verbose(2))).startswith("I")
    assert LogSettings().lowest_level() == logging.INFO
    assert settings.lowest_level() == verbose(2)


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The real root logger (loggers cache their levels against it), restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _server_log(root: logging.Logger, **settings: object) -> tuple[ServerLog, io.StringIO, logging.Logger]:
    stream = io.StringIO()
    server_log = ServerLog(LogSettings(**settings))  # type: ignore[arg-type]
    server_log.install(stream, root)
    return server_log, stream, logging.getLogger("nereid.test_log_settings")


def test_updates_take_effect_at_once(root_logger: logging.Logger) -> None:
    server_log, stream, logger = _server_log(root_logger)
    logger.debug("hidden")
    assert not logger.isEnabledFor(logging.DEBUG)
    server_log.update({"log_verbose_level": 1, "log_info": False, "log_format": "ISO8601"})
    assert logger.isEnabledFor(logging.DEBUG)
    logger.debug("shown")
    logger.info("not shown")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and ISO8601_RECORD.fullmatch(lines[0]) and '"shown"' in lines[0]


def test_model_messages_carry_the_model_file_and_line(root_logger: logging.Logger) -> None:
    _, stream, logger = _server_log(root_logger)
    log_at(logger, logging.INFO, "model.py", 7, "hello")
    assert re.search(r" model\.py:7\] \"hello\"$", stream.getvalue().strip())


def test_update_checks_in_tritons_order_and_keeps_what_came_before() -> None:
    server_log = ServerLog(LogSettings())
    with pytest.raises(Unsupported, match="log file location can not be updated through network protocol"):
        server_log.update({"log_info": False, "log_file": ""})
    assert server_log.settings.log_info  # log_file is checked before anything changes
    with pytest.raises(
        InternalError, match="attempt to access JSON non-unsigned-integer as unsigned-integer"
    ):
        server_log.update({"log_verbose_level": -1, "log_info": False, "log_format": "ISO8601"})
    assert not server_log.settings.log_info  # set before the verbose level failed
    assert server_log.settings.log_format == "default"  # checked after it: untouched
    with pytest.raises(InternalError, match="attempt to access JSON non-boolean as boolean"):
        server_log.update({"log_warning": "true"})
    with pytest.raises(InternalError, match="attempt to access JSON non-string as string"):
        server_log.update({"log_format": 1})
    with pytest.raises(Unavailable, match="invalid argument for --log_format, got: xml"):
        server_log.update({"log_format": "xml"})
    assert server_log.update({"log_info": None, "unknown": 3}).log_info is False  # null and unknown: ignored


def test_typed_updates_have_the_grpc_texts() -> None:
    server_log = ServerLog(LogSettings())
    with pytest.raises(InvalidArgument, match="expect boolean for 'log_info'"):
        server_log.update({"log_info": None}, typed=True)
    with pytest.raises(InvalidArgument, match="expect int32 for 'log_verbose_level'"):
        server_log.update({"log_verbose_level": "1"}, typed=True)
    with pytest.raises(InvalidArgument, match="expect string for 'log_format'"):
        server_log.update({"log_format": True}, typed=True)
    with pytest.raises(InvalidArgument, match="invalid argument for log_format, got: xml"):
        server_log.update({"log_format": "xml"}, typed=True)


@pytest.mark.parametrize(("sent", "kept"), [(5, 5), (2**31 - 1, 2**31 - 1), (2**31, 0), (2**32 + 1, 1)])
def test_verbose_levels_wrap_as_tritons(sent: int, kept: int) -> None:
    server_log = ServerLog(LogSettings())
    assert server_log.update({"log_verbose_level": sent}).log_verbose_level == kept


def test_command_line_flags_set_the_log() -> None:
    settings, warnings = parse_settings(
        [
            "--model-repository=/m",
            "--log-verbose=2",
            "--log-info=false",
            "--log-warning=false",
            "--log-error=true",
            "--log-format=ISO8601",
            "--log-file=/tmp/x.log",
        ]
    )
    assert settings.log == LogSettings("/tmp/x.log", False, False, True, 2, "ISO8601")
    assert not [w for w in warnings if "--log" in w]
    with pytest.raises(SystemExit):
        parse_settings(["--model-repository=/m", "--log-format=json"])


def test_the_log_file_receives_the_lines(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    server_log = ServerLog(LogSettings(log_file=str(path)))
    root = logging.Logger("file-root")
    server_log.install(None, root)
    root.warning("to the file")
    for handler in root.handlers:
        handler.flush()
    assert DEFAULT_RECORD.fullmatch(path.read_text().strip())


def test_a_log_file_that_cannot_be_written_stops_the_server_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nereid.cli import main

    assert main([f"--model-repository={tmp_path}", f"--log-file={tmp_path}/missing/server.log"]) == 1
    assert "cannot write the log file" in capsys.readouterr().err
