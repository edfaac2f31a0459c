"""Web UI features of issue 38 and issue 31 item 5 against the real server on SmolLM2: copy buttons (the text
reaches the clipboard), edit + resend / regenerate as branches and switching between them, continue a cut-off
answer, KaTeX math, tables and task lists, attached files (token count from /tokenize, content in the prompt),
every sampler setting reaching the request, presets and per-conversation settings, per-answer stats, reasoning
collapsed, tool calls and JSON mode. Screenshots go to tests/artifacts/ui-feature-*.png."""
import json

import requests

from ui_helpers import ARTIFACTS, MODEL_NAME, write_json

# Reads the clipboard (the async callback gets its text, or "ERR: ...").
READ_CLIPBOARD = """
const done = arguments[arguments.length - 1];
navigator.clipboard.readText().then(done, (e) => done('ERR: ' + e));
"""


def shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.d.save_screenshot(str(ARTIFACTS / f"ui-feature-{name}.png"))


def grant_clipboard(page):
    page.d.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": page.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})


def clipboard(page):
    page.d.set_script_timeout(10)
    return page.d.execute_async_script(READ_CLIPBOARD)


def import_conv(page, tmp_path, name, messages, **extra):
    page.el("#import-json").send_keys(write_json(tmp_path / f"{name}.json", dict(title=name, messages=messages, **extra)))
    page.wait(lambda: len(page.els("#messages .msg")) == len(messages), 10, "the imported conversation is not shown")


def generation(page, action, timeout=90):
    """Runs action (which starts a generation) and waits until that generation ended and the page is idle
    (counted by the page itself: a short generation may start and end before a look at the state)."""
    n = page.js("return quarrelUI.generations()")
    action()
    page.wait(lambda: page.js("return quarrelUI.generations()") > n and page.state() == "connected", timeout,
              "the generation did not end")


def generate(page, text, timeout=90):
    generation(page, lambda: page.send(text), timeout)


def last_request(page):
    return page.js("return quarrelUI.lastRequest()")


def branch_label(page, css):
    return page.el(css + " .branch-label").text


MARKDOWN = r"""Euler: $e^{i\pi} + 1 = 0$ and the price is $5 or $6.

$$\int_0^1 x^2\,dx = \frac{1}{3}$$

| Name | Value |
|------|------:|
| alpha | 1 |
| beta | 2 |

- [x] done item
- [ ] open item

```python
print("hi $x$")
```
"""


def test_math_tables_task_lists_and_copy(page, tmp_path):
    page.open()
    grant_clipboard(page)
    import_conv(page, tmp_path, "math", [{"role": "user", "content": "Show me math"},
                                         {"role": "assistant", "content": MARKDOWN}])
    a = page.el("#messages .msg.assistant .content")
    # KaTeX rendered the inline and the display formula (built from the TeX, no raw dollars left)
    assert len(a.find_elements("css selector", ".math-inline .katex")) == 1
    assert len(a.find_elements("css selector", ".math-display .katex-display, .math-display .katex")) >= 1
    assert "\\frac" not in a.text and "e^{i" not in a.text
    assert "$5 or $6" in a.text  # currency stays text
    assert 'print("hi $x$")' in a.find_element("css selector", "pre code").text  # no math inside code
    # the KaTeX fonts load from the server (CSS font-src 'self'), no console errors (CSP, 404)
    page.wait(lambda: page.js("return document.fonts.check('16px KaTeX_Main')"), 10, "KaTeX_Main not loaded")
    # a GFM table and a task list
    assert [th.text for th in a.find_elements("css selector", "table th")] == ["Name", "Value"]
    assert len(a.find_elements("css selector", "table tbody tr")) == 2
    boxes = a.find_elements("css selector", "li > .task-box")
    assert [b.text for b in boxes] == ["☑", "☐"] and "task-done" in boxes[0].get_attribute("class")
    assert a.find_elements("css selector", "input") == []
    shot(page, "math-table-tasks")
    # copy the code block, then the whole answer
    a.find_element("css selector", ".code-wrap .copy-btn").click()
    page.wait(lambda: clipboard(page) == 'print("hi $x$")', 10, "the code block did not reach the clipboard")
    page.el("#messages .msg.assistant .msg-actions .copy-msg").click()
    page.wait(lambda: clipboard(page) == MARKDOWN, 10, "the answer did not reach the clipboard")
    page.el("#messages .msg.user .msg-actions .copy-msg").click()
    page.wait(lambda: clipboard(page) == "Show me math", 10, "the question did not reach the clipboard")
    assert page.console_errors() == []


