#!/usr/bin/env python3
"""bench/soak.py — a soak test of `quarrel serve` with API keys and rate limits on (issue 32).

Starts `quarrel serve` on MODEL with a fresh key store (`quarrel keys create`: four keys on the server's
default limits --rate-rpm / --rate-tpm, one with a tight --rpm, one with a tight --tpm), then CLIENTS
concurrent clients each run streaming requests back to back for DURATION seconds over a random mix of
routes and transports: OpenAI SSE (/v1/chat/completions, /v1/completions), Ollama NDJSON (/api/chat,
/api/generate), the UI's SSE (/api/stream) and /ws (a socket kept across requests). A share --hangup of the
requests hang up (after 0-8 tokens, or at a random moment 0.05-1 s in, while queued or prefilling; /ws half by
a close frame, half by dropping the TCP connection), a share --bad-key present a key the store does not know.

Every request ends in one outcome. Expected: "complete" (200 and a well-formed stream to its end marker:
finish_reason stop|length, at most max_tokens tokens), "rate_limited" (429 with Retry-After >= 1 and
error.code RATE_LIMITED; on /ws the in-band error RATE_LIMITED; the client then waits Retry-After),
"unauthorized" (401 UNAUTHORIZED for a bad key only), "hangup" (the client's own). Anything else is
unexpected: another status (5xx included), a malformed frame, an error frame, a stream cut before its end,
a transport error, a time-out, the server exiting. After the load: the KV blocks must all be free again
(/metrics quarrel_kv_blocks_used), and SIGTERM must end the server with status 0.

RSS (/proc/PID/status VmRSS) is sampled every 2 s; growth = the median over [WARMUP, WARMUP + W] against
the median over the last W seconds of the load (W = min(30, (DURATION - WARMUP) / 4)).
Prints a JSON summary; exit status 1 on any unexpected outcome, KV blocks left, an unclean exit or RSS
growth >= --rss-limit percent.

usage:
    bench/soak.py --bin build/quarrel --model ~/.cache/quarrel/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        [--clients 64] [--duration 600] [--warmup 60] [--hangup 0.2] [--bad-key 0.02] [--max-tokens 8,48] \\
        [--parallel 16] [--threads 2] [--seed 1] [--json OUT] [--server-log PATH]
    bench/soak.py --url http://127.0.0.1:8080 --key KEY [--key KEY2 ...] [--pid PID] ...   (a running server)
"""
import os
import sys

# bench/ holds scripts named like standard modules (tokenize.py): keep it off the import path
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import asyncio
import collections
import importlib.util
import json
import random
import re
import signal
import statistics
import subprocess
import tempfile
import time

import httpx  # noqa: E402
from websockets.asyncio.client import connect as ws_connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.protocol import State  # noqa: E402

_spec = importlib.util.spec_from_file_location("serve_load", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                          "serve_load.py"))
serve_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_load)
PROMPTS, rss_kb, metric_sum, free_port = serve_load.PROMPTS, serve_load.rss_kb, serve_load.metric_sum, serve_load.free_port

ROUTES = ("openai_chat", "openai_completions", "ollama_chat", "ollama_generate", "ui_stream", "ws")
BAD_KEY = "qr-000000000000-" + "0" * 40
FINISH = ("stop", "length")


class Unexpected(Exception):
    """An outcome the server must never produce: kind (a short category) and detail."""

    def __init__(self, kind, detail=""):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, str(detail)[:300]


