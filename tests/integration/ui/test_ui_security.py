"""Web UI security (acceptance 3 and 4): the CSP header on every asset forbids inline script and the
browser enforces it; the page loads without console errors; model output holding <script>,
<img onerror> and javascript: links executes nothing; the API key prompt when auth is on."""
import json
import re
import subprocess

import requests

from ui_helpers import MODEL_NAME, Page, Server, write_json

ASSETS = {"/": "text/html", "/index.html": "text/html", "/app.js": "text/javascript", "/style.css": "text/css",
          "/vendor/marked.min.js": "text/javascript", "/vendor/highlight.min.js": "text/javascript",
          "/vendor/purify.min.js": "text/javascript", "/vendor/hljs-light.css": "text/css",
          "/vendor/hljs-dark.css": "text/css", "/render.js": "text/javascript", "/tree.js": "text/javascript",
          "/options.js": "text/javascript", "/vendor/katex.min.js": "text/javascript",
          "/vendor/katex.min.css": "text/css", "/vendor/fonts/KaTeX_Main-Regular.woff2": "font/woff2"}


def csp_directives(header):
    return {d.split()[0]: d.split()[1:] for d in (x.strip() for x in header.split(";")) if d}


def test_assets_served_with_strict_csp(server):
    for path, ctype in ASSETS.items():
        r = requests.get(server.url + path, timeout=10)
        assert r.status_code == 200, path
        assert r.headers["Content-Type"].startswith(ctype), (path, r.headers["Content-Type"])
        assert len(r.content) > 0
        csp = csp_directives(r.headers["Content-Security-Policy"])
        assert csp["script-src"] == ["'self'"], csp  # no 'unsafe-inline', no 'unsafe-eval', no hosts
        assert csp["default-src"] == ["'none'"] and csp["object-src"] == ["'none'"]
        assert csp["style-src"] == ["'self'"] and csp["connect-src"] == ["'self'"]
        assert csp["base-uri"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
        assert r.headers["X-Content-Type-Options"] == "nosniff"
    # the page itself holds no inline script, no event-handler attributes, no inline styles
    html = requests.get(server.url + "/", timeout=10).text
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert re.findall(r"\son[a-z]+\s*=", html) == []
    assert re.findall(r"\sstyle\s*=", html) == []
    # the API stays JSON (no UI headers) and unknown paths are still 404
    assert requests.get(server.url + "/nope.js", timeout=10).status_code == 404
    assert "Content-Security-Policy" not in requests.get(server.url + "/healthz", timeout=10).headers
    assert requests.post(server.url + "/", timeout=10).status_code == 405


def test_page_loads_without_console_errors(page):
    page.open()
    assert page.js("return quarrelUI.libraries()") == {"marked": True, "highlight": True, "purify": True, "katex": True}
    page.wait(lambda: page.els("#models .model"))
    page.el("#settings-open").click()
    page.el("#settings-close").click()
    page.el("#theme-toggle").click()
    page.el("#theme-toggle").click()
    assert page.console_errors() == []


def test_browser_enforces_csp(page):
    page.open()
    page.console_errors()
    # a script element with inline text, added at run time, must not run
    page.js("const s = document.createElement('script'); s.textContent = 'window.__inline = 1';"
            "document.body.append(s);"
            "const d = document.createElement('div'); d.innerHTML = '<img src=x onerror=\"window.__inline2 = 1\">';"
            "document.body.append(d);")
    page.wait(lambda: len(page.js("return document.querySelectorAll('img[src=x]')")) == 1)
    assert page.js("return [window.__inline, window.__inline2]") == [None, None]
    errors = " ".join(e["message"] for e in page.console_errors())
    assert "Content Security Policy" in errors  # refused by the policy, not by chance
    page.d.refresh()  # leave a clean page behind


XSS = [
    "<script>window.__xss = 'script'</script>",
    "<img src=x onerror=\"window.__xss = 'img'\">",
    "[click me](javascript:window.__xss='md-link')",
    "[upper](JAVASCRIPT:window.__xss='upper')",
    "[spaced]( javascript:window.__xss='spaced')",
    "<a href=\"javascript:window.__xss='a'\">raw link</a>",
    "<a href=\"jav&#x09;ascript:window.__xss='entity'\">entity link</a>",
    "<svg onload=\"window.__xss='svg'\"><circle r=5></circle></svg>",
    "<iframe srcdoc=\"<script>parent.__xss='iframe'</script>\"></iframe>",
    "<details open ontoggle=\"window.__xss='details'\">x</details>",
    "<p style=\"background:url(javascript:window.__xss='style')\" onclick=\"window.__xss='click'\">para</p>",
    "<form action=\"javascript:window.__xss='form'\"><button>go</button></form>",
    "![alt text](javascript:window.__xss='image')",
    "```html\n<script>window.__xss='code'</script>\n```",
    "<math><mtext><table><mglyph><style><img src=x onerror=\"window.__xss='mxss'\">",
]


def test_model_output_cannot_inject_script(page, tmp_path):
    """Assistant messages go through the renderer whether they stream in or come back from storage;
    an imported conversation puts exact hostile text through that same path."""
    page.open()
    messages = []
    for x in XSS:
        messages += [{"role": "user", "content": "show " + x}, {"role": "assistant", "content": "Here:\n\n" + x}]
    page.el("#import-json").send_keys(write_json(tmp_path / "xss.json", {"conversations": [
        {"title": "hostile", "model": MODEL_NAME, "messages": messages}]}))
    page.wait(lambda: len(page.els("#messages .msg")) == len(messages))
    for a in page.els("#messages .msg.assistant a"):
        a.click()  # a javascript: link that survived would run now
    page.js("document.querySelectorAll('#messages *').forEach(e => e.dispatchEvent(new Event('toggle')))")
    page.d.execute_async_script("setTimeout(arguments[0], 300)")
    assert page.js("return window.__xss") is None
    bad = page.js("""const out = [];
      for (const e of document.querySelectorAll('#messages .msg.assistant .content *')) {
        if (/^(SCRIPT|IFRAME|SVG|MATH|IMG|FORM|STYLE|OBJECT|EMBED)$/i.test(e.tagName)) out.push(e.tagName);
        for (const a of e.attributes) {
          if (/^on/i.test(a.name) || a.name === 'style' || a.name === 'srcdoc') out.push(e.tagName + ' ' + a.name);
          if (/^\\s*(javascript|data|vbscript):/i.test(a.value)) out.push(e.tagName + ' ' + a.name + '=' + a.value);
        }
      }
      return out;""")
    assert bad == []
    texts = page.assistant_texts()
    # the code block shows the script as text; markdown links without a safe URL keep their text only
    assert "<script>window.__xss='code'</script>" in texts[13]
    # raw HTML in model output is shown as the text it is, never parsed as markup
    assert "<script>window.__xss = 'script'</script>" in texts[0]
    assert "<img src=x onerror=\"window.__xss = 'img'\">" in texts[1]
    assert "click me" in texts[2] and page.els("#messages .msg.assistant")[2].find_elements("css selector", "a[href]") == []
    assert page.console_errors() == []  # nothing even tried to run (no CSP violation reports)
    page.el("#clear-all").click()
    page.d.switch_to.alert.accept()


def test_api_key_prompt(browser, quarrel_bin, smollm, tmp_path):
    db = str(tmp_path / "keys.db")
    r = subprocess.run([quarrel_bin, "keys", "create", "--name", "ui", "--db", db, "--json"], capture_output=True,
                       text=True, timeout=30, check=True)
    key = json.loads(r.stdout)["key"]
    s = Server(quarrel_bin, smollm, ["--api-key-db", db])
    try:
        assert requests.get(s.url + "/", timeout=5).status_code == 200  # the page is public
        assert requests.get(s.url + "/api/models", timeout=5).status_code == 401
        browser.get_log("browser")
        p = Page(browser, s.url)
        browser.get(s.url + "/")
        browser.execute_script("localStorage.clear(); sessionStorage.clear();")
        browser.get(s.url + "/")
        p.wait(lambda: p.js("return document.getElementById('key-dialog').open"), 15, "no API key prompt")
        assert p.state() == "disconnected"
        assert p.js("return quarrelUI.authRequired()") is True
        # asked before the first API call: no request was refused (a 401 logs a console error)
        assert p.console_errors() == []
        assert not [e for e in p.js("return performance.getEntriesByType('resource').map(e => e.name)")
                    if "/api/" in e or "/v1/" in e or "/ws" in e]
        p.el("#api-key").send_keys(key)
        p.el("#key-save").click()
        p.wait_state("connected")
        assert p.js("return sessionStorage.getItem('quarrel.apiKey')") == json.dumps(key)
        assert p.js("return localStorage.getItem('quarrel.apiKey')") is None
        p.wait(lambda: p.els("#models .model"))  # /api/models with the key
        p.set_settings(max_tokens=6)
        p.send("Hello")  # over /ws, the key offered as a subprotocol
        p.wait_state("generating", timeout=10)
        p.wait_state("connected", timeout=60)
        assert p.assistant_texts()[-1]
        assert p.js("return quarrelUI.transport()") == "ws"
        # a wrong key brings the prompt back
        browser.execute_script("sessionStorage.setItem('quarrel.apiKey', JSON.stringify('qr-000000000000-' + '0'.repeat(40)))")
        browser.refresh()
        p.wait(lambda: p.js("return document.getElementById('key-dialog').open"), 15, "no prompt for a bad key")
    finally:
        browser.execute_script("sessionStorage.clear(); localStorage.clear();")
        browser.get("about:blank")
        s.stop()


def test_without_marked_messages_are_plain_text(page, tmp_path):
    """A build without libjs-marked embeds a stub: the UI shows messages as plain text."""
    page.open()
    page.js("window.marked = undefined")
    page.el("#import-json").send_keys(write_json(tmp_path / "plain.json", {"title": "plain", "messages": [
        {"role": "assistant", "content": "**bold** <b>tag</b> [x](javascript:alert(1))"}]}))
    page.wait(lambda: page.els("#messages .msg.assistant .content.plain"))
    c = page.el("#messages .msg.assistant .content")
    assert c.text == "**bold** <b>tag</b> [x](javascript:alert(1))"
    assert page.js("return arguments[0].children.length", c) == 0
    page.d.refresh()
