// sluice console: plain JavaScript over the admin JSON API. Every value from the server is
// written with textContent (keys are data, never markup); the token lives in sessionStorage.
"use strict";

(function () {
  const TOKEN = "sluice-admin-token";
  const REFRESH_MS = 2000;
  const HISTORY_MS = 10 * 60 * 1000;

  const $ = (id) => document.getElementById(id);
  const samples = new Map(); // queue name -> [{t, depth, rate}], the last 10 minutes
  let timer = null;
  let current = null; // the queue of the queue page, as last read
  let currentETag = null;
  let formETag = null; // the revision the outflow form's values were read at
  let deadAfter = [];  // cursors of the pages before the one shown
  let deadNext = null;

  // ---- API ----------------------------------------------------------------------------
  class APIError extends Error {
    constructor(status, problem) {
      super((problem && (problem.detail || problem.title)) || ("HTTP " + status));
      this.status = status;
      this.problem = problem;
    }
  }

  async function api(method, path, body, headers) {
    const h = Object.assign({ "Authorization": "Bearer " + sessionStorage.getItem(TOKEN) }, headers || {});
    if (body !== undefined) h["Content-Type"] = "application/json";
    const resp = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
    let data = null;
    const text = await resp.text();
    if (text) { try { data = JSON.parse(text); } catch (e) { data = null; } }
    if (resp.status === 401) { signOut("The admin token was refused. Sign in again."); throw new APIError(401, data); }
    if (!resp.ok) throw new APIError(resp.status, data);
    return { data, etag: resp.headers.get("ETag") };
  }

  // ---- helpers ------------------------------------------------------------------------
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  // words writes a name — a rule, domain or queue name, a key, an id, a descriptor — so that
  // it wraps only after its separators (- _ . = , : / @), never inside a word: a <wbr>
  // after each, and CSS that breaks nowhere else (.name). Text nodes only: keys are data.
  function words(text) {
    const f = document.createDocumentFragment();
    for (const part of String(text === undefined || text === null ? "" : text).split(/(?<=[-_.=,:/@])/)) {
      if (part === "") continue;
      if (f.lastChild) f.appendChild(document.createElement("wbr"));
      f.appendChild(document.createTextNode(part));
    }
    return f;
  }
  function named(tag, text, cls) {
    const e = el(tag, null, cls ? cls + " name" : "name");
    e.appendChild(words(text));
    return e;
  }
  let said = 0; // how many times say was called: a page's first load clears only its own status
  function say(msg, bad) {
    said++;
    const s = $("status");
    s.textContent = msg || "";
    s.className = "status" + (msg ? (bad ? " bad" : " ok") : "");
  }
  function rate(r) {
    if (!r) return "—";
    if (r.unit) return r.requests_per_unit + "/" + r.unit;
    return r.requests_per_unit + " per " + r.interval;
  }
  function perSecond(r) {
    if (!r) return 0;
    const secs = { second: 1, minute: 60, hour: 3600, day: 86400, week: 604800 }[r.unit];
    return secs ? r.requests_per_unit / secs : 0;
  }
  function num(n, digits) {
    if (n === null || n === undefined) return "—";
    return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits || 0 });
  }
  function age(s) {
    if (s === null || s === undefined) return "—";
    if (s < 1) return "<1 s";
    if (s < 120) return Math.round(s) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function when(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleString();
  }

  // Sparkline of values (oldest first) as an inline SVG beside its scale: the line runs
  // from the lowest value of the window (bottom) to the highest (top), and both numbers
  // are written next to it (and in its label), so no two sparklines read as one scale.
  function spark(values, cls, label, big, digits) {
    const ns = "http://www.w3.org/2000/svg";
    const w = big ? 600 : 120, h = big ? 80 : 28;
    const lo = values.length ? Math.min(...values) : 0, hi = values.length ? Math.max(...values) : 0;
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label + "; from " + num(lo, digits) + " to " + num(hi, digits));
    svg.dataset.min = String(lo);
    svg.dataset.max = String(hi);
    if (!big) svg.setAttribute("class", "spark");
    const base = document.createElementNS(ns, "line");
    base.setAttribute("x1", "0"); base.setAttribute("x2", String(w));
    base.setAttribute("y1", String(h - 1)); base.setAttribute("y2", String(h - 1));
    base.setAttribute("class", "base");
    svg.appendChild(base);
    if (values.length > 1) {
      const pts = values.map((v, i) => {
        const x = (i / (values.length - 1)) * w;
        const y = hi > lo ? h - 2 - ((v - lo) / (hi - lo)) * (h - 4) : h / 2;
        return x.toFixed(1) + "," + y.toFixed(1);
      });
      const line = document.createElementNS(ns, "polyline");
      line.setAttribute("points", pts.join(" "));
      if (cls) line.setAttribute("class", cls);
      svg.appendChild(line);
    }
    const box = el("span", null, big ? "spark-box big" : "spark-box");
    const scale = el("span", null, "scale");
    scale.setAttribute("aria-hidden", "true"); // the label says it
    scale.appendChild(el("span", num(hi, digits), "max"));
    scale.appendChild(el("span", num(lo, digits), "min"));
    box.appendChild(svg);
    box.appendChild(scale);
    return box;
  }

  function record(queues) {
    const now = Date.now();
    for (const q of queues) {
      const h = samples.get(q.name) || [];
      h.push({ t: now, depth: q.depth, rate: q.drained_per_second });
      while (h.length && now - h[0].t > HISTORY_MS) h.shift();
      samples.set(q.name, h);
    }
  }
  function series(name, field) { return (samples.get(name) || []).map((p) => p[field]); }

  // ---- pages --------------------------------------------------------------------------
  function show(page) {
    for (const id of ["signin", "page-queues", "page-queue", "page-dead", "page-audit"]) $(id).hidden = id !== page;
    for (const a of document.querySelectorAll("[data-nav]")) {
      const nav = (page === "page-queues" || page === "page-queue") ? "queues" : page === "page-audit" ? "audit" : "dead";
      const on = a.dataset.nav === nav;
      if (on) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
  }

  async function refreshQueues() {
    const { data } = await api("GET", "/v1/admin/queues");
    const queues = data.queues || [];
    record(queues);
    const body = $("queues").tBodies[0];
    const rows = [];
    for (const q of queues) {
      const tr = el("tr");
      tr.dataset.queue = q.name;
      const name = el("td", null, "name"); const a = named("a", q.name); a.href = "#/queue/" + encodeURIComponent(q.name); name.appendChild(a); tr.appendChild(name);
      tr.appendChild(named("td", q.domain, "opt"));
      const of = el("td", null, "opt");
      const eff = el("span", rate(q.outflow), (q.overridden || []).includes("outflow") ? "overridden" : "");
      of.appendChild(eff);
      if ((q.overridden || []).includes("outflow")) of.appendChild(el("span", " (file " + rate(q.rules_file.outflow) + ")"));
      tr.appendChild(of);
      tr.appendChild(el("td", num(q.capacity), "num opt"));
      tr.appendChild(el("td", num(q.active_keys), "num opt"));
      // Depth and delivered/s: the number now, and under it the last 10 minutes.
      const depth = el("td", null, "num trend"); depth.dataset.field = "depth";
      depth.appendChild(el("span", num(q.depth), "now"));
      depth.appendChild(spark(series(q.name, "depth"), "", "Depth of " + q.name + " over the last 10 minutes, now " + q.depth));
      tr.appendChild(depth);
      tr.appendChild(el("td", age(q.oldest_age_seconds), "num opt"));
      const delivered = el("td", null, "num trend opt");
      delivered.appendChild(el("span", num(q.drained_per_second, 1), "now"));
      delivered.appendChild(spark(series(q.name, "rate"), "rate", "Delivered per second of " + q.name + " over the last 10 minutes, now " + num(q.drained_per_second, 1), false, 1));
      tr.appendChild(delivered);
      tr.appendChild(el("td", num(q.refused_per_second, 1), "num opt"));
      tr.appendChild(el("td", num(q.parked), "num opt"));
      tr.appendChild(el("td", num(q.dead), "num opt"));
      const st = el("td"); st.dataset.field = "state"; st.appendChild(el("span", q.paused ? "Paused" : "Running", "badge " + (q.paused ? "paused" : "running"))); tr.appendChild(st);
      // The sink breaker (sink.breaker) while it holds the rule's deliveries back.
      if (q.breaker && q.breaker.state !== "closed") st.appendChild(el("span", breakerLabel(q.breaker.state), "badge breaker"));
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    $("no-queues").hidden = queues.length > 0;
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
    fillQueueSelect(queues);
  }

  // The rules change only with the rules files: read once per visit of the page.
  async function refreshRules() {
    const { data } = await api("GET", "/v1/admin/rules");
    const rows = (data.rules || []).map((r) => {
      const tr = el("tr");
      tr.dataset.rule = r.name;
      const name = el("td", null, "name");
      if (r.kind === "queue") { const a = named("a", r.name); a.href = "#/queue/" + encodeURIComponent(r.name); name.appendChild(a); }
      else name.appendChild(words(r.name));
      tr.appendChild(name);
      tr.appendChild(named("td", r.domain));
      tr.appendChild(named("td", (r.descriptor || []).map((e) => e.key + "=" + (e.value === "" ? "(each value)" : e.value)).join(", "), "wrap"));
      tr.appendChild(el("td", r.kind));
      let limits = (r.rate_limits || []).map((l) => rate(l) + " " + l.algorithm.replace(/_/g, " ") + (l.burst ? ", burst " + l.burst : "") + (l.name ? " (" + l.name + ")" : "")).join("; ");
      if (r.unlimited) limits = "unlimited";
      if (r.shadow_mode) limits += " · shadow mode";
      if (r.replaces && r.replaces.length) limits += " · replaces " + r.replaces.join(", ");
      tr.appendChild(el("td", limits || "—", "wrap"));
      tr.appendChild(el("td", r.queue ? "capacity " + r.queue.capacity + ", " + rate(r.queue.outflow) + " per key" + (r.queue.total_outflow ? ", total " + rate(r.queue.total_outflow) : "") + ", overflow " + r.overflow : "—", "wrap"));
      const src = el("td", (r.source || "").split("/").pop());
      src.title = r.source; // the whole path on hover
      tr.appendChild(src);
      return tr;
    });
    $("rules").tBodies[0].replaceChildren(...rows);
  }

  function fillQueueSelect(queues) {
    const sel = $("dead-queue");
    const have = new Set([...sel.options].map((o) => o.value));
    for (const q of queues) {
      if (!have.has(q.name)) { const o = el("option", q.name); o.value = q.name; sel.appendChild(o); }
    }
  }

  function fact(dl, label, value, cls) {
    const d = el("div"); d.appendChild(el("dt", label)); d.appendChild(el("dd", value, cls)); dl.appendChild(d);
  }

  // A rule's sink breaker: "Breaker open" (deliveries wait, spending no attempts) or
  // "Breaker probing" (one probe delivery is out).
  function breakerLabel(state) { return state === "open" ? "Breaker open" : state === "half_open" ? "Breaker probing" : "Breaker closed"; }

  // The breaker facts of a queue's page: its state with how many drainers' breakers are not
  // closed, and the earliest next probe of an open one (each drainer's: sluice queue NAME).
  function breakerFact(b) {
    const out = (b.drainers || []).filter((d) => d.state !== "closed");
    if (out.length === 0) return "Closed";
    return (b.state === "open" ? "Open" : "Probing") + ", " + out.length + " of " + b.drainers.length + " drainers";
  }

  function nextProbe(b) {
    const ts = (b.drainers || []).map((d) => d.next_probe_at).filter(Boolean).sort();
    return ts.length ? when(ts[0]) : "";
  }

  async function refreshQueue(name, withForm) {
    const { data: q, etag } = await api("GET", "/v1/admin/queues/" + encodeURIComponent(name));
    current = q; currentETag = etag;
    record([q]);
    $("q-title").textContent = q.name;
    const badge = $("q-state");
    badge.textContent = q.paused ? "Paused" : "Running";
    badge.className = "badge " + (q.paused ? "paused" : "running");
    $("q-pause").textContent = q.paused ? "Resume" : "Pause";
    const over = q.overridden || [];
    $("q-reset").disabled = over.length === 0;
    const dl = $("q-facts"); dl.replaceChildren();
    fact(dl, "Domain", q.domain);
    fact(dl, "Outflow per key", rate(q.outflow), over.includes("outflow") ? "overridden" : "");
    fact(dl, "Rules file outflow", rate(q.rules_file.outflow));
    fact(dl, "Total outflow", rate(q.total_outflow));
    fact(dl, "Capacity per key", num(q.capacity), over.includes("capacity") ? "overridden" : "");
    fact(dl, "Keys", num(q.active_keys));
    fact(dl, "Depth", num(q.depth));
    fact(dl, "Oldest waiting", age(q.oldest_age_seconds));
    fact(dl, "Delivered/s", num(q.drained_per_second, 1));
    fact(dl, "Refused/s", num(q.refused_per_second, 1));
    fact(dl, "Scheduled", num(q.scheduled));
    fact(dl, "Delivering now", num(q.in_flight));
    fact(dl, "Parked", num(q.parked));
    fact(dl, "Dead", num(q.dead));
    if (q.breaker) {
      fact(dl, "Sink breaker", breakerFact(q.breaker), q.breaker.state !== "closed" ? "overridden" : "");
      if (nextProbe(q.breaker)) fact(dl, "Next probe", nextProbe(q.breaker));
    }
    $("q-depth-chart").replaceChildren(spark(series(q.name, "depth"), "", "Depth over the last 10 minutes, now " + q.depth, true));
    $("q-rate-chart").replaceChildren(spark(series(q.name, "rate"), "rate", "Delivered per second over the last 10 minutes, now " + num(q.drained_per_second, 1), true, 1));
    $("q-dead-link").href = "#/dead?queue=" + encodeURIComponent(q.name);
    $("of-hint").textContent = over.includes("outflow")
      ? "Changed live from the rules file's " + rate(q.rules_file.outflow) + (q.override_updated_at ? " at " + when(q.override_updated_at) : "") + "."
      : "As the rules file says.";
    // The form keeps the values it was filled with (and their revision) until applied: a
    // change by someone else meanwhile is then a 412, not silently overwritten.
    if (withForm) fillOutflowForm(q, etag);
    const { data: k } = await api("GET", "/v1/admin/queues/" + encodeURIComponent(name) + "/keys?top=20");
    const rows = (k.keys || []).map((key) => {
      const tr = el("tr");
      tr.appendChild(named("td", key.key));
      tr.appendChild(el("td", num(key.depth), "num"));
      tr.appendChild(el("td", key.next_dispatch_at ? when(key.next_dispatch_at) : "—"));
      return tr;
    });
    $("keys").tBodies[0].replaceChildren(...rows);
    $("keys-note").textContent = rows.length === 0 ? "No key has messages waiting." : (k.complete ? "" : "More than 10,000 keys have messages: these are the deepest of the first 10,000 read.");
  }

  // showKey shows one key of the queue page's queue: its depth, its effective outflow and
  // where that comes from (the rules file, the queue's override, or the key's own).
  async function showKey(name, key) {
    const dl = $("key-facts"); dl.replaceChildren();
    $("key-note").textContent = "";
    const { data: k } = await api("GET", "/v1/admin/queues/" + encodeURIComponent(name) + "/keys/" + encodeURIComponent(key));
    fact(dl, "Key", k.key);
    fact(dl, "Depth", num(k.depth));
    fact(dl, "Next dispatch", k.next_dispatch_at ? when(k.next_dispatch_at) : "—");
    if (k.source !== undefined) {
      fact(dl, "Outflow", rate(k.outflow) + (k.paused ? " (paused)" : ""));
      fact(dl, "From", k.source);
    }
    if (k.window_source !== undefined) {
      // The key's delivery window: its own override's, or the rule's delivery.window.
      fact(dl, "Window", windowText(k.window));
      fact(dl, "Window from", k.window_source);
    }
    $("key-note").textContent = k.override ? "Set at " + when(k.override.updated_at) + "; change it with sluice tune " + name + " --key …" : "";
  }

  // windowText writes a window as `sluice tune --window` takes it; null: always open.
  function windowText(w) {
    if (!w) return "any time";
    let t = w.from + "–" + w.to + " " + w.time_zone;
    if (w.default_time_zone) t += " (else " + w.default_time_zone + ")";
    return (w.days && w.days.length ? w.days.join(",") + " " : "") + t;
  }

  function fillOutflowForm(q, etag) {
    formETag = etag;
    const o = q.outflow || {};
    $("of-rate").value = o.requests_per_unit || "";
    $("of-unit").value = o.unit || "second";
  }

  async function refreshDead(after) {
    const queue = $("dead-queue").value;
    const qs = new URLSearchParams({ limit: "50" });
    if (queue) qs.set("queue", queue);
    if (after) qs.set("after", after);
    const { data } = await api("GET", "/v1/admin/dead?" + qs.toString());
    const rows = (data.messages || []).map((m) => {
      const tr = el("tr");
      tr.dataset.id = m.id;
      tr.appendChild(named("td", m.id));
      tr.appendChild(named("td", m.rule));
      tr.appendChild(named("td", m.key));
      tr.appendChild(el("td", m.reason, "wrap"));
      tr.appendChild(el("td", num(m.attempts), "num"));
      tr.appendChild(el("td", m.last_error || "—", "wrap"));
      tr.appendChild(el("td", when(m.updated_at)));
      const act = el("td");
      const b = el("button", "Replay", "operate");
      b.type = "button";
      b.setAttribute("aria-label", "Replay message " + m.id);
      b.addEventListener("click", () => replayOne(m.id, b));
      act.appendChild(b);
      tr.appendChild(act);
      return tr;
    });
    $("dead").tBodies[0].replaceChildren(...rows);
    $("dead-empty").hidden = rows.length > 0;
    deadNext = data.next ? new URL(data.next, location.origin).searchParams.get("after") : null;
    $("dead-next").disabled = !deadNext;
    $("dead-first").disabled = deadAfter.length === 0;
    $("dead-replay-all").disabled = !queue || rows.length === 0;
  }

  async function replayOne(id, button) {
    button.disabled = true;
    try {
      await api("POST", "/v1/admin/dead/" + encodeURIComponent(id) + "/replay");
      say("Message " + id + " is queued again.");
    } catch (e) {
      button.disabled = false;
      say("Replay of " + id + " failed: " + e.message, true);
    }
    await refreshDead(deadAfter[deadAfter.length - 1]);
  }

  // The audit trail: the newest 100 operator changes.
  async function refreshAudit() {
    const { data } = await api("GET", "/v1/admin/audit?limit=100");
    const recs = data.records || [];
    const brief = (v) => v === undefined || v === null ? "" : typeof v === "string" ? v : JSON.stringify(v);
    $("audit").tBodies[0].replaceChildren(...recs.map((r) => {
      const tr = el("tr");
      tr.appendChild(el("td", when(r.at)));
      tr.appendChild(el("td", r.actor || ""));
      tr.appendChild(el("td", r.action));
      tr.appendChild(named("td", r.queue || ""));
      tr.appendChild(named("td", r.target || ""));
      const ba = [brief(r.before), brief(r.after)].filter((x) => x !== "").join(" → ");
      tr.appendChild(named("td", ba, "wrap"));
      tr.appendChild(el("td", r.result || ""));
      return tr;
    }));
    $("audit-empty").hidden = recs.length > 0;
  }

  // ---- routing ------------------------------------------------------------------------
  function route() {
    const h = location.hash || "#/queues";
    if (h.startsWith("#/queue/")) return { page: "page-queue", name: decodeURIComponent(h.slice(8)) };
    if (h.startsWith("#/audit")) return { page: "page-audit" };
    if (h.startsWith("#/dead")) {
      const q = new URLSearchParams(h.split("?")[1] || "").get("queue") || "";
      return { page: "page-dead", queue: q };
    }
    return { page: "page-queues" };
  }

  // The body says when the page's data is laid out, for tests to wait on instead of
  // sleeping: data-busy while a refresh runs, data-shown = the page (its hash) once its
  // first refresh is done.
  let busy = 0;
  async function tick(first) {
    const r = route();
    const before = said;
    busy++;
    document.body.dataset.busy = "1";
    try {
      if (r.page === "page-queues") {
        await refreshQueues();
        if (first) await refreshRules();
      }
      else if (r.page === "page-queue") await refreshQueue(r.name, first);
      else if (r.page === "page-audit") await refreshAudit();
      else if (first) {
        await refreshQueues();
        $("dead-queue").value = r.queue;
        deadAfter = [];
        await refreshDead();
      }
      // A page opened clears the last page's message, unless something was said while it
      // loaded (a purge clicked before the first refresh came back: its "Purged" stays).
      if (first && said === before) say("");
    } catch (e) {
      if (e.status !== 401) say("Could not read the admin API: " + e.message, true);
    } finally {
      if (--busy === 0) delete document.body.dataset.busy;
      if (first) document.body.dataset.shown = location.hash || "#/queues";
    }
  }

  // whoami shows who is signed in; a read token gets the read-only page (no controls).
  async function whoami() {
    try {
      const { data } = await api("GET", "/v1/admin/whoami");
      document.body.classList.toggle("read-only", data.scope === "read");
      $("whoami").textContent = data.name + (data.scope === "read" ? " (read only)" : "");
    } catch (e) {
      document.body.classList.remove("read-only"); // an older ingress: every token operates
      $("whoami").textContent = "";
    }
  }

  function start() {
    stop();
    $("signin").hidden = true;
    $("nav").hidden = false;
    whoami();
    const r = route();
    show(r.page);
    tick(true);
    timer = setInterval(() => tick(false), REFRESH_MS);
  }
  function stop() { if (timer) clearInterval(timer); timer = null; }

  function signOut(message) {
    stop();
    sessionStorage.removeItem(TOKEN);
    document.body.classList.remove("read-only");
    $("whoami").textContent = "";
    $("nav").hidden = true;
    show("signin");
    $("signin-error").textContent = message || "";
    $("token").value = "";
    $("token").focus();
  }

  // ---- actions ------------------------------------------------------------------------
  async function patch(body, what, ifMatch) {
    if (!current) return;
    try {
      const { data, etag } = await api("PATCH", "/v1/admin/queues/" + encodeURIComponent(current.name), body,
        ifMatch !== null && ifMatch !== undefined ? { "If-Match": ifMatch } : {});
      current = data; currentETag = etag;
      say(what);
      await refreshQueue(current.name, true);
    } catch (e) {
      if (e.status === 412) {
        say("Changed by someone else in the meantime: nothing was applied. The current values are shown; check them and try again.", true);
        await refreshQueue(current.name, true);
      } else if (e.status !== 401) {
        const field = e.problem && e.problem.field ? " (" + e.problem.field + ")" : "";
        say("Not applied: " + e.message + field, true);
      }
    }
  }

  function wire() {
    $("signin-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const token = $("token").value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN, token);
      try {
        await api("GET", "/v1/admin/queues");
        $("signin-error").textContent = "";
        start();
        $("main").focus();
      } catch (e) {
        if (e.status !== 401) { sessionStorage.removeItem(TOKEN); $("signin-error").textContent = "Could not reach the admin API: " + e.message; }
      }
    });
    $("signout").addEventListener("click", () => signOut("Signed out."));
    window.addEventListener("hashchange", () => { if (sessionStorage.getItem(TOKEN)) start(); });

    $("q-pause").addEventListener("click", () => {
      if (!current) return;
      const pause = !current.paused;
      patch({ paused: pause }, pause ? "Paused: drainers stop releasing this queue within a second." : "Resumed.", currentETag);
    });
    $("q-reset").addEventListener("click", () => patch({ reset: true }, "Back to the rules file.", currentETag));
    $("outflow-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const n = parseInt($("of-rate").value, 10);
      if (!(n >= 1)) { say("The outflow must be a whole number of messages, at least 1.", true); return; }
      const unit = $("of-unit").value;
      patch({ outflow: { unit, requests_per_unit: n } }, "Outflow is now " + n + "/" + unit + " per key.", formETag);
    });
    $("purge-confirm").addEventListener("input", () => {
      $("purge-button").disabled = !current || $("purge-confirm").value !== current.name;
    });
    $("key-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const key = $("key-name").value;
      if (!current) return;
      try { await showKey(current.name, key); } catch (e) { say("Key " + key + ": " + e.message, true); }
    });
    $("purge-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!current || $("purge-confirm").value !== current.name) return;
      try {
        await api("POST", "/v1/admin/queues/" + encodeURIComponent(current.name) + "/purge");
        say("Purged " + current.name + ".");
        $("purge-confirm").value = "";
        $("purge-button").disabled = true;
        await refreshQueue(current.name, false);
      } catch (e) {
        if (e.status !== 401) say("Purge failed: " + e.message, true);
      }
    });

    $("dead-queue").addEventListener("change", () => {
      const q = $("dead-queue").value;
      history.replaceState(null, "", q ? "#/dead?queue=" + encodeURIComponent(q) : "#/dead");
      deadAfter = [];
      refreshDead().catch((e) => say(e.message, true));
    });
    $("dead-next").addEventListener("click", () => {
      if (!deadNext) return;
      deadAfter.push(deadNext);
      refreshDead(deadNext).catch((e) => say(e.message, true));
    });
    $("dead-first").addEventListener("click", () => {
      deadAfter = [];
      refreshDead().catch((e) => say(e.message, true));
    });
    // Replay all asks once more on the button itself (no modal dialog): a second click
    // within 5 s replays.
    let armed = null;
    $("dead-replay-all").addEventListener("click", async () => {
      const q = $("dead-queue").value;
      const b = $("dead-replay-all");
      if (!q) return;
      if (armed !== q) {
        armed = q;
        b.textContent = "Click again to replay every dead letter of " + q;
        setTimeout(() => { if (armed === q) { armed = null; b.textContent = "Replay all of this queue"; } }, 5000);
        return;
      }
      armed = null;
      b.textContent = "Replay all of this queue";
      try {
        const { data } = await api("POST", "/v1/admin/dead/replay?queue=" + encodeURIComponent(q));
        say("Replayed " + data.replayed + " of " + q + (data.kept ? "; " + data.kept + " kept (no room in their key)" : "") + ".");
      } catch (e) {
        if (e.status !== 401) say("Replay failed: " + e.message, true);
      }
      deadAfter = [];
      await refreshDead();
    });
  }

  wire();
  if (sessionStorage.getItem(TOKEN)) start(); else signOut("");
})();
