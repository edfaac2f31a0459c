"""Issue 32 items 7 and 8 (API conformance): logprobs keep tokens whose piece is not valid UTF-8 alone
(`bytes` + a `bytes:\\xNN` token string), unknown chat roles are refused with 400, `Allow` on HEAD and 405
answers, TRACE answered 405 JSON, CivetWeb's own refusals in JSON, close 1001 and SHUTTING_DOWN on /ws
at shutdown."""
import json
import signal
import time

import pytest
import requests

from conftest import MODEL_NAME, Server  # at import: a later `from conftest` can find another directory's conftest

CJK = "请用中文回答：日本的首都是哪里？东京是日本的首都。北京是中国的首都。"


def piece_ok(token, bts):
    """A token string is the piece itself when its bytes are valid UTF-8, else `bytes:` + \\xNN escapes."""
    raw = bytes(bts)
    try:
        assert token == raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        assert token.startswith("bytes:") and token.encode("latin-1", "strict")  # ASCII only
        return False


def test_chat_top_logprobs_keep_partial_utf8(server):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": CJK}], "max_tokens": 12,
            "temperature": 0, "logprobs": True, "top_logprobs": 20, "ignore_eos": True}
    r = requests.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 12
    partial = 0
    for c in content:
        assert len(c["top_logprobs"]) == 20, [t["token"] for t in c["top_logprobs"]]
        for t in [c] + c["top_logprobs"]:
            partial += not piece_ok(t["token"], t["bytes"])
    assert partial > 0  # the prompt does bring pieces that are not whole characters


