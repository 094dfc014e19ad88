// The console's shell: tabs, routing by the URL's hash (#/models, #/live/NAME, #/try/NAME), API access.

import { access, api, setAccess } from "./api.js";
import { lang, t } from "./i18n.js";
import { renderLive } from "./live.js";
import { renderModels } from "./models.js";
import { renderTry } from "./try.js";
import { el, showError } from "./ui.js";

const PAGES = { models: renderModels, live: renderLive, try: renderTry };
let current = null; // the page shown: { stop() } when it polls

function header() {
  const nav = el("nav", {});
  for (const page of Object.keys(PAGES)) {
    nav.append(el("a", { href: `#/${page}`, "data-page": page }, t(`tab_${page}`)));
  }
  const saved = access();
  const name = el("input", { name: "header-name", value: saved.name, placeholder: "x-api-key" });
  const value = el("input", { name: "header-value", value: saved.value, type: "password" });
  const form = el(
    "form",
    {
      class: "access",
      onsubmit: (e) => {
        e.preventDefault();
        setAccess(name.value, value.value);
        e.target.closest("details").open = false;
        route();
      },
    },
    el("p", {}, t("access_help")),
    el("label", {}, t("header_name"), name),
    el("label", {}, t("header_value"), value),
    el("button", { type: "submit" }, t("save")),
  );
  const settings = el("details", { class: "settings" }, el("summary", {}, t("access")), form);
  return el("header", {}, el("h1", {}, el("span", { class: "logo" }, "◆"), " ", t("title")), nav, settings);
}

async function route() {
  const [page = "models", model = ""] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const render = PAGES[page] || renderModels;
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", link.dataset.page === (PAGES[page] ? page : "models"));
  }
  if (current && current.stop) current.stop();
  current = null;
  const main = document.querySelector("main");
  main.replaceChildren();
  try {
    const info = await api.info();
    current = await render(main, info, model);
  } catch (error) {
    const box = el("div", { class: "notice" });
    showError(box, error);
    main.replaceChildren(box);
  }
}

document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
document.title = t("title");
document.body.prepend(header());
window.addEventListener("hashchange", route);
route();
