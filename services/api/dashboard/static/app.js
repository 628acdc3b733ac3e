// The dlaas dashboard: one page, hash-routed, that reads and acts only through the REST API.
//
// The user's API token is kept in this tab's sessionStorage and sent as the Bearer header
// of every fetch; it never goes into a URL (URLs end up in logs and history). Pages poll
// the API every few seconds; metric charts follow the metrics stream (NDJSON) so points
// appear as the learner prints them. Charts are uPlot; the view is preact + htm.
import { html, render, uPlot, useEffect, useRef, useState } from "./vendor/vendor.min.js";
import { UsagePage } from "./usage.js";

const TOKEN_KEY = "dlaas.token";
const LOG_TAIL_LINES = 300;

// Charts by series name, for whoever debugs the page (and the browser test) to read
// the data a chart really holds: `window.dlaasCharts.loss.data`.
window.dlaasCharts = {};

// --------------------------------------------------------------------------- the API

const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.problems = body?.problems || [];
  }
}

// fetch() against the API with the token; JSON back unless `raw`. A 401 logs out.
async function api(path, { method = "GET", json, body, raw = false, signal } = {}) {
  const headers = { Authorization: `Bearer ${token.get()}` };
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  const r = await fetch(path, { method, headers, body, signal, cache: "no-store" });
  if (!r.ok) {
    const err = new ApiError(r.status, await r.json().catch(() => null));
    if (r.status === 401) {
      token.clear();
      window.dispatchEvent(new Event("dlaas-logout"));
    }
    throw err;
  }
  return raw ? r : r.json();
}

// The job statuses in order and the final ones, as the server's status table has them
// (GET /v1/statuses): asked once per page load, never typed here.
let statusTable = null;
const loadStatuses = () =>
  (statusTable ??= api("/v1/statuses").catch((e) => {
    statusTable = null; // asked again next time
    throw e;
  }));

// --------------------------------------------------------------------------- helpers

const fmtTime = (t) => (t ? new Date(t * 1000).toLocaleString() : "");
const fmtSeconds = (s) =>
  s == null ? "?" : s < 90 ? `${Math.round(s)} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`;
const fmtEta = (lo, hi) =>
  lo == null || hi == null ? "unknown: does not fit the cluster as it is now" : `${fmtSeconds(lo)} – ${fmtSeconds(hi)}`;
// A job's progress (the job view's `progress`): "45% · ETA 12:03", or "epoch 3" without a total.
const fmtProgress = (p) => {
  if (!p) return "";
  const where = p.total ? `${p.unit} ${+p.done.toFixed(1)}/${p.total}` : `${p.unit} ${+p.done.toFixed(1)}`;
  if (p.percent == null) return where;
  const eta = p.finish_at ? ` · ETA ${new Date(p.finish_at * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}` : "";
  return `${Math.round(p.percent)}%${eta}`;
};
const qs = (params) => new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v != null)).toString();

