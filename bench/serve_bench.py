#!/usr/bin/env python3
"""bench/serve_bench.py — one streaming client against `quarrel serve` and llama.cpp's `llama-server` on the
same GGUF file; a side-by-side table with the ratio quarrel / llama-server. Standard library only (the GPU
machine has python3 without aiohttp/httpx): one thread and one http.client connection per request, the requests of a
round spread over several client processes at 32+ streams (--client-procs; the busiest one's CPU / wall is reported).

For each concurrency C the server starts with C slots (quarrel --parallel C, llama-server -np C) and a KV
cache of C x (prompt + max + 16) tokens, answers its health check and one warm-up request, then --reps rounds
each send C concurrent streaming POST /v1/completions at once: a prompt of about --prompt-tokens tokens (words
of a fixed list, a different request number and word order per request, so the prefix cache saves nothing),
max_tokens --max-tokens, temperature 0, ignore_eos. Per request: TTFT (send -> first text chunk), TPOT ((last
chunk - first chunk) / (tokens - 1)) and the tokens (the usage field, else the text chunks). Per round: the
median TTFT and TPOT over the requests and the aggregate output tok/s (all tokens / the round's wall time).
Reported: the median of those over the rounds.

--mixed: each round runs twice, the C streams alone, then the C streams again while one more request with a
prompt of --mixed-prompt-tokens arrives (once every stream has its first token, + --mixed-delay s); servers
get C + 1 slots (llama-server also --kv-unified, so the long prompt may use the whole cache). Reported: the
streams' median TPOT alone and with the long prompt, their ratio (near 1 when chunked prefill interleaves the
long prompt with the decode steps), the streams' median longest gap between chunks, and the long prompt's TTFT.

usage:
    python3 bench/serve_bench.py --quarrel build/quarrel [--llama-server PATH] --model MODEL.gguf \\
        [--concurrency 1,64,256] [--prompt-tokens 128] [--max-tokens 256] [--reps 3] [--backend cuda|cpu] \\
        [--threads N] [--port 8090] [--json OUT] [--log-dir DIR] [--mixed [--mixed-prompt-tokens 16000] [--mixed-delay 0.5]] \
        [--quarrel-arg=--prefill-chunk --quarrel-arg=128 ...] [--llama-arg=-ub --llama-arg=256 ...]
Exit status 1 when a server does not start or a request fails.
"""
import os
import sys

# bench/ holds scripts named like standard modules (tokenize.py): keep it off the import path
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import http.client
import json
import multiprocessing
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

WORDS = ("the quick brown fox jumps over a lazy dog while seven small birds sing in green trees near old "
         "stone bridge river water flows past quiet houses where people read books and drink warm tea every "
         "morning before they walk to work through busy streets full of cars bikes and friendly faces").split()
HOST = "127.0.0.1"


def make_prompt(i, n_words):
    """About n_words + 3 tokens: a request number, then the word list rotated by i (a prompt per i)."""
    words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(max(1, n_words))]
    return f"Request {i}: " + " ".join(words)


def words_for(a, tokens):
    """The words of a prompt of about `tokens` tokens (fit on the first server's /tokenize, see calibrate)."""
    fit = a.words_fit.get(tokens)
    return fit if fit else max(1, tokens - 3)