class Stream:
    """Checks the frames of one streaming answer. feed(obj) takes one decoded frame (a JSON object, or
    "[DONE]" for the SSE terminator) and returns the tokens it carried; ended is set by the end marker."""

    def __init__(self, route, max_tokens):
        self.route, self.max_tokens = route, max_tokens
        self.tokens = 0
        self.finish = None  # finish_reason once seen
        self.ended = False

    def feed(self, obj):
        if self.ended:
            raise Unexpected("malformed", f"a frame after the end: {obj!r}")
        if obj == "[DONE]":
            if self.route not in ("openai_chat", "openai_completions", "ui_stream") or self.finish is None:
                raise Unexpected("malformed", f"[DONE] before a finish_reason on {self.route}")
            self.ended = True
            return 0
        if not isinstance(obj, dict):
            raise Unexpected("malformed", f"not an object: {obj!r}")
        if "error" in obj:
            raise Unexpected("error_frame", obj["error"])
        n = getattr(self, "_" + self.route)(obj)
        self.tokens += n
        if self.tokens > self.max_tokens:
            raise Unexpected("malformed", f"{self.tokens} tokens > max_tokens {self.max_tokens}")
        return n

    def _finished(self, reason):
        if reason not in FINISH:
            raise Unexpected("malformed", f"finish_reason {reason!r}")
        if self.finish is not None:
            raise Unexpected("malformed", "two finish_reasons")
        self.finish = reason

    def _openai(self, obj, kind, field):
        if obj.get("object") != kind or not isinstance(obj.get("choices"), list):
            raise Unexpected("malformed", f"not a {kind}: {obj!r}")
        if not obj["choices"]:  # the usage chunk, after the finish_reason
            if self.finish is None or not isinstance(obj.get("usage"), dict):
                raise Unexpected("malformed", f"empty choices: {obj!r}")
            return 0
        c = obj["choices"][0]
        delta = c.get("delta") if field == "delta" else None
        text = delta.get("content") if isinstance(delta, dict) else c.get("text")
        if field == "delta" and text is None and isinstance(delta, dict) and set(delta) <= {
                "role", "content", "tool_calls", "reasoning_content"}:
            text = ""  # a delta without text: role only, a tool call, reasoning, held-back text, the finish
        if not isinstance(text, str):
            raise Unexpected("malformed", f"no text in {obj!r}")
        if c.get("finish_reason") is not None:
            self._finished(c["finish_reason"])
            return 0
        return 1

    def _openai_chat(self, obj):
        return self._openai(obj, "chat.completion.chunk", "delta")

    def _openai_completions(self, obj):
        return self._openai(obj, "text_completion", "text")

    def _ollama(self, obj, text):
        if not isinstance(obj.get("done"), bool) or not isinstance(text, str):
            raise Unexpected("malformed", f"not an Ollama frame: {obj!r}")
        if obj["done"]:
            self._finished(obj.get("done_reason"))
            self.ended = True
            return 0
        return 1

    def _ollama_chat(self, obj):
        return self._ollama(obj, (obj.get("message") or {}).get("content"))

    def _ollama_generate(self, obj):
        return self._ollama(obj, obj.get("response"))

    def _ui_stream(self, obj):  # also the payload of /ws inference messages
        if not isinstance(obj.get("complete"), bool) or not isinstance(obj.get("token"), str):
            raise Unexpected("malformed", f"not a stream frame: {obj!r}")
        if obj["complete"]:
            self._finished(obj.get("finish_reason"))
            if self.route == "ws":
                self.ended = True
            return 0
        return 1

    _ws = _ui_stream


def request_body(route, model, rng, max_tokens):
    prompt = rng.choice(PROMPTS)
    msgs = [{"role": "user", "content": prompt}]
    opts = {"temperature": 0.7, "top_k": 40}
    if route == "openai_chat":
        return "/v1/chat/completions", {"model": model, "messages": msgs, "max_tokens": max_tokens, "stream": True,
                                        "stream_options": {"include_usage": True}, **opts}
    if route == "openai_completions":
        return "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, **opts}
    if route == "ollama_chat":
        return "/api/chat", {"model": model, "messages": msgs, "options": {"num_predict": max_tokens, **opts}}
    if route == "ollama_generate":
        return "/api/generate", {"model": model, "prompt": prompt, "options": {"num_predict": max_tokens, **opts}}
    return "/api/stream", {"model": model, "messages": msgs, "max_tokens": max_tokens, **opts}  # ui_stream, ws


