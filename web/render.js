/* render.js — how the web UI shows model output: Markdown (marked, GFM tables and task lists) with
 * highlight.js, math (KaTeX: $..$, \(..\), $$..$$, \[..\]), copy buttons on code blocks, and the
 * reasoning section (<think>..</think>) split from the answer. Everything the model wrote passes our
 * allowlist sanitizer (and DOMPurify when present) before it reaches the page; KaTeX then builds its
 * nodes from the TeX source itself (never from model HTML), through the DOM, which the CSP allows.
 * Loaded before app.js; exposes window.QuarrelRender. */
"use strict";

window.QuarrelRender = (function () {
  const ALLOWED_TAGS = new Set(["P", "BR", "HR", "H1", "H2", "H3", "H4", "H5", "H6", "STRONG", "EM", "B", "I", "DEL",
    "S", "CODE", "PRE", "BLOCKQUOTE", "UL", "OL", "LI", "A", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "SPAN",
    "DIV", "SUP", "SUB", "KBD"]);
  // removed together with everything inside them
  const DROPPED_TAGS = new Set(["SCRIPT", "STYLE", "IFRAME", "FRAME", "FRAMESET", "OBJECT", "EMBED", "APPLET", "SVG",
    "MATH", "TEMPLATE", "FORM", "INPUT", "BUTTON", "TEXTAREA", "SELECT", "OPTION", "LINK", "META", "BASE", "NOSCRIPT",
    "AUDIO", "VIDEO", "SOURCE", "TRACK", "CANVAS", "PORTAL", "DIALOG", "TITLE", "HEAD"]);
  const ALLOWED_ATTRS = { A: ["href", "title"], SPAN: ["class", "aria-label"], CODE: ["class"], PRE: ["class"],
    TH: ["align"], TD: ["align"], OL: ["start"] };
  // highlight.js and marked classes, and the task-list boxes made below
  const ALLOWED_CLASS = /^(hljs[\w-]*|language-[\w+#-]+|task-box|task-done)$/;

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

  /* A GFM task-list checkbox (<input type=checkbox>, which the sanitizer never lets through) as text:
   * a span "☑" / "☐" that screen readers read as done / not done. */
  function taskBox(input) {
    const done = input.hasAttribute("checked");
    const s = document.createElement("span");
    s.className = done ? "task-box task-done" : "task-box";
    s.setAttribute("aria-label", done ? "done" : "not done");
    s.textContent = done ? "☑" : "☐";
    return s;
  }

  /* Our allowlist sanitizer (always applied; DOMPurify, when present, then checks its output, so that
   * it never parses hostile markup itself: its DOMParser trips CSP reports). Parses html in an
   * inert <template> (no script runs, no image loads) and returns a DocumentFragment that keeps only
   * ALLOWED_TAGS with their ALLOWED_ATTRS; other elements are unwrapped (their text stays), and
   * DROPPED_TAGS vanish with their contents. Images become their alt text, task-list checkboxes
   * a ☑ / ☐ span. */
  function sanitize(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    const walk = (parent) => {
      for (const node of Array.from(parent.childNodes)) {
        if (node.nodeType === Node.TEXT_NODE) continue;
        if (node.nodeType !== Node.ELEMENT_NODE) { node.remove(); continue; }
        const tag = node.tagName.toUpperCase();
        if (tag === "INPUT" && String(node.getAttribute("type")).toLowerCase() === "checkbox" &&
            node.parentElement && node.parentElement.tagName === "LI") {
          node.replaceWith(taskBox(node));
          continue;
        }
        if (DROPPED_TAGS.has(tag)) { node.remove(); continue; }
        if (tag === "IMG") { node.replaceWith(document.createTextNode(node.getAttribute("alt") || "")); continue; }
        walk(node);
        if (!ALLOWED_TAGS.has(tag)) { node.replaceWith(...Array.from(node.childNodes)); continue; }
        const keep = ALLOWED_ATTRS[tag] || [];
        for (const attr of Array.from(node.attributes)) {
          if (!keep.includes(attr.name.toLowerCase())) node.removeAttribute(attr.name);
        }
        if (node.hasAttribute("class")) {
          const cls = node.getAttribute("class").split(/\s+/).filter((c) => ALLOWED_CLASS.test(c));
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
  const haveKatex = () => typeof window.katex === "object" && typeof window.katex.render === "function";

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

  /* ---------------------------------------------------------------- math */
  const MATH_MARK = "QRMATHX"; // placeholder text: MATH_MARK + index + "X" (letters and digits: Markdown leaves it)
  const MATH_RE = new RegExp(MATH_MARK + "(\\d+)X", "g");
  // code spans and fences keep their dollars
  const CODE_RE = /(```[\s\S]*?(?:```|$)|~~~[\s\S]*?(?:~~~|$)|`[^`\n]*`)/;
  const MATH_PATTERNS = [
    [/\$\$([\s\S]+?)\$\$/g, true],
    [/\\\[([\s\S]+?)\\\]/g, true],
    [/\\\(([\s\S]+?)\\\)/g, false],
    // $x$: no space just inside the dollars, no digit or letter after (so "$5 and $6" stays text)
    [/\$(?=[^\s$])((?:\\\$|[^$\n])*?[^\s\\$])\$(?![\w$])/g, false],
  ];

  /* Replaces the math of text (outside code) by placeholders; returns {text, math: [{tex, display, src}]}. */
  function extractMath(text) {
    const math = [];
    const parts = text.split(CODE_RE);
    for (let i = 0; i < parts.length; i += 2) { // odd parts are code
      for (const [re, display] of MATH_PATTERNS) {
        parts[i] = parts[i].replace(re, (src, tex) => {
          math.push({ tex, display, src });
          const mark = MATH_MARK + (math.length - 1) + "X";
          return display ? "\n\n" + mark + "\n\n" : mark;
        });
      }
    }
    return { text: parts.join(""), math };
  }

  /* Puts the math back into the rendered fragment: KaTeX output where KaTeX is loaded and the TeX
   * parses, the source text elsewhere (inside code, without KaTeX, a TeX error: marked math-error). */
  function restoreMath(root, math) {
    if (!math.length) return;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const hits = [];
    for (let n = walker.nextNode(); n; n = walker.nextNode()) if (n.nodeValue.includes(MATH_MARK)) hits.push(n);
    for (const node of hits) {
      const inCode = node.parentElement && node.parentElement.closest("code, pre");
      const out = [];
      let last = 0;
      node.nodeValue.replace(MATH_RE, (mark, idx, at) => {
        if (at > last) out.push(document.createTextNode(node.nodeValue.slice(last, at)));
        last = at + mark.length;
        const m = math[Number(idx)];
        if (!m) { out.push(document.createTextNode(mark)); return mark; }
        if (inCode || !haveKatex()) { out.push(document.createTextNode(m.src)); return mark; }
        const box = document.createElement(m.display ? "div" : "span");
        box.className = m.display ? "math math-display" : "math math-inline";
        try { // (KaTeX's own error node carries a style attribute, which the CSP refuses: ours instead)
          window.katex.render(m.tex, box, { displayMode: m.display, throwOnError: true, output: "html", trust: false,
                                           maxExpand: 1000, maxSize: 50 });
        } catch (e) {
          box.className += " math-error";
          box.title = String(e && e.message || e);
          box.textContent = m.src;
        }
        out.push(box);
        return mark;
      });
      if (last < node.nodeValue.length) out.push(document.createTextNode(node.nodeValue.slice(last)));
      // a display formula alone in its paragraph replaces the paragraph
      const p = node.parentElement;
      if (p && p.tagName === "P" && p.childNodes.length === 1 && out.length === 1 && out[0].tagName === "DIV") p.replaceWith(out[0]);
      else node.replaceWith(...out);
    }
  }

  /* ---------------------------------------------------------------- copy */
  /* Puts text on the clipboard: the async Clipboard API, else a hidden textarea and execCommand.
   * Resolves true when one of them reported success. */
  async function copyText(text) {
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (e) { /* fall through */ }
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.className = "offscreen";
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    ta.remove();
    return ok;
  }

  /* A "Copy" button whose click copies text() and says "Copied" for a moment. */
  function copyButton(label, text) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "copy-btn";
    b.textContent = "Copy";
    b.setAttribute("aria-label", label);
    b.addEventListener("click", async (ev) => {
      ev.stopPropagation();
      const ok = await copyText(text());
      b.textContent = ok ? "Copied" : "Copy failed";
      b.dataset.copied = ok ? "true" : "false";
      setTimeout(() => { b.textContent = "Copy"; }, 1500);
    });
    return b;
  }

  function addCodeCopyButtons(el) {
    for (const pre of el.querySelectorAll("pre")) {
      if (pre.parentElement && pre.parentElement.classList.contains("code-wrap")) continue;
      const wrap = document.createElement("div");
      wrap.className = "code-wrap";
      pre.replaceWith(wrap);
      wrap.append(pre, copyButton("Copy code", () => pre.textContent.replace(/\n$/, "")));
    }
  }

  /* ---------------------------------------------------------------- markdown */
  /* Renders model output into el: math placeholders, markdown -> HTML (marked, with highlight.js when
   * `highlight`), sanitized by sanitize() and then DOMPurify (if present), math back in (KaTeX), copy
   * buttons on code blocks. Without marked the text is shown as plain text. Never assigns
   * unsanitized HTML to a live element. */
  function renderMarkdown(el, text, highlight) {
    if (!haveMarked()) {
      el.classList.add("plain");
      el.textContent = text;
      return;
    }
    let html, math;
    try {
      setupMarked();
      const ex = extractMath(text);
      math = ex.math;
      html = window.marked.parse(ex.text, { gfm: true, breaks: false, headerIds: false, mangle: false,
                                            langPrefix: "hljs language-", highlight: highlight ? highlightCode : null });
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
    restoreMath(frag, math);
    el.replaceChildren(frag);
    addCodeCopyButtons(el);
  }

  /* ---------------------------------------------------------------- reasoning */
  const THINK_OPEN = "<think>", THINK_CLOSE = "</think>";
  /* Splits a reply into {reasoning, content, thinking}: the text of a leading <think>..</think>
   * section (or everything before a </think> that closes a section the prompt opened) and the answer
   * after it; thinking = the section is still open (the reply is all reasoning so far). */
  function splitReasoning(text) {
    const t = String(text || "");
    const lead = t.length - t.trimStart().length;
    const close = t.indexOf(THINK_CLOSE);
    if (t.startsWith(THINK_OPEN, lead)) {
      const body = lead + THINK_OPEN.length;
      if (close < 0) return { reasoning: t.slice(body).trim(), content: "", thinking: true };
      return { reasoning: t.slice(body, close).trim(), content: t.slice(close + THINK_CLOSE.length).trimStart(),
               thinking: false };
    }
    if (close >= 0 && t.lastIndexOf(THINK_OPEN, close) < 0)
      return { reasoning: t.slice(0, close).trim(), content: t.slice(close + THINK_CLOSE.length).trimStart(),
               thinking: false };
    return { reasoning: "", content: t, thinking: false };
  }

  return Object.freeze({
    sanitize, renderMarkdown, splitReasoning, copyText, copyButton, escapeHtml,
    libraries: () => ({ marked: haveMarked(), highlight: haveHljs(), purify: havePurify(), katex: haveKatex() }),
  });
})();
