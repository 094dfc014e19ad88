// Try-it page: a form built from a model's metadata that sends one v2 infer request and shows the
// outputs; an OCR model's boxes and text are drawn over the uploaded image.

import { api } from "./api.js";
import { t } from "./i18n.js";
import { imageCanvas, ocrOverlay } from "./overlay.js";
import { concreteShape, decodeResponse, encodeRequest, parseValues } from "./tensors.js";
import { el, modelSelect, showError, showNotice } from "./ui.js";

const MAX_SHOWN = 256; // elements shown per output

// An input holding an image as pixels: rank 3 with 3 channels first or last (after the batch dimension).
function imageLayout(input, batched) {
  const dims = batched ? input.shape.slice(1) : input.shape;
  if (dims.length !== 3 || !["UINT8", "FP32"].includes(input.datatype)) return null;
  if (dims[2] === 3) return { layout: "HWC", height: dims[0], width: dims[1] };
  if (dims[0] === 3) return { layout: "CHW", height: dims[1], width: dims[2] };
  return null;
}

function inputField(input, batched) {
  const shape = input.shape;
  const known = shape.every((d, i) => d > 0 || (batched && i === 0));
  const count = known ? concreteShape(shape, batched, 0).reduce((a, b) => a * b, 1) : 0;
  const file = el("input", { type: "file", name: `${input.name}-file`, "data-input": input.name });
  const label = el("legend", {}, `${input.name} `, el("code", {}, `${input.datatype} [${shape.join(", ")}]`));
  const image = imageLayout(input, batched);
  if (image) {
    file.setAttribute("accept", "image/*");
    return { input, batched, file, image, node: el("fieldset", {}, label, el("label", {}, t("image"), " ", file)) };
  }
  const isText = input.datatype === "BYTES";
  // an example to edit: 0, 1, 2... (a single text element, usually a file's place, starts empty)
  const initial = isText ? (count === 1 ? "" : Array.from({ length: Math.min(count || 1, 64) }, (_, i) => String(i)).join("\n")) : Array.from({ length: Math.min(count || 1, 4096) }, (_, i) => (input.datatype === "BOOL" ? i % 2 === 1 : i)).join(" ");
  const text = el("textarea", { name: input.name, rows: isText ? 4 : 2, spellcheck: "false" }, initial);
  const help = el("small", {}, t(isText ? "text_help" : "values_help"));
  const node = el("fieldset", {}, label, text, help);
  if (isText) node.append(el("label", { class: "file" }, t("file"), " ", file));
  return { input, batched, text, file: isText ? file : null, node };
}

async function imagePixels(file, image, datatype) {
  const bitmap = await createImageBitmap(file);
  const height = image.height > 0 ? image.height : bitmap.height;
  const width = image.width > 0 ? image.width : bitmap.width;
  const canvas = new OffscreenCanvas(width, height);
  canvas.getContext("2d").drawImage(bitmap, 0, 0, width, height);
  const rgba = canvas.getContext("2d").getImageData(0, 0, width, height).data;
  const data = new Array(width * height * 3);
  for (let p = 0; p < width * height; p++) {
    for (let c = 0; c < 3; c++) {
      const value = datatype === "FP32" ? rgba[4 * p + c] / 255 : rgba[4 * p + c];
      data[image.layout === "HWC" ? 3 * p + c : c * width * height + p] = value;
    }
  }
  const dims = image.layout === "HWC" ? [height, width, 3] : [3, height, width];
  return { data, dims };
}

