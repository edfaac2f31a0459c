"""Issue 32 (hardening): the key store's file mode, GET /v1/models/{id}, per-key token limits on every
HTTP route, per-message limits and key validity on /ws, the /ws Origin check and the Host check."""
import json
import os
import stat
import subprocess
import time

import openai
import pytest
import requests

from conftest import MODEL_NAME
from test_server_keys import keys


def test_key_store_mode_0600(quarrel_bin, tmp_path):
    db = str(tmp_path / "keys.db")
    old = os.umask(0o022)
    try:
        keys(quarrel_bin, db, "create", "--name", "a")
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
        os.chmod(db, 0o644)  # a store loosened by hand is tightened on the next write
        keys(quarrel_bin, db, "create", "--name", "b")
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    finally:
        os.umask(old)


def test_openai_models_retrieve(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    m = c.models.retrieve(MODEL_NAME)
    assert m.id == MODEL_NAME and m.object == "model" and m.owned_by == "quarrel"
    assert m.id in [x.id for x in c.models.list().data]
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("no-such-model")
    r = requests.get(server.url + "/v1/models/no-such-model", timeout=5)
    e = r.json()["error"]
    assert r.status_code == 404 and e["code"] == "MODEL_NOT_FOUND" and e["type"] == "not_found_error"
    assert "no-such-model" in e["message"] and "param" in e
    assert requests.post(server.url + "/v1/models/" + MODEL_NAME, timeout=5).status_code == 405


def test_key_token_limit_http(quarrel_bin, smollm, make_server, tmp_path):
    """A key's own --tpm is charged on the HTTP routes of both APIs (not the server-wide --rate-tpm)."""
    db = str(tmp_path / "keys.db")
    c = keys(quarrel_bin, db, "create", "--name", "c", "--tpm", "40")
    o = keys(quarrel_bin, db, "create", "--name", "o", "--tpm", "5")
    s = make_server([smollm], ["--api-key-db", db])
    body = {"model": MODEL_NAME, "prompt": "Hello there", "max_tokens": 30, "temperature": 0, "ignore_eos": True}
    h = {"Authorization": "Bearer " + c["key"]}
    codes = [requests.post(s.url + "/v1/completions", json=body, headers=h, timeout=60) for _ in range(4)]
    assert [r.status_code for r in codes[:2]] == [200, 200] and codes[3].status_code == 429, [r.status_code for r in codes]
    e = codes[3].json()["error"]
    assert e["code"] == "RATE_LIMITED" and e["type"] == "rate_limit_error" and int(codes[3].headers["Retry-After"]) >= 1
    client = openai.OpenAI(base_url=s.url + "/v1", api_key=c["key"], max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    # Ollama route: charged too, and refused in Ollama's error shape
    g = {"model": MODEL_NAME, "prompt": "Hello there, how are you today? Tell me a story.", "raw": True,
         "stream": False, "options": {"num_predict": 4, "temperature": 0}}  # > 5 tokens
    ho = {"X-API-Key": o["key"]}
    assert requests.post(s.url + "/api/generate", json=g, headers=ho, timeout=60).status_code == 200
    r = requests.post(s.url + "/api/generate", json=g, headers=ho, timeout=60)
    assert r.status_code == 429 and isinstance(r.json()["error"], str) and r.json()["code"] == "RATE_LIMITED"
    assert int(r.headers["Retry-After"]) >= 1


def ws_infer(ws, max_tokens=2):
    """Sends one inference message; returns the final inference payload or the error payload."""
    ws.send(json.dumps({"type": "inference", "payload": {"model": MODEL_NAME, "prompt": "Hi", "max_tokens": max_tokens,
                                                         "temperature": 0, "stream": False}}))
    while True:
        m = json.loads(ws.recv(timeout=30))
        if m["type"] == "error" or (m["type"] == "inference" and m["payload"].get("complete")):
            return m


def ws_alive(ws):
    ws.send(json.dumps({"type": "ping", "payload": 7}))
    return json.loads(ws.recv(timeout=10)) == {"type": "pong", "payload": 7}


def test_ws_limits_per_message(quarrel_bin, smollm, make_server, tmp_path):
    """/ws applies the key's rpm/tpm and checks the key on every inference message, not only at the
    handshake; a refusal is an in-band error and the socket stays usable."""
    from websockets.sync.client import connect
    db = str(tmp_path / "keys.db")
    slow = keys(quarrel_bin, db, "create", "--name", "slow", "--rpm", "3")
    tok = keys(quarrel_bin, db, "create", "--name", "tok", "--tpm", "5")
    gone = keys(quarrel_bin, db, "create", "--name", "gone")
    s = make_server([smollm], ["--api-key-db", db])
    ws_url = s.url.replace("http", "ws") + "/ws"
    with connect(ws_url, additional_headers={"X-API-Key": slow["key"]}) as ws:  # the handshake is request 1
        res = [ws_infer(ws) for _ in range(6)]
        assert [m["type"] for m in res[:2]] == ["inference", "inference"], res
        assert all(m["type"] == "error" and m["payload"]["code"] == "RATE_LIMITED" for m in res[2:]), res
        assert "retry" in res[2]["payload"]["message"] and ws_alive(ws)
    with connect(ws_url, additional_headers={"X-API-Key": tok["key"]}) as ws:
        assert ws_infer(ws, 8)["type"] == "inference"  # spends more than 5 tokens
        m = ws_infer(ws)
        assert m["type"] == "error" and m["payload"]["code"] == "RATE_LIMITED" and ws_alive(ws)
    with connect(ws_url, additional_headers={"X-API-Key": gone["key"]}) as ws:
        assert ws_infer(ws)["type"] == "inference"
        subprocess.run([quarrel_bin, "keys", "revoke", gone["id"], "--db", db], check=True, capture_output=True)
        m = ws_infer(ws)
        assert m["type"] == "error" and m["payload"]["code"] == "UNAUTHORIZED" and ws_alive(ws)


def raw_status(port, host_header, path="/healthz", extra=""):
    """Status code and body of a GET with this exact Host header (None: no Host line)."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        host = f"Host: {host_header}\r\n" if host_header is not None else ""
        sock.sendall(f"GET {path} HTTP/1.1\r\n{host}{extra}Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_host_check(quarrel_bin, smollm, make_server):
    s = make_server([smollm], ["--allowed-host", "api.example", "--allowed-host", "Other.Example"])
    p = s.port
    for ok in (f"127.0.0.1:{p}", "127.0.0.1", f"localhost:{p}", "LOCALHOST:1", "[::1]:9", "api.example",
               f"api.example:{p}", "other.example:80"):
        assert raw_status(p, ok)[0] == 200, ok
    for bad in ("evil.example", f"evil.example:{p}", "api.example.evil", "10.1.2.3", "localhost.evil:80", "[::2]"):
        st, body = raw_status(p, bad)
        assert st == 403 and json.loads(body)["error"]["code"] == "FORBIDDEN", bad
    assert raw_status(p, "evil.example", "/v1/models")[0] == 403
    # the clients in use keep working
    assert openai.OpenAI(base_url=f"http://localhost:{p}/v1", api_key="x", max_retries=0).models.list().data
    assert requests.get(s.url + "/api/tags", timeout=5).status_code == 200


def test_ws_origin_check(server):
    """server runs with --cors-origin http://allowed.example."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect
    ws_url = server.url.replace("http", "ws") + "/ws"
    local = f"ws://localhost:{server.port}/ws"
    for url, origin in ((ws_url, None), (ws_url, "http://allowed.example"), (ws_url, server.url),
                        (local, f"http://localhost:{server.port}")):  # same origin: Origin names Host
        with connect(url, additional_headers={"Origin": origin} if origin else {}, origin=None) as ws:
            assert ws_alive(ws), origin
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{server.port + 1}", "https://allowed.example"):
        with pytest.raises(InvalidStatus) as e:
            connect(ws_url, additional_headers={"Origin": origin})
        assert e.value.response.status_code == 403, origin
        assert json.loads(e.value.response.body)["error"]["code"] == "FORBIDDEN"