def check_refusal(status, headers, body, bad_key):
    """The outcome of a non-200 answer: rate_limited / unauthorized (expected ones), else Unexpected.
    Returns (outcome, seconds to wait)."""
    try:
        j = json.loads(body)
        code = j["error"]["code"] if isinstance(j["error"], dict) else j.get("code")  # OpenAI / Ollama form
    except (ValueError, KeyError, TypeError, AttributeError):
        code = None
    if status == 429 and code == "RATE_LIMITED":
        ra = headers.get("retry-after", "")
        if not ra.isdigit() or int(ra) < 1:
            raise Unexpected("bad_429", f"Retry-After {ra!r}")
        return "rate_limited", int(ra)
    if status == 401 and code == "UNAUTHORIZED" and bad_key:
        return "unauthorized", 0
    raise Unexpected(f"http_{status}", body[:200])


async def http_request(client, url, route, key, model, rng, max_tokens, hang_after):
    """One streaming HTTP request. Returns (outcome, tokens, wait_s); raises Unexpected."""
    path, body = request_body(route, model, rng, max_tokens)
    st = Stream(route, max_tokens)
    ndjson = route.startswith("ollama")
    async with client.stream("POST", url + path, json=body, headers={"Authorization": "Bearer " + key}) as r:
        if r.status_code != 200:
            outcome, wait = check_refusal(r.status_code, r.headers, (await r.aread()).decode("utf-8", "replace"),
                                          key == BAD_KEY)
            return outcome, 0, wait
        if hang_after == 0:
            return "hangup", 0, 0  # leaving the block closes the connection
        async for line in r.aiter_lines():
            if not line or line.startswith(":"):
                continue
            if ndjson:
                frame = line
            elif line.startswith("data: "):
                frame = line[6:]
            else:
                raise Unexpected("malformed", f"SSE line {line[:120]!r}")
            if frame == "[DONE]" and not ndjson:
                obj = frame
            else:
                try:
                    obj = json.loads(frame)
                except ValueError:
                    raise Unexpected("malformed", f"not JSON: {frame[:120]!r}") from None
            if st.feed(obj) and hang_after is not None and st.tokens >= hang_after:
                return "hangup", st.tokens, 0
        if not st.ended:
            raise Unexpected("truncated", f"{route} ended after {st.tokens} tokens without its end marker")
    return "complete", st.tokens, 0


class WsClient:
    """One client's /ws connection, opened on demand and kept across requests."""

    def __init__(self, url):
        self.url = url.replace("http://", "ws://") + "/ws"
        self.ws = None
        self.key = None

    async def drop(self, abrupt=False):
        ws, self.ws = self.ws, None
        if ws is None:
            return
        if abrupt:
            ws.transport.abort()
        else:
            await ws.close()

    async def drop_if_closed(self):
        if self.ws is not None and self.ws.state is not State.OPEN:
            await self.drop()

    async def request(self, key, model, rng, max_tokens, hang_after, timeout):
        if self.ws is not None and self.key != key:
            await self.drop()
        if self.ws is None:
            self.ws = await ws_connect(self.url, additional_headers={"Authorization": "Bearer " + key},
                                       max_size=None, open_timeout=timeout, ping_interval=None, close_timeout=5)
            self.key = key
        _, body = request_body("ws", model, rng, max_tokens)
        try:
            await self.ws.send(json.dumps({"type": "inference", "payload": body}))
        except ConnectionClosed:
            pass  # a refused handshake (401, 429): its error message is still to be read
        st = Stream("ws", max_tokens)
        while not st.ended:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), timeout)
            except asyncio.TimeoutError:
                raise Unexpected("timeout", f"/ws: no message for {timeout} s") from None
            try:
                m = json.loads(raw)
            except ValueError:
                raise Unexpected("malformed", f"/ws: not JSON: {raw[:120]!r}") from None
            if not isinstance(m, dict):
                raise Unexpected("malformed", f"/ws: {m!r}")
            p = m.get("payload") or {}
            if m.get("type") == "error":
                code = p.get("code")
                if code == "RATE_LIMITED" and st.tokens == 0:
                    wait = re.search(r"retry in (\d+) s", p.get("message", ""))
                    if not wait or int(wait.group(1)) < 1:
                        raise Unexpected("bad_429", f"/ws: {p!r}")
                    await self.drop_if_closed()  # refused at the handshake: the server closes
                    return "rate_limited", 0, int(wait.group(1))
                if code == "UNAUTHORIZED" and key == BAD_KEY and st.tokens == 0:
                    await self.drop()
                    return "unauthorized", 0, 0
                raise Unexpected("error_frame", f"/ws: {p!r}")
            if m.get("type") != "inference" or not isinstance(p, dict):
                raise Unexpected("malformed", f"/ws: {m!r}")
            if st.feed(p) and hang_after is not None and st.tokens >= hang_after:
                await self.drop(abrupt=rng.random() < 0.5)
                return "hangup", st.tokens, 0
        return "complete", st.tokens, 0


