/* app.js — Quarrel's web UI. Plain JavaScript, no build step; served by `quarrel serve` under a
 * CSP that forbids inline script, so everything lives here (and in render.js, tree.js, options.js,
 * loaded first) and is wired with addEventListener.
 *
 * Pieces: storage (localStorage: settings, conversations as message trees, presets, theme;
 * sessionStorage: API key), the messages view (copy, edit, regenerate, continue, branch switching,
 * reasoning and tool calls, per-answer stats), the connection state machine (disconnected ->
 * connecting -> connected -> generating) over /ws with a heartbeat and exponential backoff, falling
 * back to SSE (/api/stream) when WebSocket fails and trying WebSocket again (with backoff) while on
 * that fallback; requests with tools go to /v1/chat/completions (streamed). With auth on (/healthz
 * says so) the key is asked for before the first API call. */
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const R = window.QuarrelRender, T = window.QuarrelTree, O = window.QuarrelOptions;
  const KEYS = {
    settings: "quarrel.settings",
    convs: "quarrel.conversations",
    current: "quarrel.current",
    presets: "quarrel.presets",
    theme: "quarrel.theme",
    model: "quarrel.model",
    apiKey: "quarrel.apiKey", // sessionStorage
  };
  const DEFAULTS = O.DEFAULTS;
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
  const MAX_ATTACH_BYTES = 512 * 1024; // per file

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
  conversations = conversations.filter((c) => c && typeof c === "object").map((c) => T.normalize(c));
  let current = null; // the open conversation (an element of conversations, or a new unsaved one)
  let customPresets = load(KEYS.presets, []);
  let apiKey = load(KEYS.apiKey, "", sessionStorage);
  let selectedModel = load(KEYS.model, "");
  let authRequired = false; // /healthz said the API needs a key
  let lastRequest = null; // {route, body} of the last generation request (for the UI tests)

  function newConversation() {
    const c = { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 7), title: "New chat",
                created: Date.now(), updated: Date.now(), model: selectedModel };
    T.fromMessages(c, []);
    return c;
  }
  function persistConversations() {
    save(KEYS.convs, conversations.map(T.stored));
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
  /* The settings in force for the open conversation: its own when it has them, else the global ones. */
  const effective = () => (current && current.settings ? current.settings : settings);

  /* ---------------------------------------------------------------- messages view */
  const messagesEl = $("messages");
  let stickToBottom = true;
  messagesEl.addEventListener("scroll", () => {
    stickToBottom = messagesEl.scrollHeight - messagesEl.scrollTop - messagesEl.clientHeight < 48;
  });
  function autoScroll() {
    if (stickToBottom) messagesEl.scrollTop = messagesEl.scrollHeight;
  }

  /* The text of a user message as the model gets it: what was typed, then each attached file. */
  function userContent(m) {
    let t = m.content;
    for (const f of m.files || []) t += "\n\nFile: " + f.name + "\n```\n" + f.text + (f.text.endsWith("\n") ? "" : "\n") + "```";
    return t;
  }

  function button(cls, text, label, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "act " + cls;
    b.textContent = text;
    b.setAttribute("aria-label", label);
    b.title = label;
    b.addEventListener("click", onClick);
    b.disabled = conn.state === "generating";
    return b;
  }

  /* Fills an assistant message's body: the reasoning (collapsed), the answer (Markdown; a JSON-mode
   * answer as a JSON code block), the tool calls. final: the reply is complete (highlight code). */
  function renderAssistant(el, msg, final) {
    const split = R.splitReasoning(msg.content);
    const reasoning = [msg.reasoning || "", split.reasoning].filter(Boolean).join("\n\n");
    let details = el.querySelector(":scope > details.reasoning");
    if (reasoning) {
      if (!details) {
        details = document.createElement("details");
        details.className = "reasoning";
        const sum = document.createElement("summary");
        const body = document.createElement("div");
        body.className = "reasoning-body";
        details.append(sum, body);
        el.prepend(details);
      }
      details.querySelector("summary").textContent = split.thinking && !final ? "Thinking…" : "Reasoning";
      details.querySelector(".reasoning-body").textContent = reasoning;
    } else if (details) {
      details.remove();
    }
    const body = el.querySelector(":scope > .content");
    let text = split.content;
    if (msg.json_mode && final) {
      try { text = "```json\n" + JSON.stringify(JSON.parse(text), null, 2) + "\n```"; } catch (e) { /* as it came */ }
      body.classList.add("json");
    }
    R.renderMarkdown(body, text, final);
    let calls = el.querySelector(":scope > .tool-calls");
    if (msg.tool_calls && msg.tool_calls.length) {
      if (!calls) {
        calls = document.createElement("div");
        calls.className = "tool-calls";
        body.after(calls);
      }
      calls.replaceChildren();
      for (const c of msg.tool_calls) {
        const box = document.createElement("details");
        box.className = "tool-call";
        box.open = true;
        const sum = document.createElement("summary");
        sum.textContent = "Tool call: " + c.name;
        const pre = document.createElement("pre");
        const code = document.createElement("code");
        let args = c.arguments;
        try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* keep the text */ }
        code.textContent = args;
        pre.append(code);
        box.append(sum, pre);
        calls.append(box);
      }
    } else if (calls) {
      calls.remove();
    }
  }

  function messageElement(msg) {
    const wrap = document.createElement("article");
    wrap.className = "msg " + (msg.role === "user" ? "user" : msg.role === "assistant" ? "assistant" : "system");
    wrap.dataset.role = msg.role;
    wrap.dataset.id = msg.id;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = msg.role === "user" ? "You" : msg.role === "assistant" ? "Assistant" : msg.role;
    const body = document.createElement("div");
    body.className = "content";
    wrap.append(who, body);
    if (msg.role === "assistant") renderAssistant(wrap, msg, true);
    else body.textContent = msg.content; // user text is shown as typed
    if (msg.files && msg.files.length) {
      const ul = document.createElement("ul");
      ul.className = "attachments sent";
      for (const f of msg.files) {
        const li = document.createElement("li");
        li.textContent = f.name + (f.tokens ? " · " + f.tokens + " tokens" : "");
        ul.append(li);
      }
      wrap.append(ul);
    }
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = metaText(msg);
    wrap.append(meta, actionsFor(msg));
    return wrap;
  }

  /* The buttons under a message: branch switcher, Copy; Edit (user); Regenerate, Continue (assistant). */
  function actionsFor(msg) {
    const bar = document.createElement("div");
    bar.className = "msg-actions";
    if (!current || !current.nodes[msg.id]) return bar;
    const { ids, index } = T.siblings(current, msg);
    if (ids.length > 1) {
      const nav = document.createElement("span");
      nav.className = "branch-nav";
      const label = document.createElement("span");
      label.className = "branch-label";
      label.textContent = index + 1 + "/" + ids.length;
      nav.append(button("branch-prev", "‹", "Previous version", () => switchBranch(msg, index - 1)), label,
                 button("branch-next", "›", "Next version", () => switchBranch(msg, index + 1)));
      nav.querySelector(".branch-prev").disabled ||= index === 0;
      nav.querySelector(".branch-next").disabled ||= index === ids.length - 1;
      bar.append(nav);
    }
    const copy = R.copyButton(msg.role === "user" ? "Copy message" : "Copy answer",
                              () => (msg.role === "user" ? userContent(msg) : R.splitReasoning(msg.content).content));
    copy.classList.add("act", "copy-msg");
    bar.append(copy);
    if (msg.role === "user") bar.append(button("edit", "Edit", "Edit and resend", () => startEdit(msg)));
    if (msg.role === "assistant") {
      bar.append(button("regen", "Regenerate", "Regenerate this answer", () => regenerate(msg)));
      if (msg.finish_reason === "length" || msg.finish_reason === "cancelled")
        bar.append(button("continue", "Continue", "Continue this answer", () => continueAnswer(msg)));
    }
    return bar;
  }

  /* Per-answer stats: speed, prompt / output / cached-prefix tokens, time to first token. */
  function metaText(msg) {
    const parts = [];
    if (msg.finish_reason && msg.finish_reason !== "stop") parts.push(msg.finish_reason);
    if (msg.tokens_per_sec) parts.push(msg.tokens_per_sec.toFixed(1) + " tok/s");
    const u = msg.usage;
    if (u) {
      if (u.prompt_tokens !== undefined) parts.push("prompt " + u.prompt_tokens);
      if (u.completion_tokens !== undefined) parts.push("output " + u.completion_tokens);
      if (u.cached_tokens !== undefined) parts.push("cached " + u.cached_tokens);
    }
    if (typeof msg.ttft_ms === "number" && msg.ttft_ms > 0) parts.push("TTFT " + Math.round(msg.ttft_ms) + " ms");
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

  /* ---------------------------------------------------------------- editing */
  /* Turns a user message into an editor; Save & send adds the edited text as a new version (a branch)
   * and answers it. */
  function startEdit(msg) {
    if (conn.state === "generating") return;
    const el = messagesEl.querySelector('.msg[data-id="' + msg.id + '"]');
    if (!el || el.querySelector(".edit-box")) return;
    const box = document.createElement("div");
    box.className = "edit-box";
    const ta = document.createElement("textarea");
    ta.className = "edit-text";
    ta.rows = 3;
    ta.value = msg.content;
    ta.setAttribute("aria-label", "Edit message");
    const row = document.createElement("div");
    row.className = "row end";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "btn small edit-cancel";
    cancel.textContent = "Cancel";
    cancel.addEventListener("click", () => { box.remove(); el.classList.remove("editing"); });
    const ok = document.createElement("button");
    ok.type = "button";
    ok.className = "btn small primary edit-save";
    ok.textContent = "Save & send";
    ok.addEventListener("click", () => {
      const text = ta.value;
      if (!text.trim() || conn.state !== "connected") return;
      const user = T.append(current, msg.parent, { role: "user", content: text, files: msg.files, ts: Date.now() });
      const asst = T.append(current, user.id, { role: "assistant", content: "", ts: Date.now() });
      generate(asst, false);
    });
    ta.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); ok.click(); }
      if (ev.key === "Escape") { ev.stopPropagation(); cancel.click(); }
    });
    row.append(cancel, ok);
    box.append(ta, row);
    el.classList.add("editing");
    el.querySelector(".content").after(box);
    ta.focus();
  }

  function switchBranch(msg, k) {
    if (conn.state === "generating") return;
    T.select(current, msg, k);
    saveCurrent();
    renderMessages();
  }
  function regenerate(msg) {
    if (conn.state !== "connected") return;
    generate(T.append(current, msg.parent, { role: "assistant", content: "", ts: Date.now() }), false);
  }
  function continueAnswer(msg) {
    if (conn.state !== "connected") return;
    generate(msg, true);
  }

  /* ---------------------------------------------------------------- attachments */
  let attachments = []; // [{name, text, tokens}] for the next message
  function renderAttachments() {
    const ul = $("attachments");
    ul.replaceChildren();
    attachments.forEach((f, i) => {
      const li = document.createElement("li");
      li.className = "attachment";
      const name = document.createElement("span");
      name.className = "att-name";
      name.textContent = f.name;
      const tok = document.createElement("span");
      tok.className = "att-tokens";
      tok.textContent = f.tokens === null ? "counting…" : f.tokens < 0 ? "? tokens" : f.tokens + " tokens";
      const del = document.createElement("button");
      del.type = "button";
      del.className = "icon-btn att-remove";
      del.setAttribute("aria-label", "Remove " + f.name);
      del.textContent = "✕";
      del.addEventListener("click", () => { attachments.splice(i, 1); renderAttachments(); });
      li.append(name, tok, del);
      ul.append(li);
    });
    ul.hidden = !attachments.length;
  }
  /* The number of tokens of text as the selected model counts it (POST /tokenize); -1 when unknown. */
  async function countTokens(text) {
    try {
      const body = { content: text, add_special: false };
      if (selectedModel) body.model = selectedModel;
      const r = await fetch("/tokenize", { method: "POST", body: JSON.stringify(body),
                                           headers: authHeaders({ "Content-Type": "application/json" }) });
      if (r.status === 401) { askForKey(); return -1; }
      if (!r.ok) return -1;
      return ((await r.json()).tokens || []).length;
    } catch (e) {
      return -1;
    }
  }
  $("attach").addEventListener("change", async (ev) => {
    const files = Array.from(ev.target.files || []);
    ev.target.value = "";
    for (const f of files) {
      if (f.size > MAX_ATTACH_BYTES) { showNotice(f.name + " is larger than " + (MAX_ATTACH_BYTES >> 10) + " KiB"); continue; }
      const text = await f.text();
      if (text.includes("\u0000")) { showNotice(f.name + " is not a text file"); continue; }
      const entry = { name: f.name, text, tokens: null };
      attachments.push(entry);
      renderAttachments();
      entry.tokens = await countTokens(userContent({ content: "", files: [entry] }));
      renderAttachments();
    }
  });

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
    $("attach").disabled = generating;
    document.querySelectorAll("#presets button, #models button, #conversations button, .msg-actions .act").forEach((b) => {
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
  let gen = null; // {msg, el, cont, raf, t0, n, calls}

  /* The messages of a request that answers msg (its history: the active path before it; with cont,
   * msg itself too, to be continued), system prompt first. */
  function historyFor(msg, cont) {
    const msgs = [];
    const s = effective();
    if (String(s.system).trim()) msgs.push({ role: "system", content: s.system });
    for (const m of current.messages) {
      if (m === msg && !cont) break;
      if (m.role === "user") msgs.push({ role: "user", content: userContent(m) });
      else if (m.role === "assistant") msgs.push({ role: "assistant", content: R.splitReasoning(m.content).content });
      if (m === msg) break;
    }
    return msgs;
  }

  function send() {
    const text = $("prompt").value;
    if ((!text.trim() && !attachments.length) || conn.state !== "connected") return;
    if (attachments.some((f) => f.tokens === null)) return showNotice("Still counting the attached files' tokens.", true);
    if (!current) current = newConversation();
    const path = current.messages;
    const parent = path.length ? path[path.length - 1].id : null;
    const files = attachments.map((f) => ({ name: f.name, text: f.text, tokens: f.tokens }));
    const user = T.append(current, parent, { role: "user", content: text, files: files.length ? files : undefined,
                                             ts: Date.now() });
    const asst = T.append(current, user.id, { role: "assistant", content: "", ts: Date.now() });
    $("prompt").value = "";
    attachments = [];
    renderAttachments();
    generate(asst, false);
  }

  /* Generates into assistant message msg (on the active path): a new answer, or with cont the rest of
   * msg's text. Shows the conversation, then streams over /ws, /api/stream or (tools) the OpenAI route. */
  function generate(msg, cont) {
    const req = O.buildRequest(effective(), historyFor(msg, cont), selectedModel, cont);
    if (req.error) {
      if (!cont && !msg.content) { // nothing was generated: drop the empty answer again
        const p = msg.parent ? current.nodes[msg.parent] : null;
        const list = p ? p.children : current.roots;
        list.splice(list.indexOf(msg.id), 1);
        delete current.nodes[msg.id];
        if (p) p.sel = Math.max(0, list.length - 1);
        T.sync(current);
      }
      renderMessages();
      return showNotice(req.error);
    }
    current.model = selectedModel;
    lastRequest = JSON.parse(JSON.stringify(req));
    msg.json_mode = !!effective().json_mode && !(req.body.tools && req.body.tool_choice === "required");
    delete msg.error;
    delete msg.finish_reason;
    renderMessages();
    const el = messagesEl.querySelector('.msg[data-id="' + msg.id + '"]');
    el.classList.add("streaming");
    stickToBottom = true;
    autoScroll();
    saveCurrent();
    gen = { msg, el, cont, raf: 0, t0: performance.now(), n: 0, calls: [] };
    setState("generating");
    $("tps").textContent = "0.0 tok/s";
    if (req.route === "openai") streamOpenAI(req.body);
    else if (conn.transport === "ws" && conn.ws && conn.ws.readyState === WebSocket.OPEN)
      conn.ws.send(JSON.stringify({ type: "inference", payload: req.body }));
    else streamSse(req.body);
  }

  function scheduleRender() {
    if (gen.raf) return;
    gen.raf = requestAnimationFrame(() => {
      if (!gen) return;
      gen.raf = 0;
      renderAssistant(gen.el, gen.msg, false); // highlighting once, at the end
      autoScroll();
    });
  }

  function onToken(token, tps, reasoning) {
    if (!gen) return;
    gen.msg.content += token;
    if (reasoning) gen.msg.reasoning = (gen.msg.reasoning || "") + reasoning;
    gen.n++;
    if (typeof tps === "number" && tps > 0) {
      gen.msg.tokens_per_sec = tps;
      $("tps").textContent = tps.toFixed(1) + " tok/s";
    }
    scheduleRender();
  }

  /* Ends the running generation: info {finish_reason, tokens_per_sec, usage, ttft_ms, error}. */
  let finished = 0; // generations ended (for the UI tests: a short one can start and end between two looks)
  function finishGeneration(info) {
    if (!gen) return;
    const g = gen;
    gen = null;
    finished++;
    if (g.raf) cancelAnimationFrame(g.raf);
    if (info.finish_reason) g.msg.finish_reason = info.finish_reason;
    if (info.tokens_per_sec) g.msg.tokens_per_sec = info.tokens_per_sec;
    if (info.usage) {
      const u = info.usage;
      const prev = g.cont && g.msg.usage ? g.msg.usage.completion_tokens || 0 : 0;
      g.msg.usage = { prompt_tokens: u.prompt_tokens, completion_tokens: (u.completion_tokens || 0) + prev };
      const cached = u.cached_tokens !== undefined ? u.cached_tokens
        : u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : undefined;
      if (cached !== undefined) g.msg.usage.cached_tokens = cached;
    }
    if (typeof info.ttft_ms === "number") g.msg.ttft_ms = info.ttft_ms;
    else if (g.n && !g.cont) g.msg.ttft_ms = g.ttft_ms;
    if (g.calls.length) g.msg.tool_calls = g.calls.filter(Boolean);
    if (info.error) g.msg.error = info.error;
    if (conn.sseAbort) conn.sseAbort = null;
    saveCurrent();
    if (conn.state === "generating") setState("connected");
    renderMessages();
    if (g.msg.tokens_per_sec) $("tps").textContent = g.msg.tokens_per_sec.toFixed(1) + " tok/s";
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
      if (!p.complete) onToken(p.token || "", p.tokens_per_sec, p.reasoning);
      else finishGeneration(p);
    } else if (m.type === "error") {
      if (p.code === "UNAUTHORIZED") {
        askForKey(p.message);
        return;
      }
      if (gen) finishGeneration({ error: (p.code || "ERROR") + ": " + (p.message || "") });
      else showNotice((p.code || "error") + ": " + (p.message || ""));
    }
  }

  /* POSTs body to url and hands each SSE `data:` JSON object to onData. Resolves when the stream ends;
   * errors (HTTP, connection) end the generation. */
  async function fetchSse(url, body, onData) {
    const ctrl = new AbortController();
    conn.sseAbort = ctrl;
    try {
      const r = await fetch(url, { method: "POST", body: JSON.stringify(body), signal: ctrl.signal,
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
            onData(j);
          }
        }
      }
      finishGeneration({});
    } catch (e) {
      if (ctrl.signal.aborted) finishGeneration({ finish_reason: "cancelled" });
      else {
        finishGeneration({ error: "connection lost" });
        if (url === "/api/stream") lostConnection();
      }
    }
  }

  function streamSse(payload) {
    return fetchSse("/api/stream", payload, (j) => {
      if (j.error) finishGeneration({ error: j.error.code + ": " + j.error.message });
      else if (!j.complete) onToken(j.token || "", j.tokens_per_sec, j.reasoning);
      else finishGeneration(j);
    });
  }

  /* /v1/chat/completions, streamed: content and reasoning_content deltas, tool calls (assembled by
   * index), the finish reason, then usage (stream_options.include_usage). Speed and time to first
   * token are measured here. */
  function streamOpenAI(body) {
    let finish = null, first = 0;
    return fetchSse("/v1/chat/completions", body, (j) => {
      if (!gen) return;
      if (j.error) return finishGeneration({ error: (j.error.code || "error") + ": " + j.error.message });
      const ch = j.choices && j.choices[0];
      if (ch) {
        const d = ch.delta || {};
        if (d.content || d.reasoning_content) {
          if (!first) { first = performance.now(); gen.ttft_ms = first - gen.t0; }
          const dt = (performance.now() - first) / 1000;
          onToken(d.content || "", dt > 0 ? gen.n / dt : 0, d.reasoning_content || "");
        }
        for (const tc of d.tool_calls || []) {
          const k = typeof tc.index === "number" ? tc.index : gen.calls.length;
          const c = gen.calls[k] || (gen.calls[k] = { name: "", arguments: "" });
          if (tc.function && tc.function.name) c.name = tc.function.name;
          if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
          if (!first) { first = performance.now(); gen.ttft_ms = first - gen.t0; }
          gen.msg.tool_calls = gen.calls.filter(Boolean);
          scheduleRender();
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      if (j.usage) finishGeneration({ finish_reason: finish, usage: j.usage, ttft_ms: gen.ttft_ms,
                                      tokens_per_sec: gen.msg.tokens_per_sec });
    });
  }

  function stop() {
    if (conn.state !== "generating") return;
    if (conn.sseAbort) {
      conn.sseAbort.abort(); // the server cancels when its next token write fails
    } else if (conn.transport === "ws" && conn.ws && conn.ws.readyState === WebSocket.OPEN) {
      conn.ws.send(JSON.stringify({ type: "stop" })); // the server answers with finish_reason "cancelled"
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
      lines.push(m.role === "user" ? userContent(m) : m.content, "");
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
             JSON.stringify({ format: "quarrel.conversations", version: 2, conversations: conversations.map(exported) },
                            null, 2));
  });

  /* A conversation as exported: its tree (branches) plus the active path as plain {role, content}
   * messages, which older versions and other tools read. */
  function exported(c) {
    return Object.assign(T.stored(c), { messages: c.messages.map((m) => ({
      role: m.role, content: m.role === "user" ? userContent(m) : m.content })) });
  }
  const ROLES = ["user", "assistant", "system"];
  /* A stored tree's nodes, keeping only well-formed fields; null when there is none. */
  function importedNodes(nodes) {
    if (!nodes || typeof nodes !== "object") return null;
    const out = Object.create(null);
    for (const [id, n] of Object.entries(nodes)) {
      if (!/^[\w-]{1,64}$/.test(id) || !n || typeof n.content !== "string" || !ROLES.includes(n.role) || !Array.isArray(n.children)) return null;
      const files = Array.isArray(n.files) ? n.files.filter((f) => f && typeof f.name === "string" &&
        typeof f.text === "string").map((f) => ({ name: f.name, text: f.text, tokens: Number(f.tokens) || undefined })) : [];
      out[id] = { id, parent: typeof n.parent === "string" ? n.parent : null, children: n.children.map(String),
                  sel: Number(n.sel) | 0, role: n.role, content: n.content, files: files.length ? files : undefined,
                  finish_reason: typeof n.finish_reason === "string" ? n.finish_reason : undefined };
    }
    return out;
  }

  /* Accepts {conversations: [...]}, a list of conversations, or one conversation (with its tree, or
   * just its messages). */
  function importConversations(data) {
    const list = Array.isArray(data) ? data : Array.isArray(data.conversations) ? data.conversations : [data];
    let n = 0;
    for (const c of list) {
      if (!c || (!Array.isArray(c.messages) && !c.nodes)) continue;
      const msgs = (Array.isArray(c.messages) ? c.messages : []).filter((m) => m && typeof m.content === "string" &&
                                            ["user", "assistant", "system"].includes(m.role))
        .map((m) => ({ role: m.role, content: m.content }));
      const conv = newConversation();
      conv.title = typeof c.title === "string" && c.title.trim() ? c.title.slice(0, 120) : "Imported chat";
      conv.model = typeof c.model === "string" ? c.model : "";
      conv.created = Number(c.created) || Date.now();
      conv.updated = Date.now() + n; // newest first, in file order
      conv.nodes = importedNodes(c.nodes);
      conv.roots = Array.isArray(c.roots) ? c.roots.map(String) : null;
      conv.rootSel = Number(c.rootSel) | 0;
      conv.messages = msgs;
      T.normalize(conv);
      if (c.settings && typeof c.settings === "object") {
        conv.settings = Object.assign({}, DEFAULTS);
        for (const k of Object.keys(O.FIELDS)) {
          const v = c.settings[k] === undefined ? undefined : O.parseField(k, c.settings[k]);
          if (v !== undefined) conv.settings[k] = v;
        }
      }
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
  /* The settings dialog edits the global settings, or the open conversation's own ones when "For this
   * conversation only" is ticked (they then travel with the conversation). */
  function editedSettings() { return current && current.settings ? current.settings : settings; }
  function persistSettings() {
    if (current && current.settings) saveCurrent(); else save(KEYS.settings, settings);
  }
  function showSettings() {
    const s = editedSettings();
    for (const [k, f] of Object.entries(O.FIELDS)) {
      if (f.kind === "bool") $(f.id).checked = !!s[k];
      else $(f.id).value = s[k];
    }
    $("out-temperature").textContent = Number(s.temperature).toFixed(2);
    $("out-top-k").textContent = s.top_k;
    $("out-top-p").textContent = Number(s.top_p).toFixed(2);
    $("out-min-p").textContent = Number(s.min_p).toFixed(2);
    $("set-per-conv").checked = !!(current && current.settings);
    const t = O.parseTools(s.tools);
    $("settings-error").hidden = !t.error;
    $("settings-error").textContent = t.error || "";
  }
  for (const [k, f] of Object.entries(O.FIELDS)) {
    $(f.id).addEventListener(f.kind === "bool" || f.kind === "choice" ? "change" : "input", () => {
      const el = $(f.id);
      const v = O.parseField(k, f.kind === "bool" ? el.checked : el.value);
      if (v === undefined) return;
      editedSettings()[k] = v;
      persistSettings();
      if (f.kind !== "text") showSettings(); // (a text field keeps its caret)
      else if (k === "tools") {
        const t = O.parseTools(v);
        $("settings-error").hidden = !t.error;
        $("settings-error").textContent = t.error || "";
      }
    });
  }
  $("set-per-conv").addEventListener("change", () => {
    if (!current) current = newConversation();
    if ($("set-per-conv").checked) current.settings = Object.assign({}, settings);
    else delete current.settings;
    if (current.messages.length) saveCurrent();
    showSettings();
  });
  $("set-preset").addEventListener("change", () => {
    const p = O.PRESETS[$("set-preset").value];
    if (!p) return;
    Object.assign(editedSettings(), p);
    persistSettings();
    showSettings();
  });
  $("settings-reset").addEventListener("click", () => {
    if (current && current.settings) current.settings = Object.assign({}, DEFAULTS);
    else settings = Object.assign({}, DEFAULTS);
    persistSettings();
    showSettings();
  });
  $("settings-open").addEventListener("click", () => {
    showSettings();
    $("set-preset").value = "";
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
  renderAttachments();
  setState("disconnected");
  /* /healthz (public) says whether the API needs a key: if it does and none is known, ask for it
   * before any API call (no request is refused with a 401 first). */
  fetch("/healthz", { cache: "no-store" }).then((r) => r.json()).then((j) => {
    authRequired = !!(j && j.auth);
  }).catch(() => { /* connect() finds out */ }).finally(() => {
    if (authRequired && !apiKey) askForKey("This server needs an API key.");
    else connect();
  });

  // A small read-only view for the UI tests (selenium): state, not behaviour.
  window.quarrelUI = Object.freeze({
    state: () => conn.state,
    transport: () => conn.transport,
    history: () => connHistory.slice(),
    libraries: () => R.libraries(),
    markdown: (c) => conversationMarkdown(c || current),
    lastRequest: () => (lastRequest ? JSON.parse(JSON.stringify(lastRequest)) : null),
    conversation: () => (current ? JSON.parse(JSON.stringify(T.stored(current))) : null),
    authRequired: () => authRequired,
    generations: () => finished,
  });
})();
