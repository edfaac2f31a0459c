"""Fixtures of the operations tests (Docker/compose files, Prometheus, API docs, install + pkg-config,
man page). Helpers live in ops_helpers.py."""
import pathlib

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
