// Small DOM helpers shared by the pages.

import { t } from "./i18n.js";

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (value === false || value === null || value === undefined) continue;
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function showNotice(node, text) {
  node.classList.remove("error");
  node.textContent = text;
}

export function showError(node, error) {
  node.classList.add("error");
  node.textContent = `${t("error")}: ${error.message || error}`;
}

export function modelSelect(names, selected, onchange) {
  const select = el("select", { "data-testid": "model-select", onchange: (e) => onchange(e.target.value) });
  for (const name of names) select.append(el("option", { value: name, selected: name === selected }, name));
  return select;
}