def test_completions_top_logprobs_keep_partial_utf8(server):
    body = {"model": MODEL_NAME, "prompt": CJK, "max_tokens": 12, "temperature": 0, "logprobs": 5,
            "ignore_eos": True}
    r = requests.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 12 and len(lp["top_logprobs"]) == 12
    partial = 0
    for tok, top in zip(lp["tokens"], lp["top_logprobs"]):
        assert tok != "" and len(top) == 5, list(top)
        partial += sum(k.startswith("bytes:") for k in top)
    assert partial > 0


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/api/chat"])
def test_unknown_role_refused(server, route):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}, {"role": "wizard", "content": "x"}],
            "max_tokens": 2, "stream": False}
    r = requests.post(server.url + route, json=body, timeout=30)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["code"] == "INVALID_REQUEST" and "messages[1].role" in e["message"] and "wizard" in e["message"]
    if route.startswith("/v1/"):
        assert e["type"] == "invalid_request_error" and e["param"] == "messages[1].role"


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool", "developer"])
def test_known_roles_accepted(server, role):
    msgs = [{"role": role, "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    r = requests.post(server.url + "/v1/chat/completions", timeout=30,
                      json={"model": MODEL_NAME, "messages": msgs, "max_tokens": 2})
    assert r.status_code == 200, r.text


def allow_set(r):
    assert "Allow" in r.headers, dict(r.headers)
    return {m.strip() for m in r.headers["Allow"].split(",")}


@pytest.mark.parametrize("path", ["/v1/models", "/healthz", "/v1/models/" + MODEL_NAME, "/"])
def test_head_on_get_routes(server, path):
    g = requests.get(server.url + path, timeout=10)
    r = requests.head(server.url + path, timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["Content-Type"] == g.headers["Content-Type"]
    assert int(r.headers["Content-Length"]) > 0
    assert allow_set(r) == {"GET", "HEAD", "OPTIONS"}


@pytest.mark.parametrize("method,path,allow", [
    ("PUT", "/v1/models", {"GET", "HEAD", "OPTIONS"}),
    ("DELETE", "/v1/models/" + MODEL_NAME, {"GET", "HEAD", "OPTIONS"}),
    ("GET", "/v1/chat/completions", {"POST", "OPTIONS"}),
    ("HEAD", "/api/generate", {"POST", "OPTIONS"}),
    ("POST", "/index.html", {"GET", "HEAD", "OPTIONS"}),
])
def test_405_carries_allow(server, method, path, allow):
    r = requests.request(method, server.url + path, timeout=10)
    assert r.status_code == 405
    assert allow_set(r) == allow
    if method != "HEAD":
        assert r.json()["error"]["code"] == "INVALID_REQUEST"


def test_trace_is_405_json(server):
    r = requests.request("TRACE", server.url + "/v1/models", timeout=10)
    assert r.status_code == 405, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json()["error"]["code"] == "INVALID_REQUEST" and "TRACE" in r.json()["error"]["message"]
    assert "TRACE" not in allow_set(r) and "GET" in allow_set(r)
    assert r.json()["error"]["type"] == "invalid_request_error"  # an OpenAI route's error shape
    assert requests.get(server.url + "/healthz", timeout=10).status_code == 200


def test_options_carries_allow(server):
    r = requests.options(server.url + "/v1/completions", timeout=10)
    assert r.status_code == 204 and allow_set(r) == {"POST", "OPTIONS"}


def test_head_keeps_the_connection_usable(server):
    with requests.Session() as s:
        for _ in range(3):
            assert s.head(server.url + "/v1/models", timeout=10).status_code == 200
            assert s.get(server.url + "/v1/models", timeout=10).json()["object"] == "list"


def test_civetweb_errors_are_json(server):
    """Requests CivetWeb refuses before any handler (headers over --max-header-bytes, an unknown
    method) are answered in the JSON error shape, not CivetWeb's text page."""
    big = requests.get(server.url + "/healthz", headers={"X-Big": "a" * 40000}, timeout=10)
    assert big.status_code in (400, 431) and big.headers["Content-Type"].startswith("application/json")
    assert big.json()["error"]["code"] == "INVALID_REQUEST" and "max-header-bytes" in big.json()["error"]["message"]
    brew = requests.request("BREW", server.url + "/v1/models", timeout=10)  # a method CivetWeb does not know
    assert brew.status_code == 405 and brew.json()["error"]["code"] == "INVALID_REQUEST"
    assert brew.headers["Allow"] == "GET, HEAD, OPTIONS"
    brew = requests.request("BREW", server.url + "/no/such/path", timeout=10)  # ... on a path we do not serve
    assert brew.status_code == 400 and brew.json()["error"]["code"] == "INVALID_REQUEST"
    assert requests.get(server.url + "/healthz", timeout=10).status_code == 200


def ws_messages_until_close(ws, limit=20):
    """The messages a socket gets until it closes, and the close code the server sent (None: no frame)."""
    from websockets.exceptions import ConnectionClosed
    out = []
    try:
        while True:
            out.append(json.loads(ws.recv(timeout=limit)))
    except ConnectionClosed as e:
        return out, e.rcvd.code if e.rcvd else None


def test_ws_shutdown_sends_1001_and_shutting_down(quarrel_bin, smollm):
    from websockets.sync.client import connect
    s = Server(quarrel_bin, [smollm], ["--parallel", "1", "--drain", "1"])
    try:
        url = s.url.replace("http://", "ws://") + "/ws"
        with connect(url) as idle, connect(url) as running, connect(url) as queued:
            body = {"model": MODEL_NAME, "prompt": "Count: 1, 2, 3,", "max_tokens": 100000, "ignore_eos": True,
                    "temperature": 0, "stream": True}
            running.send(json.dumps({"type": "inference", "payload": body}))
            assert json.loads(running.recv(timeout=30))["type"] == "inference"  # it runs
            queued.send(json.dumps({"type": "inference", "payload": body}))  # waits for the one sequence
            time.sleep(0.3)
            s.proc.send_signal(signal.SIGTERM)
            _, code = ws_messages_until_close(idle)
            assert code == 1001
            for ws in (running, queued):
                msgs, code = ws_messages_until_close(ws)
                assert code == 1001
                errs = [m["payload"] for m in msgs if m["type"] == "error"]
                assert errs and errs[-1]["code"] == "SHUTTING_DOWN", msgs[-3:]
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.stop()


def test_cut_streams_say_timeout(make_server, smollm):
    """A stream cut by --request-timeout reports TIMEOUT in-band (SSE and /ws), not OVERLOADED."""
    from websockets.sync.client import connect
    s = make_server([smollm], ["--request-timeout", "1"])
    body = {"model": MODEL_NAME, "prompt": "Count: 1, 2, 3,", "max_tokens": 100000, "ignore_eos": True,
            "temperature": 0, "stream": True}
    r = requests.post(s.url + "/v1/completions", json=body, timeout=30)
    frames = [json.loads(l[6:]) for l in r.text.splitlines() if l.startswith("data: {")]
    assert frames[-1]["error"]["code"] == "TIMEOUT", frames[-1]
    with connect(s.url.replace("http://", "ws://") + "/ws") as ws:
        ws.send(json.dumps({"type": "inference", "payload": body}))
        while True:
            m = json.loads(ws.recv(timeout=30))
            if m["type"] == "error" or m["payload"].get("complete"):
                break
        assert m["type"] == "error" and m["payload"]["code"] == "TIMEOUT", m
        assert "timeout" in m["payload"]["message"]


def test_http_cut_by_shutdown_says_shutting_down(quarrel_bin, smollm):
    """An SSE stream cut when the drain ends reports SHUTTING_DOWN in-band, a request arriving while
    the server drains gets 503 SHUTTING_DOWN (not OVERLOADED, which means a full queue)."""
    import threading
    s = Server(quarrel_bin, [smollm], ["--parallel", "1", "--drain", "2"])
    try:
        body = {"model": MODEL_NAME, "prompt": "Count: 1, 2, 3,", "max_tokens": 100000, "ignore_eos": True,
                "temperature": 0, "stream": True}
        out = {}
        t = threading.Thread(target=lambda: out.update(r=requests.post(s.url + "/v1/completions", json=body,
                                                                         timeout=60)))
        t.start()
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        late = requests.post(s.url + "/v1/completions", json=body, timeout=10)
        assert late.status_code == 503 and late.json()["error"]["code"] == "SHUTTING_DOWN"
        assert int(late.headers["Retry-After"]) >= 1
        t.join(30)
        frames = [json.loads(l[6:]) for l in out["r"].text.splitlines() if l.startswith("data: {")]
        assert frames[-1]["error"]["code"] == "SHUTTING_DOWN", frames[-1]
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.stop()
