"""Model names on a temporary model directory ($QUARREL_MODELS_DIR) and Ollama store: `quarrel list` (size, type,
arch), short names (`quarrel run smollm2`: any unique, case-insensitive start of a file name), names in --help,
ambiguous and missing names, and `-m DIRECTORY`."""
import json
import os
import shutil
import subprocess

import pytest


def run(bin_, *args, env=None, timeout=300):
    return subprocess.run([bin_, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def store(tmp_path, smollm2):
    """A model directory with SmolLM2 and a copy under a second name, and an Ollama store with smollm2:135m."""
    models = tmp_path / "models"
    models.mkdir()
    os.symlink(smollm2, models / "SmolLM2-135M-Instruct.Q4_1.gguf")
    os.symlink(smollm2, models / "tiny-copy.gguf")
    (models / "notes.txt").write_text("not a model")
    (models / "broken.gguf").write_bytes(b"GGUF\x03\x00")  # listed, unreadable
    ollama = tmp_path / "ollama"
    (ollama / "blobs").mkdir(parents=True)
    digest = "d" * 64
    os.symlink(smollm2, ollama / "blobs" / f"sha256-{digest}")
    mdir = ollama / "manifests" / "registry.ollama.ai" / "library" / "smollm2"
    mdir.mkdir(parents=True)
    (mdir / "135m").write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                        "digest": "sha256:" + digest}]}))
    env = dict(os.environ, QUARREL_MODELS_DIR=str(models), OLLAMA_MODELS=str(ollama))
    return env, models


def test_list(quarrel_bin, store, smollm2):
    env, models = store
    r = run(quarrel_bin, "list", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ARCH", "TYPE", "PARAMS", "SIZE", "SOURCE"]
    rows = {l.split()[0]: l.split() for l in lines[1:]}
    assert set(rows) == {"SmolLM2-135M-Instruct.Q4_1", "broken", "tiny-copy", "smollm2:135m"}
    assert rows["SmolLM2-135M-Instruct.Q4_1"][1:4] == ["llama", "Q4_1", "135M"]
    assert rows["SmolLM2-135M-Instruct.Q4_1"][-1] == str(models) and rows["smollm2:135m"][-1] == "ollama"
    assert rows["broken"][2] == "unreadable"
    j = json.loads(run(quarrel_bin, "list", "--json", env=env).stdout)
    by = {m["name"]: m for m in j}
    m = by["SmolLM2-135M-Instruct.Q4_1"]
    assert m["size"] == os.path.getsize(smollm2) and m["arch"] == "llama" and m["type"] == "Q4_1"
    assert m["params"] > 100_000_000 and m["source"] == "models_dir"
    assert by["smollm2:135m"]["source"] == "ollama" and by["smollm2:135m"]["path"].endswith("sha256-" + "d" * 64)
    # an empty directory: nothing listed, a hint on stderr
    empty = dict(env, QUARREL_MODELS_DIR=str(models / "nope"), OLLAMA_MODELS=str(models / "nope"))
    r = run(quarrel_bin, "list", env=empty)
    assert r.returncode == 0 and r.stdout == "" and "no models" in r.stderr


def ids(quarrel_bin, model, env):
    r = run(quarrel_bin, "run", "-m", model, "-p", "The capital of France is", "-n", 6, "--temp", 0, "--ids-only",
            "-t", 2, env=env)
    assert r.returncode == 0, (model, r.stderr)
    return json.loads(r.stdout)


def test_short_names_resolve(quarrel_bin, store, smollm2):
    env, models = store
    want = ids(quarrel_bin, smollm2, env)
    for name in ("smollm2", "SMOLLM2-135m", "SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf",
                 "tiny", "smollm2:135m"):
        assert ids(quarrel_bin, name, env) == want, name
    # the positional form, as `ollama run`: quarrel run MODEL PROMPT
    r = run(quarrel_bin, "run", "smollm2", "The capital of France is", "-n", 6, "--temp", 0, "--ids-only", "-t", 2,
            env=env)
    assert r.returncode == 0 and json.loads(r.stdout) == want, r.stderr


def test_bad_names_and_directories(quarrel_bin, store):
    env, models = store
    r = run(quarrel_bin, "run", "-m", "nosuchmodel", "-p", "hi", env=env)
    assert r.returncode == 1 and "not found" in r.stderr and str(models) in r.stderr and "quarrel list" in r.stderr
    # an ambiguous start names the candidates
    shutil.copy(models / "tiny-copy.gguf", models / "tiny-other.gguf")
    r = run(quarrel_bin, "run", "-m", "tiny", "-p", "hi", env=env)
    assert r.returncode == 1 and "ambiguous" in r.stderr and "tiny-copy" in r.stderr and "tiny-other" in r.stderr
    # a directory is not a model
    r = run(quarrel_bin, "run", "-m", models, "-p", "hi", env=env)
    assert r.returncode == 1 and "is a directory" in r.stderr, r.stderr
    r = run(quarrel_bin, "serve", "-m", models, "--port", "0", env=env, timeout=60)
    assert r.returncode != 0 and "is a directory" in r.stderr, r.stderr
    # names never escape the directory
    r = run(quarrel_bin, "run", "-m", "../models/tiny-copy", "-p", "hi", env=env)
    assert r.returncode == 1 and "not found" in r.stderr


def test_help_shows_names_that_resolve(quarrel_bin, store):
    env, _ = store
    for args in (["--help"], ["run", "--help"], ["chat", "--help"]):
        r = run(quarrel_bin, *args, env=env)
        assert r.returncode == 0
        tail = r.stdout.split("quarrel list")[-1]
        for name in ("SmolLM2-135M-Instruct.Q4_1", "tiny-copy", "smollm2:135m"):
            assert name in tail, (args, r.stdout)
    empty = dict(env, QUARREL_MODELS_DIR="/nonexistent", OLLAMA_MODELS="/nonexistent")
    assert "quarrel list`;" not in run(quarrel_bin, "--help", env=empty).stdout