def test_reasoning_collapsed_and_tool_call_display(page, tmp_path):
    page.open()
    import_conv(page, tmp_path, "think", [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "<think>The user asks why. Let me think.</think>Because **reasons**."},
        {"role": "user", "content": "And?"},
        {"role": "assistant", "content": "Only thinking so far</think>The answer."}])
    msgs = page.els("#messages .msg.assistant")
    for m, reasoning, answer in ((msgs[0], "The user asks why. Let me think.", "Because reasons."),
                                 (msgs[1], "Only thinking so far", "The answer.")):
        d = m.find_element("css selector", "details.reasoning")
        assert d.get_attribute("open") is None  # collapsed
        assert not m.find_element("css selector", ".reasoning-body").is_displayed()
        assert m.find_element("css selector", ".content").text == answer
        d.find_element("css selector", "summary").click()
        assert m.find_element("css selector", ".reasoning-body").text == reasoning
    shot(page, "reasoning")
    # the history sent back holds the answers without their reasoning
    page.set_settings(max_tokens=4)
    generate(page, "Go on")
    sent = last_request(page)["body"]["messages"]
    assert [m["content"] for m in sent if m["role"] == "assistant"] == ["Because **reasons**.", "The answer."]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]


def open_settings(page):
    page.el("#settings-open").click()


def type_into(page, css, text):
    el = page.el(css)
    el.clear()
    if text:
        page.js("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", el, text)


def test_tool_calls_and_json_mode(page):
    page.open()
    open_settings(page)
    type_into(page, "#set-max-tokens", "80")
    page.js("arguments[0].dispatchEvent(new Event('input'))", page.el("#set-max-tokens"))
    type_into(page, "#set-tools", "[not json")
    assert page.el("#settings-error").is_displayed()
    type_into(page, "#set-tools", json.dumps(TOOLS))
    assert not page.el("#settings-error").is_displayed()
    page.js("arguments[0].value = 'required'; arguments[0].dispatchEvent(new Event('change'))", page.el("#set-tool-choice"))
    page.close_settings()
    generate(page, "What is the weather in Paris?")
    req = last_request(page)
    assert req["route"] == "openai" and req["body"]["tools"] == TOOLS and req["body"]["tool_choice"] == "required"
    call = page.el("#messages .msg.assistant .tool-call")
    assert call.find_element("css selector", "summary").text == "Tool call: get_weather"
    args = json.loads(call.find_element("css selector", "pre").text)
    assert isinstance(args.get("city"), str)  # the grammar made a well-formed call
    stored = page.js("return quarrelUI.conversation()")
    asst = [n for n in stored["nodes"].values() if n["role"] == "assistant"][0]
    assert asst["tool_calls"][0]["name"] == "get_weather" and asst["finish_reason"] == "tool_calls"
    shot(page, "tool-call")
    # JSON mode, no tools: the native route with a JSON-object grammar; the reply is shown as JSON
    open_settings(page)
    type_into(page, "#set-tools", "")
    page.js("arguments[0].dispatchEvent(new Event('input'))", page.el("#set-tools"))
    page.el("#set-json-mode").click()
    type_into(page, "#set-max-tokens", "200")
    page.js("arguments[0].dispatchEvent(new Event('input'))", page.el("#set-max-tokens"))
    page.close_settings()
    page.el("#new-chat").click()
    generate(page, "Describe a cat as JSON with a name and an age.", timeout=120)
    req = last_request(page)
    assert req["route"] == "native" and req["body"]["json_schema"] == {"type": "object"}
    content = page.el("#messages .msg.assistant .content")
    assert "json" in content.get_attribute("class")
    stored = page.js("return quarrelUI.conversation()")
    asst = [n for n in stored["nodes"].values() if n["role"] == "assistant"][0]
    if asst["finish_reason"] == "stop":  # complete: valid JSON, shown pretty-printed as a code block
        text = content.find_element("css selector", "pre code").text.strip()
        assert isinstance(json.loads(asst["content"]), dict)
        assert isinstance(json.loads(text), dict)  # pretty-printed, still the same object
    else:  # cut at max_tokens (the sampled reply varies): a prefix of an object, shown as it came
        assert asst["finish_reason"] == "length" and asst["content"].lstrip().startswith("{")
        assert content.text.strip().startswith("{")
    shot(page, "json-mode")
    assert page.console_errors() == []


