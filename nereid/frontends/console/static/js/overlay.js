// An uploaded image with an OCR model's answer over it: BOXES drawn where they are, TEXT beside each box.

import { el } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";

// Binary and plain PGM / PPM (P2, P3, P5, P6), which browsers do not show themselves.
function decodePnm(bytes) {
  const magic = String.fromCharCode(bytes[0], bytes[1]);
  if (!["P2", "P3", "P5", "P6"].includes(magic)) return null;
  const fields = [];
  let offset = 2;
  while (fields.length < 3) {
    while (offset < bytes.length && /\s/.test(String.fromCharCode(bytes[offset]))) offset++;
    if (bytes[offset] === 35) {
      while (offset < bytes.length && bytes[offset] !== 10) offset++; // a comment runs to the line's end
      continue;
    }
    let token = "";
    while (offset < bytes.length && !/\s/.test(String.fromCharCode(bytes[offset]))) token += String.fromCharCode(bytes[offset++]);
    fields.push(Number(token));
  }
  offset++; // the single whitespace before binary pixels
  const [width, height, maxval] = fields;
  const channels = magic === "P3" || magic === "P6" ? 3 : 1;
  const count = width * height * channels;
  let samples;
  if (magic === "P5" || magic === "P6") {
    if (maxval > 255) {
      const view = new DataView(bytes.buffer, bytes.byteOffset + offset);
      samples = Array.from({ length: count }, (_, i) => view.getUint16(2 * i));
    } else samples = bytes.subarray(offset, offset + count);
  } else {
    samples = new TextDecoder().decode(bytes.subarray(offset)).trim().split(/\s+/).map(Number);
  }
  const rgba = new Uint8ClampedArray(width * height * 4);
  for (let p = 0; p < width * height; p++) {
    for (let c = 0; c < 3; c++) rgba[4 * p + c] = (samples[p * channels + (channels === 3 ? c : 0)] * 255) / maxval;
    rgba[4 * p + 3] = 255;
  }
  return new ImageData(rgba, width, height);
}

// The file drawn on a canvas at its own size.
export async function imageCanvas(bytes, type) {
  const canvas = el("canvas", { class: "image" });
  const context = canvas.getContext("2d");
  const pnm = decodePnm(bytes);
  if (pnm) {
    canvas.width = pnm.width;
    canvas.height = pnm.height;
    context.putImageData(pnm, 0, 0);
    return canvas;
  }
  const bitmap = await createImageBitmap(new Blob([bytes], { type: type || "application/octet-stream" }));
  canvas.width = bitmap.width;
  canvas.height = bitmap.height;
  context.drawImage(bitmap, 0, 0);
  return canvas;
}

// Boxes as polygons of [x, y] points. Rows of 4 are x1, y1, x2, y2; rows of 8 (or 4 x 2) are the four
// corners; rows of 5 are line, top, left, bottom, right (pixels, inclusive) as the bundled OCR example
// writes them.
export function boxPolygons(values, shape) {
  const width = shape.length >= 3 ? shape[shape.length - 1] * shape[shape.length - 2] : shape[shape.length - 1];
  const rows = [];
  for (let i = 0; i + width <= values.length; i += width) rows.push(values.slice(i, i + width));
  return rows.map((r) => {
    if (width === 4) return [[r[0], r[1]], [r[2], r[1]], [r[2], r[3]], [r[0], r[3]]];
    if (width === 5) return [[r[2], r[1]], [r[4] + 1, r[1]], [r[4] + 1, r[3] + 1], [r[2], r[3] + 1]];
    if (width === 8) return [[r[0], r[1]], [r[2], r[3]], [r[4], r[5]], [r[6], r[7]]];
    return null;
  }).filter(Boolean);
}

// One label per box: TEXT elements when there is one per box; else, when TEXT is one string whose
// visible characters match the boxes one for one, those characters.
export function boxLabels(texts, scores, count) {
  const strings = (texts || []).map(String);
  let labels = [];
  if (strings.length === count) labels = strings;
  else if (strings.length === 1 && [...strings[0].replace(/\s/g, "")].length === count) labels = [...strings[0].replace(/\s/g, "")];
  else labels = new Array(count).fill("");
  return labels.map((label, i) => (scores && scores.length === count && label ? `${label} ${Number(scores[i]).toFixed(2)}` : label));
}

export function ocrOverlay(canvas, outputs) {
  const boxes = outputs.find((o) => o.name === "BOXES");
  const text = outputs.find((o) => o.name === "TEXT");
  const scores = outputs.find((o) => o.name === "SCORES");
  const polygons = boxPolygons(boxes.values, boxes.shape);
  const labels = boxLabels(text && text.values, scores && scores.values, polygons.length);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${canvas.width} ${canvas.height}`);
  svg.setAttribute("class", "overlay");
  svg.setAttribute("data-testid", "ocr-overlay");
  // the image is shown about 720 pixels wide: labels of about 18 pixels on screen, whatever its size
  const fontSize = Math.max(canvas.width, canvas.height) / 40;
  polygons.forEach((points, i) => {
    const polygon = document.createElementNS(SVG, "polygon");
    polygon.setAttribute("points", points.map((p) => p.join(",")).join(" "));
    polygon.setAttribute("class", "box");
    svg.append(polygon);
    if (!labels[i]) return;
    const x = Math.min(...points.map((p) => p[0]));
    const y = Math.min(...points.map((p) => p[1]));
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", x);
    label.setAttribute("y", Math.max(fontSize, y - fontSize / 4));
    label.setAttribute("font-size", fontSize);
    label.setAttribute("stroke-width", fontSize / 6); // a white halo, so the text reads over any image
    label.setAttribute("class", "label");
    label.textContent = labels[i];
    svg.append(label);
  });
  const figure = el("figure", { class: "ocr" }, el("div", { class: "stack" }, canvas, svg));
  if (text) figure.append(el("figcaption", { "data-testid": "ocr-text" }, text.values.map(String).join("\n")));
  return figure;
}
