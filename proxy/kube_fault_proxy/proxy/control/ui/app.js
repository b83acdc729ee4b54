// The kube-fault-proxy dashboard: the control plane's own API, and its live feed over fetch() streaming.
"use strict";

const TOKEN_KEY = "kfp-control-token";
const WINDOW_SECONDS = 60;
const JOURNAL_KEEP = 2000;
const JOURNAL_SHOWN = 200;

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  points: [],
  journal: [],
  journalSeq: 0,
  events: new Set(),
  tick: null,
  tickAt: 0,
  library: null,
  libraryNames: null,
  abort: null,
  hasConnections: false,
};

class AuthError extends Error {}

async function api(method, path, {body, headers} = {}) {
  const h = Object.assign({}, headers || {});
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  const r = await fetch(path, {method, headers: h, body, signal: state.abort ? state.abort.signal : undefined,
                               cache: "no-store"});
  if (r.status === 401) throw new AuthError("token required");
  return r;
}

async function errorText(r) {
  const text = await r.text();
  try {
    const doc = JSON.parse(text);
    if (typeof doc.message === "string") return doc.message;
    if (typeof doc.detail === "string") return doc.detail;
    if (Array.isArray(doc.detail)) return doc.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("\n");
  } catch (_) { /* not JSON */ }
  return `${r.status} ${r.statusText}: ${text}`;
}

function show(el, text, isError) {
  el.hidden = false;
  el.textContent = text;
  el.classList.toggle("error", !!isError);
}

// --- token ---------------------------------------------------------------------------

function askForToken(message) {
  if (state.abort) state.abort.abort();
  state.abort = null;
  $("dashboard").hidden = true;
  $("login").hidden = false;
  const err = $("login-error");
  if (message) show(err, message, true); else err.hidden = true;
  $("token-input").focus();
}

async function useToken(event) {
  event.preventDefault();
  state.token = $("token-input").value.trim() || null;
  $("token-input").value = "";
  if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token); else sessionStorage.removeItem(TOKEN_KEY);
  await boot(true);
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  askForToken();
}

// --- startup ----------------------------------------------------------------------------

async function boot(afterLogin) {
  state.abort = new AbortController();
  try {
    const r = await api("GET", "/v1/active");
    if (!r.ok) throw new Error(await errorText(r));
  } catch (e) {
    if (e instanceof AuthError) {
      askForToken(afterLogin ? "that token was refused" : state.token ? "the saved token was refused" : null);
      return;
    }
    show($("live"), `control plane unreachable: ${e.message}`, true);
    setTimeout(() => boot(false), 2000);
    return;
  }
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("forget-token").hidden = !state.token;
  await loadLibrary();
  stream(state.abort);
}

// --- live feed ----------------------------------------------------------------------------

function setLive(on, text) {
  const el = $("live");
  el.classList.toggle("on", on);
  el.classList.toggle("off", !on);
  el.classList.remove("error");
  el.textContent = text;
}

