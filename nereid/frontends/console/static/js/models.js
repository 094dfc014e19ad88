// Models page: every model and version from the repository index, with what its completed configuration
// says, and load / unload / reload through the repository API.

import { analysisSection } from "./analysis.js";
import { api } from "./api.js";
import { t } from "./i18n.js";
import { el, showError, showNotice } from "./ui.js";

export function batchingText(config) {
  if (!config) return "";
  const max = config.max_batch_size || 0;
  if (config.dynamic_batching) {
    return t("batch_dynamic", { max, delay: config.dynamic_batching.max_queue_delay_microseconds || 0 });
  }
  if (config.sequence_batching) return t("batch_sequence", { max });
  return max > 0 ? t("batch_off", { max }) : t("batch_none");
}

function instancesText(config) {
  if (!config) return "";
  if (config.platform === "ensemble") return "—";
  return (config.instance_group || [])
    .map((g) => `${g.count ?? 1} × ${(g.kind || "KIND_AUTO").replace("KIND_", "")}`)
    .join(", ");
}

export async function renderModels(root, info) {
  const explicit = info.model_control_mode === "explicit";
  const table = el("table", { class: "models", "data-testid": "models-table" });
  const notice = el("div", { class: "notice", "data-testid": "models-notice" });
  root.replaceChildren(notice, table, await analysisSection());
  if (!explicit) notice.textContent = t("control_off", { mode: info.model_control_mode });

  async function act(action, name) {
    showNotice(notice, t("working"));
    try {
      if (action === "unload") await api.unload(name);
      else await api.load(name); // load again is a reload: new versions serve, old ones drain
      showNotice(notice, t(action === "unload" ? "done_unload" : "done_load", { name }));
    } catch (error) {
      showError(notice, error);
    }
    await refresh();
  }

  let latest = 0; // refreshes overlap (timer and actions): only the last one started may draw
  async function refresh() {
    const mine = ++latest;
    let index;
    try {
      index = await api.index();
    } catch (error) {
      showError(notice, error);
      return;
    }
    const head = el(
      "tr",
      {},
      ...["model", "version", "state", "reason", "backend", "platform", "instances", "batching", "actions"].map(
        (key) => el("th", {}, t(key)),
      ),
    );
    const rows = await Promise.all(index.map((entry) => row(entry, explicit, act)));
    if (mine !== latest) return;
    // configurations a reader unfolded stay unfolded across refreshes
    const unfolded = new Set([...table.querySelectorAll("details[open]")].map((d) => d.dataset.key));
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows.flat()));
    for (const details of table.querySelectorAll("details")) details.open = unfolded.has(details.dataset.key);
    if (!index.length) table.append(el("caption", {}, t("no_models")));
  }

  await refresh();
  // models change on their own too (--model-control-mode=poll, other clients): look again every 5 s
  const timer = setInterval(refresh, 5000);
  return { stop: () => clearInterval(timer) };
}

async function row(entry, explicit, act) {
  const ready = entry.state === "READY";
  let config = null;
  if (ready) {
    try {
      config = await api.config(entry.name, entry.version);
    } catch {
      config = null; // unloaded between the index and this call: the next refresh shows it
    }
  }
  const buttons = el("td", { class: "actions" });
  const button = (action) =>
    el("button", { type: "button", "data-action": action, disabled: !explicit, onclick: () => act(action, entry.name) }, t(action));
  if (ready) buttons.append(button("reload"), button("unload"));
  else buttons.append(button("load"));
  const main = el(
    "tr",
    { "data-model": entry.name, "data-version": entry.version || "", class: ready ? "ready" : "unavailable" },
    el("td", { class: "name" }, entry.name),
    el("td", {}, entry.version || ""),
    el("td", { class: "state" }, el("span", { class: `badge ${entry.state || ""}` }, entry.state || "")),
    el("td", { class: "reason" }, entry.reason || ""),
    el("td", {}, config ? config.backend || "" : ""),
    el("td", {}, config ? config.platform || "" : ""),
    el("td", {}, instancesText(config)),
    el("td", {}, batchingText(config)),
    buttons,
  );
  if (!config) return [main];
  const details = el(
    "tr",
    { class: "config-row" },
    el(
      "td",
      { colspan: 9 },
      el("details", { "data-key": `${entry.name}/${entry.version}` }, el("summary", {}, t("config")), el("pre", { class: "config" }, JSON.stringify(config, null, 2))),
    ),
  );
  return [main, details];
}
