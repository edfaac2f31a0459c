"""bench/serve_bench.py against `quarrel serve` on the CPU at tiny sizes (a few seconds): the figures come
back in the JSON (the streams spread over client processes), the mixed long-prompt round runs, and a server that fails to start gives exit status 1
with its log, and leaves no process behind."""
import json
import pathlib
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "serve_bench.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_closed(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_quarrel_rounds_and_mixed(quarrel_bin, smollm2, tmp_path):
    port, out = free_port(), tmp_path / "serve.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--quarrel", quarrel_bin, "--model", smollm2, "--backend", "cpu",
                        "--threads", "2", "--concurrency", "2", "--prompt-tokens", "16", "--max-tokens", "6",
                        "--reps", "1", "--mixed", "--mixed-prompt-tokens", "80", "--mixed-delay", "0",
                        "--client-procs", "2", "--port", str(port), "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "| 2 | output tok/s, aggregate |" in r.stdout and "| 2 | TPOT with / without the long prompt |" in r.stdout
    res = json.loads(out.read_text())["results"]["quarrel"]["2"]
    assert len(res["rounds"]) == 1
    m = res["median"]
    assert m["tokens"] == 12  # 2 streams x 6 tokens (ignore_eos)
    for k in ("agg_tps", "ttft_ms", "tpot_ms", "mixed_tpot_ms", "mixed_tpot_ratio", "long_ttft_ms"):
        assert m[k] > 0, (k, m)
    assert m["long_prompt_tokens"] >= 80 and 16 <= m["prompt_tokens"] < 32, m
    assert 0 <= m["client_cpu"] < 2, m  # the busiest of the 2 client processes (one stream each)
    assert port_closed(port)  # the server was stopped


def test_server_that_does_not_start(smollm2, tmp_path):
    port = free_port()
    r = subprocess.run([sys.executable, str(SCRIPT), "--quarrel", "/bin/false", "--model", smollm2, "--backend", "cpu",
                        "--concurrency", "1", "--port", str(port), "--start-timeout", "20"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "quarrel exited with 1" in r.stderr and "log tail" in r.stderr, r.stderr


def test_bad_arguments(smollm2):
    r = subprocess.run([sys.executable, str(SCRIPT), "--quarrel", "/bin/false", "--model", smollm2,
                        "--concurrency", "256", "--mixed"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "at most 256 slots" in r.stderr, r.stderr
