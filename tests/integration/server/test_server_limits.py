"""Bad input never crashes the server and gets its error code; limits (body, JSON depth, headers,
slowloris), CORS, request ids, queue bound (503 + Retry-After), timeouts, cancellation on
disconnect (KV blocks freed, visible in /metrics), prefix cache (acceptance 5), metric names."""
import json
import socket
import threading
import time

import pytest
import requests

from conftest import MODEL_NAME


def err(r):
    return r.json()["error"]["code"]


def test_bad_inputs(server):
    u = server.url
    cases = [
        ("/v1/chat/completions", b"{", 400, "INVALID_REQUEST"),
        ("/v1/chat/completions", b"[1,2]", 400, "INVALID_REQUEST"),
        ("/v1/chat/completions", json.dumps({"model": MODEL_NAME, "messages": [{"role": 1}]}).encode(), 400, "INVALID_REQUEST"),
        ("/v1/completions", json.dumps({"model": MODEL_NAME, "prompt": "x", "max_tokens": -1}).encode(), 400, "INVALID_REQUEST"),
        ("/v1/completions", json.dumps({"model": MODEL_NAME, "prompt": "x", "stop": 5}).encode(), 400, "INVALID_REQUEST"),
        ("/v1/completions", json.dumps({"model": MODEL_NAME, "prompt": [999999999]}).encode(), 400, "INVALID_REQUEST"),
        ("/v1/completions", json.dumps({"model": MODEL_NAME, "prompt": "x", "logit_bias": {"99999999": 1}}).encode(), 400, "INVALID_REQUEST"),
        ("/api/generate", json.dumps({"model": MODEL_NAME, "prompt": "x", "options": {"top_k": "a"}}).encode(), 400, "INVALID_REQUEST"),
        ("/api/generate", json.dumps({"model": "nope", "prompt": "x"}).encode(), 404, "MODEL_NOT_FOUND"),
        ("/api/chat", json.dumps({"model": MODEL_NAME}).encode(), 400, "INVALID_REQUEST"),
        ("/tokenize", json.dumps({"model": MODEL_NAME, "content": 3}).encode(), 400, "INVALID_REQUEST"),
        ("/detokenize", json.dumps({"model": MODEL_NAME, "tokens": [-1]}).encode(), 400, "INVALID_REQUEST"),
        ("/api/embed", json.dumps({"model": MODEL_NAME, "input": []}).encode(), 400, "INVALID_REQUEST"),
        ("/nope", b"{}", 404, "INVALID_REQUEST"),
    ]
    for path, body, status, code in cases:
        r = requests.post(u + path, data=body, timeout=30)
        assert r.status_code == status, (path, body, r.text)
        assert err(r) == code, (path, body, r.text)
    r = requests.get(u + "/v1/chat/completions", timeout=5)
    assert r.status_code == 405
    assert requests.get(u + "/healthz", timeout=5).status_code == 200  # still alive


def test_body_and_depth_limits(server):
    r = requests.post(server.url + "/v1/completions", data=b"x" * (5 << 20), timeout=30)
    assert r.status_code == 413 and err(r) == "INVALID_REQUEST"
    deep = "[" * 100 + "]" * 100
    r = requests.post(server.url + "/v1/completions", data=('{"model":"%s","prompt":%s}' % (MODEL_NAME, deep)).encode(),
                      timeout=10)
    assert r.status_code == 400 and "nesting" in r.json()["error"]["message"]
    r = requests.get(server.url + "/healthz", headers={"X-Big": "y" * 20000}, timeout=10)
    assert r.status_code in (400, 413, 431)


def test_slowloris(make_server, smollm):
    s = make_server([smollm], ["--io-timeout-ms", "1000"])
    host, port = s.url[7:].split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")  # headers never end
    t0 = time.time()
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    assert time.time() - t0 < 6  # closed by the server within the bounded timeout
    sock.close()
    assert requests.get(s.url + "/healthz", timeout=5).status_code == 200


def test_cors_and_request_id(server):
    r = requests.options(server.url + "/v1/chat/completions", headers={
        "Origin": "http://allowed.example", "Access-Control-Request-Method": "POST"}, timeout=5)
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == "http://allowed.example"
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert "Authorization" in r.headers["Access-Control-Allow-Headers"]
    r = requests.options(server.url + "/v1/chat/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}, timeout=5)
    assert "Access-Control-Allow-Origin" not in r.headers
    r = requests.get(server.url + "/v1/models", headers={"Origin": "http://allowed.example", "X-Request-Id": "abc-123"},
                     timeout=5)
    assert r.headers["Access-Control-Allow-Origin"] == "http://allowed.example"
    assert r.headers["X-Request-Id"] == "abc-123"
    assert requests.get(server.url + "/v1/models", timeout=5).headers["X-Request-Id"].startswith("req-")
    # logs: JSON lines with the request id, never the prompt
    requests.post(server.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "SECRET-PROMPT-42",
                                                        "max_tokens": 1}, headers={"X-Request-Id": "rid-log-1"}, timeout=30)
    time.sleep(0.2)
    lines = [l for l in server.log_lines() if l.get("request_id") == "rid-log-1"]
    assert lines and lines[0]["status"] == 200 and lines[0]["model"] == MODEL_NAME
    assert "SECRET-PROMPT-42" not in server.logs()


