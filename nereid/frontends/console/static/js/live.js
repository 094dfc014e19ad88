// Live page: one model's throughput, latency quantiles, queue and compute time and batch sizes, and the
// server's CPU and memory, from a snapshot polled every second.

import { api } from "./api.js";
import { t } from "./i18n.js";
import { el, modelSelect, showError } from "./ui.js";

const POINTS = 120; // two minutes at one point a second
const HINT_POINTS = 10; // the batch-size chart covers the last ten seconds, as the hint does
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];

// Sums every loaded version of `name` into one set of cumulative counters.
export function modelCounters(snapshot, name) {
  const versions = snapshot.models.filter((m) => m.name === name);
  if (!versions.length) return null;
  const sum = { inferences: 0, requests: 0, request_ns: 0, queue_ns: 0, compute_n: 0, compute_ns: 0, batches: {}, durations: null, hint: null };
  for (const m of versions) {
    sum.inferences += m.inference_count;
    sum.requests += m.stats.success.count;
    sum.request_ns += m.stats.success.ns;
    sum.queue_ns += m.stats.queue.ns;
    sum.compute_n += m.stats.compute_infer.count;
    sum.compute_ns += m.stats.compute_infer.ns;
    for (const [size, n] of Object.entries(m.batch_sizes)) sum.batches[size] = (sum.batches[size] || 0) + n;
    if (!sum.durations) sum.durations = m.request_duration_us.map(([b, n]) => [b, n]);
    else m.request_duration_us.forEach(([, n], i) => (sum.durations[i][1] += n));
    sum.hint = sum.hint || m.hint;
  }
  return sum;
}

// The q-quantile of the requests that one cumulative histogram gained over another, interpolated within
// its bucket (as Prometheus's histogram_quantile does); null when no request finished in between.
export function quantile(q, before, after) {
  const counts = after.map(([bound, n], i) => [bound, Math.max(0, n - (before ? before[i][1] : 0))]);
  const total = counts.length ? counts[counts.length - 1][1] : 0;
  if (!total) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const [bound, n] of counts) {
    if (n >= rank) {
      if (bound === null) return lower; // beyond the last bound: its lower edge is all that is known
      return lower + ((bound - lower) * (rank - below)) / Math.max(n - below, 1);
    }
    if (bound !== null) lower = bound;
    below = n;
  }
  return lower;
}

function chart(title, unit, series, testid, options = {}) {
  const now = el("span", { class: "now", "data-testid": `now-${testid}` }, "–");
  const plotBox = el("div", { class: "plot", "data-testid": `chart-${testid}` });
  const card = el("section", { class: "card" }, el("h3", {}, title, " ", now), plotBox);
  const opts = {
    width: 460,
    height: 170,
    legend: { live: false },
    cursor: { show: false },
    // time charts always span the last POINTS seconds, so they scroll as the seconds pass
    scales: { x: options.time === false ? { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] } : { time: true, range: (u, min, max) => [max - POINTS, max] }, y: { range: (u, min, max) => [0, Math.max(max * 1.15, options.minMax ?? 1)] } },
    axes: [{ stroke: "#555", grid: { stroke: "#eee" }, ...(options.time === false ? { splits: (u) => u.data[0] } : {}) }, { stroke: "#555", grid: { stroke: "#eee" }, size: 56 }],
    series: [
      {},
      ...series.map((label, i) => ({
        label,
        stroke: COLORS[i],
        width: 2,
        dash: i === 1 ? [6, 4] : undefined, // a second series stays visible where it equals the first
        ...(options.paths ? { paths: options.paths, fill: COLORS[i] + "88", points: { show: false } } : {}),
      })),
    ],
  };
  const empty = [[], ...series.map(() => [])];
  const plot = new uPlot(opts, empty, plotBox);
  return {
    card,
    plot,
    set(data, text) {
      plot.setData(data);
      now.textContent = text;
    },
    resize(width) {
      plot.setSize({ width, height: 170 });
    },
  };
}

const fmt = (x, digits = 1) => (x === null || x === undefined || Number.isNaN(x) ? "–" : x.toFixed(digits));