class Results:
    def __init__(self):
        self.outcomes = collections.Counter()  # (route, outcome)
        self.unexpected = []
        self.tokens = 0
        self.latency = collections.defaultdict(list)  # route -> seconds of complete requests

    def add_unexpected(self, t, route, kind, detail):
        self.unexpected.append({"t": round(t, 1), "route": route, "kind": kind, "detail": detail})


async def client_loop(i, args, url, model, keys, end, res, t0, stop):
    rng = random.Random(args.seed * 100003 + i)
    key = keys[i % len(keys)]
    lo, hi = args.max_tokens
    ws = WsClient(url)
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.timeout), limits=limits) as client:
        while time.time() < end and not stop.is_set():
            route = rng.choice(ROUTES)
            use = BAD_KEY if rng.random() < args.bad_key else key
            hang = rng.randint(0, 8) if rng.random() < args.hangup else None
            n_max = rng.randint(lo, hi)
            early = rng.uniform(0.05, 1.0) if hang == 0 and rng.random() < 0.5 else None
            t = time.time()
            try:
                if route == "ws":
                    req = ws.request(use, model, rng, n_max, hang, args.timeout)
                else:
                    req = http_request(client, url, route, use, model, rng, n_max, hang)
                if early is None:
                    outcome, n, wait = await req
                else:  # hangs up after `early` seconds, before the answer or its first token if still waiting
                    try:
                        outcome, n, wait = await asyncio.wait_for(req, early)
                    except TimeoutError:
                        outcome, n, wait = "hangup", 0, 0
                        await ws.drop(abrupt=True)
            except Unexpected as e:
                res.add_unexpected(t - t0, route, e.kind, e.detail)
                outcome, n, wait = "unexpected", 0, 1
                await ws.drop(abrupt=True)
            except (httpx.TimeoutException, asyncio.TimeoutError) as e:
                res.add_unexpected(t - t0, route, "timeout", f"{type(e).__name__}: {e}")
                outcome, n, wait = "unexpected", 0, 1
                await ws.drop(abrupt=True)
            except Exception as e:  # noqa: BLE001 - transport errors, closed sockets: all unexpected
                res.add_unexpected(t - t0, route, "transport", f"{type(e).__name__}: {e}")
                outcome, n, wait = "unexpected", 0, 1
                await ws.drop(abrupt=True)
            res.outcomes[(route, outcome)] += 1
            res.tokens += n
            if outcome == "complete":
                res.latency[route].append(time.time() - t)
            if wait:
                await asyncio.sleep(min(wait, max(0.0, end - time.time())))
    await ws.drop()