def test_every_setting_reaches_the_request_presets_per_conversation(page):
    page.open()
    open_settings(page)
    page.js("arguments[0].value = 'precise'; arguments[0].dispatchEvent(new Event('change'))", page.el("#set-preset"))
    assert float(page.el("#set-temperature").get_attribute("value")) == 0.2
    assert page.el("#set-top-k").get_attribute("value") == "20"
    values = {"#set-min-p": ("0.12", "input"), "#set-repeat-penalty": ("1.3", "input"),
              "#set-repeat-last-n": ("32", "input"), "#set-presence-penalty": ("0.5", "input"),
              "#set-frequency-penalty": ("-0.25", "input"), "#set-seed": ("1234", "input"),
              "#set-stop": ("END\nSTOP", "input"), "#set-max-tokens": ("7", "input"),
              "#set-system": ("Be brief.", "input")}
    for css, (v, ev) in values.items():
        page.js("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event(arguments[2]))",
                page.el(css), v, ev)
    page.close_settings()
    generate(page, "Say hello.")
    body = last_request(page)["body"]
    expect = {"temperature": 0.2, "top_k": 20, "top_p": 0.9, "min_p": 0.12, "repeat_penalty": 1.3, "repeat_last_n": 32,
              "presence_penalty": 0.5, "frequency_penalty": -0.25, "seed": 1234, "stop": ["END", "STOP"],
              "max_tokens": 7, "model": MODEL_NAME}
    assert {k: body.get(k) for k in expect} == expect
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    # the server took them: the same request with the same seed gives the same text
    first = [n for n in page.js("return quarrelUI.conversation()")["nodes"].values() if n["role"] == "assistant"][0]
    r = requests.post(page.url + "/api/stream", json=dict(body, messages=body["messages"]), timeout=60, stream=True)
    toks = [json.loads(line[5:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data:") and
            line[5:].strip() != "[DONE]"]
    assert toks[-1]["usage"]["completion_tokens"] <= 7
    assert "".join(t.get("token", "") for t in toks[:-1]) == first["content"]
    # per-conversation settings: this conversation keeps max_tokens 3, the global settings stay
    open_settings(page)
    page.el("#set-per-conv").click()
    page.js("arguments[0].value = '3'; arguments[0].dispatchEvent(new Event('input'))", page.el("#set-max-tokens"))
    page.close_settings()
    conv_id = page.js("return quarrelUI.conversation().id")
    assert json.loads(page.js("return localStorage.getItem('quarrel.settings')"))["max_tokens"] == 7
    generate(page, "Again.")
    assert last_request(page)["body"]["max_tokens"] == 3
    page.el("#new-chat").click()
    open_settings(page)
    assert not page.el("#set-per-conv").is_selected()
    assert page.el("#set-max-tokens").get_attribute("value") == "7"
    page.close_settings()
    generate(page, "New chat.")
    assert last_request(page)["body"]["max_tokens"] == 7
    page.el(f'#conversations li[data-id="{conv_id}"] .conv-open').click()
    open_settings(page)
    assert page.el("#set-per-conv").is_selected() and page.el("#set-max-tokens").get_attribute("value") == "3"
    shot(page, "settings")
    page.close_settings()


def test_edit_regenerate_branches_and_stats(page):
    page.open()
    page.set_settings(max_tokens=8)
    generate(page, "Name a colour.")
    first = page.assistant_texts()[-1]
    meta = page.el("#messages .msg.assistant .meta").text
    for part in ("tok/s", "prompt ", "output ", "cached ", "TTFT "):
        assert part in meta, meta
    # the second turn reuses the first one's prefix (the server's prefix cache): cached > 0
    generate(page, "Another one.")
    stats = [n for n in page.js("return quarrelUI.conversation()")["nodes"].values() if n["role"] == "assistant"]
    stats.sort(key=lambda n: n["ts"])
    assert stats[1]["usage"]["cached_tokens"] > 0 and stats[1]["usage"]["prompt_tokens"] > stats[0]["usage"]["prompt_tokens"]
    assert stats[1]["usage"]["completion_tokens"] >= 1 and stats[1]["ttft_ms"] > 0
    # regenerate the first answer: a second version; the later turn belongs to the first version
    generation(page, lambda: page.els("#messages .msg.assistant")[0].find_element("css selector", ".regen").click())
    assert len(page.els("#messages .msg")) == 2  # the new branch ends at its answer
    assert branch_label(page, "#messages .msg.assistant") == "2/2"
    second = page.assistant_texts()[0]
    page.el("#messages .msg.assistant .branch-prev").click()
    assert branch_label(page, "#messages .msg.assistant") == "1/2"
    assert page.assistant_texts()[0] == first and len(page.els("#messages .msg")) == 4  # its follow-up is back
    page.el("#messages .msg.assistant .branch-next").click()
    assert page.assistant_texts()[0] == second and len(page.els("#messages .msg")) == 2
    # edit the question: a new version of it, answered; the old one stays reachable
    page.el("#messages .msg.user .edit").click()
    box = page.el("#messages .msg.user .edit-text")
    box.clear()
    box.send_keys("Name a fruit.")
    generation(page, lambda: page.el("#messages .msg.user .edit-save").click())
    assert page.el("#messages .msg.user .content").text == "Name a fruit."
    assert branch_label(page, "#messages .msg.user") == "2/2"
    body = last_request(page)["body"]
    assert body["messages"][-1] == {"role": "user", "content": "Name a fruit."}
    assert len(body["messages"]) == 1  # the edited question's own history only
    shot(page, "branches")
    page.el("#messages .msg.user .branch-prev").click()
    assert page.el("#messages .msg.user .content").text == "Name a colour."
    assert branch_label(page, "#messages .msg.assistant") == "2/2"  # the sub-branch as it was left
    # the tree survives a reload
    page.d.refresh()
    page.wait_state("connected")
    assert page.el("#messages .msg.user .content").text == "Name a colour."
    assert branch_label(page, "#messages .msg.user") == "1/2"
    assert page.console_errors() == []


def test_continue_a_cut_off_answer(page):
    page.open()
    # greedy, so that the answer is surely longer than the 6 tokens allowed
    page.js("localStorage.setItem('quarrel.settings', JSON.stringify({temperature: 0, max_tokens: 6}))")
    page.d.refresh()
    page.wait_state("connected")
    generate(page, "Count from one to twenty in words, separated by commas.")
    stored = page.js("return quarrelUI.conversation()")
    asst = [n for n in stored["nodes"].values() if n["role"] == "assistant"][0]
    assert asst["finish_reason"] == "length"
    before = asst["content"]
    generation(page, lambda: page.el("#messages .msg.assistant .continue").click())
    body = last_request(page)["body"]
    assert body["continue_final_message"] is True
    assert body["messages"][-1] == {"role": "assistant", "content": before}
    after = [n for n in page.js("return quarrelUI.conversation()")["nodes"].values() if n["role"] == "assistant"]
    assert len(after) == 1 and after[0]["content"].startswith(before) and len(after[0]["content"]) > len(before)
    assert after[0]["usage"]["completion_tokens"] > 6  # the two parts together
    assert len(page.els("#messages .msg.assistant")) == 1
    shot(page, "continue")


def test_attached_file_reaches_the_prompt(page, tmp_path):
    page.open()
    f = tmp_path / "notes.py"
    code = "def add(a, b):\n    return a + b  # ZEBRA-42\n"
    f.write_text(code, encoding="utf-8")
    page.el("#attach").send_keys(str(f))
    count = "const e = document.querySelector('#attachments .att-tokens'); return e ? e.textContent : ''"
    page.wait(lambda: page.js(count).endswith(" tokens"), 15, "no token count")
    shown = int(page.js(count).split()[0])
    wrapped = f"\n\nFile: notes.py\n```\n{code}```"
    expect = len(requests.post(page.url + "/tokenize", json={"content": wrapped, "add_special": False}, timeout=10)
                 .json()["tokens"])
    assert shown == expect and shown > 5
    shot(page, "attachment")
    page.set_settings(max_tokens=4)
    generate(page, "What does this file do?")
    body = last_request(page)["body"]
    assert body["messages"][-1]["content"] == "What does this file do?" + wrapped
    assert page.els("#attachments li") == []  # sent: the composer is empty again
    sent = page.el("#messages .msg.user .attachments.sent").text
    assert "notes.py" in sent and f"{expect} tokens" in sent
    assert page.el("#messages .msg.user .content").text == "What does this file do?"
    # the server saw the file: its prompt is longer than the question alone by about the file's tokens
    n_prompt = page.js("return quarrelUI.conversation()")["nodes"]
    asst = [n for n in n_prompt.values() if n["role"] == "assistant"][0]
    assert asst["usage"]["prompt_tokens"] >= expect