def test_queue_full_and_timeout(make_server, smollm):
    s = make_server([smollm], ["--parallel", "1", "--max-queue", "1", "--request-timeout", "2"])
    body = {"model": MODEL_NAME, "prompt": "Count: 1, 2, 3,", "max_tokens": 100000, "temperature": 0, "ignore_eos": True}
    results = []

    def worker():
        results.append(requests.post(s.url + "/v1/completions", json=body, timeout=60))

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
        time.sleep(0.3)
    for t in ts:
        t.join()
    codes = sorted(r.status_code for r in results)
    assert 503 in codes, [r.text for r in results]
    r503 = next(r for r in results if r.status_code == 503)
    assert err(r503) == "OVERLOADED" and int(r503.headers["Retry-After"]) >= 1
    # the running one (and the queued one) end with TIMEOUT after 2 s
    r504 = [r for r in results if r.status_code == 504]
    assert r504 and err(r504[0]) == "TIMEOUT"
    assert s.metric("quarrel_errors_total", code="OVERLOADED") >= 1


def test_disconnect_frees_kv_blocks(server):
    before = server.metric("quarrel_cancellations_total", model=MODEL_NAME)
    for path, body in (("/v1/completions", {"stream": True}), ("/api/generate", {"raw": True}),
                       ("/api/stream", {})):
        payload = {"model": MODEL_NAME, "prompt": "Count: 1, 2, 3,", "max_tokens": 5000, "temperature": 0,
                   "ignore_eos": True, "options": {"num_predict": 5000, "temperature": 0}, **body}
        r = requests.post(server.url + path, json=payload, stream=True, timeout=60)
        it = r.iter_lines()
        got = 0
        for line in it:
            if line:
                got += 1
            if got >= 3:
                break
        assert server.metric("quarrel_kv_blocks_used", model=MODEL_NAME) > 0
        r.close()  # hang up mid-stream
        deadline = time.time() + 10
        while server.metric("quarrel_kv_blocks_used", model=MODEL_NAME) != 0 and time.time() < deadline:
            time.sleep(0.05)
        assert server.metric("quarrel_kv_blocks_used", model=MODEL_NAME) == 0, path
    assert server.metric("quarrel_cancellations_total", model=MODEL_NAME) >= before + 3


def test_prefix_cache_ttft(make_server, smollm):
    """Acceptance 5: a second request with the same 1,000-token prefix has >= 5x lower TTFT and a hit."""
    s = make_server([smollm], ["--parallel", "2"])
    words = " ".join(f"item{i}" for i in range(600))
    toks = requests.post(s.url + "/tokenize", json={"model": MODEL_NAME, "content": words}, timeout=30).json()["tokens"]
    assert len(toks) >= 1000
    prefix = toks[:1000]

    def ttft(suffix):
        t0 = time.time()
        r = requests.post(s.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": prefix + suffix,
                                                           "max_tokens": 1, "stream": True, "temperature": 0},
                          stream=True, timeout=120)
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                return time.time() - t0
        raise AssertionError("no token")

    hits0 = s.metric("quarrel_prefix_cache_hits_total", model=MODEL_NAME)
    cold = ttft([28, 29])
    warm = ttft([30, 31])
    assert s.metric("quarrel_prefix_cache_hits_total", model=MODEL_NAME) == hits0 + 1
    assert s.metric("quarrel_prefix_cache_tokens_total", model=MODEL_NAME) >= 992
    assert cold >= 5 * warm, (cold, warm)


def test_metric_names(server):
    requests.post(server.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "x", "max_tokens": 2}, timeout=30)
    text = requests.get(server.url + "/metrics", timeout=5).text
    for name in ("quarrel_requests_total{", "quarrel_tokens_total{", 'kind="prompt"', 'kind="generated"',
                 "quarrel_request_duration_seconds_bucket", "quarrel_time_to_first_token_seconds_bucket",
                 'quarrel_connections_active{kind="http"}', 'quarrel_connections_active{kind="ws"}',
                 "quarrel_queue_depth", "quarrel_kv_blocks_used", "quarrel_kv_blocks_free",
                 "quarrel_prefix_cache_hits_total", "quarrel_errors_total"):
        assert name in text, name
    assert requests.get(server.url + "/readyz", timeout=5).json()["status"] == "ready"
