/* app.js — Quarrel's web UI. Plain JavaScript, no build step; served by `quarrel serve` under a
 * CSP that forbids inline script, so everything lives here and is wired with addEventListener.
 *
 * Pieces: storage (localStorage: settings, conversations, presets, theme; sessionStorage: API key),
 * rendering (marked + highlight.js, then our own allowlist sanitizer and DOMPurify), the
 * connection state machine (disconnected -> connecting -> connected -> generating) over /ws with a
 * heartbeat and exponential backoff, falling back to SSE (/api/stream) when WebSocket fails and
 * trying WebSocket again (with backoff) while on that fallback. */
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const KEYS = {
    settings: "quarrel.settings",
    convs: "quarrel.conversations",
    current: "quarrel.current",
    presets: "quarrel.presets",
    theme: "quarrel.theme",
    model: "quarrel.model",
    apiKey: "quarrel.apiKey", // sessionStorage
  };
  const DEFAULTS = Object.freeze({ temperature: 0.8, top_k: 40, top_p: 0.95, max_tokens: 512, system: "" });
  const BUILTIN_PRESETS = [
    { name: "Summarize", text: "Summarize the following text in a few sentences:\n\n" },
    { name: "Translate", text: "Translate the following text into English:\n\n" },
    { name: "Code", text: "Write code for the following task. Answer with one code block and a short explanation:\n\n" },
    { name: "Explain", text: "Explain the following simply, step by step:\n\n" },
  ];
  const params = new URLSearchParams(location.search);
  const FORCE_SSE = params.get("transport") === "sse";
  const HEARTBEAT_MS = 10000, PONG_TIMEOUT_MS = 5000;
  const BACKOFF_MIN_MS = 250, BACKOFF_MAX_MS = 8000;
  const PROBE_MIN_MS = 1000, PROBE_MAX_MS = 30000; // WebSocket retries while on the SSE fallback

  /* ---------------------------------------------------------------- storage */
  function load(key, fallback, store = localStorage) {
    try {
      const v = store.getItem(key);
      return v === null ? fallback : JSON.parse(v);
    } catch (e) {
      return fallback;
    }
  }
  function save(key, value, store = localStorage) {
    try {
      store.setItem(key, JSON.stringify(value));
    } catch (e) {
      showNotice("Could not save to browser storage: " + e.message);
    }
  }

  let settings = Object.assign({}, DEFAULTS, load(KEYS.settings, {}));
  let conversations = load(KEYS.convs, []);
  if (!Array.isArray(conversations)) conversations = [];
  let current = null; // the open conversation (an element of conversations, or a new unsaved one)
  let customPresets = load(KEYS.presets, []);
  let apiKey = load(KEYS.apiKey, "", sessionStorage);
  let selectedModel = load(KEYS.model, "");

  function newConversation() {
    return { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 7), title: "New chat",
             created: Date.now(), updated: Date.now(), model: selectedModel, messages: [] };
  }
  function persistConversations() {
    save(KEYS.convs, conversations);
    if (current) save(KEYS.current, current.id);
  }
  function saveCurrent() {
    if (!current || current.messages.length === 0) return;
    current.updated = Date.now();
    if (current.title === "New chat") {
      const first = current.messages.find((m) => m.role === "user");
      if (first) current.title = first.content.replace(/\s+/g, " ").trim().slice(0, 60) || "New chat";
    }
    if (!conversations.includes(current)) conversations.unshift(current);
    persistConversations();
    renderConversationList();
  }

  /* ---------------------------------------------------------------- rendering */
  const ALLOWED_TAGS = new Set(["P", "BR", "HR", "H1", "H2", "H3", "H4", "H5", "H6", "STRONG", "EM", "B", "I", "DEL",
    "S", "CODE", "PRE", "BLOCKQUOTE", "UL", "OL", "LI", "A", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "SPAN",
    "DIV", "SUP", "SUB", "KBD"]);
  // removed together with everything inside them
  const DROPPED_TAGS = new Set(["SCRIPT", "STYLE", "IFRAME", "FRAME", "FRAMESET", "OBJECT", "EMBED", "APPLET", "SVG",
    "MATH", "TEMPLATE", "FORM", "INPUT", "BUTTON", "TEXTAREA", "SELECT", "OPTION", "LINK", "META", "BASE", "NOSCRIPT",
    "AUDIO", "VIDEO", "SOURCE", "TRACK", "CANVAS", "PORTAL", "DIALOG", "TITLE", "HEAD"]);
  const ALLOWED_ATTRS = { A: ["href", "title"], SPAN: ["class"], CODE: ["class"], PRE: ["class"], TH: ["align"],
    TD: ["align"], OL: ["start"] };

  /* True for http(s), mailto and same-document links; false for javascript:, data:, vbscript: ... */
  function safeHref(href) {
    const h = String(href).trim();
    if (h.startsWith("#")) return true;
    try {
      const u = new URL(h, location.href);
      return u.protocol === "http:" || u.protocol === "https:" || u.protocol === "mailto:";
    } catch (e) {
      return false;
    }
  }

  /* Our allowlist sanitizer (always applied; DOMPurify, when present, then checks its output, so that
   * it never parses hostile markup itself: its DOMParser trips CSP reports). Parses html in an
   * inert <template> (no script runs, no image loads) and returns a DocumentFragment that keeps only
   * ALLOWED_TAGS with their ALLOWED_ATTRS; other elements are unwrapped (their text stays), and
   * DROPPED_TAGS vanish with their contents. Images become their alt text. */
  function sanitize(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    const walk = (parent) => {
      for (const node of Array.from(parent.childNodes)) {
        if (node.nodeType === Node.TEXT_NODE) continue;
        if (node.nodeType !== Node.ELEMENT_NODE) { node.remove(); continue; }
        const tag = node.tagName.toUpperCase();
        if (DROPPED_TAGS.has(tag)) { node.remove(); continue; }
        if (tag === "IMG") { node.replaceWith(document.createTextNode(node.getAttribute("alt") || "")); continue; }
        walk(node);
        if (!ALLOWED_TAGS.has(tag)) { node.replaceWith(...Array.from(node.childNodes)); continue; }
        const keep = ALLOWED_ATTRS[tag] || [];
        for (const attr of Array.from(node.attributes)) {
          if (!keep.includes(attr.name.toLowerCase())) node.removeAttribute(attr.name);
        }
        if (node.hasAttribute("class")) { // only highlight.js and marked classes
          const cls = node.getAttribute("class").split(/\s+/).filter((c) => /^(hljs[\w-]*|language-[\w+#-]+)$/.test(c));
          if (cls.length) node.setAttribute("class", cls.join(" ")); else node.removeAttribute("class");
        }
        if (tag === "A") {
          const href = node.getAttribute("href");
          if (href === null || !safeHref(href)) node.removeAttribute("href");
          else { node.setAttribute("rel", "noopener noreferrer nofollow"); node.setAttribute("target", "_blank"); }
        }
      }
    };
    walk(tpl.content);
    return tpl.content;
  }

  const haveMarked = () => typeof window.marked === "object" && typeof window.marked.parse === "function";
  const haveHljs = () => typeof window.hljs === "object" && typeof window.hljs.highlight === "function";
  const havePurify = () => typeof window.DOMPurify === "function" || (typeof window.DOMPurify === "object" &&
                                                                      typeof window.DOMPurify.sanitize === "function");

  const escapeHtml = (t) => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  /* Raw HTML inside model output is shown as the text it is, never parsed as markup. */
  let markedReady = false;
  function setupMarked() {
    if (markedReady || !haveMarked()) return;
    window.marked.use({ renderer: { html: (raw) => escapeHtml(typeof raw === "object" && raw ? raw.text : raw) } });
    markedReady = true;
  }

  function highlightCode(code, lang) {
    if (!haveHljs()) return null;
    try {
      if (lang && window.hljs.getLanguage(lang)) return window.hljs.highlight(lang, code, true).value;
      return window.hljs.highlightAuto(code).value;
    } catch (e) {
      return null;
    }
  }

  /* Renders model output into el: markdown -> HTML (marked, with highlight.js when `highlight`),
   * sanitized by sanitize() and then DOMPurify (if present). Without marked the text is shown as
   * plain text. Never assigns unsanitized HTML to a live element. */
  function renderMarkdown(el, text, highlight) {
    if (!haveMarked()) {
      el.classList.add("plain");
      el.textContent = text;
      return;
    }
    let html;
    try {
      setupMarked();
      html = window.marked.parse(text, { gfm: true, breaks: false, headerIds: false, mangle: false, langPrefix: "hljs language-",
                                         highlight: highlight ? highlightCode : null });
    } catch (e) {
      el.classList.add("plain");
      el.textContent = text;
      return;
    }
    let frag = sanitize(html);
    if (havePurify()) { // a second, independent opinion over what ours kept
      try {
        const box = document.createElement("div");
        box.append(frag);
        frag = sanitize(window.DOMPurify.sanitize(box.innerHTML, { USE_PROFILES: { html: true } }));
      } catch (e) {
        frag = sanitize(html); // a broken DOMPurify build: ours alone
      }
    }
    el.replaceChildren(frag);
  }

  /* ---------------------------------------------------------------- messages view */
  const messagesEl = $("messages");
  let stickToBottom = true;
  messagesEl.addEventListener("scroll", () => {
    stickToBottom = messagesEl.scrollHeight - messagesEl.scrollTop - messagesEl.clientHeight < 48;
  });
  function autoScroll() {
    if (stickToBottom) messagesEl.scrollTop = messagesEl.scrollHeight;
  }

  function messageElement(msg) {
    const wrap = document.createElement("article");
    wrap.className = "msg " + (msg.role === "user" ? "user" : msg.role === "assistant" ? "assistant" : "system");
    wrap.dataset.role = msg.role;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = msg.role === "user" ? "You" : msg.role === "assistant" ? "Assistant" : msg.role;
    const body = document.createElement("div");
    body.className = "content";
    if (msg.role === "assistant") renderMarkdown(body, msg.content, true);
    else body.textContent = msg.content; // user text is shown as typed
    wrap.append(who, body);
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = metaText(msg);
    wrap.append(meta);
    return wrap;
  }
  function metaText(msg) {
    const parts = [];
    if (msg.finish_reason && msg.finish_reason !== "stop") parts.push(msg.finish_reason);
    if (msg.tokens_per_sec) parts.push(msg.tokens_per_sec.toFixed(1) + " tok/s");
    if (msg.error) parts.push("error: " + msg.error);
    return parts.join(" · ");
  }

  function renderMessages() {
    messagesEl.querySelectorAll(".msg").forEach((n) => n.remove());
    $("empty").hidden = !!(current && current.messages.length);
    if (current) for (const m of current.messages) messagesEl.append(messageElement(m));
    stickToBottom = true;
    autoScroll();
  }

  /* ---------------------------------------------------------------- connection state machine */
  const conn = {
    state: "disconnected", // disconnected | connecting | connected | generating
    transport: FORCE_SSE ? "sse" : "ws",
    ws: null,
    attempt: 0, // consecutive failed connection attempts (backoff exponent)
    wsFailures: 0, // consecutive WebSocket attempts that never opened
    probe: null, // a WebSocket being tried while on the SSE fallback
    probeAttempt: 0,
    probeTimer: 0,
    retryTimer: 0,
    heartbeatTimer: 0,
    pongTimer: 0,
    sseAbort: null,
  };
  const connHistory = []; // the last transitions, for the UI tests (quarrelUI.history())
  function setState(s) {
    conn.state = s;
    connHistory.push(s + "/" + conn.transport + "@" + Math.round(performance.now()));
    if (connHistory.length > 64) connHistory.shift();
    const el = $("conn");
    el.dataset.transport = conn.transport;
    el.dataset.state = s; // last: a test waiting on data-state then reads a matching data-transport
    $("conn-label").textContent = s;
    $("transport").textContent = s === "disconnected" ? "" : conn.transport === "ws" ? "WebSocket" : "SSE";
    document.body.dataset.conn = s;
    const generating = s === "generating";
    const usable = s === "connected";
    $("prompt").disabled = generating;
    $("send").disabled = !usable;
    $("stop").disabled = !generating;
    $("new-chat").disabled = generating;
    $("clear-all").disabled = generating;
    $("import-json").disabled = generating;
    document.querySelectorAll("#presets button, #models button, #conversations button").forEach((b) => {
      b.disabled = generating;
    });
    $("typing").hidden = !generating;
  }

  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    if (apiKey) h["Authorization"] = "Bearer " + apiKey;
    return h;
  }

  function scheduleReconnect() {
    clearTimeout(conn.retryTimer);
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * Math.pow(2, conn.attempt));
    const delay = base / 2 + Math.random() * base / 2; // jitter
    conn.attempt++;
    conn.retryTimer = setTimeout(connect, delay);
  }

  function stopHeartbeat() {
    clearInterval(conn.heartbeatTimer);
    clearTimeout(conn.pongTimer);
    conn.heartbeatTimer = conn.pongTimer = 0;
  }

  function startHeartbeat() {
    stopHeartbeat();
    conn.heartbeatTimer = setInterval(() => {
      if (conn.transport === "ws") {
        if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) return;
        try {
          conn.ws.send(JSON.stringify({ type: "ping", payload: { t: Date.now() } }));
        } catch (e) {
          return;
        }
        clearTimeout(conn.pongTimer);
        conn.pongTimer = setTimeout(() => { // no pong: the link is dead even if the socket says open
          if (conn.ws) conn.ws.close();
        }, PONG_TIMEOUT_MS);
      } else if (conn.state !== "generating") {
        fetch("/healthz", { cache: "no-store" }).then((r) => {
          if (!r.ok) throw new Error("HTTP " + r.status);
        }).catch(() => lostConnection());
      }
    }, HEARTBEAT_MS);
  }

  function lostConnection() {
    stopHeartbeat();
    cancelWsProbe();
    if (conn.state === "disconnected") return;
    if (conn.state === "generating") finishGeneration({ error: "connection lost" });
    setState("disconnected");
    if (!FORCE_SSE) { // WebSocket gets another chance after a lost connection
      conn.transport = "ws";
      conn.wsFailures = 0;
    }
    scheduleReconnect();
  }

  function connected() {
    conn.attempt = 0;
    setState("connected");
    startHeartbeat();
    loadModels();
    if (conn.transport === "sse") scheduleWsProbe();
  }

  function openWebSocket() {
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws";
    return apiKey ? new WebSocket(url, ["quarrel", "quarrel.key." + apiKey]) : new WebSocket(url);
  }

  /* Makes ws, just opened, the transport: its messages drive the UI, its close is a lost connection. */
  function useWebSocket(ws) {
    conn.ws = ws;
    conn.transport = "ws";
    conn.wsFailures = 0;
    ws.addEventListener("message", (ev) => onWsMessage(ev.data));
    ws.addEventListener("close", () => {
      if (conn.ws !== ws) return;
      conn.ws = null;
      lostConnection();
    });
    connected();
  }

  /* On the SSE fallback (never with ?transport=sse): tries WebSocket again after PROBE_MIN_MS, doubling
   * to PROBE_MAX_MS (jittered), so that a server that comes back, or a proxy that lets WebSocket
   * through again, gets the UI back onto WebSocket without a reload. */
  function scheduleWsProbe() {
    clearTimeout(conn.probeTimer);
    if (FORCE_SSE || conn.transport !== "sse" || conn.probe) return;
    const base = Math.min(PROBE_MAX_MS, PROBE_MIN_MS * Math.pow(2, conn.probeAttempt));
    conn.probeAttempt++;
    conn.probeTimer = setTimeout(probeWs, base / 2 + Math.random() * base / 2);
  }

  /* One probe: only while idle on SSE (a running generation finishes on SSE first). A probe that opens
   * becomes the transport; one that fails schedules the next. */
  function probeWs() {
    conn.probeTimer = 0;
    if (conn.transport !== "sse" || conn.probe) return;
    if (conn.state !== "connected") {
      if (conn.state === "generating") scheduleWsProbe();
      return; // disconnected or connecting: the reconnect starts with WebSocket anyway
    }
    let ws;
    try {
      ws = openWebSocket();
    } catch (e) {
      return scheduleWsProbe();
    }
    conn.probe = ws;
    let opened = false;
    ws.addEventListener("open", () => {
      opened = true;
      if (conn.probe !== ws) return; // cancelled meanwhile (it closes itself)
      conn.probe = null;
      if (conn.transport !== "sse" || conn.state !== "connected") { // a generation started meanwhile
        ws.close();
        return scheduleWsProbe();
      }
      conn.probeAttempt = 0;
      useWebSocket(ws);
    });
    ws.addEventListener("close", () => {
      if (opened || conn.probe !== ws) return;
      conn.probe = null;
      scheduleWsProbe();
    });
  }

  function cancelWsProbe() {
    clearTimeout(conn.probeTimer);
    conn.probeTimer = 0;
    conn.probeAttempt = 0;
    if (conn.probe) {
      const ws = conn.probe;
      conn.probe = null;
      ws.close();
    }
  }

  function connect() {
    clearTimeout(conn.retryTimer);
    if (conn.state === "connecting" || conn.state === "connected" || conn.state === "generating") return;
    setState("connecting");
    if (conn.transport === "sse") return connectSse();
    let ws;
    try {
      ws = openWebSocket();
    } catch (e) {
      return wsFailed();
    }
    conn.ws = ws;
    let opened = false;
    ws.addEventListener("open", () => {
      opened = true;
      if (conn.ws === ws) useWebSocket(ws);
    });
    ws.addEventListener("close", () => {
      if (opened || conn.ws !== ws) return;
      conn.ws = null;
      wsFailed();
    });
  }

  /* A WebSocket that never opened: after two in a row, try plain HTTP; if the server answers there,
   * stream over SSE instead (some proxies block WebSocket). */
  function wsFailed() {
    conn.wsFailures++;
    stopHeartbeat();
    if (conn.wsFailures >= 2) {
      fetch("/healthz", { cache: "no-store" }).then((r) => {
        if (!r.ok) throw new Error("HTTP " + r.status);
        conn.transport = "sse";
        setState("connecting");
        connectSse();
      }).catch(() => {
        setState("disconnected");
        scheduleReconnect();
      });
      return;
    }
    setState("disconnected");
    scheduleReconnect();
  }

  function connectSse() {
    fetch("/healthz", { cache: "no-store" }).then((r) => {
      if (!r.ok) throw new Error("HTTP " + r.status);
      connected();
    }).catch(() => {
      setState("disconnected");
      if (!FORCE_SSE) conn.transport = "ws";
      scheduleReconnect();
    });
  }

  /* ---------------------------------------------------------------- generation */
  let gen = null; // {msg, el, body, pending, raf, t0, n}

  function requestPayload() {
    const msgs = [];
    if (settings.system.trim()) msgs.push({ role: "system", content: settings.system });
    for (const m of current.messages) {
      if ((m.role === "user" || m.role === "assistant") && !(m === gen.msg)) msgs.push({ role: m.role, content: m.content });
    }
    const p = { messages: msgs, temperature: Number(settings.temperature), top_k: Number(settings.top_k),
                top_p: Number(settings.top_p), max_tokens: Number(settings.max_tokens), stream: true };
    if (selectedModel) p.model = selectedModel;
    return p;
  }

  function send() {
    const text = $("prompt").value;
    if (!text.trim() || conn.state !== "connected") return;
    if (!current) current = newConversation();
    current.model = selectedModel;
    current.messages.push({ role: "user", content: text, ts: Date.now() });
    const msg = { role: "assistant", content: "", ts: Date.now() };
    current.messages.push(msg);
    $("prompt").value = "";
    $("empty").hidden = true;
    messagesEl.append(messageElement(current.messages[current.messages.length - 2]));
    const el = messageElement(msg);
    el.classList.add("streaming");
    messagesEl.append(el);
    stickToBottom = true;
    autoScroll();
    saveCurrent();
    gen = { msg, el, body: el.querySelector(".content"), raf: 0, t0: performance.now(), n: 0 };
    setState("generating");
    $("tps").textContent = "0.0 tok/s";
    const payload = requestPayload();
    if (conn.transport === "ws" && conn.ws && conn.ws.readyState === WebSocket.OPEN) {
      conn.ws.send(JSON.stringify({ type: "inference", payload }));
    } else {
      streamSse(payload);
    }
  }

  function onToken(token, tps) {
    if (!gen) return;
    gen.msg.content += token;
    gen.n++;
    if (typeof tps === "number" && tps > 0) {
      gen.msg.tokens_per_sec = tps;
      $("tps").textContent = tps.toFixed(1) + " tok/s";
    }
    if (!gen.raf) {
      gen.raf = requestAnimationFrame(() => {
        if (!gen) return;
        gen.raf = 0;
        renderMarkdown(gen.body, gen.msg.content, false); // highlighting once, at the end
        autoScroll();
      });
    }
  }

  /* Ends the running generation: info {finish_reason, tokens_per_sec, error}. */
  function finishGeneration(info) {
    if (!gen) return;
    const g = gen;
    gen = null;
    if (g.raf) cancelAnimationFrame(g.raf);
    if (info.finish_reason) g.msg.finish_reason = info.finish_reason;
    if (info.tokens_per_sec) g.msg.tokens_per_sec = info.tokens_per_sec;
    if (info.error) g.msg.error = info.error;
    renderMarkdown(g.body, g.msg.content, true);
    g.el.classList.remove("streaming");
    g.el.querySelector(".meta").textContent = metaText(g.msg);
    if (g.msg.tokens_per_sec) $("tps").textContent = g.msg.tokens_per_sec.toFixed(1) + " tok/s";
    if (conn.sseAbort) conn.sseAbort = null;
    saveCurrent();
    autoScroll();
    if (conn.state === "generating") setState("connected");
    $("prompt").focus();
  }

  function onWsMessage(data) {
    let m;
    try {
      m = JSON.parse(data);
    } catch (e) {
      return;
    }
    const p = m.payload || {};
    if (m.type === "pong") {
      clearTimeout(conn.pongTimer);
    } else if (m.type === "inference") {
      if (!p.complete) onToken(p.token || "", p.tokens_per_sec);
      else finishGeneration({ finish_reason: p.finish_reason, tokens_per_sec: p.tokens_per_sec });
    } else if (m.type === "error") {
      if (p.code === "UNAUTHORIZED") {
        askForKey(p.message);
        return;
      }
      if (gen) finishGeneration({ error: (p.code || "ERROR") + ": " + (p.message || "") });
      else showNotice((p.code || "error") + ": " + (p.message || ""));
    }
  }

  async function streamSse(payload) {
    const ctrl = new AbortController();
    conn.sseAbort = ctrl;
    try {
      const r = await fetch("/api/stream", { method: "POST", body: JSON.stringify(payload), signal: ctrl.signal,
                                             headers: authHeaders({ "Content-Type": "application/json" }) });
      if (r.status === 401) {
        finishGeneration({ error: "unauthorized" });
        askForKey();
        return;
      }
      if (!r.ok || !r.body) {
        let msg = "HTTP " + r.status;
        try { msg = (await r.json()).error.message; } catch (e) { /* keep the status */ }
        finishGeneration({ error: msg });
        return;
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of frame.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const d = line.slice(5).trim();
            if (d === "[DONE]") continue;
            let j;
            try { j = JSON.parse(d); } catch (e) { continue; }
            if (j.error) finishGeneration({ error: j.error.code + ": " + j.error.message });
            else if (!j.complete) onToken(j.token || "", j.tokens_per_sec);
            else finishGeneration({ finish_reason: j.finish_reason, tokens_per_sec: j.tokens_per_sec });
          }
        }
      }
      finishGeneration({});
    } catch (e) {
      if (ctrl.signal.aborted) finishGeneration({ finish_reason: "cancelled" });
      else {
        finishGeneration({ error: "connection lost" });
        lostConnection();
      }
    }
  }

  function stop() {
    if (conn.state !== "generating") return;
    if (conn.transport === "ws" && conn.ws && conn.ws.readyState === WebSocket.OPEN) {
      conn.ws.send(JSON.stringify({ type: "stop" })); // the server answers with finish_reason "cancelled"
    } else if (conn.sseAbort) {
      conn.sseAbort.abort(); // the server cancels when its next token write fails
    }
  }

  /* ---------------------------------------------------------------- models */
  async function loadModels() {
    try {
      const r = await fetch("/api/models", { headers: authHeaders(), cache: "no-store" });
      if (r.status === 401) return askForKey();
      if (!r.ok) throw new Error("HTTP " + r.status);
      const j = await r.json();
      renderModels(j.models || []);
    } catch (e) {
      renderModels([]);
    }
  }

  function fmtBytes(n) {
    if (!n && n !== 0) return "?";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + u[i];
  }
  function fmtParams(n) {
    if (!n) return "?";
    return n >= 1e9 ? (n / 1e9).toFixed(1) + "B" : (n / 1e6).toFixed(0) + "M";
  }

  function renderModels(models) {
    const ul = $("models");
    ul.replaceChildren();
    if (!models.length) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = "no models";
      ul.append(li);
      return;
    }
    if (!selectedModel || !models.some((m) => m.name === selectedModel)) selectedModel = models[0].name;
    for (const m of models) {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "model" + (m.name === selectedModel ? " selected" : "");
      b.setAttribute("aria-pressed", m.name === selectedModel ? "true" : "false");
      b.dataset.name = m.name;
      const name = document.createElement("span");
      name.className = "model-name";
      name.textContent = m.name;
      const status = document.createElement("span");
      const loaded = m.loaded !== false;
      status.className = "badge " + (loaded ? "ok" : "off");
      status.textContent = loaded ? "loaded" : "unloaded";
      const info = document.createElement("span");
      info.className = "model-info";
      const mem = m.memory ? m.memory.total_bytes : m.size;
      info.textContent = [m.architecture, fmtParams(m.parameters) + " params", m.quantization,
                          fmtBytes(mem), m.backend].filter(Boolean).join(" · ");
      b.append(name, status, info);
      b.addEventListener("click", () => {
        selectedModel = m.name;
        save(KEYS.model, selectedModel);
        renderModels(models);
        closeSidebarOnMobile();
      });
      b.disabled = conn.state === "generating";
      li.append(b);
      ul.append(li);
    }
  }

  /* ---------------------------------------------------------------- API key */
  function askForKey(message) {
    const d = $("key-dialog");
    if (d.open) return;
    stopHeartbeat();
    cancelWsProbe();
    if (conn.ws) { const ws = conn.ws; conn.ws = null; ws.close(); }
    clearTimeout(conn.retryTimer);
    setState("disconnected");
    $("api-key").value = "";
    if (message) showNotice(message);
    d.showModal();
  }
  $("key-form").addEventListener("submit", () => {
    apiKey = $("api-key").value.trim();
    save(KEYS.apiKey, apiKey, sessionStorage);
    hideNotice();
    conn.attempt = 0;
    conn.wsFailures = 0;
    setTimeout(connect, 0);
  });

  /* ---------------------------------------------------------------- conversations */
  function renderConversationList() {
    const q = $("conv-search").value.trim().toLowerCase();
    const ul = $("conversations");
    ul.replaceChildren();
    const list = conversations.filter((c) => !q || c.title.toLowerCase().includes(q) ||
                                             c.messages.some((m) => String(m.content).toLowerCase().includes(q)));
    list.sort((a, b) => b.updated - a.updated);
    if (!list.length) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = q ? "no matches" : "no saved conversations";
      ul.append(li);
    }
    for (const c of list) {
      const li = document.createElement("li");
      li.className = "conv" + (current && c.id === current.id ? " selected" : "");
      li.dataset.id = c.id;
      const open = document.createElement("button");
      open.type = "button";
      open.className = "conv-open";
      open.textContent = c.title;
      open.title = new Date(c.updated).toLocaleString();
      open.addEventListener("click", () => openConversation(c.id));
      const del = document.createElement("button");
      del.type = "button";
      del.className = "conv-delete icon-btn";
      del.setAttribute("aria-label", "Delete conversation " + c.title);
      del.textContent = "✕";
      del.addEventListener("click", () => deleteConversation(c.id));
      open.disabled = del.disabled = conn.state === "generating";
      li.append(open, del);
      ul.append(li);
    }
  }
  function openConversation(id) {
    if (conn.state === "generating") return;
    const c = conversations.find((x) => x.id === id);
    if (!c) return;
    current = c;
    save(KEYS.current, c.id);
    renderMessages();
    renderConversationList();
    closeSidebarOnMobile();
  }
  function deleteConversation(id) {
    conversations = conversations.filter((c) => c.id !== id);
    if (current && current.id === id) current = newConversation();
    persistConversations();
    renderMessages();
    renderConversationList();
  }
  function startNewChat() {
    if (conn.state === "generating") return;
    current = newConversation();
    save(KEYS.current, null);
    renderMessages();
    renderConversationList();
    $("prompt").focus();
  }

  function conversationMarkdown(c) {
    const lines = ["# " + c.title, ""];
    if (c.model) lines.push("Model: " + c.model, "");
    for (const m of c.messages) {
      lines.push("## " + (m.role === "user" ? "User" : m.role === "assistant" ? "Assistant" : m.role), "");
      lines.push(m.content, "");
    }
    return lines.join("\n");
  }
  function download(name, type, text) {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }
  function fileStem(c) {
    return "quarrel-" + (c.title.replace(/[^\w-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 40) || "chat");
  }
  $("export-md").addEventListener("click", () => {
    if (!current || !current.messages.length) return showNotice("Nothing to export: the conversation is empty.");
    download(fileStem(current) + ".md", "text/markdown", conversationMarkdown(current));
  });
  $("export-json").addEventListener("click", () => {
    if (!conversations.length) return showNotice("Nothing to export: no saved conversations.");
    download("quarrel-conversations.json", "application/json",
             JSON.stringify({ format: "quarrel.conversations", version: 1, conversations }, null, 2));
  });

  /* Accepts {conversations: [...]}, a list of conversations, or one conversation. */
  function importConversations(data) {
    const list = Array.isArray(data) ? data : Array.isArray(data.conversations) ? data.conversations : [data];
    let n = 0;
    for (const c of list) {
      if (!c || !Array.isArray(c.messages)) continue;
      const msgs = c.messages.filter((m) => m && typeof m.content === "string" &&
                                            ["user", "assistant", "system"].includes(m.role))
        .map((m) => ({ role: m.role, content: m.content }));
      const conv = newConversation();
      conv.title = typeof c.title === "string" && c.title.trim() ? c.title.slice(0, 120) : "Imported chat";
      conv.model = typeof c.model === "string" ? c.model : "";
      conv.created = Number(c.created) || Date.now();
      conv.updated = Date.now() + n; // newest first, in file order
      conv.messages = msgs;
      conversations = conversations.filter((x) => x.id !== c.id);
      if (typeof c.id === "string" && /^[\w-]{1,40}$/.test(c.id)) conv.id = c.id;
      conversations.push(conv);
      n++;
    }
    if (!n) throw new Error("no conversations in the file");
    persistConversations();
    renderConversationList();
    return n;
  }
  $("import-json").addEventListener("change", async (ev) => {
    const f = ev.target.files && ev.target.files[0];
    ev.target.value = "";
    if (!f) return;
    try {
      const n = importConversations(JSON.parse(await f.text()));
      showNotice("Imported " + n + " conversation" + (n === 1 ? "" : "s") + ".", true);
      const newest = conversations.reduce((a, b) => (b.updated > a.updated ? b : a));
      openConversation(newest.id);
    } catch (e) {
      showNotice("Import failed: " + e.message);
    }
  });
  $("clear-all").addEventListener("click", () => {
    if (!conversations.length) return;
    if (!window.confirm("Delete all " + conversations.length + " saved conversations?")) return;
    conversations = [];
    current = newConversation();
    persistConversations();
    renderMessages();
    renderConversationList();
  });
  $("conv-search").addEventListener("input", renderConversationList);

  /* ---------------------------------------------------------------- settings */
  const SETTING_INPUTS = { temperature: "set-temperature", top_k: "set-top-k", top_p: "set-top-p",
                           max_tokens: "set-max-tokens", system: "set-system" };
  function showSettings() {
    for (const [k, id] of Object.entries(SETTING_INPUTS)) $(id).value = settings[k];
    $("out-temperature").textContent = Number(settings.temperature).toFixed(2);
    $("out-top-k").textContent = settings.top_k;
    $("out-top-p").textContent = Number(settings.top_p).toFixed(2);
  }
  for (const [k, id] of Object.entries(SETTING_INPUTS)) {
    $(id).addEventListener("input", () => {
      const el = $(id);
      if (k === "system") settings[k] = el.value;
      else {
        let v = Number(el.value);
        if (!Number.isFinite(v)) return;
        if (k === "max_tokens") v = Math.max(1, Math.min(32768, Math.round(v)));
        settings[k] = v;
      }
      save(KEYS.settings, settings);
      showSettings();
    });
  }
  $("settings-reset").addEventListener("click", () => {
    settings = Object.assign({}, DEFAULTS);
    save(KEYS.settings, settings);
    showSettings();
  });
  $("settings-open").addEventListener("click", () => {
    showSettings();
    renderCustomPresets();
    $("settings").showModal();
    $("settings-open").setAttribute("aria-expanded", "true");
  });
  $("settings").addEventListener("close", () => {
    $("settings-open").setAttribute("aria-expanded", "false");
    $("settings-open").focus();
  });

  /* ---------------------------------------------------------------- presets */
  function renderPresets() {
    const box = $("presets");
    box.replaceChildren();
    for (const p of BUILTIN_PRESETS.concat(customPresets)) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "chip";
      b.textContent = p.name;
      b.title = p.text.trim();
      b.addEventListener("click", () => {
        const ta = $("prompt");
        ta.value = p.text + ta.value;
        ta.focus();
        ta.setSelectionRange(ta.value.length, ta.value.length);
      });
      b.disabled = conn.state === "generating";
      box.append(b);
    }
  }
  function renderCustomPresets() {
    const ul = $("custom-preset-list");
    ul.replaceChildren();
    customPresets.forEach((p, i) => {
      const li = document.createElement("li");
      const span = document.createElement("span");
      span.textContent = p.name;
      const del = document.createElement("button");
      del.type = "button";
      del.className = "icon-btn";
      del.setAttribute("aria-label", "Delete preset " + p.name);
      del.textContent = "✕";
      del.addEventListener("click", () => {
        customPresets.splice(i, 1);
        save(KEYS.presets, customPresets);
        renderCustomPresets();
        renderPresets();
      });
      li.append(span, del);
      ul.append(li);
    });
  }
  $("preset-add").addEventListener("click", () => {
    const name = $("preset-name").value.trim(), text = $("preset-text").value;
    if (!name || !text.trim()) return;
    customPresets.push({ name: name.slice(0, 40), text: text.endsWith("\n") ? text : text + "\n\n" });
    save(KEYS.presets, customPresets);
    $("preset-name").value = $("preset-text").value = "";
    renderCustomPresets();
    renderPresets();
  });

  /* ---------------------------------------------------------------- theme */
  const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");
  function effectiveTheme() {
    const pref = load(KEYS.theme, "system");
    return pref === "light" || pref === "dark" ? pref : darkQuery.matches ? "dark" : "light";
  }
  function applyTheme() {
    const t = effectiveTheme();
    document.documentElement.dataset.theme = t;
    $("hljs-light").disabled = t === "dark";
    $("hljs-dark").disabled = t !== "dark";
    $("theme-toggle").setAttribute("aria-label", t === "dark" ? "Switch to light theme" : "Switch to dark theme");
  }
  darkQuery.addEventListener("change", applyTheme);
  $("theme-toggle").addEventListener("click", () => {
    save(KEYS.theme, effectiveTheme() === "dark" ? "light" : "dark");
    applyTheme();
  });

  /* ---------------------------------------------------------------- layout, notices, keys */
  function closeSidebarOnMobile() {
    if (window.matchMedia("(max-width: 767px)").matches) toggleSidebar(false);
  }
  function toggleSidebar(open) {
    const sb = $("sidebar");
    const o = open === undefined ? !sb.classList.contains("open") : open;
    sb.classList.toggle("open", o);
    $("sidebar-toggle").setAttribute("aria-expanded", o ? "true" : "false");
  }
  $("sidebar-toggle").addEventListener("click", () => toggleSidebar());

  let noticeTimer = 0;
  function showNotice(text, transient) {
    const n = $("notice");
    n.textContent = text;
    n.hidden = false;
    clearTimeout(noticeTimer);
    if (transient) noticeTimer = setTimeout(hideNotice, 4000);
  }
  function hideNotice() { $("notice").hidden = true; }

  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    send();
  });
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      send();
    }
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && conn.state === "generating") {
      ev.preventDefault();
      stop();
    }
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", startNewChat);

  /* ---------------------------------------------------------------- start */
  applyTheme();
  const lastId = load(KEYS.current, null);
  current = conversations.find((c) => c.id === lastId) || newConversation();
  renderMessages();
  renderConversationList();
  renderPresets();
  setState("disconnected");
  connect();

  // A small read-only view for the UI tests (selenium): state, not behaviour.
  window.quarrelUI = Object.freeze({
    state: () => conn.state,
    transport: () => conn.transport,
    history: () => connHistory.slice(),
    libraries: () => ({ marked: haveMarked(), highlight: haveHljs(), purify: havePurify() }),
    markdown: (c) => conversationMarkdown(c || current),
  });
})();
