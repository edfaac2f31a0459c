/* options.js — the web UI's generation settings: every sampler field the API takes (temperature,
 * top-k, top-p, min-p, repeat / presence / frequency penalties, seed, stop strings, max tokens), the
 * system prompt, JSON mode and tools; the built-in sampler presets; and the request bodies built
 * from them (our /ws and /api/stream body, or /v1/chat/completions when tools are set). No DOM.
 * Loaded before app.js; exposes window.QuarrelOptions. */
"use strict";

window.QuarrelOptions = (function () {
  const DEFAULTS = Object.freeze({
    temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1.0, repeat_last_n: 64,
    presence_penalty: 0, frequency_penalty: 0, seed: "", stop: "", max_tokens: 512, system: "",
    json_mode: false, tools: "", tool_choice: "auto",
  });

  /* key -> {id of the settings field, kind (num | int | text | bool | choice), min, max} */
  const FIELDS = {
    temperature: { id: "set-temperature", kind: "num", min: 0, max: 2 },
    top_k: { id: "set-top-k", kind: "int", min: 0, max: 1000 },
    top_p: { id: "set-top-p", kind: "num", min: 0, max: 1 },
    min_p: { id: "set-min-p", kind: "num", min: 0, max: 1 },
    repeat_penalty: { id: "set-repeat-penalty", kind: "num", min: 0.01, max: 3 },
    repeat_last_n: { id: "set-repeat-last-n", kind: "int", min: -1, max: 32768 },
    presence_penalty: { id: "set-presence-penalty", kind: "num", min: -2, max: 2 },
    frequency_penalty: { id: "set-frequency-penalty", kind: "num", min: -2, max: 2 },
    seed: { id: "set-seed", kind: "text" }, // "" = random; else an integer
    stop: { id: "set-stop", kind: "text" }, // one stop string per line
    max_tokens: { id: "set-max-tokens", kind: "int", min: 1, max: 32768 },
    system: { id: "set-system", kind: "text" },
    json_mode: { id: "set-json-mode", kind: "bool" },
    tools: { id: "set-tools", kind: "text" }, // a JSON array of OpenAI tool definitions
    tool_choice: { id: "set-tool-choice", kind: "choice" },
  };

  /* Sampler presets: the fields they set (the rest stays as it is). */
  const PRESETS = Object.freeze({
    balanced: { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1.0, presence_penalty: 0,
                frequency_penalty: 0, seed: "" },
    precise: { temperature: 0.2, top_k: 20, top_p: 0.9, min_p: 0.1, repeat_penalty: 1.05, presence_penalty: 0,
               frequency_penalty: 0, seed: "" },
    creative: { temperature: 1.1, top_k: 100, top_p: 0.98, min_p: 0.02, repeat_penalty: 1.1, presence_penalty: 0.3,
                frequency_penalty: 0.2, seed: "" },
    deterministic: { temperature: 0, top_k: 1, top_p: 1, min_p: 0, repeat_penalty: 1.0, presence_penalty: 0,
                     frequency_penalty: 0, seed: "42" },
  });

  /* The value typed into field key, checked and clamped; undefined when it is not usable (kept as it was). */
  function parseField(key, raw) {
    const f = FIELDS[key];
    if (f.kind === "bool") return !!raw;
    if (f.kind === "text" || f.kind === "choice") {
      if (key === "seed" && String(raw).trim() !== "" && !/^-?\d{1,18}$/.test(String(raw).trim())) return undefined;
      return key === "seed" ? String(raw).trim() : String(raw);
    }
    let v = Number(raw);
    if (raw === "" || !Number.isFinite(v)) return undefined;
    if (f.kind === "int") v = Math.round(v);
    return Math.max(f.min, Math.min(f.max, v));
  }

  /* The parsed tools setting: {tools: [...]} or {error} (null tools when the field is empty). */
  function parseTools(text) {
    if (!String(text || "").trim()) return { tools: null };
    try {
      const t = JSON.parse(text);
      const list = Array.isArray(t) ? t : [t];
      for (const x of list) {
        if (!x || typeof x !== "object") throw new Error("each tool must be an object");
        const fn = x.function || x;
        if (typeof fn.name !== "string" || !fn.name) throw new Error("each tool needs a function name");
      }
      return { tools: list.map((x) => (x.function ? x : { type: "function", function: x })) };
    } catch (e) {
      return { error: "Tools: " + e.message };
    }
  }

  /* The sampler fields of a request body from settings s. */
  function samplerFields(s) {
    const p = {
      temperature: Number(s.temperature), top_k: Number(s.top_k), top_p: Number(s.top_p), min_p: Number(s.min_p),
      repeat_penalty: Number(s.repeat_penalty), repeat_last_n: Number(s.repeat_last_n),
      presence_penalty: Number(s.presence_penalty), frequency_penalty: Number(s.frequency_penalty),
      max_tokens: Number(s.max_tokens),
    };
    if (String(s.seed).trim() !== "") p.seed = Number(s.seed);
    const stops = String(s.stop || "").split("\n").filter((x) => x.length).slice(0, 16);
    if (stops.length) p.stop = stops;
    return p;
  }

  /* The request for messages (already [{role, content}], system message first when set) under settings s:
   * {route: "native" | "openai", body}; or {error}. native = the /ws inference payload and /api/stream
   * body (JSON mode as json_schema {"type": "object"}); openai = /v1/chat/completions, streamed, for
   * tools (response_format json_object in JSON mode). cont: continue the last (assistant) message. */
  function buildRequest(s, messages, model, cont) {
    const t = parseTools(s.tools);
    if (t.error) return { error: t.error };
    const body = Object.assign({ messages }, samplerFields(s));
    if (model) body.model = model;
    if (t.tools && !cont) {
      body.tools = t.tools;
      body.tool_choice = s.tool_choice || "auto";
      body.stream = true;
      body.stream_options = { include_usage: true };
      if (s.json_mode && body.tool_choice !== "required") body.response_format = { type: "json_object" };
      return { route: "openai", body };
    }
    body.stream = true;
    if (s.json_mode && !cont) body.json_schema = { type: "object" }; // (a continued reply is mid-way: no grammar)
    if (cont) body.continue_final_message = true;
    return { route: "native", body };
  }

  return Object.freeze({ DEFAULTS, FIELDS, PRESETS, parseField, parseTools, buildRequest });
})();
