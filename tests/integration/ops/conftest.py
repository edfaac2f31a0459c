"""Fixtures of the operations tests (Docker/compose files, Prometheus, API docs, install + pkg-config,
man page). Helpers live in ops_helpers.py."""
import pathlib
import subprocess

import pytest

from ops_helpers import srv


@pytest.fixture(scope="session")
def build_dir(quarrel_bin):
    d = pathlib.Path(quarrel_bin).resolve().parent
    if not (d / "CMakeCache.txt").exists():
        pytest.fail(f"{d} is not a CMake build directory (QUARREL_BIN must be BUILD/quarrel)")
    return d


@pytest.fixture(scope="session")
def smollm():
    path = srv.models_dir() / srv.SMOLLM
    if not path.exists():
        pytest.fail(f"model {path} not found: run scripts/setup.sh (or set QUARREL_MODELS_DIR)")
    return str(path)


@pytest.fixture(scope="session")
def prefix(build_dir, tmp_path_factory):
    """The build installed into a temporary prefix (`cmake --install BUILD --prefix DIR`), shared by the
    install and C API tests."""
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", str(build_dir), "--prefix", str(p)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return p
