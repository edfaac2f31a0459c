"""The generation CLI: Ollama-name resolution, bad input (clear errors and exit codes, no crash)."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import gguf


def run(bin_, *args, env=None, timeout=300):
    return subprocess.run([bin_, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def assert_clean_error(r, code, *needles):
    """Exit code as expected, a message on stderr, no sanitizer report or signal."""
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stderr.strip(), "expected an error message"
    for n in needles:
        assert n.lower() in r.stderr.lower(), (n, r.stderr)
    assert "Sanitizer" not in r.stderr


@pytest.fixture(scope="module")
def ollama_store(tmp_path_factory, smollm2):
    """A hand-made Ollama model store holding smollm2:135m."""
    store = tmp_path_factory.mktemp("ollama")
    digest = "a" * 64  # the store is addressed by digest; the test does not need the real hash
    (store / "blobs").mkdir()
    blob = store / "blobs" / f"sha256-{digest}"
    try:
        os.link(smollm2, blob)
    except OSError:
        shutil.copy(smollm2, blob)
    mdir = store / "manifests" / "registry.ollama.ai" / "library" / "smollm2"
    mdir.mkdir(parents=True)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "b" * 64,
                           "size": 1},
                "layers": [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "c" * 64, "size": 1},
                           {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + digest,
                            "size": os.path.getsize(smollm2)}]}
    (mdir / "135m").write_text(json.dumps(manifest))
    (mdir / "broken").write_text("{not json")
    return store


def test_ollama_name_resolves(quarrel_bin, smollm2, ollama_store):
    env = dict(os.environ, OLLAMA_MODELS=str(ollama_store))
    by_name = run(quarrel_bin, "run", "-m", "smollm2:135m", "-p", "The capital of France is", "-n", 8, "--temp", 0,
                  "--ids-only", "-t", 2, env=env)
    assert by_name.returncode == 0, by_name.stderr
    by_path = run(quarrel_bin, "run", "-m", smollm2, "-p", "The capital of France is", "-n", 8, "--temp", 0,
                  "--ids-only", "-t", 2)
    assert by_path.returncode == 0, by_path.stderr
    assert json.loads(by_name.stdout) == json.loads(by_path.stdout)
    assert len(json.loads(by_name.stdout)) == 8


def test_ollama_bad_names(quarrel_bin, ollama_store):
    env = dict(os.environ, OLLAMA_MODELS=str(ollama_store))
    assert_clean_error(run(quarrel_bin, "run", "-m", "nosuch:7b", "-p", "hi", env=env), 1, "not found")
    assert_clean_error(run(quarrel_bin, "run", "-m", "smollm2:broken", "-p", "hi", env=env), 1, "manifests")
    assert_clean_error(run(quarrel_bin, "run", "-m", "../../etc:passwd", "-p", "hi", env=env), 1, "not found")


def test_missing_model(quarrel_bin, tmp_path):
    assert_clean_error(run(quarrel_bin, "run", "-m", tmp_path / "nope.gguf", "-p", "hi"), 1, "not found")


def write_gguf(path, arch):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "c", "ab"])
    w.add_token_types([1, 1, 1, 1])
    w.add_token_merges(["a b"])
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_wrong_arch(quarrel_bin, tmp_path):
    p = write_gguf(tmp_path / "foo.gguf", "foo")
    assert_clean_error(run(quarrel_bin, "run", "-m", p, "-p", "hi"), 1, "foo")


def test_unsupported_tensor_type(quarrel_bin, tmp_path):
    # IQ2_XXS blocks are 256 wide: a 32-wide row is not even representable, so make it 256 wide.
    p = tmp_path / "iq.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(256)
    w.add_feed_forward_length(256)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "c", "ab"])
    w.add_token_types([1, 1, 1, 1])
    w.add_token_merges(["a b"])
    # raw_shape is the byte shape: 4 rows of one 66-byte IQ2_XXS block (256 elements) each
    w.add_tensor("token_embd.weight", np.zeros((4, 66), dtype=np.uint8), raw_shape=(4, 66),
                 raw_dtype=gguf.GGMLQuantizationType.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run(quarrel_bin, "run", "-m", p, "-p", "hi")
    assert r.returncode == 1, r.stderr
    assert "Sanitizer" not in r.stderr and r.stderr.strip()


@pytest.mark.parametrize("args,needle", [
    (["-p", ""], "empty"),
    (["-p", "hi", "-n", "0"], "-n"),
    (["-p", "hi", "--temp", "-1"], "temp"),
    (["-p", "hi", "--top-p", "1.5"], "top"),
    (["-p", "hi", "--top-p", "nan"], "top-p"),
    (["-p", "hi", "--top-k", "-3"], "top"),
    (["-p", "hi", "--min-p", "2"], "min"),
    (["-p", "hi", "--repeat-penalty", "0"], "penalty"),
    (["-p", "hi", "--seed", "-5"], "seed"),
    (["-p", "hi", "--stop", ""], "stop"),
    (["--bogus"], ""),
])
def test_bad_arguments(quarrel_bin, smollm2, args, needle):
    r = run(quarrel_bin, "run", "-m", smollm2, *args)
    assert_clean_error(r, 2, needle)


def test_prompt_longer_than_context(quarrel_bin, smollm2):
    r = run(quarrel_bin, "run", "-m", smollm2, "-p", "hello " * 200, "-c", "64", "-n", "4")
    assert_clean_error(r, 1, "context")


def test_unknown_command(quarrel_bin):
    r = run(quarrel_bin, "frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_generation_smoke(quarrel_bin, smollm2):
    r = run(quarrel_bin, "run", "-m", smollm2, "--chat", "-p", "What is the capital of France?", "-n", 16,
            "--temp", 0, "-t", 2)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 0  # exact tokens are checked against llama.cpp in test_logits_ref.py
    assert "decode" in r.stderr and "prefill" in r.stderr
