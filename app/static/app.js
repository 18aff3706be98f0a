// The page's behaviour: talks to the JSON API only, writes with textContent only.
"use strict";

const POLL_MS = 500;
const REFRESH_MS = 3000;
const PAGE_SIZE = 15;
const DEAD_PAGE_SIZE = 10;

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

// ---------- where the app is served ----------
// The app's root as the server rendered it (request.script_root + "/": "/", or "/queue/" when it is
// mounted there). Every URL the page fetches or links to is made from it, never from "/".
const BASE = new URL(document.documentElement.dataset.base || "./", location.href);

// "api/stats" → the absolute URL of that route of this app.
function appUrl(path) {
  return new URL(path, BASE).href;
}

// A path the API gives from the app's root (a job's resultUrl) as a URL below BASE.
function apiPathUrl(path) {
  const root = BASE.pathname;
  return appUrl(path.startsWith(root) ? path.slice(root.length) : path.replace(/^\/+/, ""));
}

// Where a succeeded job's result is: its resultUrl, below BASE.
function resultHref(job) {
  return job.resultUrl ? apiPathUrl(job.resultUrl) : null;
}

// ---------- API ----------

class ApiFailure extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
    this.details = error && error.details;
  }
}

// ---------- authentication ----------
// With API_TOKENS set, every /api call needs "Authorization: Bearer <token>". The page asks for the
// token after the first 401 and keeps it in sessionStorage: this tab only, gone when it closes.

const TOKEN_KEY = "pgqw.apiToken";

function apiToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function authHeaders() {
  const token = apiToken();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function askForToken() {
  const bar = $("#auth-bar");
  if (bar.hidden) {
    bar.hidden = false;
    $("#api-token").focus();
  }
}

function initAuth() {
  $("#auth-bar").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#api-token").value.trim());
    window.location.reload();
  });
  // A link cannot send a header: with a token, result links are fetched and shown from memory.
  document.addEventListener("click", async (event) => {
    const link = event.target.closest && event.target.closest("a[href]");
    if (!link || !apiToken() || !isResultLink(link.href)) return;
    event.preventDefault();
    const response = await fetch(link.href, { headers: authHeaders() });
    if (response.status === 401) return askForToken();
    if (!response.ok) return;
    window.open(URL.createObjectURL(await response.blob()), "_blank", "noopener");
  });
}

// A link to a file of a job (its result, or a route a task module added) of this app's API.
function isResultLink(href) {
  const api = appUrl("api/jobs/");
  return href.startsWith(api) && /^[^/]+\/[a-z]+$/.test(href.slice(api.length).split(/[?#]/)[0]);
}

// path: relative to the app's root ("api/jobs"), see appUrl.
async function api(path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}), ...authHeaders() };
  const response = await fetch(appUrl(path), { ...options, headers });
  if (response.status === 401) askForToken();
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) throw new ApiFailure(response.status, body && body.error);
  return { status: response.status, data: body ? body.data : null };
}

