// The page's behaviour: talks to the JSON API only, writes with textContent only.
"use strict";

const POLL_MS = 500;
const REFRESH_MS = 3000;
const PAGE_SIZE = 15;
const DEAD_PAGE_SIZE = 10;
const LISTING_FIELDS = ["title", "priceMinor", "currency", "address", "bedrooms"];

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

// ---------- where the app is served ----------
// The app's root as the server rendered it (request.script_root + "/": "/", or "/queue/" when it is
// mounted there). Every URL the page fetches or links to is made from it, never from "/".
const BASE = new URL(document.documentElement.dataset.base || "./", location.href);
// The demo's form is on the page only when the server loaded the demo's task module.
const DEMO = Boolean(document.getElementById("view-make"));

// "api/stats" → the absolute URL of that route of this app.
function appUrl(path) {
  return new URL(path, BASE).href;
}

// A path the API gives from the app's root (a job's resultUrl) as a URL below BASE.
function apiPathUrl(path) {
  const root = BASE.pathname;
  return appUrl(path.startsWith(root) ? path.slice(root.length) : path.replace(/^\/+/, ""));
}

// Where a succeeded job's result is: its resultUrl, below BASE. Without the demo there is no flyer
// route; /result serves the same file.
function resultHref(job) {
  if (!job.resultUrl) return null;
  const path = DEMO ? job.resultUrl : job.resultUrl.replace(/\/flyer$/, "/result");
  return apiPathUrl(path);
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

// A link to a job's result (or flyer) of this app's API.
function isResultLink(href) {
  const api = appUrl("api/jobs/");
  return href.startsWith(api) && /^[^/]+\/(flyer|result)$/.test(href.slice(api.length).split(/[?#]/)[0]);
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

// Mirrors pgqw.listing.format_price: symbol, grouped major units, minor part only when non-zero.
function formatPrice(minorText, option) {
  if (!/^\d+$/.test(minorText) || !option) return "";
  const exponent = Number(option.dataset.exponent);
  const minor = BigInt(minorText);
  const base = 10n ** BigInt(exponent);
  const major = (minor / base).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const rest = minor % base;
  let text = option.dataset.symbol + major;
  if (rest !== 0n) text += "." + rest.toString().padStart(exponent, "0");
  return text;
}

// lastError is the error of the latest failed attempt. While the job is failed or dead that attempt is
// where the job stands, and the error shows as one (red). In any other status a later attempt has
// started or succeeded since, so the error is history: shown muted and labelled as an earlier attempt's.
function earlierError(job) {
  return Boolean(job.lastError) && job.status !== "failed" && job.status !== "dead";
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

const views = DEMO ? ["console", "jobs", "dead", "make"] : ["console", "jobs", "dead"];

function currentView() {
  const name = location.hash.replace("#", "");
  return views.includes(name) ? name : "console";
}

function showView() {
  const name = currentView();
  for (const section of $$(".view")) section.hidden = section.dataset.view !== name;
  for (const tab of $$(".tab")) tab.classList.toggle("active", tab.dataset.tab === name);
  if (name === "console") consoleView.load();
  if (name === "jobs") jobs.load();
  if (name === "dead") dead.load(null);
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
      tr.append(name, td(t.queue), td(t.priority, "num"), td(t.maxAttempts, "num"), td(backoff, "small"),
        td(formatDuration(t.leaseMs / 1000), "num nowrap"));
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
    const pick = (s, camel, snake) => (s[camel] !== undefined ? s[camel] : s[snake]);
    const rows = list.map((s) => {
      const tr = el("tr", s.paused ? "paused" : "");
      tr.dataset.schedule = s.name;
      tr.dataset.testid = "schedule-row";
      const name = el("td");
      name.append(el("div", "cell-title", s.name));
      name.append(el("div", "muted small mono", `${pick(s, "taskType", "task_type")} → ${s.queue || "its queue"}`));
      const when = el("td");
      when.append(el("code", "", s.cron));
      const state = el("span");
      badge(state, s.paused ? "paused" : "active");
      state.dataset.testid = "schedule-state";
      const action = s.paused
        ? button("Resume", "schedule-resume", () => this.scheduleAction(s.name, "resume"))
        : button("Pause", "schedule-pause", () => this.scheduleAction(s.name, "pause"));
      action.setAttribute("aria-label", `${s.paused ? "Resume" : "Pause"} schedule ${s.name}`);
      const last = pick(s, "lastSlot", "last_slot");
      const next = pick(s, "nextSlot", "next_slot");
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

// ---------- 1. the form and the live job ----------

const form = {
  pendingKey: null, // kept when a request got no answer, so sending again cannot make a second job
  pollTimer: null,

  init() {
    const f = $("#flyer-form");
    f.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    $("#f-priceMinor").addEventListener("input", () => this.preview());
    $("#f-currency").addEventListener("change", () => this.preview());
    for (const input of $$("input, select", f)) {
      input.addEventListener("input", () => {
        this.pendingKey = null; // a different body needs a different key
        this.clearFieldError(input.name);
      });
    }
    this.preview();
  },

  preview() {
    const select = $("#f-currency");
    $("#price-preview").textContent = formatPrice(
      $("#f-priceMinor").value.trim(), select.options[select.selectedIndex]
    );
  },

  // Numbers are sent as numbers when they look like whole numbers, otherwise as typed,
  // so the API (the one validator) can say what is wrong with them.
  payload() {
    const value = (name) => $(`#f-${name}`).value;
    const number = (text) => (/^-?\d+$/.test(text.trim()) ? Number(text.trim()) : text);
    return {
      title: value("title"),
      priceMinor: number(value("priceMinor")),
      currency: value("currency"),
      address: value("address"),
      bedrooms: number(value("bedrooms")),
    };
  },

  clearFieldError(name) {
    const el = $(`#err-${name}`);
    if (el) {
      el.hidden = true;
      el.textContent = "";
      el.closest(".field").classList.remove("invalid");
    }
  },

  showErrors(failure) {
    const formError = $("#form-error");
    let placed = 0;
    for (const d of Array.isArray(failure.details) ? failure.details : []) {
      const name = d.field.replace(/^payload\./, "");
      const el = $(`#err-${name}`);
      if (el && LISTING_FIELDS.includes(name)) {
        el.textContent = `${name === "priceMinor" ? "Price" : name[0].toUpperCase() + name.slice(1)} ${d.problem}.`;
        el.hidden = false;
        el.closest(".field").classList.add("invalid");
        placed += 1;
      }
    }
    if (!placed) {
      formError.textContent = failure.message;
      formError.hidden = false;
    }
  },

  async submit() {
    const button = $("#submit");
    for (const name of LISTING_FIELDS) this.clearFieldError(name);
    $("#form-error").hidden = true;
    button.disabled = true;
    button.textContent = "Sending…";
    this.pendingKey = this.pendingKey || newKey();
    try {
      const { data } = await api("api/jobs", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json", "Idempotency-Key": this.pendingKey },
        body: JSON.stringify({ type: "listing_flyer", payload: this.payload() }),
      });
      this.pendingKey = null;
      this.follow(data);
    } catch (failure) {
      if (failure instanceof ApiFailure) {
        this.pendingKey = null;
        this.showErrors(failure);
      } else {
        const formError = $("#form-error");
        formError.textContent = "The server did not answer. Press the button again to resend the same request.";
        formError.hidden = false;
      }
    } finally {
      button.disabled = false;
      button.textContent = "Make the flyer";
    }
  },

  follow(job) {
    clearTimeout(this.pollTimer);
    $("#job-card").classList.remove("is-empty");
    $("#job-empty").hidden = true;
    $("#job-body").hidden = false;
    this.render(job);
    this.poll(job.id);
  },

  poll(id) {
    this.pollTimer = setTimeout(async () => {
      try {
        const { data } = await api(`api/jobs/${id}`);
        this.render(data);
        if (["succeeded", "dead", "cancelled"].includes(data.status)) return;
      } catch (_) {
        // Keep following; the server may be restarting.
      }
      this.poll(id);
    }, POLL_MS);
  },

  render(job) {
    badge($("#job-status"), job.status);
    $("#job-id").textContent = job.id;
    $("#job-attempts").textContent = `${job.attempts} of ${job.maxAttempts}`;
    $("#job-created").replaceChildren(timeCell(job.createdAt));
    // Facts with nothing to say yet are hidden rather than shown as a dash.
    const fact = (name, value, render) => {
      $(`#fact-${name}`).hidden = !value;
      if (value) render(value);
    };
    fact("started", job.startedAt, (v) => $("#job-started").replaceChildren(timeCell(v)));
    fact("finished", job.finishedAt, (v) => $("#job-finished").replaceChildren(timeCell(v)));
    fact("next", job.nextAttemptAt, (v) => $("#job-next").replaceChildren(timeCell(v)));
    fact("worker", job.lockedBy, (v) => ($("#job-worker").textContent = v));
    fact("error", job.lastError, () => {
      const earlier = earlierError(job);
      // The label says whose error it is; the text is the error alone.
      $("#job-error-label").textContent = earlier ? "Earlier attempt failed" : "Last error";
      $("#job-error").className = earlier ? "earlier-error" : "error-text";
      $("#job-error").textContent = job.lastError;
    });
    const order = ["pending", "processing", "succeeded"];
    const at = job.status === "failed" ? 0 : order.indexOf(job.status);
    for (const li of $$("#job-steps li")) {
      const i = order.indexOf(li.dataset.step);
      li.classList.toggle("done", at > i || job.status === "succeeded");
      li.classList.toggle("current", at === i && job.status !== "succeeded");
    }
    const link = $("#pdf-link");
    link.hidden = !job.resultUrl;
    if (job.resultUrl) link.href = resultHref(job);
    const notes = {
      pending: "Waiting for a worker…",
      processing: "A worker is rendering the PDF…",
      failed: "That attempt failed; it will be retried automatically.",
      dead: "The job failed for good. See Dead letters to retry it.",
      succeeded: "Done. The PDF is ready.",
      cancelled: "Cancelled. No flyer will be made.",
    };
    $("#job-note").textContent = notes[job.status] || "";
    // Cancel: a waiting job ends at once; a running one is asked to stop (its worker ends it).
    const cancel = $("#job-cancel");
    cancel.hidden = !["pending", "failed", "processing"].includes(job.status);
    cancel.onclick = () => this.cancel(job.id);
  },

  async cancel(id) {
    const button = $("#job-cancel");
    button.disabled = true;
    try {
      const { data } = await api(`api/jobs/${id}/cancel`, { method: "POST" });
      this.render(data);
      if (data.status === "processing") $("#job-note").textContent = "Asked the worker to stop…";
      refreshStats();
    } catch (failure) {
      $("#job-note").textContent = failure.message || "The cancel did not go through.";
    } finally {
      button.disabled = false;
    }
  },
};

// ---------- 2. jobs table ----------

const SEARCH_FIELDS = ["id_prefix", "type", "queue"];

const jobs = {
  status: "",
  filters: {}, // the search: id_prefix, type, queue (status is the chips)
  cursors: [null], // the cursor of each page seen; the last one is the page shown
  next: null,
  timer: null,

  init() {
    $("#job-search").addEventListener("submit", (event) => {
      event.preventDefault();
      this.filters = {};
      for (const name of SEARCH_FIELDS) {
        const value = $(`#s-${name}`).value.trim();
        if (value) this.filters[name] = value;
      }
      this.cursors = [null];
      this.load();
    });
    $("#search-clear").addEventListener("click", () => {
      for (const name of SEARCH_FIELDS) $(`#s-${name}`).value = "";
      this.filters = {};
      this.status = "";
      this.cursors = [null];
      this.load();
    });
    for (const chip of $$("#status-filter .chip")) {
      chip.addEventListener("click", () => {
        this.status = chip.dataset.status;
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
      const created = document.createElement("td");
      created.append(timeCell(job.createdAt));
      const listing = document.createElement("td");
      const title = document.createElement("div");
      title.className = "cell-title";
      title.textContent = (job.payload && typeof job.payload.title === "string" && job.payload.title) || job.type;
      const id = document.createElement("code");
      id.className = "muted small";
      id.textContent = shortId(job.id);
      id.title = job.id;
      id.dataset.testid = "job-row-id";
      listing.append(title, id);
      if (title.textContent !== job.type) listing.append(el("span", "muted small", ` · ${job.type}`));
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
      const flyer = document.createElement("td");
      if (job.resultUrl) {
        const a = document.createElement("a");
        a.href = resultHref(job);
        a.target = "_blank";
        a.rel = "noopener";
        a.textContent = job.type === "listing_flyer" ? "PDF" : "result";
        flyer.append(a);
      }
      const actions = el("td", "nowrap");
      if (["pending", "failed", "processing"].includes(job.status)) {
        const b = button("Cancel", "row-cancel", () => this.act(job, "cancel", b), "button small-button danger");
        b.setAttribute("aria-label", `Cancel job ${shortId(job.id)}`);
        actions.append(b);
      }
      if (job.status === "dead") {
        const b = button("Retry", "row-retry", () => this.act(job, "retry", b));
        b.setAttribute("aria-label", `Retry job ${shortId(job.id)}`);
        actions.append(b);
      }
      tr.append(created, listing, td(job.queue, "nowrap"), status, attempts, error, flyer, actions);
      return tr;
    });
    $("#jobs-rows").replaceChildren(...rows);
  },
};

// ---------- 3. dead letters ----------

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
          a.textContent = data.type === "listing_flyer" ? "Open the PDF" : "Open the result";
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
  if (DEMO) form.init();
  jobs.init();
  dead.init();
  window.addEventListener("hashchange", showView);
  showView();
  refreshStats();
  setInterval(() => {
    if (!document.hidden) refreshStats();
  }, REFRESH_MS);
});
