// The latest `nereid analyze` report of a served repository: each model's verdict and best candidates.

import { api } from "./api.js";
import { t } from "./i18n.js";
import { el } from "./ui.js";

export async function analysisSection() {
  let found;
  try {
    found = await api.analysis();
  } catch {
    return el("section", { hidden: true }); // none written into the repositories served
  }
  const section = el("section", { class: "analysis", "data-testid": "analysis" });
  for (const a of found.analyses) {
    const head = el("tr", {}, ...["rank", "analysis_settings", "analysis_throughput", "analysis_p99"].map((k) => el("th", {}, k === "rank" ? "#" : t(k))));
    const rows = a.top.map((c) => {
      const m = c.best || c.closest || {};
      const fmt = (v, d) => (v === undefined ? "–" : v.toFixed(d));
      return el("tr", { class: c.key === a.chosen ? "chosen" : "" }, el("td", {}, c.rank ?? "–"), el("td", {}, c.describe), el("td", {}, fmt(m.throughput, 0)), el("td", {}, fmt(m.p99_ms, 2)));
    });
    section.append(
      el("h2", {}, t("analysis", { created: a.created })),
      el("p", { class: "verdict" }, a.verdict),
      el("table", { class: "models" }, el("thead", {}, head), el("tbody", {}, ...rows)),
    );
  }
  return section;
}