export async function renderLive(root, info, selected) {
  let snapshot = await api.live();
  const names = [...new Set(snapshot.models.map((m) => m.name))].sort();
  if (!names.length) {
    root.replaceChildren(el("p", { class: "notice" }, t("no_ready")));
    return null;
  }
  const name = names.includes(selected) ? selected : names[0];
  const select = modelSelect(names, name, (value) => (location.hash = `#/live/${encodeURIComponent(value)}`));
  const hint = el("div", { class: "hint", "data-testid": "hint" }, el("strong", {}, t("why_small")), " ", el("span", {}, t("hint_wait")));
  const notice = el("div", { class: "notice" });
  const charts = {
    throughput: chart(t("throughput"), t("per_s"), [t("infer_per_s"), t("req_per_s")], "throughput"),
    latency: chart(t("latency"), "ms", [t("p50"), t("p99")], "latency", { minMax: 0.1 }),
    time: chart(t("queue_compute"), "ms", [t("queue"), t("compute")], "time", { minMax: 0.1 }),
    batches: chart(t("batch_sizes"), "", [t("executions")], "batches", { time: false, paths: uPlot.paths.bars({ size: [0.6, 40] }) }),
    cpu: chart(t("cpu"), "%", [t("host"), t("server")], "cpu", { minMax: 100 }),
    memory: chart(t("memory"), "GiB", [t("used"), t("resident")], "memory"),
  };
  const grid = el("div", { class: "grid" }, ...Object.values(charts).map((c) => c.card));
  root.replaceChildren(el("div", { class: "toolbar" }, el("label", {}, t("choose_model"), " ", select)), hint, notice, grid);

  const fit = () => {
    const width = Math.max(260, grid.querySelector(".card").clientWidth - 24);
    for (const c of Object.values(charts)) c.resize(width);
  };
  fit();
  window.addEventListener("resize", fit);

  const history = []; // { time, counters, server }
  const series = { t: [], infer: [], req: [], p50: [], p99: [], queue: [], compute: [], host: [], proc: [], used: [], rss: [] };

  function update() {
    const counters = modelCounters(snapshot, name);
    history.push({ time: snapshot.time, counters, server: snapshot.server });
    if (history.length > POINTS + 1) history.shift();
    const server = snapshot.server;
    series.host.push(server.cpu_utilization * 100);
    series.proc.push((server.process_cpu_utilization / server.cpu_count) * 100);
    series.used.push((server.memory_used_bytes || 0) / 2 ** 30);
    series.rss.push((server.process_memory_bytes || 0) / 2 ** 30);
    series.t.push(snapshot.time);
    const previous = history.length > 1 ? history[history.length - 2] : null;
    const a = previous && previous.counters;
    const b = counters;
    const dt = previous ? snapshot.time - previous.time : 0;
    const delta = (key) => (a && b ? Math.max(0, b[key] - a[key]) : 0);
    const requests = delta("requests");
    const computes = delta("compute_n");
    series.infer.push(dt > 0 ? delta("inferences") / dt : 0);
    series.req.push(dt > 0 ? requests / dt : 0);
    const ms = (us) => (us === null ? null : us / 1000);
    series.p50.push(a && b ? ms(quantile(0.5, a.durations, b.durations)) : null);
    series.p99.push(a && b ? ms(quantile(0.99, a.durations, b.durations)) : null);
    series.queue.push(requests ? delta("queue_ns") / requests / 1e6 : null);
    series.compute.push(computes ? delta("compute_ns") / computes / 1e6 : null);
    for (const values of Object.values(series)) if (values.length > POINTS) values.shift();
    const last = (values) => values[values.length - 1];
    charts.throughput.set([series.t, series.infer, series.req], `${fmt(last(series.infer))} ${t("infer_per_s")}`);
    charts.latency.set([series.t, series.p50, series.p99], `p50 ${fmt(last(series.p50), 2)} · p99 ${fmt(last(series.p99), 2)} ms`);
    charts.time.set([series.t, series.queue, series.compute], `${fmt(last(series.queue), 3)} / ${fmt(last(series.compute), 3)} ms`);
    charts.cpu.set([series.t, series.host, series.proc], `${fmt(last(series.host))}% · ${fmt(last(series.proc))}%`);
    charts.memory.set([series.t, series.used, series.rss], `${fmt(last(series.used), 2)} · ${fmt(last(series.rss), 2)} GiB`);
    // executions per batch size over the last ten seconds
    const old = history[Math.max(0, history.length - 1 - HINT_POINTS)].counters;
    const sizes = b ? Object.keys(b.batches).map(Number).sort((x, y) => x - y) : [];
    const counts = sizes.map((s) => Math.max(0, b.batches[s] - ((old && old.batches[s]) || 0)));
    const total = counts.reduce((x, y) => x + y, 0);
    const mean = total ? sizes.reduce((acc, s, i) => acc + s * counts[i], 0) / total : null;
    charts.batches.set([sizes, counts], mean === null ? "–" : `${t("mean")} ${fmt(mean, 2)}`);
    const code = b && b.hint ? b.hint.code : null;
    hint.lastChild.textContent = code ? t(`hint_${code}`, b.hint.values) : t("hint_wait");
    hint.dataset.code = code || "";
  }

  update();
  let stopped = false;
  let timer = null;
  async function tick() {
    if (stopped) return;
    try {
      snapshot = await api.live();
      notice.textContent = "";
      update();
    } catch (error) {
      showError(notice, error);
    }
    if (!stopped) timer = setTimeout(tick, 1000);
  }
  timer = setTimeout(tick, 1000);
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      window.removeEventListener("resize", fit);
      for (const c of Object.values(charts)) c.plot.destroy();
    },
  };
}
