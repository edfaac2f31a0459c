"""bench/soak.py (issue 32): the CI-sized soak — 24 concurrent streaming clients for 60 s against `quarrel serve`
on SmolLM2 with API keys and rate limits on, 20 % of the requests hanging up mid-stream — ends with 0 unexpected
outcomes, every route completing, 429s and 401s where expected, the KV blocks free, a clean SIGTERM exit and RSS
growth < 5 % after a 20 s warm-up. And the soak's judge can fail: against a server that answers 5xx, malformed
frames, a cut stream, a 429 without Retry-After, it exits 1 and names each kind."""
import json
import pathlib
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "soak.py"
ROUTES = ("openai_chat", "openai_completions", "ollama_chat", "ollama_generate", "ui_stream", "ws")


def test_soak_60s(quarrel_bin, smollm2, tmp_path):
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--bin", quarrel_bin, "--model", smollm2, "--clients", "24",
                        "--duration", "60", "--warmup", "20", "--threads", "2", "--parallel", "8",
                        "--max-tokens", "4,16", "--json", str(out), "--server-log", str(tmp_path / "server.log")],
                       capture_output=True, text=True, timeout=300)
    res = json.loads(out.read_text())
    assert r.returncode == 0 and res["ok"], (res.get("unexpected_samples"), res.get("rss"), r.stderr[-2000:])
    assert res["unexpected"] == 0 and res["server_exit_code"] == 0 and res["kv_blocks_used_after"] == 0
    assert res["rss"]["growth_pct"] < 5 and res["rss"]["samples"] >= 20
    o = res["outcomes"]
    assert o["complete"] >= 50 and o["hangup"] >= 10 and o["rate_limited"] >= 5, o
    for route in ROUTES:  # every route and transport carried complete streams and hang-ups
        assert res["by_route"][route].get("complete", 0) >= 3, res["by_route"]
    assert sum(res["by_route"][rt].get("hangup", 0) > 0 for rt in ROUTES) >= 5, res["by_route"]
    assert res["cancellations"] >= 1  # hang-ups mid-stream cancel on the server
    assert res["server_log"]["levels"].get("error", 0) == 0, res["server_log"]
    assert not any(s.startswith("5") for s in res["server_log"]["request_statuses"]), res["server_log"]


class Misbehaving(BaseHTTPRequestHandler):
    """A server that gets every route wrong in its own way (and refuses /ws)."""

    def log_message(self, *a):
        pass

    def send(self, status, body, ctype="application/json", headers=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.send(200, json.dumps({"data": [{"id": "fake"}]}))
        if self.path == "/metrics":
            return self.send(200, 'quarrel_kv_blocks_used{model="fake"} 0\n', "text/plain")
        self.send(404, json.dumps({"error": {"code": "NOT_FOUND", "message": "no"}}))

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        chunk = json.dumps({"object": "chat.completion.chunk", "choices": [{"delta": {"content": "x"}}]})
        if self.path == "/v1/chat/completions":  # a frame that is not JSON
            return self.send(200, f"data: {chunk}\n\ndata: {{oops\n\n", "text/event-stream")
        if self.path == "/v1/completions":
            return self.send(500, json.dumps({"error": {"code": "INFERENCE_ERROR", "message": "boom"}}))
        if self.path == "/api/chat":  # cut before done: true
            return self.send(200, json.dumps({"message": {"content": "x"}, "done": False}) + "\n", "application/x-ndjson")
        if self.path == "/api/generate":  # a 429 without Retry-After
            return self.send(429, json.dumps({"error": "slow down", "code": "RATE_LIMITED"}))
        if self.path == "/api/stream":  # an error frame inside a 200 stream
            return self.send(200, 'data: {"error": {"code": "INFERENCE_ERROR", "message": "x"}}\n\n', "text/event-stream")
        self.send(404, "{}")


def test_soak_reports_unexpected_outcomes(tmp_path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "soak.json"
        r = subprocess.run([sys.executable, str(SCRIPT), "--url", f"http://127.0.0.1:{httpd.server_port}",
                            "--key", "k", "--clients", "6", "--duration", "4", "--warmup", "1", "--hangup", "0",
                            "--bad-key", "0", "--json", str(out)], capture_output=True, text=True, timeout=120)
    finally:
        httpd.shutdown()
    assert r.returncode == 1, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert not res["ok"] and res["outcomes"].get("complete", 0) == 0
    kinds = res["unexpected_kinds"]
    for k in ("malformed", "http_500", "truncated", "bad_429", "error_frame", "transport"):
        assert kinds.get(k, 0) >= 1, kinds
    assert res["unexpected"] == sum(kinds.values()) == res["outcomes"]["unexpected"]
