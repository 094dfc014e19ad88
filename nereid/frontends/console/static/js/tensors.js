// The v2 infer request and response with the binary tensor extension: a JSON header, then each binary
// tensor's bytes (BYTES elements each behind a 4-byte little-endian length).

const ARRAYS = {
  BOOL: Uint8Array,
  UINT8: Uint8Array,
  UINT16: Uint16Array,
  UINT32: Uint32Array,
  UINT64: BigUint64Array,
  INT8: Int8Array,
  INT16: Int16Array,
  INT32: Int32Array,
  INT64: BigInt64Array,
  FP32: Float32Array,
  FP64: Float64Array,
};

// A tensor to send: { name, datatype, shape, data } with data JSON values, or `bytes` (Uint8Array
// elements of a BYTES tensor, sent as binary data).
export function encodeRequest(inputs, outputNames) {
  const header = { inputs: [], outputs: outputNames.map((name) => ({ name, parameters: { binary_data: true } })) };
  const chunks = [];
  for (const input of inputs) {
    if (input.bytes) {
      const size = input.bytes.reduce((n, b) => n + 4 + b.length, 0);
      const chunk = new Uint8Array(size);
      const view = new DataView(chunk.buffer);
      let offset = 0;
      for (const element of input.bytes) {
        view.setUint32(offset, element.length, true);
        chunk.set(element, offset + 4);
        offset += 4 + element.length;
      }
      chunks.push(chunk);
      header.inputs.push({ name: input.name, datatype: "BYTES", shape: input.shape, parameters: { binary_data_size: size } });
    } else {
      header.inputs.push({ name: input.name, datatype: input.datatype, shape: input.shape, data: input.data });
    }
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  if (!chunks.length) return { body: json, headers: { "content-type": "application/json" } };
  const body = new Uint8Array(json.length + chunks.reduce((n, c) => n + c.length, 0));
  body.set(json, 0);
  let offset = json.length;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.length;
  }
  return { body, headers: { "inference-header-content-length": String(json.length), "content-type": "application/octet-stream" } };
}

// The response's outputs as { name, datatype, shape, values } (numbers, strings, or Uint8Array for
// BYTES elements that are not UTF-8 text).
export async function decodeResponse(response) {
  const buffer = new Uint8Array(await response.arrayBuffer());
  const headerLength = response.headers.get("inference-header-content-length");
  const jsonEnd = headerLength === null ? buffer.length : Number(headerLength);
  const header = JSON.parse(new TextDecoder().decode(buffer.subarray(0, jsonEnd)));
  let offset = jsonEnd;
  const outputs = [];
  for (const output of header.outputs || []) {
    const size = output.parameters && output.parameters.binary_data_size;
    let values = output.data;
    if (size !== undefined) {
      values = decodeBinary(output.datatype, buffer.slice(offset, offset + size));
      offset += size;
    }
    outputs.push({ name: output.name, datatype: output.datatype, shape: output.shape, values });
  }
  return outputs;
}

function decodeBinary(datatype, bytes) {
  if (datatype === "BYTES") {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const values = [];
    const text = new TextDecoder("utf-8", { fatal: true });
    for (let offset = 0; offset + 4 <= bytes.length; ) {
      const length = view.getUint32(offset, true);
      const element = bytes.slice(offset + 4, offset + 4 + length);
      try {
        values.push(text.decode(element));
      } catch {
        values.push(element);
      }
      offset += 4 + length;
    }
    return values;
  }
  if (datatype === "FP16" || datatype === "BF16") {
    const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
    return Array.from(halves, datatype === "FP16" ? fromHalf : (h) => new Float32Array(new Uint32Array([h << 16]).buffer)[0]);
  }
  const Type = ARRAYS[datatype];
  if (!Type) throw new Error(`cannot show data type ${datatype}`);
  const array = new Type(bytes.buffer, bytes.byteOffset, bytes.byteLength / Type.BYTES_PER_ELEMENT);
  if (datatype === "BOOL") return Array.from(array, (v) => v !== 0);
  return Array.from(array, (v) => (typeof v === "bigint" ? Number(v) : v));
}

function fromHalf(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >> 10) & 0x1f;
  const fraction = h & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

// Numbers typed by a person: a JSON array (nested or not), or numbers separated by spaces or commas.
export function parseValues(text, datatype) {
  const trimmed = text.trim();
  let values;
  if (trimmed.startsWith("[")) values = JSON.parse(trimmed).flat(Infinity);
  else values = trimmed ? trimmed.split(/[\s,]+/) : [];
  if (datatype === "BOOL") return values.map((v) => v === true || v === 1 || /^(true|1)$/i.test(String(v)));
  return values.map((v) => {
    const n = Number(v);
    if (Number.isNaN(n) && !/^nan$/i.test(String(v))) throw new Error(`'${v}' is not a number`);
    return n;
  });
}

// A metadata shape made concrete for `count` elements: the batch dimension (when the model batches) is
// 1, a single other -1 is worked out from the count; with several, all but the last are 1.
export function concreteShape(shape, batched, count) {
  const dims = shape.map((d, i) => (batched && i === 0 ? 1 : d));
  const free = dims.lastIndexOf(-1);
  if (free < 0) return dims;
  const fixed = dims.map((d, i) => (d === -1 && i !== free ? 1 : d));
  const known = fixed.reduce((a, d, i) => (i === free ? a : a * d), 1);
  fixed[free] = known > 0 ? Math.floor(count / known) : 0;
  return fixed;
}
