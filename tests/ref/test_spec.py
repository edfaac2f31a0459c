"""Speculative decoding on real models (issue 34): greedy output with a drafter is token for token the output of
plain greedy decoding, for the n-gram drafter on SmolLM2 and Gemma 3 and for a draft model (SmolLM2 Q4_1
drafting for F16 and Q8_0 SmolLM2 targets made with `quarrel quantize`, Gemma 3 Q4_K_M for its Q8_0), and drafts were
verified and kept; a
draft with another vocabulary is refused at load time with a clear error. An EAGLE-3 head for SmolLM2 (`quarrel synth
--arch eagle3 --preset smollm2-135m --tokenizer-from SmolLM2`: random weights, so its drafts are rejected; what it
drafts is checked against llama.cpp in test_eagle3_head.py) keeps greedy output too; a head for another model is
refused."""
import json
import re
import subprocess

import pytest

PROMPTS = [
    "Rename the variable `out` to `result` in this function and return the full function:\n\n"
    "def squares(xs):\n    out = []\n    for x in xs:\n        out.append(x * x)\n    return out\n",
    "Add type hints to this function and return it:\n\ndef add_item(cart, item, qty):\n    if item in cart:\n"
    "        cart[item] += qty\n    else:\n        cart[item] = qty\n    return cart\n",
]
SPEC = re.compile(r"speculative: (\d+) drafted, (\d+) accepted")


def generate(bin_, model, prompt, *extra, n=96):
    chat = [] if "gemma" in str(model) else ["--chat"]  # (the Gemma 3 test file has no chat template)
    r = subprocess.run([bin_, "run", "-m", str(model), *chat, "-p", prompt, "--temp", "0", "-n", str(n), "-t", "2",
                        "--ignore-eos", "--ids-only", "-q", "-v", "--backend", "cpu", *extra],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    m = SPEC.search(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1]), (int(m.group(1)), int(m.group(2))) if m else (0, 0)


@pytest.fixture(scope="module")
def smol_targets(quarrel_bin, smollm2, tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    f16, q8 = d / "smol-f16.gguf", d / "smol-q8_0.gguf"
    for src, dst, typ, more in ((smollm2, f16, "F16", ["--allow-requantize"]), (f16, q8, "Q8_0", [])):
        subprocess.run([quarrel_bin, "quantize", str(src), str(dst), typ, "-t", "2", *more], check=True,
                       capture_output=True, timeout=600)
    return {"F16": f16, "Q8_0": q8}


def check(bin_, model, *extra, need_accepted=True):
    drafted = accepted = 0
    for p in PROMPTS:
        plain, _ = generate(bin_, model, p)
        spec, (d, a) = generate(bin_, model, p, *extra)
        assert spec == plain
        drafted, accepted = drafted + d, accepted + a
    assert drafted > 0 and (accepted > 0 or not need_accepted)


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_ngram_greedy_identical(quarrel_bin, request, which):
    check(quarrel_bin, request.getfixturevalue(which), "--spec", "ngram", "--spec-ngram", "1:4")


@pytest.mark.parametrize("target", ["F16", "Q8_0"])
def test_draft_model_greedy_identical(quarrel_bin, smollm2, smol_targets, target):
    check(quarrel_bin, smol_targets[target], "--draft-model", str(smollm2))


def test_draft_model_greedy_identical_gemma3(quarrel_bin, gemma3, tmp_path):
    """Gemma 3 270M requantized to Q8_0 as the target, the Q4_K_M file as its draft."""
    q8 = tmp_path / "gemma3-q8_0.gguf"
    subprocess.run([quarrel_bin, "quantize", str(gemma3), str(q8), "Q8_0", "-t", "2", "--allow-requantize"], check=True,
                   capture_output=True, timeout=600)
    check(quarrel_bin, q8, "--draft-model", str(gemma3))


def test_draft_vocabulary_mismatch(quarrel_bin, smollm2, gemma3):
    r = subprocess.run([quarrel_bin, "run", "-m", str(smollm2), "-p", "hi", "-n", "4", "--backend", "cpu",
                        "--draft-model", str(gemma3)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert "vocabulary is incompatible" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def smol_head(quarrel_bin, smollm2, tmp_path_factory):
    out = tmp_path_factory.mktemp("eagle3") / "smol-eagle3.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", "eagle3", "--preset", "smollm2-135m", "--tokenizer-from", str(smollm2),
                    "--type", "Q8_0", "--seed", "5", "-t", "2", "-o", str(out)], check=True, capture_output=True,
                   timeout=300)
    return out


def test_eagle3_greedy_identical(quarrel_bin, smollm2, smol_head):
    check(quarrel_bin, smollm2, "--spec", "eagle3", "--draft-model", str(smol_head), "--draft-p-min", "0",
          need_accepted=False)


def test_eagle3_greedy_identical_gemma3(quarrel_bin, gemma3, tmp_path):
    """A head for Gemma 3 270M (its shapes: synth preset gemma3-270m; its tokenizer; sharing its embeddings and output
    matrix); the target's capture is the gemma family's residual stream (test_eagle3.py checks it against llama.cpp)."""
    head = tmp_path / "gemma3-eagle3.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", "eagle3", "--preset", "gemma3-270m", "--target-arch", "gemma3",
                    "--tokenizer-from", str(gemma3), "--no-token-embd", "--no-output", "--type", "Q8_0", "--seed", "5",
                    "-t", "2", "-o", str(head)], check=True, capture_output=True, timeout=300)
    check(quarrel_bin, gemma3, "--spec", "eagle3", "--draft-model", str(head), "--draft-p-min", "0",
          need_accepted=False)


def test_eagle3_head_for_another_model(quarrel_bin, smollm2, gemma3, smol_head, tmp_path):
    r = subprocess.run([quarrel_bin, "run", "-m", str(gemma3), "-p", "hi", "-n", "4", "--backend", "cpu",
                        "--draft-model", str(smol_head)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert "EAGLE-3 head" in r.stderr and "hidden size" in r.stderr and "Traceback" not in r.stderr
    tiny = tmp_path / "tiny-head.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", "eagle3", "--preset", "tiny", "-o", str(tiny)], check=True,
                   capture_output=True, timeout=120)
    r = subprocess.run([quarrel_bin, "run", "-m", str(smollm2), "-p", "hi", "-n", "4", "--backend", "cpu",
                        "--spec", "eagle3", "--draft-model", str(tiny)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "belongs to another model" in r.stderr