async def watch(proc, pid, end, rss, res, t0, stop):
    """Samples RSS every 2 s; ends the run early when the server exits."""
    while time.time() < end and not stop.is_set():
        if proc is not None and proc.poll() is not None:
            res.add_unexpected(time.time() - t0, "-", "server_exit", f"the server exited with {proc.returncode}")
            stop.set()
            return
        if pid:
            rss.append((time.time() - t0, rss_kb(pid)))
        await asyncio.sleep(2)


def rss_summary(rss, warmup, duration, limit_pct):
    w = min(30.0, max(2.0, (duration - warmup) / 4))
    base = [v for t, v in rss if warmup <= t <= warmup + w]
    last = [v for t, v in rss if t >= duration - w]
    if not base or not last:
        return {"note": "too few RSS samples"}, True
    a, b = statistics.median(base), statistics.median(last)
    growth = 100 * (b - a) / a
    return {"window_s": round(w, 1), "after_warmup_mb": round(a / 1024, 1), "end_mb": round(b / 1024, 1),
            "max_mb": round(max(v for _, v in rss) / 1024, 1), "growth_pct": round(growth, 2),
            "samples": len(rss)}, growth < limit_pct


async def run(args, url, proc, pid, keys, model):
    res = Results()
    stop = asyncio.Event()
    t0 = time.time()
    end = t0 + args.duration
    rss = []
    tasks = [client_loop(i, args, url, model, keys, end, res, t0, stop) for i in range(args.clients)]
    tasks.append(watch(proc, pid, end, rss, res, t0, stop))
    await asyncio.gather(*tasks)
    wall = time.time() - t0
    out = {"clients": args.clients, "duration_s": round(wall, 1), "warmup_s": args.warmup,
           "hangup_share": args.hangup, "bad_key_share": args.bad_key, "max_tokens": args.max_tokens}
    by_outcome = collections.Counter()
    for (route, outcome), n in res.outcomes.items():
        by_outcome[outcome] += n
    out["requests"] = sum(by_outcome.values())
    out["outcomes"] = dict(sorted(by_outcome.items()))
    out["by_route"] = {r: {o: n for (rr, o), n in sorted(res.outcomes.items()) if rr == r} for r in ROUTES}
    out["tokens_received"] = res.tokens
    out["tokens_per_s"] = round(res.tokens / wall, 1)
    lat = [x for v in res.latency.values() for x in v]
    out["complete_latency_s"] = {p: round(serve_load.pct(lat, p), 2) for p in (50, 95, 99)}
    ok_rss = True
    if pid:
        out["rss"], ok_rss = rss_summary(rss, args.warmup, args.duration, args.rss_limit)
    used = None
    if not stop.is_set():  # the server is up: every stream has ended, so its KV blocks must all be free
        m, used = await serve_load.wait_kv_free(url)
        out["kv_blocks_used_after"] = used
        out["cancellations"] = metric_sum(m, "quarrel_cancellations_total")
        out["server_requests_total"] = metric_sum(m, "quarrel_requests_total")
        if used:
            res.add_unexpected(wall, "-", "kv_leak", f"{used} KV blocks still used 30 s after the load")
    out["unexpected"] = len(res.unexpected)
    out["unexpected_kinds"] = dict(collections.Counter(u["kind"] for u in res.unexpected))
    out["unexpected_samples"] = res.unexpected[:20]
    return out, ok_rss