async function stream(abort) {
  while (!abort.signal.aborted) {
    try {
      const r = await api("GET", "/v1/events/stream", {headers: {Accept: "text/event-stream"}});
      if (!r.ok) throw new Error(await errorText(r));
      setLive(true, "live");
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          onFrame(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (e) {
      if (e instanceof AuthError) { askForToken("the token was refused"); return; }
      if (abort.signal.aborted) return;
    }
    setLive(false, "reconnecting…");
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function onFrame(frame) {
  let event = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return;
  // A snapshot (the first frame of every connection) repeats recent records: onTick skips seen seqs.
  if (event === "snapshot" || event === "tick") onTick(JSON.parse(data.join("\n")));
}

function onTick(tick) {
  state.tick = tick;
  state.tickAt = performance.now();
  const conn = tick.connections || null;
  state.hasConnections = !!conn;
  state.points.push({
    t: tick.time,
    values: {
      requests: tick.rates.requests,
      bindsSucceeded: tick.rates.bindsSucceeded,
      bindsThrottled: tick.rates.bindsThrottled,
      bindsFailed: tick.rates.bindsFailed,
      bindsInjected: tick.rates.bindsInjected,
      clientOpen: conn ? conn.clientOpen || 0 : 0,
      upstreamOpen: conn ? conn.upstreamOpen || 0 : 0,
    },
  });
  while (state.points.length && tick.time - state.points[0].t > WINDOW_SECONDS + 5) state.points.shift();
  let fresh = false;
  for (const r of tick.journal) {
    if (r.seq <= state.journalSeq) continue;
    state.journal.push(r);
    state.journalSeq = r.seq;
    fresh = true;
  }
  if (state.journal.length > JOURNAL_KEEP) state.journal.splice(0, state.journal.length - JOURNAL_KEEP);
  // Reload the library when a profile was added, replaced or removed, or when what the page last
  // loaded differs from the proxy's (an add and a delete between two ticks leave the fingerprint as it was).
  const fingerprint = JSON.stringify(tick.library);
  const names = JSON.stringify(tick.library.map(([name]) => name));
  if ((state.library !== null && fingerprint !== state.library) ||
      (state.libraryNames !== null && names !== state.libraryNames)) loadLibrary();
  state.library = fingerprint;
  renderActive();
  renderOutage();
  renderCharts();
  if (fresh) renderJournal();  // untouched otherwise, so its text can be selected and copied
}

// --- rendering ----------------------------------------------------------------------------

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function clock(wall) {
  return new Date(wall * 1000).toLocaleTimeString([], {hour12: false});
}

function remainingSeconds() {
  const a = state.tick && state.tick.active;
  if (!a || !a.profile || a.remainingSeconds === null || a.remainingSeconds === undefined) return null;
  return Math.max(0, a.remainingSeconds - (performance.now() - state.tickAt) / 1000);
}

function renderTtl() {
  const a = state.tick && state.tick.active;
  const left = remainingSeconds();
  $("active-ttl").textContent = !a || !a.profile ? "–" : left === null ? "none" :
    `${Math.ceil(left)} s left of ${a.ttlSeconds} s`;
}

function renderActive() {
  const {active, rules, totals} = state.tick;
  const on = !!active.profile;
  $("active-name").textContent = on ? active.profile : "none (pass-through)";
  $("active-name").classList.toggle("none", !on);
  $("active-epoch").textContent = String(active.epoch);
  $("active-seed").textContent = on ? String(active.seed) : "–";
  $("deactivate").disabled = !on;
  renderTtl();
  const body = $("rules").tBodies[0];
  const shape = `${active.epoch} ${Object.keys(rules || {}).join(" ")}`;
  if (body.dataset.shape !== shape) {
    body.dataset.shape = shape;
    body.textContent = "";
    for (const name of Object.keys(rules || {})) {
      const tr = document.createElement("tr");
      tr.dataset.rule = name;
      cell(tr, name, "name");
      for (const cls of ["matched", "eligible", "injected", "trigger"]) cell(tr, "", cls);
      body.appendChild(tr);
    }
    if (!on) {
      const tr = document.createElement("tr");
      cell(tr, "pass-through: nothing is injected", "hint").colSpan = 5;
      body.appendChild(tr);
    }
  }
  for (const tr of body.rows) {
    const c = (rules || {})[tr.dataset.rule];
    if (!c) continue;
    const values = {matched: c.matched, eligible: c.eligible, injected: c.injected, trigger: c.triggerSeen};
    for (const td of tr.cells) if (td.className in values) td.textContent = String(values[td.className]);
  }
  for (const tr of $("library").tBodies[0].rows) tr.classList.toggle("active", on && tr.dataset.profile === active.profile);
  $("totals").textContent = `${totals.requests} requests · ${totals.injections} injections`;
  $("bind-totals").textContent = `${totals.bindsSucceeded} succeeded (2xx) · ${totals.bindsFailed} failed ` +
    `(any other answer, or none) · ${totals.bindsThrottled} throttled (429 with Retry-After, which ` +
    `client-go sends again itself) · ${totals.bindsInjected} injected`;
}

function renderOutage() {
  const o = state.tick.outage;
  const el = $("outage");
  el.classList.toggle("on", !!o.active);
  if (o.active) {
    const ends = o.startedAt + (o.seconds || 0);
    const left = Math.max(0, ends - state.tick.time);
    el.textContent = `OUTAGE since ${clock(o.startedAt)}: ${o.seconds} s, new connections ${o.refuse}, ` +
      `${o.clientConnectionsClosed} client connections closed; ends in ~${Math.ceil(left)} s`;
  } else if (o.endedAt) {
    el.textContent = `none now; the last (${o.seconds} s, ${o.refuse}) ended ${clock(o.endedAt)}: ` +
      `${o.clientConnectionsClosed} connections closed, ${o.newConnectionsRefused} refused, ` +
      `${o.upstreamConnectsFailed} upstream connects failed`;
  } else {
    el.textContent = "no outage seen";
  }
}

function renderCharts() {
  const {drawChart} = window.kfpCharts;
  drawChart($("chart-requests"), state.points, [{key: "requests", label: "requests/s", cls: "s-requests"}],
    WINDOW_SECONDS);
  drawChart($("chart-binds"), state.points, [
    {key: "bindsSucceeded", label: "2xx", cls: "s-ok"},
    {key: "bindsFailed", label: "failed", cls: "s-failed"},
    {key: "bindsThrottled", label: "throttled", cls: "s-throttled"},
    {key: "bindsInjected", label: "injected", cls: "s-injected"},
  ], WINDOW_SECONDS);
  drawChart($("chart-connections"), state.points, [
    {key: "clientOpen", label: "client", cls: "s-client"},
    {key: "upstreamOpen", label: "upstream", cls: "s-upstream"},
  ], WINDOW_SECONDS);
  $("connections-missing").hidden = state.hasConnections;
}

function objectName(r) {
  if (r.request && r.request.name) return r.request.namespace ? `${r.request.namespace}/${r.request.name}` : r.request.name;
  if (r.name) return r.namespace ? `${r.namespace}/${r.name}` : r.name;
  return "";
}

function what(r) {
  const parts = [];
  if (r.fault) parts.push(r.fault);
  if (r.action) parts.push(r.action);
  if (r.request) parts.push(`${r.request.verb} ${r.request.resource || r.request.path}` +
    (r.request.subresource ? `/${r.request.subresource}` : ""));
  if (r.event === "activate") parts.push(`seed ${r.seed}` + (r.ttlSeconds ? `, TTL ${r.ttlSeconds} s` : ""));
  if (r.event === "deactivate") parts.push(r.reason);
  if (r.event === "outage-start") parts.push(`${r.seconds} s, ${r.refuse}`);
  if (r.reason && r.event !== "deactivate") parts.push(r.reason);
  return parts.join(" · ");
}

function renderJournal() {
  const select = $("filter-event");
  for (const r of state.journal) {
    if (state.events.has(r.event)) continue;
    state.events.add(r.event);
    const opt = document.createElement("option");
    opt.value = opt.textContent = r.event;
    select.appendChild(opt);
  }
  const event = select.value;
  const rule = $("filter-rule").value.trim().toLowerCase();
  const name = $("filter-name").value.trim().toLowerCase();
  const shown = [];
  let matching = 0;
  for (let i = state.journal.length - 1; i >= 0; i--) {
    const r = state.journal[i];
    if (event && r.event !== event) continue;
    if (rule && !(r.rule || "").toLowerCase().includes(rule)) continue;
    if (name && !objectName(r).toLowerCase().includes(name)) continue;
    matching++;
    if (shown.length < JOURNAL_SHOWN) shown.push(r);
  }
  const body = $("journal").tBodies[0];
  body.textContent = "";
  for (const r of shown) {
    const tr = document.createElement("tr");
    tr.dataset.seq = r.seq;
    tr.dataset.event = r.event;
    tr.className = `ev-${r.event}`;
    cell(tr, r.seq);
    cell(tr, clock(r.time));
    cell(tr, r.event, "event");
    cell(tr, [r.profile, r.rule].filter(Boolean).join(" / "), "rule");
    cell(tr, what(r));
    cell(tr, objectName(r), "object");
    body.appendChild(tr);
  }
  $("journal-count").textContent = `${matching} of the last ${state.journal.length} records` +
    (matching > shown.length ? ` (newest ${shown.length} shown)` : "");
}

// --- library, activation, upload -----------------------------------------------------------------

let libraryAsked = 0;

async function loadLibrary() {
  const asked = ++libraryAsked;
  let doc;
  try {
    const r = await api("GET", "/v1/profiles");
    if (!r.ok) throw new Error(await errorText(r));
    doc = await r.json();
  } catch (e) {
    if (e instanceof AuthError) askForToken("the token was refused");
    return;
  }
  if (asked !== libraryAsked) return;  // an older answer that arrived late: a newer one is coming
  state.libraryNames = JSON.stringify(doc.profiles.map((p) => p.name));
  const body = $("library").tBodies[0];
  body.textContent = "";
  for (const p of doc.profiles) {
    const tr = document.createElement("tr");
    tr.dataset.profile = p.name;
    tr.classList.toggle("active", p.active);
    cell(tr, p.name, "name");
    const desc = cell(tr, p.description || "", "description");
    if (p.incident) {
      const tag = document.createElement("span");
      tag.className = "incident";
      tag.textContent = p.incident;
      desc.appendChild(tag);
    }
    cell(tr, p.rules.length);
    const actions = cell(tr, "", "actions");
    const go = document.createElement("button");
    go.type = "button";
    go.className = "activate";
    go.textContent = "activate";
    go.addEventListener("click", () => activate(p.name));
    const edit = document.createElement("button");
    edit.type = "button";
    edit.className = "edit";
    edit.textContent = "edit";
    edit.addEventListener("click", () => loadIntoEditor(p.name));
    actions.append(go, edit);
    body.appendChild(tr);
  }
}

async function guarded(fn) {
  try {
    await fn();
  } catch (e) {
    if (e instanceof AuthError) askForToken("the token was refused");
    else show($("action-result"), String(e.message || e), true);
  }
}

function activate(name) {
  return guarded(async () => {
    const body = {profile: name};
    const seed = $("seed").value.trim();
    const ttl = $("ttl").value.trim();
    if (seed !== "") body.seed = Number(seed);
    if (ttl !== "") body.ttlSeconds = Number(ttl);
    const r = await api("PUT", "/v1/active", {body: JSON.stringify(body),
                                              headers: {"Content-Type": "application/json"}});
    if (!r.ok) throw new Error(await errorText(r));
    const a = await r.json();
    show($("action-result"), `activated ${a.profile} (epoch ${a.epoch}, seed ${a.seed})`, false);
    loadLibrary();
  });
}

function deactivate() {
  return guarded(async () => {
    const r = await api("DELETE", "/v1/active");
    if (!r.ok) throw new Error(await errorText(r));
    const d = await r.json();
    show($("action-result"), `deactivated ${d.deactivated || "nothing"}: pass-through`, false);
    loadLibrary();
  });
}

function nameFromText(text) {
  const block = text.match(/^metadata:\s*\n((?:[ \t]+.*\n?)*)/m);
  const inBlock = block && block[1].match(/^[ \t]+name:\s*["']?([a-z0-9.-]+)/m);
  const flow = text.match(/^metadata:\s*\{[^}]*\bname:\s*["']?([a-z0-9.-]+)/m);
  const json = text.match(/"metadata"\s*:\s*\{[^}]*"name"\s*:\s*"([^"]+)"/);
  const m = inBlock || flow || json;
  return m ? m[1] : "";
}

function upload() {
  const out = $("upload-result");
  return guarded(async () => {
    const text = $("editor").value;
    const name = $("upload-name").value.trim() || nameFromText(text);
    if (!name) { show(out, "give the profile a name (metadata.name)", true); return; }
    const ctype = text.trim().startsWith("{") ? "application/json" : "application/yaml";
    const r = await api("PUT", `/v1/profiles/${encodeURIComponent(name)}`, {body: text,
                                                                           headers: {"Content-Type": ctype}});
    if (!r.ok) { show(out, await errorText(r), true); return; }
    const p = await r.json();
    show(out, `${p.replaced ? "replaced" : "added"} ${p.name}: ${p.rules.length} rule(s)`, false);
    loadLibrary();
  });
}

function loadIntoEditor(name) {
  return guarded(async () => {
    const r = await api("GET", `/v1/profiles/${encodeURIComponent(name)}`, {headers: {Accept: "application/yaml"}});
    if (!r.ok) throw new Error(await errorText(r));
    $("editor").value = await r.text();
    $("upload-name").value = name;
    $("upload-result").hidden = true;
    $("editor").focus();
  });
}

async function openMetrics(event) {
  if (!state.token) return;  // a plain link works without a token
  event.preventDefault();
  await guarded(async () => {
    const r = await api("GET", "/metrics");
    if (!r.ok) throw new Error(await errorText(r));
    $("metrics-text").textContent = await r.text();
    $("metrics-dialog").showModal();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", useToken);
  $("forget-token").addEventListener("click", forgetToken);
  $("deactivate").addEventListener("click", deactivate);
  $("upload").addEventListener("click", upload);
  $("link-metrics").addEventListener("click", openMetrics);
  $("metrics-close").addEventListener("click", () => $("metrics-dialog").close());
  for (const id of ["filter-event", "filter-rule", "filter-name"]) {
    $(id).addEventListener("input", renderJournal);
  }
  setInterval(() => { if (state.tick) renderTtl(); }, 250);
  boot(false);
});