// The tensor one field sends, and the uploaded file when there is one (shown under the outputs).
async function fieldTensor(field) {
  const { input, batched } = field;
  const upload = field.file && field.file.files[0];
  if (field.image) {
    if (!upload) throw new Error(`${input.name}: choose an image`);
    const { data, dims } = await imagePixels(upload, field.image, input.datatype);
    return { tensor: { name: input.name, datatype: input.datatype, shape: batched ? [1, ...dims] : dims, data }, upload };
  }
  if (upload) {
    const bytes = new Uint8Array(await upload.arrayBuffer());
    return { tensor: { name: input.name, datatype: "BYTES", shape: concreteShape(input.shape, batched, 1), bytes: [bytes] }, upload };
  }
  if (input.datatype === "BYTES") {
    const lines = field.text.value.split("\n");
    const bytes = lines.map((line) => new TextEncoder().encode(line));
    return { tensor: { name: input.name, datatype: "BYTES", shape: concreteShape(input.shape, batched, bytes.length), bytes }, upload: null };
  }
  const data = parseValues(field.text.value, input.datatype);
  return { tensor: { name: input.name, datatype: input.datatype, shape: concreteShape(input.shape, batched, data.length), data }, upload: null };
}

function showValue(value) {
  if (value instanceof Uint8Array) return t("bytes", { n: value.length });
  if (typeof value === "number" && !Number.isInteger(value)) return Number(value.toPrecision(6));
  return value;
}

function outputCard(output) {
  const values = output.values || [];
  const shown = values.slice(0, MAX_SHOWN).map(showValue);
  const text = output.datatype === "BYTES" ? shown.join("\n") : shown.join(" ");
  return el(
    "section",
    { class: "card output", "data-output": output.name },
    el("h3", {}, output.name, " ", el("code", {}, `${output.datatype} [${output.shape.join(", ")}]`)),
    el("pre", { class: "values" }, text + (values.length > MAX_SHOWN ? " …" : "")),
  );
}

export async function renderTry(root, info, selected) {
  const index = await api.index();
  const names = [...new Set(index.filter((m) => m.state === "READY").map((m) => m.name))].sort();
  if (!names.length) {
    root.replaceChildren(el("p", { class: "notice" }, t("no_ready")));
    return null;
  }
  const name = names.includes(selected) ? selected : names[0];
  const select = modelSelect(names, name, (value) => (location.hash = `#/try/${encodeURIComponent(value)}`));
  const [metadata, config] = await Promise.all([api.metadata(name), api.config(name)]);
  const batched = (config.max_batch_size || 0) > 0;
  const fields = metadata.inputs.map((input) => inputField(input, batched));
  const status = el("div", { class: "notice", "data-testid": "try-status" });
  const results = el("div", { class: "results", "data-testid": "outputs" });
  const send = el("button", { type: "submit", class: "primary" }, t("send"));
  const form = el(
    "form",
    { class: "try", onsubmit: (e) => (e.preventDefault(), run()) },
    el("h2", {}, t("inputs")),
    ...fields.map((f) => f.node),
    send,
  );
  root.replaceChildren(el("div", { class: "toolbar" }, el("label", {}, t("choose_model"), " ", select)), form, status, el("h2", {}, t("outputs")), results);

  async function run() {
    send.disabled = true;
    showNotice(status, t("sending"));
    try {
      const tensors = await Promise.all(fields.map(fieldTensor));
      const { body, headers } = encodeRequest(tensors.map((x) => x.tensor), metadata.outputs.map((o) => o.name));
      const started = performance.now();
      const response = await api.infer(name, body, headers);
      const outputs = await decodeResponse(response);
      showNotice(status, t("elapsed", { ms: (performance.now() - started).toFixed(1) }));
      const cards = outputs.map(outputCard);
      const upload = tensors.map((x) => x.upload).find(Boolean);
      if (upload && outputs.some((o) => o.name === "BOXES")) {
        const bytes = new Uint8Array(await upload.arrayBuffer());
        cards.unshift(ocrOverlay(await imageCanvas(bytes, upload.type), outputs));
      }
      results.replaceChildren(...cards);
    } catch (error) {
      showError(status, error);
      results.replaceChildren();
    } finally {
      send.disabled = false;
    }
  }
  return null;
}
