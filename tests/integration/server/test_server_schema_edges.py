"""Issue 32 item 9: the cases `schemathesis run --checks all` found where /openapi.yaml and the server
disagreed, one test each (each failed before the fix): methods the server does not know answer 405 with
Allow; bodies with a NUL in a key or an integer past int64 in a field we do not read are accepted; 5.0 is an
integer; null means "absent" for optional fields; keep_alive follows one grammar on every route; top_p 0 is
the top token alone; OpenAI's encoding_format base64; /api/show needs a model or name."""
import base64
import socket
import struct

import pytest
import requests

from conftest import MODEL_NAME, Server  # noqa: F401  (Server: a later `from conftest` may find another conftest)


def raw_request(url, method, path):
    """Status line and headers of METHOD PATH over a plain socket (requests refuses some methods)."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 0\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:] if ":" in h)}
    return int(head[0].split()[1]), headers


@pytest.mark.parametrize("method,path,allow", [("QUERY", "/api/tags", "GET"), ("QUERY", "/v1/chat/completions", "POST"),
                                               ("QUERY", "/ws", "GET"), ("PUT", "/ws", "GET")])
def test_unknown_method_is_405_with_allow(server, method, path, allow):
    status, headers = raw_request(server.url, method, path)
    assert status == 405, (status, headers)
    assert allow in headers.get("allow", ""), headers


def chat(server, extra, raw=None):
    """POST /v1/chat/completions: a short greedy-ish request updated with extra, or the raw bytes given."""
    if raw is not None:
        return requests.post(server.url + "/v1/chat/completions", data=raw, timeout=60,
                             headers={"Content-Type": "application/json"})
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": False}
    body.update(extra)
    return requests.post(server.url + "/v1/chat/completions", json=body, timeout=60)


def test_nul_in_a_key_and_huge_integers_are_accepted(server):
    raw = ('{"model": "%s", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": false, '
           '"x\\u0000y": {"k\\u0000": 1}, "unused": [-166804000000000000000000, 99999999999999999999999]}') % MODEL_NAME
    r = chat(server, {}, raw=raw.encode())
    assert r.status_code == 200, r.text


def test_integral_reals_are_integers(server):
    r = chat(server, {"max_tokens": 2.0, "seed": 7.0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 2
    r = chat(server, {"max_tokens": 2.5})
    assert r.status_code == 400 and "max_tokens" in r.text


def test_seed_bounds_are_int64(server):
    assert chat(server, {"seed": -9223372036854775808}).status_code == 200
    assert chat(server, {"seed": 9223372036854775807}).status_code == 200
    for bad in (-9223372036854775809, 9223372036854775808, 10 ** 30):
        r = chat(server, {"seed": bad})
        assert r.status_code == 400 and "seed" in r.text, (bad, r.text)


def test_null_is_absent(server):
    r = chat(server, {"top_logprobs": None, "logprobs": None, "stop": None, "seed": None, "model": None})
    assert r.status_code == 200, r.text
    r = requests.post(server.url + "/tokenize", json={"model": None, "content": "hi", "add_special": None,
                                                      "with_pieces": None}, timeout=30)
    assert r.status_code == 200 and r.json()["tokens"], r.text
    r = requests.post(server.url + "/v1/embeddings", json={"model": None, "input": "hi", "encoding_format": None},
                      timeout=60)
    assert r.status_code == 200, r.text


def test_top_p_zero_is_the_top_token(server):
    r = chat(server, {"top_p": 0, "temperature": 1.0, "max_tokens": 6, "seed": 1})
    assert r.status_code == 200, r.text
    greedy = chat(server, {"temperature": 0, "max_tokens": 6})
    assert r.json()["choices"][0]["message"]["content"] == greedy.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("route,body", [
    ("/api/chat", {"messages": [{"role": "user", "content": "Hi"}], "stream": False, "options": {"num_predict": 1}}),
    ("/api/embed", {"input": "hi"}),
])
def test_keep_alive_grammar(make_server, smollm, route, body):
    server = make_server([smollm])
    for ok in ("5m", "1h30m", "90s", "250ms", "1.5h", "-1", "30", 0, -1, None):
        r = requests.post(server.url + route, json=dict(body, model=MODEL_NAME, keep_alive=ok), timeout=60)
        assert r.status_code == 200, (ok, r.text)
    for bad in ("", "1.51.5", "5m3", "1e3s", "0x10", " 5m", "+5m", "5 m", "m", "1d"):
        r = requests.post(server.url + route, json=dict(body, model=MODEL_NAME, keep_alive=bad), timeout=60)
        assert r.status_code == 400 and "keep_alive" in r.text, (bad, r.status_code, r.text)


def test_embeddings_base64(server):
    body = {"model": MODEL_NAME, "input": ["hello world", "the sea"]}
    plain = requests.post(server.url + "/v1/embeddings", json=dict(body, encoding_format="float"), timeout=60).json()
    b64 = requests.post(server.url + "/v1/embeddings", json=dict(body, encoding_format="base64"), timeout=60).json()
    for p, b in zip(plain["data"], b64["data"]):
        raw = base64.b64decode(b["embedding"])
        vec = struct.unpack("<%df" % (len(raw) // 4), raw)
        assert len(vec) == len(p["embedding"])
        assert max(abs(x - y) for x, y in zip(vec, p["embedding"])) < 1e-6
    r = requests.post(server.url + "/v1/embeddings", json=dict(body, encoding_format="int8"), timeout=60)
    assert r.status_code == 400 and "encoding_format" in r.text


def test_show_needs_a_model_or_name(server):
    assert requests.post(server.url + "/api/show", json={}, timeout=30).status_code == 400
    assert requests.post(server.url + "/api/show", json={"model": MODEL_NAME, "name": {}}, timeout=30).status_code == 400
    assert requests.post(server.url + "/api/show", json={"name": MODEL_NAME}, timeout=30).status_code == 200
    assert requests.post(server.url + "/api/show", json={"model": MODEL_NAME}, timeout=30).status_code == 200


@pytest.mark.parametrize("extra", [{}, {"raw": True}, {"prompt": ""}, {"prompt": "", "raw": True}])
def test_generate_without_prompt_loads_the_model(server, extra):
    """Ollama: /api/generate without a prompt loads the model and generates nothing (raw or not)."""
    r = requests.post(server.url + "/api/generate", json=dict({"model": MODEL_NAME, "stream": False}, **extra), timeout=60)
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["done"] is True and j["done_reason"] == "load" and j["response"] == "", j


def test_generate_without_prompt_keep_alive_0_unloads(make_server, smollm):
    s = make_server([smollm])
    r = requests.post(s.url + "/api/generate", json={"model": MODEL_NAME, "keep_alive": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["done_reason"] == "unload", r.text
