"""bench/gpu_serve_smoke.py — `quarrel serve` on the GPU with one model: a request alone, then 16 concurrent
greedy requests of 48 tokens (the scheduler batches them: hybrid models through the SSM state pool, MoE
models through the batched expert kernels). Prints how many returned all their tokens, whether request 0
gives the same text batched as alone, and the server's KV / SSM metrics. Standard library only (the
device machine has no httpx).

    python3 bench/gpu_serve_smoke.py QUARREL MODEL.gguf PORT [cuda|cpu]
"""
import json, subprocess, sys, threading, time, urllib.request
qr, model, port = sys.argv[1], sys.argv[2], sys.argv[3]
backend = sys.argv[4] if len(sys.argv) > 4 else "cuda"
srv = subprocess.Popen([qr, "serve", "-m", model, "--backend", backend, "--port", port, "--parallel", "8"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
base = f"http://127.0.0.1:{port}"
for _ in range(120):
    try:
        urllib.request.urlopen(base + "/readyz", timeout=2).read(); break
    except Exception:
        time.sleep(0.5)
name = json.loads(urllib.request.urlopen(base + "/v1/models").read())["data"][0]["id"]
def ask(i, out):
    body = json.dumps({"model": name, "prompt": f"Request {i}: the numbers are", "max_tokens": 48, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    t = time.time()
    try:
        r = json.loads(urllib.request.urlopen(req, timeout=120).read())
        out[i] = (r["usage"]["completion_tokens"], r["choices"][0]["text"], time.time() - t)
    except Exception as e:
        out[i] = (None, repr(e), time.time() - t)
solo = {}
ask(0, solo)
out = {}
th = [threading.Thread(target=ask, args=(i, out)) for i in range(16)]
t0 = time.time(); [x.start() for x in th]; [x.join() for x in th]; wall = time.time() - t0
ok = sum(1 for v in out.values() if v[0] == 48)
m = urllib.request.urlopen(base + "/metrics").read().decode()
keep = [l for l in m.splitlines() if l.startswith(("quarrel_batch", "quarrel_kv_blocks_used", "quarrel_ssm_state_bytes",
                                                  "quarrel_ssm_divergence_total", "quarrel_requests_total"))][:12]
print(f"{model}: 16 concurrent requests: {ok}/16 returned 48 tokens in {wall:.2f} s "
      f"({16 * 48 / wall:.0f} tok/s aggregate; one alone {solo[0][2]:.2f} s); request 0 batched == alone: "
      f"{out[0][1] == solo[0][1]}")
print("\n".join(keep))
bad = [v for v in out.values() if v[0] != 48]
if bad: print("errors:", bad[:3])
srv.terminate(); srv.wait(timeout=30)
