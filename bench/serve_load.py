#!/usr/bin/env python3
"""Load test of `quarrel serve` (acceptance 4 of issue 6).

    load:     CLIENTS concurrent streaming clients for DURATION seconds, mixed SSE
              (/v1/chat/completions), NDJSON (/api/generate) and WebSocket (/ws); DISCONNECT of the
              requests hang up mid-stream. Checks: 0 unexpected errors, every disconnect frees its KV
              blocks (quarrel_kv_blocks_used back to 0, cancellations counted in /metrics), RSS flat
              (minute 1 vs the last minute within +-5 %). Reports tokens/s and TTFT / latency
              p50/p95/p99.
    batch:    aggregate decode tokens/s with 1 stream and with 16 concurrent streams (same prompt,
              fixed length, ignore_eos) -> the batching speed-up.

usage:
    bench/serve_load.py --bin build/quarrel --model ~/.cache/quarrel/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        [--mode load|batch|both] [--clients 128] [--duration 300] [--parallel 16] [--threads 0] [--json OUT]
    bench/serve_load.py --url http://127.0.0.1:8080 --pid PID ...      (an already running server)
Exit status 1 when a load check fails.
"""
import os
import sys

# bench/ holds scripts named like standard modules (tokenize.py): keep it off the import path
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import asyncio
import json
import random
import re
import signal
import socket
import statistics
import subprocess
import time

import httpx  # noqa: E402
import websockets  # noqa: E402

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works.",
    "List some facts about the moon.",
    "Describe your ideal weekend.",
    "What are the benefits of exercise?",
    "Summarize the plot of a detective novel you invent.",
]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metrics(url):
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def metric_sum(m, name):
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


async def wait_kv_free(url, timeout=30):
    """Polls /metrics until quarrel_kv_blocks_used (all models) is 0 or timeout seconds pass.
    Returns (the last metrics, the blocks still used)."""
    deadline = time.time() + timeout
    while True:
        m = metrics(url)
        used = metric_sum(m, "quarrel_kv_blocks_used")
        if used == 0 or time.time() > deadline:
            return m, used
        await asyncio.sleep(0.2)


class Stats:
    def __init__(self):
        self.ttft, self.latency = [], []
        self.tokens = 0
        self.done = self.disconnects = 0
        self.errors = []


async def one_sse(client, url, model, rng, hang_after, st):
    body = {"model": model, "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
            "max_tokens": rng.randint(32, 128), "temperature": 0.7, "stream": True}
    t0 = time.time()
    first = None
    n = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            st.errors.append(f"sse status {r.status_code}: {(await r.aread())[:200]!r}")
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                st.errors.append(f"sse error {obj['error']}")
                return
            if obj["choices"] and obj["choices"][0]["delta"].get("content"):
                n += 1
                if first is None:
                    first = time.time()
                if hang_after and n >= hang_after:
                    st.disconnects += 1
                    st.tokens += n
                    return  # leaving the block closes the connection mid-stream
    st.tokens += n
    st.done += 1
    if first:
        st.ttft.append(first - t0)
    st.latency.append(time.time() - t0)


async def one_ndjson(client, url, model, rng, hang_after, st):
    body = {"model": model, "prompt": rng.choice(PROMPTS),
            "options": {"num_predict": rng.randint(32, 128), "temperature": 0.7}}
    t0 = time.time()
    first = None
    n = 0
    async with client.stream("POST", url + "/api/generate", json=body) as r:
        if r.status_code != 200:
            st.errors.append(f"ndjson status {r.status_code}: {(await r.aread())[:200]!r}")
            return
        async for line in r.aiter_lines():
            if not line:
                continue
            obj = json.loads(line)
            if "error" in obj:
                st.errors.append(f"ndjson error {obj['error']}")
                return
            if obj.get("done"):
                break
            if obj.get("response"):
                n += 1
                if first is None:
                    first = time.time()
                if hang_after and n >= hang_after:
                    st.disconnects += 1
                    st.tokens += n
                    return
    st.tokens += n
    st.done += 1
    if first:
        st.ttft.append(first - t0)
    st.latency.append(time.time() - t0)