def count_tokens(port, model, text):
    """Tokens of text by the server's /tokenize (quarrel and llama-server: {"content"} -> {"tokens"}); None if absent."""
    body = {"content": text}
    if model:
        body["model"] = model
    req = urllib.request.Request(f"http://{HOST}:{port}/tokenize", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return len(json.loads(r.read())["tokens"])
    except (OSError, ValueError, KeyError):
        return None


def calibrate(port, model, a, targets):
    """For each target length, the word count whose prompt (make_prompt of request 0) tokenizes closest to it: a few
    secant steps on the first server's tokenizer (the same file, so the same counts for the second server)."""
    for target in targets:
        if target in a.words_fit:
            continue
        n, best = max(1, target - 3), None
        for _ in range(6):
            got = count_tokens(port, model, make_prompt(0, n))
            if got is None:
                return
            if best is None or abs(got - target) < abs(best[1] - target):
                best = (n, got)
            if got == target:
                break
            n = max(1, n + round((target - got) * n / max(got, 1)))
        a.words_fit[target] = best[0]
        print(f"#   prompts of ~{target} tokens: {best[0]} words ({best[1]} tokens)", file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


class Server:
    """One server process (its log in a temporary file); stop() kills it and waits."""

    def __init__(self, kind, cmd, port, health):
        self.kind, self.cmd, self.port, self.health = kind, cmd, port, health
        self.log = tempfile.NamedTemporaryFile(prefix=f"serve_bench_{kind}_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, n=30):
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def wait_ready(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.port}{self.health}", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.kind} not ready after {timeout} s")

    def model_id(self):
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.port}/v1/models", timeout=10) as r:
                return json.loads(r.read())["data"][0]["id"]
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def stop(self, keep=None):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=15)
        self.log.close()
        if keep:
            shutil.copyfile(self.log.name, keep)
        os.unlink(self.log.name)


def server_cmd(kind, a, slots, ctx):
    """The command line of `kind` (quarrel | llama) with `slots` sequences and a KV cache of ctx tokens."""
    if kind == "quarrel":
        cmd = [a.quarrel, "serve", "-m", a.model, "--parallel", str(slots), "--ctx", str(ctx), "--host", HOST,
               "--port", str(a.port), "--backend", a.backend, "--http-threads", str(max(256, slots + 16)),
               "--max-queue", str(max(64, slots + 16))]
        return cmd + (["--threads", str(a.threads)] if a.threads else []) + a.quarrel_arg, "/readyz"
    cmd = [a.llama_server, "-m", a.model, "-np", str(slots), "-c", str(ctx), "-ngl",
           "99" if a.backend == "cuda" else "0", "-fa", "on", "--host", HOST, "--port", str(a.port)]
    if a.mixed:
        cmd.append("--kv-unified")  # the long prompt needs more than ctx / slots
    return cmd + (["-t", str(a.threads)] if a.threads else []) + a.llama_arg, "/health"


class Request:
    """One streaming POST /v1/completions, run on its own thread; fills in its timings."""

    def __init__(self, port, model, prompt, max_tokens, timeout):
        self.port, self.timeout = port, timeout
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        if model:
            body["model"] = model
        self.body = json.dumps(body).encode()
        self.t_send = self.t_first = self.t_last = None
        self.chunk_times = []
        self.tokens = self.prompt_tokens = None
        self.error = None
        self.on_first = None  # called once at the first text chunk
        self.conn = http.client.HTTPConnection(HOST, port, timeout=timeout)

    def connect(self):
        try:
            self.conn.connect()
        except OSError as e:
            self.error = f"connect: {e}"

    def run(self):
        if self.error:
            return
        n_chunks = 0
        try:
            self.t_send = time.time()
            self.conn.request("POST", "/v1/completions", self.body, {"Content-Type": "application/json"})
            r = self.conn.getresponse()
            if r.status != 200:
                self.error = f"HTTP {r.status}: {r.read()[:300]!r}"
                return
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                if "error" in obj:
                    self.error = f"in-stream error: {obj['error']}"
                    return
                now = time.time()
                if obj.get("choices") and obj["choices"][0].get("text"):
                    n_chunks += 1
                    self.chunk_times.append(now)
                    if self.t_first is None:
                        self.t_first = now
                        if self.on_first:
                            self.on_first()
                    self.t_last = now
                if isinstance(obj.get("usage"), dict):
                    self.tokens = obj["usage"].get("completion_tokens")
                    self.prompt_tokens = obj["usage"].get("prompt_tokens")
        except (OSError, ValueError, http.client.HTTPException) as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.conn.close()
        if self.tokens is None:
            self.tokens = n_chunks
        if self.t_first is None and not self.error:
            self.error = "no text received"

    def ttft(self):
        return self.t_first - self.t_send if self.t_first else None

    def tpot(self):
        return (self.t_last - self.t_first) / (self.tokens - 1) if self.t_first and self.tokens > 1 else None

    def max_gap(self):
        t = self.chunk_times
        return max(b - a for a, b in zip(t, t[1:])) if len(t) > 1 else None


