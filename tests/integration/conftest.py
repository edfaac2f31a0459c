"""Shared pytest fixtures of the integration tests.

Flight: the `flight_tool` test driver (built from tests/integration/flight_tool.c), the internal
shared library libquarrel_dev.so (for the C Data Interface test: qr_embed_batch_* are not public, so the
installed libquarrel.so does not export them) and `longbow`, a factory that starts
tests/integration/longbow_server.py on free loopback ports.
Paths come from $FLIGHT_TOOL / $QUARREL_DEV_LIB, else build/ (run `make build` first).
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "integration" / "longbow_server.py"


def build_file(env, name):
    """$env, else build/name; fails the test with a hint when it does not exist."""
    path = os.environ.get(env) or str(ROOT / "build" / name)
    if not os.path.exists(path):
        pytest.fail(f"{name} not found at {path}: run `make build` (or set {env})")
    return path


@pytest.fixture(scope="session")
def quarrel_bin():
    """The quarrel binary under test (every integration test directory uses this one fixture)."""
    return build_file("QUARREL_BIN", "quarrel")


@pytest.fixture(scope="session")
def smollm2():
    """The default model file (scripts/setup.sh puts it in $QUARREL_MODELS_DIR, default ~/.cache/quarrel/models)."""
    d = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))
    path = d / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.fail(f"model {path} not found: run scripts/setup.sh (or set QUARREL_MODELS_DIR)")
    return str(path)


@pytest.fixture(scope="session")
def flight_tool():
    return build_file("FLIGHT_TOOL", "flight-tool")


@pytest.fixture(scope="session")
def quarrel_lib():
    return build_file("QUARREL_DEV_LIB", "libquarrel_dev.so")


class LongbowServer:
    """One running longbow_server.py process (data + meta Flight servers)."""

    def __init__(self, args, data_port=0, meta_port=0):
        self.args = list(args)
        self.proc = None
        self.data_port = data_port
        self.meta_port = meta_port
        self.start()

    def start(self):
        cmd = [sys.executable, str(SERVER), "--data-port", str(self.data_port), "--meta-port", str(self.meta_port)]
        self.proc = subprocess.Popen(cmd + self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()
            raise RuntimeError(f"longbow_server.py did not start: {err}")
        ports = json.loads(line)
        self.data_port, self.meta_port = ports["data_port"], ports["meta_port"]

    @property
    def data(self):
        return f"127.0.0.1:{self.data_port}"

    @property
    def meta(self):
        return f"127.0.0.1:{self.meta_port}"

    def kill(self):
        """SIGKILL: the server dies mid-whatever (no clean shutdown)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.proc.stdout.close()
            self.proc.stderr.close()

    def restart(self):
        """Starts again on the same ports with the same options."""
        self.stop()
        deadline = time.time() + 10
        while True:
            try:
                self.start()
                return
            except (RuntimeError, json.JSONDecodeError):
                if time.time() > deadline:
                    raise
                time.sleep(0.2)


@pytest.fixture
def longbow():
    """Factory: longbow(*args, data_port=0, meta_port=0) -> LongbowServer (stopped after the test)."""
    servers = []

    def start(*args, data_port=0, meta_port=0):
        s = LongbowServer(args, data_port, meta_port)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