// The current "#/page/arg" as [page, arg].
function useRoute() {
  const parse = () => {
    const [, page = "jobs", ...rest] = location.hash.replace(/^#/, "").split("/");
    return [page || "jobs", decodeURIComponent(rest.join("/"))];
  };
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const on = () => setRoute(parse());
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}

// Call `load` now and every `ms` while mounted (and `key` unchanged); [data, error, reload].
function usePoll(load, ms, key = "") {
  const [state, setState] = useState({ data: null, error: null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    let timer;
    const run = async () => {
      try {
        const data = await load();
        if (live) setState({ data, error: null });
      } catch (e) {
        if (live) setState((s) => ({ data: s.data, error: e }));
      }
      if (live && ms) timer = setTimeout(run, ms);
    };
    run();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [key, tick]);
  return [state.data, state.error, () => setTick((t) => t + 1)];
}

const Status = ({ status }) => html`<span class="status st-${status}">${status}</span>`;
const ErrorNote = ({ error }) =>
  error
    ? html`<div class="error" role="alert">${error.message}${error.problems?.length > 1
        ? html`<ul>${error.problems.map((p) => html`<li>${p}</li>`)}</ul>`
        : ""}</div>`
    : "";
const JobLink = ({ id }) => html`<a href="#/job/${encodeURIComponent(id)}">${id}</a>`;

// --------------------------------------------------------------------------- login

function Login({ onLogin }) {
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    const value = e.target.elements.token.value.trim();
    if (!value) return;
    token.set(value);
    try {
      onLogin(await api("/v1/me"));
    } catch (err) {
      token.clear();
      setError(err);
    }
  };
  // The input has no `name`: if the script failed, the browser would send nothing.
  return html`<main class="login">
    <h1>dlaas</h1>
    <form method="post" action="#" onSubmit=${submit}>
      <label for="token">API token</label>
      <input id="token" type="password" autocomplete="off" placeholder="paste your token" required />
      <button type="submit">Log in</button>
      <p class="hint">The token stays in this browser tab (sessionStorage) and is sent only to this API.</p>
      <${ErrorNote} error=${error} />
    </form>
  </main>`;
}

// --------------------------------------------------------------------------- jobs

function JobsPage() {
  const [status, setStatus] = useState("");
  const [label, setLabel] = useState("");
  const [text, setText] = useState("");
  const [statuses] = usePoll(loadStatuses, 0);
  const [data, error] = usePoll(() => api(`/v1/jobs?${qs({ status, label, limit: 500 })}`), 2000, `${status}/${label}`);
  // The labels to choose from: every FAILED job's triage label seen since the page opened.
  const labels = useRef(new Set()).current;
  for (const j of data?.jobs || []) if (j.status === "FAILED" && j.error_code) labels.add(j.error_code);
  const needle = text.toLowerCase();
  const jobs = (data?.jobs || []).filter((j) =>
    [j.job_id, j.name, j.user, j.reason].some((f) => f.toLowerCase().includes(needle)),
  );
  return html`<section>
    <h2>Jobs</h2>
    <div class="filters">
      <select id="status-filter" value=${status} onChange=${(e) => setStatus(e.target.value)}>
        <option value="">every status</option>
        ${(statuses?.statuses || []).map((s) => html`<option value=${s}>${s}</option>`)}
      </select>
      <select id="label-filter" value=${label} onChange=${(e) => setLabel(e.target.value)}>
        <option value="">every failure label</option>
        ${[...labels].sort().map((l) => html`<option value=${l}>${l}</option>`)}
      </select>
      <input id="text-filter" type="search" placeholder="filter by id, name, user, reason" value=${text}
        onInput=${(e) => setText(e.target.value)} />
      <span class="muted">${data ? `${jobs.length} shown of ${data.total}` : "loading…"}</span>
    </div>
    <${ErrorNote} error=${error} />
    <table class="jobs">
      <thead><tr><th>job</th><th>name</th><th>user</th><th>status</th><th>progress</th><th>reason</th><th>submitted</th></tr></thead>
      <tbody>
        ${jobs.map((j) => html`<tr key=${j.job_id} data-job=${j.job_id}>
          <td><${JobLink} id=${j.job_id} /></td><td>${j.name}</td><td>${j.user}</td>
          <td><${Status} status=${j.status} /></td><td class="progress">${fmtProgress(j.progress)}</td>
          <td class="reason">${j.reason}</td>
          <td>${fmtTime(j.created_at)}</td></tr>`)}
      </tbody>
    </table>
  </section>`;
}

function SubmitPage() {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const form = new FormData();
    const manifest = e.target.elements.manifest.value;
    form.append("manifest", new Blob([manifest], { type: "application/yaml" }), "manifest.yaml");
    const code = e.target.elements.code.files[0];
    if (code) form.append("code", code, code.name);
    setBusy(true);
    try {
      const reply = await api("/v1/jobs", { method: "POST", body: form });
      location.hash = `#/job/${encodeURIComponent(reply.job_id)}`;
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return html`<section>
    <h2>Submit a job</h2>
    <form class="submit" onSubmit=${submit}>
      <label for="manifest">Manifest (YAML)</label>
      <textarea id="manifest" rows="14" required spellcheck="false"
        placeholder=${"name: my-job\nlearners: 1\ncpus: 1\nmemory: 512MiB\nframework:\n  name: python\n  command: python3 train.py"}></textarea>
      <label for="code">Code archive (.tar.gz or .zip, optional)</label>
      <input id="code" type="file" accept=".tar.gz,.tgz,.zip" />
      <button type="submit" disabled=${busy}>${busy ? "Submitting…" : "Submit"}</button>
      <${ErrorNote} error=${error} />
    </form>
  </section>`;
}

// --------------------------------------------------------------------------- one job

function JobPage({ id }) {
  const [job, error, reload] = usePoll(() => api(`/v1/jobs/${encodeURIComponent(id)}`), 1500, id);
  const [statuses, statusesError] = usePoll(loadStatuses, 0);
  const failure = error || statusesError;
  if (!job || !statuses) return html`<section><${ErrorNote} error=${failure} />${failure ? "" : "loading…"}</section>`;
  const final = statuses.final.includes(job.status);
  // As the API counts them: the manifest's size, its scale target, what is deployed.
  const learners = Math.max(job.manifest?.learners || 1, job.learners.length, Number(job.info?.learners_target) || 0);
  return html`<section>
    <h2>${job.name} <span class="muted">${job.job_id}</span></h2>
    <p><span id="job-status"><${Status} status=${job.status} /></span> <span class="reason">${job.reason}</span></p>
    ${job.queue
      ? html`<p class="queue">Queue position ${job.queue.position}: ${job.queue.reason}; starts in ${fmtEta(job.queue.eta_low_s, job.queue.eta_high_s)}</p>`
      : job.queue_note ? html`<p class="queue">${job.queue_note}</p>` : ""}
    ${job.progress
      ? html`<p id="job-progress" class="progress">Progress: ${job.progress.unit} ${+job.progress.done.toFixed(1)}${job.progress.total ? ` of ${job.progress.total}` : ""}${job.progress.percent != null ? ` (${job.progress.percent}%)` : ""}${job.progress.remaining_s != null ? `; finishes in about ${fmtSeconds(job.progress.remaining_s)} (${fmtProgress(job.progress)})` : ""}</p>`
      : ""}
    <${ErrorNote} error=${error} />
    <${Actions} job=${job} final=${final} reload=${reload} />
    <h3>Metrics</h3>
    <${Metrics} id=${id} learners=${learners} final=${final} />
    <div class="columns">
      <div>
        <h3>Status history</h3>
        <table class="history">
          <thead><tr><th>status</th><th>at</th><th>reason</th></tr></thead>
          <tbody>${job.history.map((h) => html`<tr><td><${Status} status=${h.status} /></td><td>${fmtTime(h.at)}</td>
            <td class="reason">${h.reason}${h.exit_code != null ? ` (exit ${h.exit_code})` : ""}</td></tr>`)}</tbody>
        </table>
      </div>
      <div>
        <h3>Learners</h3>
        <table class="learners">
          <thead><tr><th>learner</th><th>node</th><th>state</th><th>exit</th><th>container</th></tr></thead>
          <tbody>${job.learners.map((l) => html`<tr><td>${l.id}</td><td>${l.node || ""}</td><td>${l.state || ""}</td>
            <td>${l.exit_code ?? ""}${l.oom_killed ? " (OOM)" : ""}</td><td class="muted">${l.container || ""}</td></tr>`)}</tbody>
        </table>
      </div>
    </div>
    <h3>Logs</h3>
    ${Array.from({ length: learners }, (_, i) => html`<${LogTail} key=${i} id=${id} learner=${i} final=${final} />`)}
  </section>`;
}

function Actions({ job, final, reload }) {
  const [error, setError] = useState(null);
  const [note, setNote] = useState("");
  const m = job.manifest || {};
  // Elastic: the manifest allows a range of learner counts (plain jobs have one).
  const elastic = (m.min_learners ?? m.learners) !== (m.max_learners ?? m.learners);
  const act = async (fn) => {
    setError(null);
    setNote("");
    try {
      setNote(await fn());
      reload();
    } catch (err) {
      setError(err);
    }
  };
  const path = `/v1/jobs/${encodeURIComponent(job.job_id)}`;
  const halt = () => act(async () => `halt: ${(await api(`${path}/halt`, { method: "POST" })).status}`);
  const resume = () => act(async () => `resume: ${(await api(`${path}/resume`, { method: "POST" })).status}`);
  const scale = (e) => {
    e.preventDefault();
    const learners = Number(e.target.elements.learners.value);
    act(async () => `scaled to ${(await api(`${path}/scale`, { method: "POST", json: { learners } })).learners} learners`);
  };
  const del = async () => {
    if (!confirm(`Delete ${job.job_id}? Its record and containers go; its results stay in their bucket.`)) return;
    try {
      await api(path, { method: "DELETE" });
      location.hash = "#/jobs";
    } catch (err) {
      setError(err);
    }
  };
  // The token cannot ride in a link: fetch the archive, hand it to the browser as a blob.
  const download = () =>
    act(async () => {
      const r = await api(`${path}/results`, { raw: true });
      const url = URL.createObjectURL(await r.blob());
      const a = Object.assign(document.createElement("a"), { href: url, download: `${job.job_id}-results.tar.gz` });
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
      return "results downloaded";
    });
  return html`<div class="actions">
    <button id="halt" onClick=${halt} disabled=${final}>Halt</button>
    <button id="resume" onClick=${resume} disabled=${job.status !== "HALTED"}>Resume</button>
    ${elastic
      ? html`<form class="inline" onSubmit=${scale}>
          <input name="learners" type="number" min=${m.min_learners || 1} max=${m.max_learners || 1024}
            value=${job.learners.length || m.learners} aria-label="learners" />
          <button type="submit" disabled=${final}>Scale</button></form>`
      : ""}
    <button id="download" onClick=${download}>Download results</button>
    <button id="delete" class="danger" onClick=${del}>Delete</button>
    <span class="muted">${note}</span>
    <${ErrorNote} error=${error} />
  </div>`;
}

// A learner's log: the last lines, read from where the last poll ended (offset).
function LogTail({ id, learner, final }) {
  const [lines, setLines] = useState([]);
  const [error, setError] = useState(null);
  const offset = useRef(0);
  const pre = useRef(null);
  useEffect(() => {
    let live = true;
    let timer;
    const poll = async () => {
      let got = 0;
      try {
        const r = await api(`/v1/jobs/${encodeURIComponent(id)}/logs?${qs({ learner, offset: offset.current })}`, { raw: true });
        const text = await r.text();
        if (!live) return; // a newer poll loop owns the offset now
        const fresh = text ? text.replace(/\n$/, "").split("\n") : [];
        got = fresh.length;
        offset.current += got;
        if (got) setLines((old) => old.concat(fresh).slice(-LOG_TAIL_LINES));
        setError(null);
      } catch (err) {
        if (live) setError(err);
      }
      // A final job's log is complete once a read brings nothing new.
      if (live && !(final && got === 0)) timer = setTimeout(poll, 1500);
    };
    poll();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [id, learner, final]);
  useEffect(() => {
    if (pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [lines]);
  return html`<div class="log">
    <div class="log-title">learner ${learner} <span class="muted">(${offset.current} lines, last ${LOG_TAIL_LINES} shown)</span></div>
    <pre ref=${pre} id="log-${learner}">${lines.join("\n")}</pre>
    <${ErrorNote} error=${error} />
  </div>`;
}

// Metric series of one learner: the metrics stream with `follow` while the job runs, then
// the whole series once more (the stream may have broken off; the snapshot is complete).
function Metrics({ id, learners, final }) {
  const [learner, setLearner] = useState(0);
  const [series, setSeries] = useState({});
  const [error, setError] = useState(null);
  useEffect(() => setSeries({}), [id, learner]);
  // Not reset when the job ends: the charts stay while the snapshot replaces their data.
  useEffect(() => {
    const abort = new AbortController();
    const base = `/v1/jobs/${encodeURIComponent(id)}/metrics`;
    // Downsampled: a chart has no use for more points than this, and a reply is a page.
    const snapshot = async () =>
      setSeries((await api(`${base}?${qs({ learner, max_points: 1000 })}`, { signal: abort.signal })).series);
    const follow = async () => {
      const r = await api(`${base}?${qs({ learner, follow: true })}`, { raw: true, signal: abort.signal });
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        const lines = buffer.split("\n");
        buffer = lines.pop();
        const points = lines.filter(Boolean).map((l) => JSON.parse(l));
        if (points.length) setSeries((old) => addPoints(old, points));
      }
    };
    setError(null);
    (final ? snapshot() : follow().then(snapshot)).catch((err) => {
      if (!abort.signal.aborted) setError(err);
    });
    return () => abort.abort();
  }, [id, learner, final]);
  const names = Object.keys(series).sort();
  return html`<div class="metrics">
    ${learners > 1
      ? html`<label>learner <select value=${learner} onChange=${(e) => setLearner(Number(e.target.value))}>
          ${Array.from({ length: learners }, (_, i) => html`<option value=${i}>${i}</option>`)}</select></label>`
      : ""}
    <${ErrorNote} error=${error} />
    ${names.length ? "" : html`<p class="muted">No metrics yet: lines such as <code>epoch 3/20 loss=0.42</code> in the learner's output become series.</p>`}
    <div class="charts">${names.map((n) => html`<${Chart} key=${n} name=${n} points=${series[n]} />`)}</div>
  </div>`;
}

// Points of the stream added to the series; a step seen again replaces its value.
function addPoints(old, points) {
  const next = { ...old };
  for (const p of points) {
    const s = (next[p.name] || []).filter(([step]) => step !== p.step);
    s.push([p.step, p.value]);
    s.sort((a, b) => a[0] - b[0]);
    next[p.name] = s;
  }
  return next;
}

function Chart({ name, points }) {
  const box = useRef(null);
  const plot = useRef(null);
  const data = [points.map((p) => p[0]), points.map((p) => p[1])];
  useEffect(() => {
    const opts = {
      title: name,
      width: Math.min(560, box.current.clientWidth || 560),
      height: 240,
      scales: { x: { time: false } },
      series: [{ label: "step" }, { label: name, stroke: "#2563eb", width: 2, points: { show: true } }],
      axes: [{ label: "step" }, {}],
    };
    plot.current = new uPlot(opts, data, box.current);
    window.dlaasCharts[name] = plot.current;
    return () => {
      plot.current.destroy();
      if (window.dlaasCharts[name] === plot.current) delete window.dlaasCharts[name];
    };
  }, [name]);
  useEffect(() => {
    plot.current?.setData(data);
  }, [points]);
  return html`<div class="chart" data-series=${name} data-points=${points.length} ref=${box}></div>`;
}

// --------------------------------------------------------------------------- cluster

function QueuePage() {
  const [data, error] = usePoll(() => api("/v1/queue"), 3000);
  const entries = data?.entries || [];
  return html`<section>
    <h2>Queue</h2>
    <${ErrorNote} error=${error} />
    ${data && !entries.length ? html`<p class="muted">The queue is empty: no job waits.</p>` : ""}
    <table class="queue">
      <thead><tr><th>position</th><th>job</th><th>waits because</th><th>starts in</th></tr></thead>
      <tbody>${entries.map((e) => html`<tr key=${e.job_id}><td>${e.position}</td><td><${JobLink} id=${e.job_id} /></td>
        <td class="reason">${e.reason}</td><td>${fmtEta(e.eta_low_s, e.eta_high_s)}</td></tr>`)}</tbody>
    </table>
  </section>`;
}

const Use = ({ used, total, unit = "" }) =>
  html`<meter min="0" max=${total || 1} value=${used} high=${total * 0.9}></meter>
    <span class="muted">${+used.toFixed(2)} / ${total}${unit}</span>`;

// Measured use: null is unknown (not measured there, or not yet) and says so, never 0.
const Measured = ({ used, total, unit = "" }) =>
  used === null || used === undefined
    ? html`<span class="muted unknown">unknown</span>`
    : html`<${Use} used=${used} total=${total} unit=${unit} />`;

function NodesPage() {
  const [data, error] = usePoll(() => api("/v1/nodes"), 3000);
  return html`<section>
    <h2>Nodes</h2>
    <${ErrorNote} error=${error} />
    <p class="muted">Allocated: what the jobs placed on a node asked for. Used: what their containers use now, measured every few seconds.</p>
    <table class="nodes">
      <thead><tr><th>node</th><th>health</th><th>CPUs allocated</th><th>CPUs used</th><th>memory allocated</th><th>memory used</th><th>GPUs allocated</th><th>GPU use</th><th>learners</th><th>jobs</th></tr></thead>
      <tbody>${(data?.nodes || []).map((n) => html`<tr key=${n.name}>
        <td>${n.name}</td><td>${n.healthy ? "healthy" : html`<span class="status st-FAILED">unhealthy</span>`}</td>
        <td><${Use} used=${n.allocated.cpus} total=${n.capacity.cpus} /></td>
        <td class="used-cpus"><${Measured} used=${n.utilization?.cpus} total=${n.capacity.cpus} /></td>
        <td><${Use} used=${n.allocated.memory_mb} total=${n.capacity.memory_mb} unit=" MiB" /></td>
        <td class="used-memory"><${Measured} used=${n.utilization?.memory_mb} total=${n.capacity.memory_mb} unit=" MiB" /></td>
        <td>${n.capacity.gpus ? html`<${Use} used=${n.allocated.gpus} total=${n.capacity.gpus} unit=${n.gpu_type ? ` ${n.gpu_type}` : ""} />` : html`<span class="muted">none</span>`}</td>
        <td class="used-gpus">${!n.capacity.gpus ? html`<span class="muted">none</span>`
          : n.utilization?.gpu_percent == null ? html`<span class="muted unknown" title="no GPU telemetry on this node">n/a</span>`
          : html`<${Use} used=${n.utilization.gpu_percent} total=${100} unit="%" />`}</td>
        <td>${n.allocated.learners}</td>
        <td>${n.jobs.map((j) => html`<${JobLink} id=${j} /> `)}</td></tr>`)}</tbody>
    </table>
  </section>`;
}

// --------------------------------------------------------------------------- admin

function AdminPage() {
  const [users, usersError, reloadUsers] = usePoll(() => api("/v1/users"), 0);
  const [teams, teamsError] = usePoll(() => api("/v1/teams"), 5000);
  const [audit, auditError] = usePoll(() => api("/v1/audit?limit=50"), 5000);
  const [issued, setIssued] = useState(null);
  const [error, setError] = useState(null);
  const addUser = async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    setError(null);
    try {
      setIssued(await api("/v1/users", { method: "POST", json: { name: f.name.value, team: f.team.value || "default", admin: f.admin.checked } }));
      e.target.reset();
      reloadUsers();
    } catch (err) {
      setError(err);
    }
  };
  return html`<section>
    <h2>Users</h2>
    <${ErrorNote} error=${usersError} />
    <table class="users">
      <thead><tr><th>user</th><th>team</th><th>admin</th><th>valid tokens</th><th>since</th></tr></thead>
      <tbody>${(users || []).map((u) => html`<tr key=${u.name}><td>${u.name}</td><td>${u.team}</td>
        <td>${u.admin ? "yes" : ""}</td><td>${u.valid_tokens}</td><td>${fmtTime(u.created_at)}</td></tr>`)}</tbody>
    </table>
    <form class="inline" onSubmit=${addUser}>
      <input name="name" placeholder="new user" required /> <input name="team" placeholder="team (default)" />
      <label><input name="admin" type="checkbox" /> admin</label> <button type="submit">Add user</button>
    </form>
    ${issued ? html`<p class="issued">Token for ${issued.name} (shown once): <code>${issued.token}</code></p>` : ""}
    <${ErrorNote} error=${error} />
    <h2>Teams</h2>
    <${ErrorNote} error=${teamsError} />
    <table class="teams">
      <thead><tr><th>team</th><th>quota GPUs</th><th>quota CPUs</th><th>quota memory</th><th>used</th><th>borrowed</th><th>queued</th></tr></thead>
      <tbody>${(teams || []).map((t) => html`<tr key=${t.name}><td>${t.name}</td><td>${t.quota.gpus}</td><td>${t.quota.cpus}</td>
        <td>${t.quota.memory_mb} MiB</td><td>${usage(t.usage.used)}</td><td>${usage(t.usage.borrowed)}</td><td>${t.usage.queued ?? ""}</td></tr>`)}</tbody>
    </table>
    <h2>Audit log</h2>
    <${ErrorNote} error=${auditError} />
    <table class="audit">
      <thead><tr><th>at</th><th>who</th><th>action</th><th>target</th><th>detail</th></tr></thead>
      <tbody>${(audit?.entries || []).map((a) => html`<tr key=${a.seq}><td>${fmtTime(a.at)}</td><td>${a.actor}</td>
        <td>${a.action}</td><td>${a.target}</td><td class="reason">${a.detail}</td></tr>`)}</tbody>
    </table>
  </section>`;
}

const usage = (u) => (u ? `${u.gpus} GPUs, ${u.cpus} CPUs, ${u.memory_mb} MiB` : "");

// --------------------------------------------------------------------------- the app

function App() {
  const [me, setMe] = useState(null);
  const [checked, setChecked] = useState(!token.get());
  const [page, arg] = useRoute();
  useEffect(() => {
    const out = () => setMe(null);
    window.addEventListener("dlaas-logout", out);
    if (token.get()) api("/v1/me").then(setMe, () => {}).finally(() => setChecked(true));
    return () => window.removeEventListener("dlaas-logout", out);
  }, []);
  if (!checked) return html`<p class="muted">loading…</p>`;
  if (!me) return html`<${Login} onLogin=${setMe} />`;
  const logout = () => {
    token.clear();
    setMe(null);
  };
  const pages = {
    jobs: () => html`<${JobsPage} />`,
    submit: () => html`<${SubmitPage} />`,
    job: () => html`<${JobPage} key=${arg} id=${arg} />`,
    queue: () => html`<${QueuePage} />`,
    nodes: () => html`<${NodesPage} />`,
    usage: () => html`<${UsagePage} />`,
    admin: () => (me.admin ? html`<${AdminPage} />` : html`<p>Administrators only.</p>`),
  };
  const link = (name, label) => html`<a href="#/${name}" class=${page === name ? "active" : ""}>${label}</a>`;
  return html`<header>
      <strong>dlaas</strong>
      <nav>${link("jobs", "Jobs")} ${link("submit", "Submit")} ${link("queue", "Queue")} ${link("nodes", "Nodes")} ${link("usage", "Usage")}
        ${me.admin ? link("admin", "Admin") : ""}</nav>
      <span class="who">${me.user} <span class="muted">(${me.team}${me.admin ? ", admin" : ""})</span>
        <button id="logout" onClick=${logout}>Log out</button></span>
    </header>
    <main>${(pages[page] || pages.jobs)()}</main>`;
}

render(html`<${App} />`, document.getElementById("app"));
