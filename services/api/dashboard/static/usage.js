// The dashboard's usage page (#/usage): GPU-, CPU- and memory-hours allocated by UTC day,
// the CPU used and peak memory where measured in the totals, one chart per team, from
// GET /v1/usage (a user's own jobs; an administrator's token sees every team). app.js
// registers the page; this module reads the API with the same token, kept in the tab's
// sessionStorage under the key app.js uses, and logs out on a 401 as app.js does.
import { html, uPlot, useEffect, useRef, useState } from "./vendor/vendor.min.js";

const TOKEN_KEY = "dlaas.token";
const REFRESH_MS = 60000;
const SERIES = [
  ["gpu_hours", "GPU-hours", "#2563eb"],
  ["cpu_hours", "CPU-hours", "#16a34a"],
  ["memory_gib_hours", "memory GiB-hours", "#d97706"],
];

async function getUsage(days) {
  const since = new Date(Date.now() - (days - 1) * 86400000).toISOString().slice(0, 10);
  const r = await fetch(`/v1/usage?by=team&since=${since}`, {
    headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` },
    cache: "no-store",
  });
  const body = await r.json().catch(() => null);
  if (r.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    window.dispatchEvent(new Event("dlaas-logout"));
  }
  if (!r.ok) throw new Error(body?.message || `HTTP ${r.status}`);
  return body;
}

// Each team's rows as uPlot data: [every day of the range (seconds since the epoch), one
// array per series], a day without a row at 0 (nothing held), so the x axis is the range.
export function teamSeries(rows, since, until) {
  const days = [];
  for (let t = Date.parse(`${since}T00:00:00Z`); t <= Date.parse(`${until}T00:00:00Z`); t += 86400000) days.push(t / 1000);
  const byTeam = {};
  for (const r of rows) (byTeam[r.team] ||= {})[Date.parse(`${r.day}T00:00:00Z`) / 1000] = r;
  return Object.fromEntries(
    Object.entries(byTeam).map(([team, byDay]) => [team, [days, ...SERIES.map(([k]) => days.map((d) => byDay[d]?.[k] ?? 0))]]),
  );
}

function TeamChart({ team, data }) {
  const box = useRef(null);
  const plot = useRef(null);
  useEffect(() => {
    const opts = {
      title: team,
      width: Math.min(560, box.current.clientWidth || 560),
      height: 240,
      series: [{ label: "day" }, ...SERIES.map(([, label, stroke]) => ({ label, stroke, width: 2, points: { show: true } }))],
      axes: [{}, { label: "hours" }],
    };
    plot.current = new uPlot(opts, data, box.current);
    window.dlaasCharts[`usage:${team}`] = plot.current;
    return () => {
      plot.current.destroy();
      delete window.dlaasCharts[`usage:${team}`];
    };
  }, [team]);
  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  return html`<div class="chart" data-team=${team} ref=${box}></div>`;
}

export function UsagePage() {
  const [days, setDays] = useState(30);
  const [state, setState] = useState({ body: null, error: null });
  useEffect(() => {
    let live = true;
    let timer;
    const run = () =>
      getUsage(days)
        .then((body) => live && setState({ body, error: null }))
        .catch((error) => live && setState((s) => ({ ...s, error })))
        .finally(() => live && (timer = setTimeout(run, REFRESH_MS)));
    run();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [days]);
  const { body, error } = state;
  const series = body ? teamSeries(body.rows, body.since, body.until) : {};
  const fmt = (v) => v.toFixed(2);
  return html`<section>
    <h2>Usage</h2>
    <p class="muted">What the jobs held (allocated), by UTC day, and beside the totals what their containers used where measured (runs whose learners ended by themselves): yours, or every team's for an administrator.
      <label> last <select value=${days} onChange=${(e) => setDays(Number(e.target.value))}>
        ${[7, 30, 90, 365].map((d) => html`<option value=${d}>${d} days</option>`)}</select></label></p>
    ${error ? html`<div class="error" role="alert">${error.message}</div>` : ""}
    ${body && !body.rows.length ? html`<p class="muted">No usage in this range.</p>` : ""}
    <table class="usage">
      <thead><tr><th>team</th><th>GPU-hours</th><th>CPU-hours</th><th>memory GiB-hours</th><th>CPU-hours used</th><th>peak memory GiB-hours</th></tr></thead>
      <tbody>${(body?.teams || []).map((t) => html`<tr key=${t.team}><td>${t.team}</td><td>${fmt(t.gpu_hours)}</td>
        <td>${fmt(t.cpu_hours)}</td><td>${fmt(t.memory_gib_hours)}</td>
        <td>${fmt(t.cpu_used_hours ?? 0)}</td><td>${fmt(t.memory_peak_gib_hours ?? 0)}</td></tr>`)}</tbody>
    </table>
    <div class="charts">${Object.entries(series).map(([team, data]) => html`<${TeamChart} key=${team} team=${team} data=${data} />`)}</div>
  </section>`;
}