// A random UUID; crypto.randomUUID exists only in secure contexts (https, localhost).
function newKey() {
  if (window.crypto && typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// ---------- formatting ----------

function pad(n) {
  return String(n).padStart(2, "0");
}

function formatTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  const today = new Date();
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

function timeCell(iso) {
  const el = document.createElement("time");
  el.textContent = formatTime(iso);
  if (iso) {
    el.dateTime = iso;
    el.title = iso;
  }
  return el;
}

function shortId(id) {
  return id.slice(0, 8);
}

// lastError is the error of the latest failed attempt. While the job is failed or dead that attempt is
// where the job stands, and the error shows as one (red). In any other status a later attempt has
// started or succeeded since, so the error is history: shown muted and labelled as an earlier attempt's.
// An expired job's lastError says when it expired: where it stands, as a dead one's.
function earlierError(job) {
  return Boolean(job.lastError) && !["failed", "dead", "expired"].includes(job.status);
}

function errorText(job) {
  if (!job.lastError) return "";
  return earlierError(job) ? `earlier attempt failed: ${job.lastError}` : job.lastError;
}

function badge(el, status) {
  el.textContent = status;
  el.dataset.status = status;
  el.className = `badge badge-${status}`;
}

// 42 s, 3 min 5 s, 2 h 10 min, 3 d 4 h: a duration in seconds, to the two largest units.
function formatDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
  if (s < 86400) return `${Math.floor(s / 3600)} h${s % 3600 >= 60 ? ` ${Math.floor((s % 3600) / 60)} min` : ""}`;
  return `${Math.floor(s / 86400)} d${s % 86400 >= 3600 ? ` ${Math.floor((s % 86400) / 3600)} h` : ""}`;
}

// "12 s ago" (by this browser's clock), with the exact time as its title.
function agoCell(iso) {
  const el = timeCell(iso);
  if (iso) el.textContent = `${formatDuration((Date.now() - new Date(iso).getTime()) / 1000)} ago`;
  return el;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function td(content, className) {
  const cell = el("td", className);
  if (content instanceof Node) cell.append(content);
  else if (content !== undefined && content !== null) cell.textContent = String(content);
  return cell;
}

function button(text, testid, onClick, className = "button small-button") {
  const b = el("button", className, text);
  b.type = "button";
  b.dataset.testid = testid;
  b.addEventListener("click", onClick);
  return b;
}

// ---------- views ----------

// The tabs a task module added (its script, loaded after this one, calls registerTab): their views
// are sections of the page like the console's own.
const consoleTabs = {};

function registerTab(name, tab) {
  consoleTabs[name] = tab;
}

// #name, or #name/<id> for the views of one thing (#job/<id>, #workflow/<id>, #batch/<id>).
function currentView() {
  const name = location.hash.replace("#", "").split("/")[0];
  const views = $$(".view").map((section) => section.dataset.view);
  return views.includes(name) ? name : "console";
}

function viewArgument() {
  const parts = location.hash.replace("#", "").split("/");
  return parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : "";
}

// The views of one job, workflow or batch belong to the Jobs tab.
const TAB_OF_VIEW = { job: "jobs", workflow: "jobs", batch: "jobs" };

function showView() {
  const name = currentView();
  for (const section of $$(".view")) section.hidden = section.dataset.view !== name;
  for (const tab of $$(".tab")) tab.classList.toggle("active", tab.dataset.tab === (TAB_OF_VIEW[name] || name));
  if (name === "console") consoleView.load();
  if (name === "jobs") jobs.load();
  if (name === "dead") dead.load(null);
  if (name === "job") jobView.load(viewArgument());
  if (name === "workflow") workflowView.load(viewArgument());
  if (name === "batch") batchView.load(viewArgument());
  if (consoleTabs[name] && consoleTabs[name].show) consoleTabs[name].show();
}

function viewHref(view, id) {
  return `#${view}/${encodeURIComponent(id)}`;
}

// ---------- 0. the console: workers, queues, task types, schedules ----------

const SVG = "http://www.w3.org/2000/svg";
const SPARK_W = 120;
const SPARK_H = 32;

// One bar per bucket, oldest first: succeeded from the bottom, failed stacked on top. Each queue's
// chart has its own scale (its busiest bucket fills the height); the totals are written beside it.
function sparkline(series, bucketSeconds) {
  const n = series.succeeded.length;
  const busiest = Math.max(0, ...series.succeeded.map((ok, i) => ok + series.failed[i]));
  const peak = Math.max(1, busiest);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", String(SPARK_W));
  svg.setAttribute("height", String(SPARK_H));
  svg.setAttribute("viewBox", `0 0 ${SPARK_W} ${SPARK_H}`);
  svg.setAttribute("role", "img");
  const label = `${series.totalSucceeded} succeeded, ${series.totalFailed} dead in the last hour; ` +
    `at most ${busiest} in ${formatDuration(bucketSeconds)}`;
  svg.setAttribute("aria-label", label);
  const title = document.createElementNS(SVG, "title");
  title.textContent = label;
  svg.append(title);
  const base = document.createElementNS(SVG, "line");
  base.setAttribute("class", "spark-base");
  base.setAttribute("x1", "0");
  base.setAttribute("x2", String(SPARK_W));
  base.setAttribute("y1", String(SPARK_H - 0.5));
  base.setAttribute("y2", String(SPARK_H - 0.5));
  svg.append(base);
  const w = SPARK_W / n;
  const bar = (i, from, count, cls) => {
    if (!count) return;
    const h = Math.max(1, (count / peak) * (SPARK_H - 2));
    const r = document.createElementNS(SVG, "rect");
    r.setAttribute("class", cls);
    r.setAttribute("x", (i * w + 0.25).toFixed(2));
    r.setAttribute("width", Math.max(0.5, w - 0.5).toFixed(2));
    r.setAttribute("y", (SPARK_H - 1 - from - h).toFixed(2));
    r.setAttribute("height", h.toFixed(2));
    svg.append(r);
    return h;
  };
  for (let i = 0; i < n; i += 1) {
    const okHeight = bar(i, 0, series.succeeded[i], "spark-ok") || 0;
    bar(i, okHeight, series.failed[i], "spark-bad");
  }
  return svg;
}

const consoleView = {
  timer: null,

  async load() {
    clearTimeout(this.timer);
    this.seq = (this.seq || 0) + 1; // only the latest load draws (see jobs.load)
    const mine = this.seq;
    const get = (path) => api(path).then((r) => r.data);
    const [workers, queues, throughput, types, schedules, stats] = await Promise.allSettled([
      get("api/workers"), get("api/queues"), get("api/throughput?minutes=60"), get("api/task-types"),
      get("api/schedules"), get("api/stats"),
    ]);
    if (mine !== this.seq) return;
    if (workers.status === "fulfilled") this.renderWorkers(workers.value);
    if (queues.status === "fulfilled") {
      this.renderQueues(queues.value, throughput.status === "fulfilled" ? throughput.value : null,
        workers.status === "fulfilled" ? workers.value : null);
    }
    if (types.status === "fulfilled") this.renderTypes(types.value);
    this.renderSchedules(schedules);
    if (stats.status === "fulfilled") {
      $("#sum-dead").textContent = String(stats.value.counts.dead);
      $("#sum-dead").closest(".tile").classList.toggle("bad", stats.value.counts.dead > 0);
    }
    if ([workers, queues, throughput].every((r) => r.status === "fulfilled")) {
      $("#console-updated").textContent = `Updated ${formatTime(new Date().toISOString())}`;
    }
    if (currentView() === "console") this.timer = setTimeout(() => this.load(), REFRESH_MS);
  },

  renderWorkers(workers) {
    const rows = workers.map((w) => {
      const tr = el("tr", w.alive ? "" : "gone");
      tr.dataset.workerId = w.id;
      tr.dataset.testid = "worker-row";
      const who = el("td");
      who.append(el("div", "mono", w.id));
      if (w.hostname || w.pid) who.append(el("div", "muted small", [w.hostname, w.pid && `pid ${w.pid}`].filter(Boolean).join(" · ")));
      const state = el("span");
      badge(state, w.alive ? "alive" : "gone");
      state.dataset.testid = "worker-state";
      if (!w.alive) state.title = w.stoppedAt ? `stopped at ${w.stoppedAt}` : `no heartbeat since ${w.lastSeenAt}`;
      tr.append(
        who,
        td(state),
        td(w.queues ? w.queues.join(", ") : "all", w.queues ? "" : "muted"),
        td(w.taskTypes.join(", "), "small"),
        td(w.concurrency === null ? "—" : w.concurrency, "num"),
        td(agoCell(w.lastSeenAt), "nowrap"),
        td(timeCell(w.startedAt), "nowrap"),
      );
      return tr;
    });
    $("#workers-rows").replaceChildren(...rows);
    $("#workers-empty").hidden = rows.length > 0;
    const alive = workers.filter((w) => w.alive).length;
    $("#sum-workers").textContent = String(alive);
    $("#sum-workers").closest(".tile").classList.toggle("bad", alive === 0);
  },

  renderQueues(queues, throughput, workers) {
    // Whether a live worker takes jobs from a queue (its queues: null means every queue).
    const served = (name) => !workers || workers.some((w) => w.alive && (w.queues === null || w.queues.includes(name)));
    const series = new Map(((throughput && throughput.queues) || []).map((q) => [q.name, q]));
    const buckets = throughput ? throughput.buckets : 60;
    const empty = { succeeded: Array(buckets).fill(0), failed: Array(buckets).fill(0), totalSucceeded: 0, totalFailed: 0 };
    // A queue whose jobs were all pruned can still have attempts in the window: show it too.
    const names = new Set(queues.map((q) => q.name));
    const all = queues.concat([...series.keys()].filter((n) => !names.has(n))
      .map((name) => ({ name, paused: false, maxRunning: null, depth: 0, running: 0, oldestReadyAgeSeconds: 0 })));
    const rows = all.map((q) => {
      const tr = el("tr", q.paused ? "paused" : "");
      tr.dataset.queue = q.name;
      tr.dataset.testid = "queue-row";
      const state = el("span");
      badge(state, q.paused ? "paused" : "active");
      state.dataset.testid = "queue-state";
      const stateCell = td(state, "badges");
      if (q.depth > 0 && !served(q.name)) {
        const warn = el("span", "badge badge-unserved", "no live worker");
        warn.title = "no live worker takes jobs from this queue";
        warn.dataset.testid = "queue-unserved";
        stateCell.append(warn);
      }
      const s = series.get(q.name) || empty;
      const chart = el("div", "spark-cell");
      chart.append(sparkline(s, throughput ? throughput.bucketSeconds : 60),
        el("span", "small muted", `${s.totalSucceeded} ok${s.totalFailed ? ` · ${s.totalFailed} failed` : ""}`));
      const action = q.paused
        ? button("Resume", "queue-resume", () => this.queueAction(q.name, "resume"))
        : button("Pause", "queue-pause", () => this.queueAction(q.name, "pause"));
      action.setAttribute("aria-label", `${q.paused ? "Resume" : "Pause"} queue ${q.name}`);
      tr.append(
        td(el("span", "cell-title", q.name)),
        stateCell,
        td(q.depth, "num"),
        td(q.depth ? formatDuration(q.oldestReadyAgeSeconds) : "—", "num nowrap"),
        td(q.running, "num"),
        td(q.maxRunning === null ? "none" : q.maxRunning, q.maxRunning === null ? "num muted" : "num"),
        td(chart),
        td(action),
      );
      return tr;
    });
    $("#queues-rows").replaceChildren(...rows);
    $("#queues-empty").hidden = rows.length > 0;
    $("#queue-names").replaceChildren(...all.map((q) => Object.assign(el("option"), { value: q.name })));
    $("#sum-waiting").textContent = String(queues.reduce((n, q) => n + q.depth, 0));
    $("#sum-running").textContent = String(queues.reduce((n, q) => n + q.running, 0));
    const oldest = Math.max(0, ...queues.filter((q) => q.depth).map((q) => q.oldestReadyAgeSeconds));
    $("#sum-oldest").textContent = queues.some((q) => q.depth) ? formatDuration(oldest) : "—";
    if (throughput) {
      const done = throughput.queues.reduce((n, q) => n + q.totalSucceeded + q.totalFailed, 0);
      $("#sum-hour").textContent = String(done);
    }
  },

  async queueAction(name, action) {
    try {
      await api(`api/queues/${encodeURIComponent(name)}/${action}`, { method: "POST" });
    } catch (failure) {
      $("#console-updated").textContent = `Could not ${action} ${name}: ${failure.message}`;
    }
    this.load();
  },

  renderTypes(types) {
    const rows = types.map((t) => {
      const tr = el("tr");
      tr.dataset.taskType = t.name;
      tr.dataset.testid = "type-row";
      const name = el("td");
      name.append(el("div", "mono", t.name));
      if (t.description) name.append(el("div", "muted small", t.description));
      // backoff_delay: least(base · 2^(attempt − 1) + jitter, cap), jitter from 0 to its maximum.
      const backoff = `${formatDuration(t.backoffBaseMs / 1000)} doubling` +
        (t.backoffMaxJitterMs ? ` + 0–${formatDuration(t.backoffMaxJitterMs / 1000)} jitter` : "") +
        `, at most ${formatDuration(t.backoffMaxDelayMs / 1000)}`;
      // Each attempt's timeout and a job's expiry (none unless set), the snoozes it may take.
      const limits = [
        t.timeoutMs ? `timeout ${formatDuration(t.timeoutMs / 1000)}` : "no timeout",
        t.expireAfterMs ? `expires after ${formatDuration(t.expireAfterMs / 1000)}` : null,
        `${t.maxSnoozes} snooze${t.maxSnoozes === 1 ? "" : "s"}`,
      ].filter(Boolean).join(" · ");
      const kept = `succeeded ${formatDuration(t.retainSucceededS)}, others ${formatDuration(t.retainFailedS)}`;
      const limitsCell = td(limits, "small");
      limitsCell.dataset.testid = "type-limits";
      tr.append(name, td(t.queue), td(t.priority, "num"), td(t.maxAttempts, "num"), td(backoff, "small"),
        td(formatDuration(t.leaseMs / 1000), "num nowrap"), limitsCell, td(kept, "small"));
      return tr;
    });
    $("#types-rows").replaceChildren(...rows);
    $("#types-empty").hidden = rows.length > 0;
    $("#type-names").replaceChildren(...types.map((t) => Object.assign(el("option"), { value: t.name })));
  },

  // The schedules route may not exist on this server (404): then there is nothing to show.
  renderSchedules(result) {
    const error = $("#schedules-error");
    error.hidden = true;
    let list = [];
    if (result.status === "fulfilled") {
      const data = result.value;
      list = Array.isArray(data) ? data : (data && data.schedules) || [];
    } else if (result.reason && result.reason.status !== 404) {
      error.textContent = `Could not read the schedules: ${result.reason.message}`;
      error.hidden = false;
      return;
    }
    const rows = list.map((s) => {
      const tr = el("tr", s.paused ? "paused" : "");
      tr.dataset.schedule = s.name;
      tr.dataset.testid = "schedule-row";
      const name = el("td");
      name.append(el("div", "cell-title", s.name));
      name.append(el("div", "muted small mono", `${s.taskType} → ${s.queue || "its queue"}`));
      const when = el("td");
      when.append(el("code", "", s.cron));
      const state = el("span");
      badge(state, s.paused ? "paused" : "active");
      state.dataset.testid = "schedule-state";
      const action = s.paused
        ? button("Resume", "schedule-resume", () => this.scheduleAction(s.name, "resume"))
        : button("Pause", "schedule-pause", () => this.scheduleAction(s.name, "pause"));
      action.setAttribute("aria-label", `${s.paused ? "Resume" : "Pause"} schedule ${s.name}`);
      const last = s.lastSlot;
      const next = s.nextSlot;
      tr.append(name, when, td(timeCell(last), "nowrap"),
        td(timeCell(s.paused ? null : next), "nowrap"), td(state), td(action));
      return tr;
    });
    $("#schedules-rows").replaceChildren(...rows);
    $('[data-testid="schedules-table"]').hidden = rows.length === 0;
    $("#schedules-empty").hidden = rows.length > 0;
  },

  async scheduleAction(name, action) {
    try {
      await api(`api/schedules/${encodeURIComponent(name)}/${action}`, { method: "POST" });
    } catch (failure) {
      $("#schedules-error").textContent = `Could not ${action} ${name}: ${failure.message}`;
      $("#schedules-error").hidden = false;
      return;
    }
    this.load();
  },
};

// ---------- stats (counts per status) ----------

async function refreshStats() {
  try {
    const { data } = await api("api/stats");
    for (const el of $$("[data-count]")) {
      const key = el.dataset.count;
      el.textContent = String(key === "total" ? data.total : data.counts[key]);
    }
    $("#jobs-total").textContent = `${data.total} in all`;
    const deadCount = $("#nav-dead-count");
    deadCount.textContent = String(data.counts.dead);
    deadCount.hidden = data.counts.dead === 0;
  } catch (_) {
    // The next refresh tries again.
  }
}

// ---------- 1. jobs table ----------

const SEARCH_FIELDS = ["id_prefix", "type", "queue"];
// The statuses a bulk cancel takes (cancel_jobs' p_statuses).
const CANCELLABLE = ["blocked", "pending", "failed", "processing"];

const jobs = {
  status: "",
  filters: {}, // the search: id_prefix, type, queue (status is the chips)
  cursors: [null], // the cursor of each page seen; the last one is the page shown
  next: null,
  timer: null,
  selected: new Set(), // the ids of the jobs ticked: kept while the rows are redrawn, until a new search
  busy: false, // acting on the selected jobs

  init() {
    $("#job-search").addEventListener("submit", (event) => {
      event.preventDefault();
      this.filters = {};
      for (const name of SEARCH_FIELDS) {
        const value = $(`#s-${name}`).value.trim();
        if (value) this.filters[name] = value;
      }
      this.selected.clear();
      this.cursors = [null];
      this.load();
    });
    $("#search-clear").addEventListener("click", () => {
      for (const name of SEARCH_FIELDS) $(`#s-${name}`).value = "";
      this.filters = {};
      this.status = "";
      this.selected.clear();
      this.cursors = [null];
      this.load();
    });
    for (const chip of $$("#status-filter .chip")) {
      chip.addEventListener("click", () => {
        this.status = chip.dataset.status;
        this.selected.clear();
        this.cursors = [null];
        this.load();
      });
    }
    $("#page-first").addEventListener("click", () => {
      this.cursors = [null];
      this.load();
    });
    $("#page-next").addEventListener("click", () => {
      if (!this.next) return;
      this.cursors.push(this.next);
      this.load();
    });
    $("#bulk-retry").addEventListener("click", () => this.bulk("retry"));
    $("#bulk-cancel").addEventListener("click", () => this.bulk("cancel"));
    $("#select-shown").addEventListener("change", (event) => {
      for (const box of $$('#jobs-rows [data-testid="row-select"]')) this.select(box.dataset.jobId, event.target.checked);
      this.drawSelection();
    });
    $("#selected-retry").addEventListener("click", () => this.actOnSelected("retry"));
    $("#selected-cancel").addEventListener("click", () => this.actOnSelected("cancel"));
  },

  select(id, on) {
    if (on) this.selected.add(id);
    else this.selected.delete(id);
  },

  // The row checkboxes, the header's one and the selected buttons, from this.selected: called after
  // every draw, so a refresh that redraws the rows keeps them ticked.
  drawSelection() {
    const boxes = $$('#jobs-rows [data-testid="row-select"]');
    let shown = 0;
    for (const box of boxes) {
      box.checked = this.selected.has(box.dataset.jobId);
      box.closest("tr").classList.toggle("selected", box.checked);
      if (box.checked) shown += 1;
    }
    const all = $("#select-shown");
    all.checked = boxes.length > 0 && shown === boxes.length;
    all.indeterminate = shown > 0 && shown < boxes.length;
    all.disabled = boxes.length === 0;
    const n = this.selected.size;
    const hidden = n - shown;
    $("#selected-count").textContent = n === 0
      ? "No job selected."
      : `${n} selected${hidden ? ` (${hidden} not shown)` : ""}:`;
    $("#selected-retry").disabled = n === 0 || this.busy;
    $("#selected-cancel").disabled = n === 0 || this.busy;
  },

  // Each selected job through its own route (POST api/jobs/{id}/retry or /cancel), one after the
  // other, then how many changed. A job no longer in a state the action takes answers 409: counted,
  // and dropped from the selection with the ones that changed; one that failed otherwise stays selected.
  async actOnSelected(action) {
    const ids = [...this.selected];
    if (ids.length === 0 || this.busy) return;
    this.busy = true;
    this.drawSelection();
    const note = $("#jobs-note");
    note.textContent = `${action === "retry" ? "Retrying" : "Cancelling"} ${ids.length} selected…`;
    let changed = 0;
    let stopping = 0;
    let wrongState = 0;
    const failures = [];
    for (const id of ids) {
      try {
        const { data } = await api(`api/jobs/${id}/${action}`, { method: "POST" });
        changed += 1;
        if (action === "cancel" && data.status === "processing") stopping += 1;
        this.selected.delete(id);
      } catch (failure) {
        if (failure instanceof ApiFailure && failure.status === 409) {
          wrongState += 1;
          this.selected.delete(id);
        } else {
          failures.push(failure);
        }
      }
    }
    let text = `${action === "retry" ? "Retried" : "Cancelled"} ${changed} of ${ids.length} selected`;
    if (stopping) text += ` (${stopping} running: asked to stop)`;
    const parts = [];
    if (wrongState) {
      parts.push(action === "retry"
        ? `${wrongState} ${wrongState === 1 ? "was" : "were"} not dead`
        : `${wrongState} had already finished`);
    }
    if (failures.length) {
      parts.push(`${failures.length} could not be ${action === "retry" ? "retried" : "cancelled"}: ${failures[0].message}`);
    }
    note.textContent = `${text}${parts.length ? `; ${parts.join("; ")}` : ""}.`;
    this.busy = false;
    this.drawn = null;
    this.drawSelection();
    this.load();
  },

  // The body of a bulk action for the search on screen (task type, queue, status), or null when that
  // action cannot take it: an id prefix is no bulk filter, and only dead jobs are retried, only
  // blocked, pending, failed or processing ones cancelled.
  bulkBody(action) {
    if (this.filters.id_prefix) return null;
    const body = {};
    if (this.filters.type) body.type = this.filters.type;
    if (this.filters.queue) body.queue = this.filters.queue;
    if (action === "retry" && this.status && this.status !== "dead") return null;
    if (action === "cancel" && this.status) {
      if (!CANCELLABLE.includes(this.status)) return null;
      body.statuses = [this.status];
    }
    if (Object.keys(body).length === 0) body.all = true;
    return body;
  },

  // What the bulk buttons would act on, in words.
  drawBulk() {
    const parts = [];
    if (this.filters.type) parts.push(`type ${this.filters.type}`);
    if (this.filters.queue) parts.push(`queue ${this.filters.queue}`);
    if (this.status) parts.push(`status ${this.status}`);
    $("#bulk-scope").textContent = this.filters.id_prefix
      ? "Bulk actions take a task type, a queue and a status, not an id prefix."
      : `Every job matching ${parts.length ? parts.join(", ") : "nothing in particular (every job)"}:`;
    $("#bulk-retry").disabled = this.bulkBody("retry") === null;
    $("#bulk-cancel").disabled = this.bulkBody("cancel") === null;
  },

  async bulk(action) {
    const body = this.bulkBody(action);
    if (body === null) return;
    const what = action === "retry" ? "Retry every dead job" : "Cancel every waiting or running job";
    const scope = body.all ? "in every queue" : `matching ${$("#bulk-scope").textContent.replace(/^Every job matching |:$/g, "")}`;
    if (!window.confirm(`${what} ${scope}?`)) return;
    const note = $("#jobs-note");
    const buttons = [$("#bulk-retry"), $("#bulk-cancel")];
    for (const b of buttons) b.disabled = true;
    note.textContent = action === "retry" ? "Retrying…" : "Cancelling…";
    try {
      const { data } = await api(`api/jobs/bulk/${action}`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      const jobsWord = data.changed === 1 ? "job" : "jobs";
      note.textContent = action === "retry"
        ? `Retried ${data.changed} dead ${jobsWord}.`
        : `Cancelled ${data.changed} ${jobsWord} (a running one is asked to stop).`;
    } catch (failure) {
      note.textContent = `Could not ${action} the matching jobs: ${failure.message}`;
    }
    this.drawn = null;
    this.load();
  },

  // The search fields suggest the registered task types and the known queues (the console fills the
  // same lists when it is shown first).
  async suggest() {
    try {
      if (!$("#type-names").children.length) {
        const { data } = await api("api/task-types");
        $("#type-names").replaceChildren(...data.map((t) => Object.assign(el("option"), { value: t.name })));
      }
      if (!$("#queue-names").children.length) {
        const { data } = await api("api/queues");
        $("#queue-names").replaceChildren(...data.map((q) => Object.assign(el("option"), { value: q.name })));
      }
    } catch (_) {
      // suggestions only
    }
  },

  async load() {
    clearTimeout(this.timer);
    // Only the latest request may draw: an older one (other filters, another page) that answers later
    // is dropped, so a slow answer never shows rows that do not match the search on screen.
    this.seq = (this.seq || 0) + 1;
    const mine = this.seq;
    this.suggest();
    for (const chip of $$("#status-filter .chip")) chip.classList.toggle("active", chip.dataset.status === this.status);
    this.drawBulk();
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (this.status) params.set("status", this.status);
    for (const [name, value] of Object.entries(this.filters)) params.set(name, value);
    const cursor = this.cursors[this.cursors.length - 1];
    if (cursor) params.set("cursor", cursor);
    const searchError = $("#search-error");
    try {
      const [{ data }] = await Promise.all([api(`api/jobs?${params}`), refreshStats()]);
      if (mine !== this.seq) return;
      searchError.hidden = true;
      this.render(data);
    } catch (failure) {
      if (mine !== this.seq) return;
      // A refused search (400) says why; anything else is shown as stale and the next refresh tries again.
      if (failure instanceof ApiFailure && failure.status === 400) {
        const problems = Array.isArray(failure.details) ? failure.details : [];
        const label = (field) => ({ id_prefix: "Id", type: "Task type", queue: "Queue" })[field] || field;
        searchError.textContent = problems.length
          ? problems.map((d) => `${label(d.field)} ${d.problem}.`).join(" ")
          : failure.message;
        searchError.hidden = false;
        $("#jobs-rows").replaceChildren();
        this.drawn = null;
        this.drawSelection();
        $("#jobs-empty").hidden = true;
        return;
      }
    }
    if (currentView() === "jobs") this.timer = setTimeout(() => this.load(), REFRESH_MS);
  },

  async act(job, action, buttonEl) {
    buttonEl.disabled = true;
    const note = $("#jobs-note");
    try {
      const { data } = await api(`api/jobs/${job.id}/${action}`, { method: "POST" });
      note.textContent = action === "cancel" && data.status === "processing"
        ? `Asked the worker running ${shortId(job.id)} to stop.`
        : `${action === "cancel" ? "Cancelled" : "Retried"} ${shortId(job.id)}: now ${data.status}.`;
    } catch (failure) {
      note.textContent = `Could not ${action} ${shortId(job.id)}: ${failure.message}`;
    }
    this.drawn = null; // its button was disabled: draw the rows again whatever the answer
    this.load();
  },

  render(page) {
    this.next = page.nextCursor;
    // The rows are drawn again only when the page's jobs changed: a refresh that finds the same jobs
    // keeps the rows, and a button about to be pressed, in place.
    const drawn = JSON.stringify(page.jobs) + new Date().toDateString();
    if (drawn !== this.drawn) {
      this.drawn = drawn;
      this.drawRows(page.jobs);
    }
    this.drawSelection();
    $("#jobs-empty").hidden = page.jobs.length > 0;
    $("#jobs-rows").dataset.refreshes = String((this.refreshes = (this.refreshes || 0) + 1)); // for tests
    $("#page-label").textContent = `Page ${this.cursors.length}`;
    $("#page-first").disabled = this.cursors.length === 1;
    $("#page-next").disabled = !this.next;
  },

  drawRows(jobs) {
    const rows = jobs.map((job) => {
      const tr = document.createElement("tr");
      tr.dataset.jobId = job.id;
      tr.dataset.testid = "job-row";
      const pick = el("input");
      pick.type = "checkbox";
      pick.dataset.testid = "row-select";
      pick.dataset.jobId = job.id;
      pick.checked = this.selected.has(job.id);
      pick.setAttribute("aria-label", `Select job ${shortId(job.id)}`);
      pick.addEventListener("change", () => {
        this.select(job.id, pick.checked);
        this.drawSelection();
      });
      const created = document.createElement("td");
      created.append(timeCell(job.createdAt));
      const jobCell = document.createElement("td");
      const title = document.createElement("div");
      title.className = "cell-title";
      title.textContent = (job.payload && typeof job.payload.title === "string" && job.payload.title) || job.type;
      const link = el("a", "", title.textContent);
      link.href = viewHref("job", job.id);
      link.dataset.testid = "job-row-link";
      title.replaceChildren(link);
      const id = document.createElement("code");
      id.className = "muted small";
      id.textContent = shortId(job.id);
      id.title = job.id;
      id.dataset.testid = "job-row-id";
      jobCell.append(title, id);
      if (title.textContent !== job.type) jobCell.append(el("span", "muted small", ` · ${job.type}`));
      // What its handler last reported (ctx.progress), shown only once there is one.
      if (job.progress !== null && job.progress !== undefined) {
        const progress = el("div", "muted small clamp", `progress: ${JSON.stringify(job.progress)}`);
        progress.dataset.testid = "job-row-progress";
        jobCell.append(progress);
      }
      const status = document.createElement("td");
      const b = document.createElement("span");
      badge(b, job.status);
      status.append(b);
      const attempts = document.createElement("td");
      attempts.className = "num";
      attempts.textContent = `${job.attempts} / ${job.maxAttempts}`;
      const error = document.createElement("td");
      error.className = `${earlierError(job) ? "earlier-error" : "error-text"} clamp`;
      error.dataset.testid = "job-row-error";
      error.textContent = errorText(job);
      error.title = errorText(job);
      const result = document.createElement("td");
      if (job.resultUrl) {
        const a = document.createElement("a");
        a.href = resultHref(job);
        a.target = "_blank";
        a.rel = "noopener";
        a.textContent = "result";
        result.append(a);
      }
      const actions = el("td", "nowrap");
      if (CANCELLABLE.includes(job.status)) {
        const b = button("Cancel", "row-cancel", () => this.act(job, "cancel", b), "button small-button danger");
        b.setAttribute("aria-label", `Cancel job ${shortId(job.id)}`);
        actions.append(b);
      }
      if (job.status === "dead") {
        const b = button("Retry", "row-retry", () => this.act(job, "retry", b));
        b.setAttribute("aria-label", `Retry job ${shortId(job.id)}`);
        actions.append(b);
      }
      tr.append(td(pick, "select-cell"), created, jobCell, td(job.queue, "nowrap"), status, attempts, error, result,
        actions);
      return tr;
    });
    $("#jobs-rows").replaceChildren(...rows);
  },
};

// ---------- 1a. one job, its workflow and its batch ----------

// A workflow's jobs as an indented list, each job one level below its deepest parent, in enqueue order:
// its state, a link to it, the parents it waits for. currentId: the job whose page this is.
function workflowGraph(jobs, currentId) {
  const byId = new Map(jobs.map((j) => [j.id, j]));
  const depth = new Map();
  for (const job of jobs) { // enqueue order: a job's parents come before it
    const parents = job.dependsOn.filter((p) => byId.has(p));
    depth.set(job.id, parents.length ? 1 + Math.max(...parents.map((p) => depth.get(p) || 0)) : 0);
  }
  return jobs.map((job) => {
    const li = el("li", `graph-node graph-depth-${Math.min(depth.get(job.id), 8)}`);
    li.dataset.jobId = job.id;
    li.dataset.testid = "workflow-node";
    if (job.id === currentId) li.classList.add("current");
    const state = el("span");
    badge(state, job.status);
    state.dataset.testid = "workflow-node-status";
    const title = (job.payload && typeof job.payload.title === "string" && job.payload.title) || job.type;
    const link = el("a", "cell-title", title);
    link.href = viewHref("job", job.id);
    link.dataset.testid = "workflow-node-link";
    li.append(state, " ", link, " ", el("code", "muted small", shortId(job.id)));
    if (job.dependsOn.length) {
      // Each parent it waits for only to end (runAnywayFor) is marked; the others must succeed.
      const anyway = new Set(job.runAnywayFor || []);
      const parents = job.dependsOn.map((id) => (anyway.has(id) && !job.runAnyway ? `${shortId(id)} (any end)` : shortId(id)));
      const after = `after ${parents.join(", ")}${job.runAnyway ? " (whatever their outcome)" : ""}`;
      li.append(el("span", "muted small", ` · ${after}`));
    }
    return li;
  });
}

// A batch's progress: a bar of its jobs by status, the counts, its callback job and when it finished.
function batchProgress(batch) {
  const box = el("div", "batch-progress");
  const done = ["succeeded", "dead", "cancelled", "expired"].reduce((n, s) => n + batch.counts[s], 0);
  const bar = el("progress");
  bar.max = Math.max(1, batch.total);
  bar.value = done;
  bar.dataset.testid = "batch-bar";
  bar.setAttribute("aria-label", `${done} of ${batch.total} jobs finished`);
  const line = el("p", "small", `${done} of ${batch.total} finished`);
  line.dataset.testid = "batch-done";
  const counts = el("ul", "batch-counts");
  for (const [status, n] of Object.entries(batch.counts)) {
    if (!n) continue;
    const item = el("li");
    const b = el("span");
    badge(b, status);
    item.append(b, ` ${n}`);
    item.dataset.testid = `batch-count-${status}`;
    counts.append(item);
  }
  const facts = el("p", "muted small");
  facts.append(`created ${formatTime(batch.createdAt)}`);
  if (batch.finishedAt) facts.append(` · every job finished ${formatTime(batch.finishedAt)}`);
  if (batch.callbackJobId) {
    const a = el("a", "", `callback job ${shortId(batch.callbackJobId)}`);
    a.href = viewHref("job", batch.callbackJobId);
    a.dataset.testid = "batch-callback";
    facts.append(" · ", a);
  }
  box.append(bar, line, counts, facts);
  return box;
}

function fact(dl, label, value) {
  const wrap = el("div", "fact");
  const dd = el("dd");
  if (value instanceof Node) dd.append(value);
  else dd.textContent = value === null || value === undefined || value === "" ? "—" : String(value);
  wrap.append(el("dt", "", label), dd);
  dl.append(wrap);
}

const jobView = {
  timer: null,

  init() {
    const root = $("#view-job");
    $('[data-slot="cancel"]', root).addEventListener("click", () => this.act("cancel"));
    $('[data-slot="retry"]', root).addEventListener("click", () => this.act("retry"));
  },

  slot(name) {
    return $(`#view-job [data-slot="${name}"]`);
  },

  async load(id) {
    clearTimeout(this.timer);
    if (id !== this.id) this.slot("note").hidden = true;
    this.id = id;
    this.seq = (this.seq || 0) + 1; // only the latest load draws (see jobs.load)
    const mine = this.seq;
    let job;
    try {
      ({ data: job } = await api(`api/jobs/${encodeURIComponent(id)}`));
    } catch (failure) {
      if (mine !== this.seq) return;
      this.slot("error").textContent = failure.status === 404 ? `No job has the id ${id}.` : failure.message;
      this.slot("error").hidden = false;
      if (failure.status !== 404 && currentView() === "job") this.timer = setTimeout(() => this.load(id), REFRESH_MS);
      return;
    }
    const [attempts, workflow, batch] = await Promise.allSettled([
      api(`api/jobs/${job.id}/attempts`).then((r) => r.data),
      // A workflow's root has no workflowId of its own: the workflow is named after it.
      api(`api/workflows/${job.workflowId || job.id}`).then((r) => r.data),
      job.batchId ? api(`api/batches/${job.batchId}`).then((r) => r.data) : Promise.resolve(null),
    ]);
    if (mine !== this.seq) return;
    this.slot("error").hidden = true;
    this.render(job, attempts, workflow, batch);
    if (currentView() === "job") this.timer = setTimeout(() => this.load(id), REFRESH_MS);
  },

  render(job, attempts, workflow, batch) {
    this.job = job;
    this.slot("title").textContent = (job.payload && typeof job.payload.title === "string" && job.payload.title) || job.type;
    this.slot("id").textContent = job.id;
    badge(this.slot("status"), job.status);
    this.slot("cancel").hidden = !CANCELLABLE.includes(job.status);
    this.slot("retry").hidden = job.status !== "dead";
    const dl = el("dl", "facts");
    fact(dl, "Type", job.type);
    fact(dl, "Queue", job.queue);
    fact(dl, "Priority", job.priority);
    fact(dl, "Attempts", `${job.attempts} / ${job.maxAttempts}`);
    fact(dl, "Created", timeCell(job.createdAt));
    if (job.nextAttemptAt) fact(dl, "Next attempt", timeCell(job.nextAttemptAt));
    fact(dl, "Started", timeCell(job.startedAt));
    fact(dl, "Finished", timeCell(job.finishedAt));
    if (job.lockedBy) fact(dl, "Worker", job.lockedBy);
    if (job.lastError) fact(dl, earlierError(job) ? "Earlier error" : "Last error", job.lastError);
    if (job.serialKey) fact(dl, "Serial key", job.serialKey);
    if (job.concurrencyKey) fact(dl, "Concurrency key", job.concurrencyKey);
    if (job.deadlineAt && job.status === "processing") fact(dl, "Times out", timeCell(job.deadlineAt));
    if (job.progress !== null && job.progress !== undefined) fact(dl, "Progress", JSON.stringify(job.progress));
    if (job.resultUrl) {
      const a = el("a", "", "open the result");
      a.href = resultHref(job);
      a.target = "_blank";
      a.rel = "noopener";
      fact(dl, "Result", a);
    }
    this.slot("facts").replaceChildren(...dl.childNodes);
    this.slot("payload").textContent = JSON.stringify(job.payload, null, 2);
    if (attempts.status === "fulfilled") this.slot("attempts").replaceChildren(...attempts.value.map(attemptRow));
    // A job alone (no parents, no dependents) is a workflow of one: not shown.
    const graph = workflow.status === "fulfilled" ? workflow.value.jobs : null;
    this.slot("workflow").hidden = !job.workflowId && !(graph && graph.length > 1);
    this.slot("workflowLink").href = viewHref("workflow", job.workflowId || job.id);
    if (graph) {
      this.slot("graph").replaceChildren(...workflowGraph(graph, job.id));
    } else if (job.workflowId) {
      this.slot("graph").replaceChildren(el("li", "form-error", `Could not read the workflow: ${workflow.reason.message}`));
    }
    this.slot("batch").hidden = !job.batchId;
    if (job.batchId) {
      this.slot("batchLink").href = viewHref("batch", job.batchId);
      if (batch.status === "fulfilled" && batch.value) this.slot("progress").replaceChildren(batchProgress(batch.value));
    }
  },

  async act(action) {
    const job = this.job;
    if (!job) return;
    const note = this.slot("note");
    try {
      const { data } = await api(`api/jobs/${job.id}/${action}`, { method: "POST" });
      note.textContent = action === "cancel" && data.status === "processing"
        ? "Asked its worker to stop."
        : `${action === "cancel" ? "Cancelled" : "Retried"}: now ${data.status}.`;
    } catch (failure) {
      note.textContent = `Could not ${action} it: ${failure.message}`;
    }
    note.hidden = false;
    this.load(job.id);
  },
};

const workflowView = {
  timer: null,

  async load(id) {
    clearTimeout(this.timer);
    this.seq = (this.seq || 0) + 1;
    const mine = this.seq;
    $("#workflow-id").textContent = id;
    try {
      const { data } = await api(`api/workflows/${encodeURIComponent(id)}`);
      if (mine !== this.seq) return;
      $("#workflow-error").hidden = true;
      const counts = {};
      for (const job of data.jobs) counts[job.status] = (counts[job.status] || 0) + 1;
      $("#workflow-summary").textContent = `${data.jobs.length} jobs: ` +
        Object.entries(counts).map(([status, n]) => `${n} ${status}`).join(", ");
      $("#workflow-graph").replaceChildren(...workflowGraph(data.jobs, null));
    } catch (failure) {
      if (mine !== this.seq) return;
      $("#workflow-error").textContent = failure.status === 404 ? `No workflow has the id ${id}.` : failure.message;
      $("#workflow-error").hidden = false;
      if (failure.status === 404) {
        $("#workflow-graph").replaceChildren();
        $("#workflow-summary").textContent = "";
        return;
      }
    }
    if (currentView() === "workflow") this.timer = setTimeout(() => this.load(id), REFRESH_MS);
  },
};

const batchView = {
  timer: null,

  async load(id) {
    clearTimeout(this.timer);
    this.seq = (this.seq || 0) + 1;
    const mine = this.seq;
    $("#batch-id").textContent = id;
    try {
      const { data } = await api(`api/batches/${encodeURIComponent(id)}`);
      if (mine !== this.seq) return;
      $("#batch-error").hidden = true;
      $("#batch-progress").replaceChildren(batchProgress(data));
    } catch (failure) {
      if (mine !== this.seq) return;
      $("#batch-error").textContent = failure.status === 404 ? `No batch has the id ${id}.` : failure.message;
      $("#batch-error").hidden = false;
      if (failure.status === 404) {
        $("#batch-progress").replaceChildren();
        return;
      }
    }
    if (currentView() === "batch") this.timer = setTimeout(() => this.load(id), REFRESH_MS);
  },
};

// ---------- 2. dead letters ----------

const dead = {
  cursors: [null],
  next: null,

  init() {
    $("#dead-refresh").addEventListener("click", () => this.load(null));
    $("#dead-first").addEventListener("click", () => this.load(null));
    $("#dead-next").addEventListener("click", () => {
      if (this.next) {
        this.cursors.push(this.next);
        this.show();
      }
    });
  },

  load(cursor) {
    this.cursors = [cursor];
    return this.show();
  },

  async show() {
    const params = new URLSearchParams({ status: "dead", limit: String(DEAD_PAGE_SIZE) });
    const cursor = this.cursors[this.cursors.length - 1];
    if (cursor) params.set("cursor", cursor);
    refreshStats();
    let page;
    try {
      ({ data: page } = await api(`api/jobs?${params}`));
    } catch (failure) {
      $("#dead-empty").textContent = `Could not load the dead jobs: ${failure.message}`;
      $("#dead-empty").hidden = false;
      return;
    }
    this.next = page.nextCursor;
    const cards = await Promise.all(page.jobs.map((job) => this.card(job)));
    $("#dead-list").replaceChildren(...cards);
    $("#dead-empty").textContent = "No dead jobs. Every job either succeeded or still has attempts left.";
    $("#dead-empty").hidden = cards.length > 0;
    $("#dead-pager").hidden = !this.next && this.cursors.length === 1;
    $("#dead-next").disabled = !this.next;
    $("#dead-first").disabled = this.cursors.length === 1;
  },

  async card(job) {
    const node = $("#dead-card-template").content.firstElementChild.cloneNode(true);
    const slot = (name) => $(`[data-slot="${name}"]`, node);
    node.dataset.jobId = job.id;
    slot("title").textContent = (job.payload && job.payload.title) || job.type;
    slot("id").textContent = job.id;
    slot("created").replaceChildren(timeCell(job.createdAt));
    slot("lastError").textContent = job.lastError || "—";
    slot("payload").textContent = JSON.stringify(job.payload, null, 2);
    badge(slot("status"), job.status);
    slot("retry").addEventListener("click", () => this.retry(node, job.id));
    try {
      const { data: attempts } = await api(`api/jobs/${job.id}/attempts`);
      slot("attempts").replaceChildren(...attempts.map(attemptRow));
    } catch (failure) {
      const tr = document.createElement("tr");
      const td = document.createElement("td");
      td.colSpan = 6;
      td.textContent = `Could not load the attempts: ${failure.message}`;
      tr.append(td);
      slot("attempts").replaceChildren(tr);
    }
    return node;
  },

  async retry(node, id) {
    const button = $('[data-slot="retry"]', node);
    const note = $('[data-slot="note"]', node);
    button.disabled = true;
    button.textContent = "Retrying…";
    try {
      const { data } = await api(`api/jobs/${id}/retry`, { method: "POST" });
      badge($('[data-slot="status"]', node), data.status);
      node.classList.add("retried");
      button.textContent = "Retried";
      note.textContent = `Back to ${data.status} with ${data.maxAttempts - data.attempts} more attempts. Following it…`;
      note.hidden = false;
      refreshStats();
      this.follow(node, id, 0);
    } catch (failure) {
      button.disabled = false;
      button.textContent = "Retry";
      note.textContent = failure.message || "The retry did not go through.";
      note.classList.add("error-text");
      note.hidden = false;
    }
  },

  // Shows the retried job's status as it moves on: pending → processing → succeeded (or dead).
  follow(node, id, polls) {
    if (polls > 120 || !node.isConnected) return;
    setTimeout(async () => {
      try {
        const { data } = await api(`api/jobs/${id}`);
        badge($('[data-slot="status"]', node), data.status);
        const note = $('[data-slot="note"]', node);
        if (data.status === "succeeded") {
          // The card's error is now an earlier attempt's: no longer shown as the job's.
          $(".last-error", node).classList.add("earlier");
          $('[data-slot="lastErrorLabel"]', node).textContent = "Earlier attempt failed";
          note.textContent = "Succeeded on retry. ";
          const a = document.createElement("a");
          a.href = resultHref(data);
          a.target = "_blank";
          a.rel = "noopener";
          a.textContent = "Open the result";
          note.append(a);
          return;
        }
        if (data.status === "dead") {
          note.textContent = `Dead again: ${data.lastError}`;
          return;
        }
        note.textContent = `Now ${data.status}: ${data.attempts} of ${data.maxAttempts} attempts used.`;
      } catch (_) {
        // try again
      }
      this.follow(node, id, polls + 1);
    }, POLL_MS);
  },
};

function attemptRow(a) {
  const tr = document.createElement("tr");
  const cell = (content, className) => {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.append(content);
    return td;
  };
  const outcome = document.createElement("span");
  badge(outcome, a.outcome || "running");
  tr.append(
    cell(String(a.attempt), "num"),
    cell(a.workerId, "nowrap mono"),
    cell(timeCell(a.startedAt), "nowrap"),
    cell(timeCell(a.finishedAt), "nowrap"),
    cell(outcome),
    cell(a.error || "", "error-text")
  );
  return tr;
}

// ---------- start ----------

document.addEventListener("DOMContentLoaded", () => {
  initAuth();
  for (const tab of Object.values(consoleTabs)) if (tab.init) tab.init();
  jobs.init();
  jobView.init();
  dead.init();
  window.addEventListener("hashchange", showView);
  showView();
  refreshStats();
  setInterval(() => {
    if (!document.hidden) refreshStats();
  }, REFRESH_MS);
});