async def one_ws(url, model, rng, hang_after, st):
    t0 = time.time()
    first = None
    n = 0
    async with websockets.connect(url.replace("http", "ws") + "/ws", max_size=None, open_timeout=120,
                                  ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "inference", "payload": {
            "model": model, "prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(32, 128), "temperature": 0.7}}))
        while True:
            m = json.loads(await ws.recv())
            if m["type"] != "inference":
                st.errors.append(f"ws {m}")
                return
            p = m["payload"]
            if p["complete"]:
                break
            n += 1
            if first is None:
                first = time.time()
            if hang_after and n >= hang_after:
                st.disconnects += 1
                st.tokens += n
                return  # closing the socket mid-stream
    st.tokens += n
    st.done += 1
    if first:
        st.ttft.append(first - t0)
    st.latency.append(time.time() - t0)


async def client_loop(i, url, model, end, disconnect, st, seed):
    rng = random.Random(seed * 1000 + i)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
        while time.time() < end:
            hang = rng.randint(2, 12) if rng.random() < disconnect else 0
            kind = i % 3
            try:
                if kind == 0:
                    await one_sse(client, url, model, rng, hang, st)
                elif kind == 1:
                    await one_ndjson(client, url, model, rng, hang, st)
                else:
                    await one_ws(url, model, rng, hang, st)
            except Exception as e:  # noqa: BLE001 - every failure counts as an unexpected error
                st.errors.append(f"client {i} kind {kind}: {type(e).__name__}: {e}")


async def sample_rss(pid, end, samples, t0):
    while time.time() < end:
        samples.append((time.time() - t0, rss_kb(pid)))
        await asyncio.sleep(5)


async def run_load(args, url, pid, model):
    st = Stats()
    t0 = time.time()
    end = t0 + args.duration
    rss = []
    m0 = metrics(url)
    tasks = [client_loop(i, url, model, end, args.disconnect, st, args.seed) for i in range(args.clients)]
    if pid:
        tasks.append(sample_rss(pid, end, rss, t0))
    await asyncio.gather(*tasks)
    wall = time.time() - t0
    # every stream has ended: the KV blocks must all be free again
    m1, used = await wait_kv_free(url)
    gen = metric_sum(m1, "quarrel_tokens_total") - metric_sum(m0, "quarrel_tokens_total")
    generated = sum(v for k, v in m1.items() if k.startswith("quarrel_tokens_total{") and 'kind="generated"' in k) - \
        sum(v for k, v in m0.items() if k.startswith("quarrel_tokens_total{") and 'kind="generated"' in k)
    cancels = metric_sum(m1, "quarrel_cancellations_total") - metric_sum(m0, "quarrel_cancellations_total")
    res = {
        "clients": args.clients, "duration_s": round(wall, 1), "requests_completed": st.done,
        "disconnects": st.disconnects, "cancellations_counted": cancels, "unexpected_errors": len(st.errors),
        "error_samples": st.errors[:5], "kv_blocks_used_after": used,
        "tokens_received": st.tokens, "generated_tokens_server": generated, "tokens_per_s": round(generated / wall, 1),
        "all_tokens_server": gen,
        "ttft_s": {p: round(pct(st.ttft, p), 3) for p in (50, 95, 99)},
        "latency_s": {p: round(pct(st.latency, p), 3) for p in (50, 95, 99)},
    }
    ok = len(st.errors) == 0 and used == 0 and cancels >= st.disconnects * 0.95
    if rss:
        first_min = [v for t, v in rss if 50 <= t <= 70] or [rss[0][1]]
        last_min = [v for t, v in rss if t >= args.duration - 20] or [rss[-1][1]]
        a, b = statistics.mean(first_min), statistics.mean(last_min)
        res["rss_mb_minute1"] = round(a / 1024, 1)
        res["rss_mb_last"] = round(b / 1024, 1)
        res["rss_change_pct"] = round(100 * (b - a) / a, 2)
        res["rss_mb_max"] = round(max(v for _, v in rss) / 1024, 1)
        ok = ok and abs(b - a) <= 0.05 * a
    res["ok"] = ok
    return res


async def batch_tps(url, model, n_streams, n_tokens):
    prompt = "Tell me about the history of the printing press."

    async def one(client):
        body = {"model": model, "prompt": prompt, "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True}
        r = await client.post(url + "/v1/completions", json=body)
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        await one(client)  # warm-up
        t0 = time.time()
        toks = await asyncio.gather(*[one(client) for _ in range(n_streams)])
        dt = time.time() - t0
    return sum(toks) / dt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args):
    port = free_port()
    cmd = [args.bin, "serve", "-m", args.model, "--port", str(port), "--parallel", str(args.parallel),
           "--max-queue", str(max(256, args.clients * 2)), "--http-threads", str(max(256, args.clients * 2 + 16))]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    log = open(args.server_log, "w")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return p, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/quarrel")
    ap.add_argument("--model")
    ap.add_argument("--url")
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--mode", choices=["load", "batch", "both"], default="both")
    ap.add_argument("--clients", type=int, default=128)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--disconnect", type=float, default=0.25)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--server-log", default="/tmp/quarrel-serve-load.log")
    args = ap.parse_args()
    proc = None
    if args.url:
        url, pid = args.url, args.pid
    else:
        if not args.model:
            ap.error("--model or --url")
        proc, url = start_server(args)
        pid = proc.pid
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    out = {"model": model, "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}
    try:
        if args.mode in ("batch", "both"):
            t1 = asyncio.run(batch_tps(url, model, 1, args.batch_tokens))
            t16 = asyncio.run(batch_tps(url, model, 16, args.batch_tokens))
            out["batch"] = {"single_stream_tps": round(t1, 1), "16_streams_tps": round(t16, 1),
                            "speedup": round(t16 / t1, 2)}
            print(json.dumps(out["batch"]), flush=True)
        if args.mode in ("load", "both"):
            out["load"] = asyncio.run(run_load(args, url, pid, model))
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    if "load" in out and not out["load"]["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