def make_keys(args, db):
    """Creates the store's keys; returns the plain keys (four on the server defaults, one tight rpm, one tight tpm:
    client i uses key i % 6)."""
    specs = [(f"soak-default-{i}", []) for i in range(4)]
    specs += [("soak-tight-rpm", ["--rpm", str(args.tight_rpm)]), ("soak-tight-tpm", ["--tpm", str(args.tight_tpm)])]
    keys = []
    for name, extra in specs:
        r = subprocess.run([args.bin, "keys", "create", "--db", db, "--name", name, *extra, "--json"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise SystemExit(f"quarrel keys create failed: {r.stderr}")
        keys.append(json.loads(r.stdout)["key"])
    return keys


def start_server(args, db, log):
    port = free_port()
    cmd = [args.bin, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
           "--parallel", str(args.parallel), "--max-queue", str(args.clients * 2),
           "--http-threads", str(args.clients * 2 + 16), "--api-key-db", db,
           "--rate-rpm", str(args.rate_rpm), "--rate-tpm", str(args.rate_tpm)]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"quarrel serve exited with {proc.returncode}; log: {args.server_log}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"quarrel serve did not start; log: {args.server_log}")


def log_summary(path):
    """Counts of the server log's levels and of its request lines' statuses."""
    levels, statuses = collections.Counter(), collections.Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                levels["not_json"] += 1
                continue
            levels[j.get("level", "?")] += 1
            if j.get("msg") == "request":
                statuses[str(j.get("status"))] += 1
    return {"levels": dict(levels), "request_statuses": dict(sorted(statuses.items()))}


def stop_server(proc):
    """SIGTERM (drain); the exit status (-9 when it had to be killed)."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/quarrel")
    ap.add_argument("--model")
    ap.add_argument("--url", help="an already running server (with --key)")
    ap.add_argument("--key", action="append", default=[], help="API key for --url (repeatable)")
    ap.add_argument("--pid", type=int, default=0, help="the --url server's process id (RSS)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--hangup", type=float, default=0.2)
    ap.add_argument("--bad-key", type=float, default=0.02)
    ap.add_argument("--max-tokens", default="8,48", help="LO,HI: max_tokens per request, uniform")
    ap.add_argument("--timeout", type=float, default=120, help="seconds without progress before a request is unexpected")
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rate-rpm", type=float, default=600, help="the server's default per-key requests per minute")
    ap.add_argument("--rate-tpm", type=float, default=60000, help="the server's default per-key tokens per minute")
    ap.add_argument("--tight-rpm", type=float, default=12, help="rpm of the tight key")
    ap.add_argument("--tight-tpm", type=float, default=600, help="tpm of the tight-tokens key")
    ap.add_argument("--rss-limit", type=float, default=5.0, help="RSS growth (percent) that fails the run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--server-log", default=os.path.join(tempfile.gettempdir(), "quarrel-soak.log"))
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.max_tokens.split(","))
    args.max_tokens = (lo, hi)
    if args.warmup >= args.duration:
        ap.error("--warmup must be shorter than --duration")
    proc, tmp = None, None
    if args.url:
        if not args.key:
            ap.error("--url needs --key")
        url, pid, keys = args.url.rstrip("/"), args.pid, args.key
    else:
        if not args.model:
            ap.error("--model or --url")
        tmp = tempfile.TemporaryDirectory(prefix="quarrel-soak-")
        db = os.path.join(tmp.name, "keys.db")
        keys = make_keys(args, db)
        log = open(args.server_log, "w")
        proc, url = start_server(args, db, log)
        pid = proc.pid
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count()}
    try:
        r = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer " + keys[0]}, timeout=30)
        model = r.json()["data"][0]["id"] if r.status_code == 200 else "default"
        out["model"] = model
        load, ok_rss = asyncio.run(run(args, url, proc, pid, keys, model))
        out.update(load)
    finally:
        if proc:
            code = stop_server(proc)
            out["server_exit_code"] = code
            if code != 0 and "unexpected" in out and "server_exit" not in out["unexpected_kinds"]:
                out["unexpected"] += 1
                out["unexpected_kinds"]["server_exit"] = 1
            out["server_log"] = log_summary(args.server_log)
        if tmp:
            tmp.cleanup()
    out["ok"] = out["unexpected"] == 0 and ok_rss
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
