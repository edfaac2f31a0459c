"""Fixtures of the `quarrel serve` integration tests: the real server process on 127.0.0.1 with a
free port, on the SmolLM2 model (fixtures fail, never skip, when the binary or the model is missing).

$QUARREL_BIN (default build/quarrel) and $QUARREL_MODELS_DIR (default ~/.cache/quarrel/models).
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import requests
from serve_util import wait_healthy

ROOT = pathlib.Path(__file__).resolve().parents[3]
SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"


def models_dir():
    return pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", str(pathlib.Path.home() / ".cache/quarrel/models")))


def _model(name):
    path = models_dir() / name
    if not path.exists():
        pytest.fail(f"model {path} not found: run scripts/setup.sh (or set QUARREL_MODELS_DIR)")
    return str(path)


@pytest.fixture(scope="session")
def smollm():
    return _model(SMOLLM)


@pytest.fixture(scope="session")
def gemma():
    return _model(GEMMA)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `quarrel serve` process. args: extra command-line arguments; env: extra environment."""

    def __init__(self, binary, models, args=(), env=None, threads=2, wait=True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="quarrel-serve-", suffix=".log", delete=False)
        cmd = [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "-t", str(threads)]
        for m in models:
            cmd += ["-m", m]
        cmd += list(args)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=full_env)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        wait_healthy(self.proc, self.url, self.logs, timeout)

    def logs(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def log_lines(self):
        out = []
        for line in self.logs().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        return out

    def metrics(self):
        """Prometheus text -> {name{labels}: value}."""
        out = {}
        for line in requests.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                key, val = line.rsplit(" ", 1)
                out[key] = float(val)
        return out

    def metric(self, name, **labels):
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return self.metrics().get(f"{name}{{{lab}}}" if lab else name, 0.0)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.log.name)
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(quarrel_bin, smollm):
    """The shared server: SmolLM2, 4 sequences, prefix cache on."""
    s = Server(quarrel_bin, [smollm], ["--parallel", "4", "--ctx", "8192", "--cors-origin", "http://allowed.example"])
    yield s
    s.stop()


@pytest.fixture
def make_server(quarrel_bin):
    """Factory for servers with their own options (stopped at the end of the test)."""
    started = []

    def make(models, args=(), env=None, wait=True):
        s = Server(quarrel_bin, models, args, env, wait=wait)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def run_greedy(binary, model, prompt, n, chat=False):
    """`quarrel run` greedy output (the reference of acceptance 3)."""
    cmd = [binary, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-q", "-t", "2"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    assert out.endswith("\n")
    return out[:-1]
