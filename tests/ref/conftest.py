"""Shared pytest fixtures: the quarrel binary and the model files."""
import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def quarrel_bin():
    path = os.environ.get("QUARREL_BIN") or str(ROOT / "build" / "quarrel")
    if not os.path.exists(path):
        pytest.fail(f"quarrel binary not found at {path}: run `make build` first")
    return path


def models_dir():
    return pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))


@pytest.fixture(scope="session")
def smollm2():
    p = models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not p.exists():
        pytest.fail(f"default model missing: {p} (run scripts/setup.sh)")
    return p


@pytest.fixture(scope="session")
def gemma3():
    p = models_dir() / "gemma-3-270m-q4_k_m.gguf"
    if not p.exists():
        pytest.fail(f"test model missing: {p} (run scripts/setup.sh)")
    return p


def _synth(quarrel_bin, tmp_path_factory, arch):
    import subprocess
    out = tmp_path_factory.mktemp(f"synth-{arch}") / f"{arch}-tiny.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", arch, "--preset", "tiny", "--type", "F16", "--seed", "1",
                    "-o", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def synth_llama(quarrel_bin, tmp_path_factory):
    """The tiny synth llama model (byte-level BPE vocabulary, pre llama-bpe)."""
    return _synth(quarrel_bin, tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def synth_gemma3(quarrel_bin, tmp_path_factory):
    """The tiny synth gemma3 model (SentencePiece-style vocabulary)."""
    return _synth(quarrel_bin, tmp_path_factory, "gemma3")