def _worker(specs, port, model, timeout, go, n_first, conn):
    """A client process (--client-procs): runs its share of a round's requests on threads once `go` is set, adds
    each first token (or error) to n_first, sends back each request's timings and this process's CPU seconds."""
    reqs = [Request(port, model, prompt, max_tokens, timeout) for prompt, max_tokens in specs]
    for r in reqs:
        r.connect()

    def run(r):
        r.on_first = lambda: _bump(n_first)
        r.run()
        if r.t_first is None:
            _bump(n_first)

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in reqs]
    go.wait()
    cpu0 = time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn.send(([{k: v for k, v in vars(r).items() if k not in ("conn", "body", "on_first")} for r in reqs],
               time.process_time() - cpu0))
    conn.close()


def _bump(counter):
    with counter.get_lock():
        counter.value += 1


def run_round(port, model, a, c, first_prompt, long_prompt=None):
    """C concurrent requests (prompts first_prompt .. first_prompt + C - 1), plus the long prompt once every
    stream has its first token when given. The requests run on threads of `procs` client processes (a Python
    process parses ~10-20k chunks a second under its GIL: one process would measure itself at high concurrency).
    Returns (the C requests, the long one or None, wall seconds, the busiest client process's CPU / wall)."""
    specs = [(make_prompt(first_prompt + i, words_for(a, a.prompt_tokens)), a.max_tokens) for i in range(c)]
    procs = a.client_procs if a.client_procs > 0 else (1 if c < 32 else min(max(1, (os.cpu_count() or 2) // 2),
                                                                            (c + 31) // 32))
    procs = min(procs, c)
    ctx = multiprocessing.get_context("fork")
    go, n_first = ctx.Event(), ctx.Value("i", 0)
    workers = []
    for p in range(procs):
        rd, wr = ctx.Pipe(duplex=False)
        w = ctx.Process(target=_worker, args=(specs[p::procs], port, model, a.timeout, go, n_first, wr), daemon=True)
        w.start()
        wr.close()
        workers.append((w, rd))
    time.sleep(0.2)  # the workers connect
    t0 = time.time()
    go.set()
    long_req = None
    if long_prompt is not None:
        while n_first.value < c and any(w.is_alive() for w, _ in workers):
            time.sleep(0.005)
        time.sleep(a.mixed_delay)
        long_req = Request(port, model, long_prompt, 8, a.timeout)
        long_req.connect()
        long_req.run()
    got, cpu = [None] * c, []
    for p, (w, rd) in enumerate(workers):
        try:
            states, cpu_s = rd.recv()
        except EOFError:
            raise RuntimeError("a client process died") from None
        w.join()
        for j, st in enumerate(states):
            r = Request.__new__(Request)
            r.__dict__.update(st)
            got[p + j * procs] = r
        cpu.append(cpu_s)
    wall = time.time() - t0
    bad = [r.error for r in got + ([long_req] if long_req else []) if r.error]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(got)} requests failed, e.g. {bad[0]}")
    return got, long_req, wall, max(cpu) / wall


def round_figures(reqs, wall, client_cpu):
    return {"client_cpu": client_cpu, "ttft_ms": median([r.ttft() for r in reqs]) * 1e3, "tpot_ms": median([r.tpot() for r in reqs]) * 1e3,
            "agg_tps": sum(r.tokens for r in reqs) / wall, "tokens": sum(r.tokens for r in reqs),
            "max_gap_ms": median([r.max_gap() for r in reqs]) * 1e3, "wall_s": wall,
            "prompt_tokens": median([r.prompt_tokens for r in reqs])}


def measure(kind, a, c):
    """Every round of concurrency c on server `kind`; returns {"rounds": [...], "median": {...}}."""
    slots = c + 1 if a.mixed else c
    ctx = c * (a.prompt_tokens + a.max_tokens + 16) + (a.mixed_prompt_tokens + 64 if a.mixed else 0)
    cmd, health = server_cmd(kind, a, slots, ctx)
    print(f"# {kind}, C={c}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    srv = Server(kind, cmd, a.port, health)
    try:
        srv.wait_ready(a.start_timeout)
        model = srv.model_id()
        calibrate(a.port, model, a, [a.prompt_tokens] + ([a.mixed_prompt_tokens] if a.mixed else []))
        warm = Request(a.port, model, make_prompt(10 ** 6, words_for(a, a.prompt_tokens)), min(16, a.max_tokens),
                       a.timeout)
        warm.run()
        if warm.error:
            raise RuntimeError(f"warm-up request failed: {warm.error}")
        rounds = []
        long_prompt = make_prompt(2 * 10 ** 6, words_for(a, a.mixed_prompt_tokens)) if a.mixed else None
        for rep in range(a.reps):
            reqs, _, wall, ccpu = run_round(a.port, model, a, c, (2 * rep) * c)
            fig = round_figures(reqs, wall, ccpu)
            if a.mixed:
                mreqs, long_req, mwall, mcpu = run_round(a.port, model, a, c, (2 * rep + 1) * c, long_prompt)
                mfig = round_figures(mreqs, mwall, mcpu)
                fig.update({"mixed_tpot_ms": mfig["tpot_ms"], "mixed_max_gap_ms": mfig["max_gap_ms"],
                            "mixed_tpot_ratio": mfig["tpot_ms"] / fig["tpot_ms"],
                            "long_ttft_ms": long_req.ttft() * 1e3, "long_prompt_tokens": long_req.prompt_tokens})
            rounds.append(fig)
            print(f"#   round {rep + 1}: " + ", ".join(f"{k} {v:.4g}" for k, v in fig.items() if v is not None),
                  file=sys.stderr, flush=True)
    except RuntimeError as e:
        raise RuntimeError(f"{kind}, C={c}: {e}\n--- {' '.join(cmd)}: log tail ---\n{srv.log_tail()}") from None
    finally:
        srv.stop(os.path.join(a.log_dir, f"{kind}_C{c}.log") if a.log_dir else None)
    keys = rounds[0].keys()
    return {"rounds": rounds, "median": {k: median([r[k] for r in rounds]) for k in keys}}


ROWS = [("agg_tps", "output tok/s, aggregate", "{:.1f}"), ("ttft_ms", "TTFT ms", "{:.1f}"),
        ("tpot_ms", "TPOT ms", "{:.2f}"), ("per_stream_tps", "tok/s a stream (1000 / TPOT)", "{:.1f}"),
        ("client_cpu", "busiest client process CPU / wall", "{:.2f}")]
MIXED_ROWS = [("mixed_tpot_ms", "TPOT ms, with the long prompt", "{:.2f}"),
              ("mixed_tpot_ratio", "TPOT with / without the long prompt", "{:.2f}"),
              ("max_gap_ms", "longest gap ms, alone", "{:.1f}"),
              ("mixed_max_gap_ms", "longest gap ms, with the long prompt", "{:.1f}"),
              ("long_ttft_ms", "long prompt TTFT ms", "{:.0f}")]


def table(results, a):
    servers = [s for s in ("quarrel", "llama") if s in results]
    names = {"quarrel": "quarrel", "llama": "llama-server"}
    head = "| C | metric | " + " | ".join(names[s] for s in servers)
    head += " | quarrel / llama-server |" if len(servers) == 2 else " |"
    lines = [head, "|" + "---|" * (2 + len(servers) + (len(servers) == 2))]
    for c in a.concurrency:
        for key, label, fmt in ROWS + (MIXED_ROWS if a.mixed else []):
            vals = []
            for s in servers:
                m = results[s][c]["median"]
                vals.append(1000 / m["tpot_ms"] if key == "per_stream_tps" else m[key])
            cells = [fmt.format(v) for v in vals]
            if len(vals) == 2:
                cells.append(f"{vals[0] / vals[1]:.2f}" if vals[1] else "-")
            lines.append(f"| {c} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def on_sigterm(signum, frame):
    """SIGTERM (a caller's timeout) unwinds like Ctrl-C, so that the running server is stopped."""
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quarrel", required=True, help="the quarrel binary")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (absent: quarrel only)")
    ap.add_argument("--model", required=True, help="the GGUF file both servers load")
    ap.add_argument("--concurrency", default="1,64,256", help="comma-separated list (default 1,64,256)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads of both servers (default: theirs)")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--json", help="write every round's figures here")
    ap.add_argument("--log-dir", help="keep each server's log here as KIND_C<concurrency>.log")
    ap.add_argument("--mixed", action="store_true", help="also measure the streams while a long prompt arrives")
    ap.add_argument("--mixed-prompt-tokens", type=int, default=16000)
    ap.add_argument("--mixed-delay", type=float, default=0.5, help="seconds after every stream's first token")
    ap.add_argument("--quarrel-arg", action="append", default=[], help="one more quarrel serve argument (repeatable)")
    ap.add_argument("--llama-arg", action="append", default=[], help="one more llama-server argument (repeatable)")
    ap.add_argument("--client-procs", type=int, default=0,
                    help="client processes a round's requests are spread over (default 0: 1 below 32 streams, else "
                         "one per 32 streams, at most half the CPUs)")
    ap.add_argument("--start-timeout", type=float, default=600, help="seconds for a server to load")
    ap.add_argument("--timeout", type=float, default=1800, help="socket timeout of a request, seconds")
    a = ap.parse_args()
    a.words_fit = {}  # prompt tokens -> words (calibrate)
    try:
        a.concurrency = [int(x) for x in a.concurrency.split(",") if x.strip()]
    except ValueError:
        ap.error("--concurrency: a comma-separated list of integers")
    if not a.concurrency or min(a.concurrency) < 1:
        ap.error("--concurrency: each value must be >= 1")
    if a.prompt_tokens < 4 or a.max_tokens < 2 or a.reps < 1 or (a.mixed and a.mixed_prompt_tokens < 4):
        ap.error("--prompt-tokens and --mixed-prompt-tokens must be >= 4, --max-tokens >= 2, --reps >= 1")
    if max(a.concurrency) + a.mixed > 256:  # quarrel serve --parallel is at most 256
        ap.error("quarrel serve takes at most 256 slots: concurrency <= 256 (<= 255 with --mixed)")
    for path in (a.quarrel, a.model) + ((a.llama_server,) if a.llama_server else ()):
        if not os.path.exists(path):
            ap.error(f"{path}: not found")
    signal.signal(signal.SIGTERM, on_sigterm)
    results = {}
    try:
        for kind in ("quarrel", "llama") if a.llama_server else ("quarrel",):
            results[kind] = {c: measure(kind, a, c) for c in a.concurrency}
    except RuntimeError as e:
        print(f"serve_bench: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the server of the moment was stopped on the way out (measure's finally)
        print("serve_bench: interrupted", file=sys.stderr)
        return 130
    print(f"\nprompt ~{a.prompt_tokens} tokens, max_tokens {a.max_tokens}, {a.reps} rounds (medians), backend "
          f"{a.backend}, model {os.path.basename(a.model)}" + (f", long prompt ~{a.mixed_prompt_tokens} tokens"
                                                              if a.mixed else "") + "\n")
    print(table(results, a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(a).items() if k != "json"},
                       "results": {s: {str(c): r for c, r in v.items()} for s, v in results.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
