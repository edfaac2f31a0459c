"""`quarrel synth` and `quarrel quantize` against llama.cpp (through llama-cpp-python).

- llama.cpp loads our tiny synthetic llama and gemma3 models in many file types, tokenizes with the
  synthetic vocabulary and evaluates a few tokens: finite, non-degenerate logits.
- synth is deterministic: two runs (different thread counts) give the same sha256.
- quantize: for each file type, our per-tensor type choices equal llama-quantize's
  (llama_model_quantize on the same F16 model), and the RMSE of our dequantized weights against the
  F16 source is within 1% of llama.cpp's for the same tensors. Run with -s to see the table.
"""
import ctypes
import json
import hashlib
import subprocess

import numpy as np
import pytest

import gguf
from gguf import quants

import llama_cpp  # a missing llama-cpp-python is an error, not a skip

# llama.cpp's enum llama_ftype values for the names `quarrel quantize` accepts.
LLAMA_FTYPE = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17,
    "Q6_K": 18, "BF16": 32, "MXFP4": 38,
}
# llama-quantize's aliases; MXFP4 is pure MXFP4 (MXFP4_MOE with --pure)
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
PURE = {"MXFP4"}

LOAD_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
              "Q5_K", "Q6_K", "MXFP4", "Q4_K_M", "Q5_K_M"]
RMSE_TYPES = ["BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
              "MXFP4", "Q4_K_M", "Q5_K_M"]
TEXT = "Hello world, the quick brown fox jumps over the lazy dog."


def synth(quarrel_bin, out, arch, ftype, seed=0, threads=2, extra=()):
    cmd = [quarrel_bin, "synth", "--arch", arch, "--preset", "tiny", "--type", ftype, "--seed", str(seed),
           "-t", str(threads), "-o", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr}"
    return out


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("synth")


# ---- llama.cpp loads and runs our models -------------------------------------------------------

@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("ftype", LOAD_TYPES)
def test_llamacpp_runs_synth(quarrel_bin, workdir, arch, ftype):
    path = synth(quarrel_bin, workdir / f"{arch}-{ftype}.gguf", arch, ftype)
    m = llama_cpp.Llama(model_path=str(path), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    try:
        toks = m.tokenize(TEXT.encode(), add_bos=True)
        assert toks[0] == m.token_bos()
        assert len(toks) < len(TEXT.encode()), "the synthetic merges should compress English text"
        assert m.detokenize(toks[1:]).decode() == TEXT
        m.eval(toks)
        logits = np.array(m.scores[: len(toks)], dtype=np.float64)
        assert np.isfinite(logits).all()
        sd = logits.std(axis=1)
        assert (sd > 0.3).all() and (sd < 10).all(), f"degenerate logits: std per position {sd}"
        top = logits.argmax(axis=1)
        assert len(set(top.tolist())) > len(toks) // 3, f"top-1 barely changes across positions: {top}"
    finally:
        m.close()


def test_synth_is_deterministic(quarrel_bin, workdir):
    for arch, ftype in [("llama", "F16"), ("llama", "Q4_K_M"), ("gemma3", "Q8_0")]:
        a = synth(quarrel_bin, workdir / "det-a.gguf", arch, ftype, seed=5, threads=1)
        b = synth(quarrel_bin, workdir / "det-b.gguf", arch, ftype, seed=5, threads=2)
        c = synth(quarrel_bin, workdir / "det-c.gguf", arch, ftype, seed=6, threads=2)
        assert sha256(a) == sha256(b), f"{arch} {ftype}: two runs differ"
        assert sha256(a) != sha256(c), f"{arch} {ftype}: the seed does not matter"


def test_synth_bad_arguments(quarrel_bin, workdir):
    cases = [
        (["--arch", "llama", "--preset", "nope"], "unknown preset"),
        (["--arch", "llama", "--preset", "tiny", "--type", "Q7_K"], "unknown type"),
        (["--preset", "tiny"], "several architectures"),
        (["--arch", "llama", "--preset", "tiny", "--seed", "-3"], "--seed"),
        (["--arch", "qwen9", "--preset", "tiny"], "unknown architecture 'qwen9' (known: llama,"),
        (["--arch", "qwen3moe", "--preset", "qwen3-8b"], "qwen3moe/qwen3-30b-a3b"),
    ]
    for args, needle in cases:
        r = subprocess.run([quarrel_bin, "synth", *args, "-o", str(workdir / "bad.gguf")], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
    assert not (workdir / "bad.gguf").exists()


# ---- quantize vs llama-quantize -----------------------------------------------------------------

def llama_quantize(src, dst, name):
    canon = ALIASES.get(name, name)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPE[canon]
    params.nthread = 2
    params.pure = canon in PURE
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, f"llama_model_quantize({name}) failed"


def tensors_of(path):
    r = gguf.GGUFReader(str(path))
    return {t.name: t for t in r.tensors}


def dequant(t):
    data = np.asarray(t.data)
    if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        return data.astype(np.float64).reshape(-1)
    return quants.dequantize(data, t.tensor_type).astype(np.float64).reshape(-1)


RESULTS = []


@pytest.fixture(scope="module")
def f16_models(quarrel_bin, workdir):
    return {arch: synth(quarrel_bin, workdir / f"src-{arch}-F16.gguf", arch, "F16", seed=11) for arch in ("llama", "gemma3")}


@pytest.mark.parametrize("ftype", RMSE_TYPES)
def test_quantize_matches_llamacpp(quarrel_bin, workdir, f16_models, ftype):
    for arch, src in f16_models.items():
        ours = workdir / f"ours-{arch}-{ftype}.gguf"
        theirs = workdir / f"theirs-{arch}-{ftype}.gguf"
        r = subprocess.run([quarrel_bin, "quantize", str(src), str(ours), ftype, "-t", "2"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        llama_quantize(src, theirs, ftype)
        src_t, our_t, their_t = tensors_of(src), tensors_of(ours), tensors_of(theirs)
        assert set(our_t) == set(their_t) == set(src_t)
        # the same type for every tensor (mix rules, fallbacks, norms)
        diff = {n: (our_t[n].tensor_type.name, their_t[n].tensor_type.name)
                for n in our_t if our_t[n].tensor_type != their_t[n].tensor_type}
        assert not diff, f"{arch} {ftype}: tensor types differ from llama-quantize (ours, theirs): {diff}"
        # RMSE against the F16 source, over every converted 2-D tensor and for one named tensor
        for name in ["blk.0.ffn_gate.weight", "blk.1.attn_q.weight", "token_embd.weight"]:
            ref = dequant(src_t[name])
            rmse_ours = float(np.sqrt(np.mean((dequant(our_t[name]) - ref) ** 2)))
            rmse_theirs = float(np.sqrt(np.mean((dequant(their_t[name]) - ref) ** 2)))
            same_bytes = bytes(np.asarray(our_t[name].data).tobytes()) == bytes(np.asarray(their_t[name].data).tobytes())
            RESULTS.append((arch, ftype, name, our_t[name].tensor_type.name, rmse_ours, rmse_theirs, same_bytes))
            assert rmse_ours <= rmse_theirs * 1.01 + 1e-12, (
                f"{arch} {ftype} {name}: RMSE {rmse_ours:.6g} vs llama.cpp {rmse_theirs:.6g}")


def teardown_module(module):
    if RESULTS:
        print("\narch    file type  tensor                  type    RMSE ours     RMSE llama.cpp  ratio   same bytes")
        for arch, ft, name, ty, a, b, same in RESULTS:
            ratio = a / b if b else float("nan")
            print(f"{arch:7} {ft:10} {name:23} {ty:7} {a:12.6g} {b:14.6g}  {ratio:6.4f}  {same}")


# ---- the Qwen family (issue 30) -----------------------------------------------------------------

QWEN_ARCHS = ["qwen2", "qwen3", "qwen3moe", "qwen2moe"]
# issue 30 part 3 (pre-tokenizers dbrx, refact, glm4, tekken): the same checks as the Qwen family
PART3_ARCHS = ["olmo2", "granitemoe", "glm4", "mistral3"]
QWEN_TEXTS = [TEXT, "digits 1234567 and 3.14159 (qwen2 splits numbers digit by digit)", "  two\n\nnew lines\ttab ",
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "héllo wörld, 你好, emoji 🙂"]


@pytest.mark.parametrize("arch", QWEN_ARCHS + PART3_ARCHS)
def test_llamacpp_runs_qwen_synth_and_tokenizes_alike(quarrel_bin, workdir, arch):
    """llama.cpp loads our Qwen (and issue 30 part 3) synth models (the preset's pre-tokenizer, ChatML template),
    its token ids equal ours (special tokens parsed), and its logits are finite and not degenerate."""
    path = synth(quarrel_bin, workdir / f"{arch}-Q8_0.gguf", arch, "Q8_0")
    m = llama_cpp.Llama(model_path=str(path), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    try:
        for text in QWEN_TEXTS:
            want = m.tokenize(text.encode(), add_bos=True, special=True)
            r = subprocess.run([quarrel_bin, "tokenize", "-m", str(path), "-p", text, "--ids-only"],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout) == want, text
        toks = m.tokenize(TEXT.encode(), add_bos=True)
        m.eval(toks)
        logits = np.array(m.scores[: len(toks)], dtype=np.float64)
        assert np.isfinite(logits).all()
        sd = logits.std(axis=1)
        assert (sd > 0.3).all() and (sd < 10).all(), f"degenerate logits: std per position {sd}"
        assert len(set(logits.argmax(axis=1).tolist())) > len(toks) // 3
    finally:
        m.close()


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_K_M"])
@pytest.mark.parametrize("arch", QWEN_ARCHS + PART3_ARCHS)
def test_qwen_synth_quant_equals_llama_quantize(quarrel_bin, workdir, arch, ftype):
    """synth --type T writes every tensor with llama-quantize's type for it and the very bytes
    llama-quantize makes from the F16 synth model (shared-expert gate and routers stay F32)."""
    src = synth(quarrel_bin, workdir / f"qsrc-{arch}-F16.gguf", arch, "F16", seed=3)
    ours = synth(quarrel_bin, workdir / f"qours-{arch}-{ftype}.gguf", arch, ftype, seed=3)
    theirs = workdir / f"qtheirs-{arch}-{ftype}.gguf"
    llama_quantize(src, theirs, ftype)
    our_t, their_t = tensors_of(ours), tensors_of(theirs)
    assert set(our_t) == set(their_t)
    diff = {n: (our_t[n].tensor_type.name, their_t[n].tensor_type.name)
            for n in our_t if our_t[n].tensor_type != their_t[n].tensor_type}
    assert not diff, f"{arch} {ftype}: tensor types differ from llama-quantize (ours, theirs): {diff}"
    differ = [n for n in our_t if bytes(np.asarray(our_t[n].data).tobytes()) != bytes(np.asarray(their_t[n].data).tobytes())]
    assert not differ, f"{arch} {ftype}: tensor bytes differ from llama-quantize's: {differ}"
    if arch == "qwen2moe":
        assert our_t["blk.0.ffn_gate_inp_shexp.weight"].tensor_type == gguf.GGMLQuantizationType.F32


# ---- issue 30 part 2: phi3 / gemma2 files and LongRoPE's factor choice --------------------------------

@pytest.mark.parametrize("arch", ["phi3", "gemma2"])
def test_quantize_mix_matches_llamacpp_new_archs(quarrel_bin, workdir, arch):
    """Q4_K_M's per-tensor types on phi3 (fused attn_qkv, 2 * n_ff ffn_up) and gemma2 (tied output) are
    llama-quantize's."""
    src = synth(quarrel_bin, workdir / f"src-{arch}-F16.gguf", arch, "F16", seed=11)
    ours, theirs = workdir / f"ours-{arch}-Q4_K_M.gguf", workdir / f"theirs-{arch}-Q4_K_M.gguf"
    r = subprocess.run([quarrel_bin, "quantize", str(src), str(ours), "Q4_K_M", "-t", "2"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    llama_quantize(src, theirs, "Q4_K_M")
    our_t, their_t = tensors_of(ours), tensors_of(theirs)
    assert set(our_t) == set(their_t)
    diff = {n: (our_t[n].tensor_type.name, their_t[n].tensor_type.name)
            for n in our_t if our_t[n].tensor_type != their_t[n].tensor_type}
    assert not diff, f"{arch} Q4_K_M: tensor types differ from llama-quantize (ours, theirs): {diff}"


@pytest.mark.parametrize("n_ctx", [1024, 2048])
def test_longrope_factor_choice(quarrel_bin, workdir, n_ctx):
    """phi3 tiny's original context is 1024: a context of 1024 takes the short factors, 2048 the long ones, in
    llama.cpp (get_rope_factors) as in quarrel (--ctx); the logits are the same to the bit at the same
    micro-batch, and the two choices differ from each other."""
    path = synth(quarrel_bin, workdir / "phi3-Q8_0.gguf", "phi3", "Q8_0", seed=3)
    m = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=512, n_ubatch=64, logits_all=True,
                        verbose=False, n_threads=2)
    try:
        toks = m.tokenize((TEXT * 8).encode(), add_bos=True)[:200]
        m.eval(toks)
        ref = np.array(m.scores[: len(toks)], dtype=np.float32)
    finally:
        m.close()
    out = {}
    for c in (1024, 2048):
        ids = workdir / "longrope-ids.json"
        ids.write_text(json.dumps(toks))
        o = workdir / f"longrope-{c}.npy"
        r = subprocess.run([quarrel_bin, "logits", "-m", str(path), "--tokens", str(ids), "-o", str(o), "--ctx", str(c),
                            "--backend", "cpu"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[c] = np.load(o)
    assert not np.array_equal(out[1024], out[2048]), "the short and long factors gave the same logits"

    def kl(q):
        lp = ref.astype(np.float64) - np.log(np.exp(ref.astype(np.float64)).sum(-1, keepdims=True))
        lq = q.astype(np.float64) - np.log(np.exp(q.astype(np.float64)).sum(-1, keepdims=True))
        return float((np.exp(lp) * (lp - lq)).sum(-1).mean())
    same, other = kl(out[n_ctx]), kl(out[3072 - n_ctx])
    print(f"n_ctx {n_ctx}: KL to llama.cpp {same:.3e} (the other choice: {other:.3e})")
    info = llama_cpp.llama_print_system_info().decode()  # bit for bit only against llama.cpp's AVX2 build
    if "AVX2 = 1" in info and "AVX512 = 1" not in info:
        assert np.array_equal(out[n_ctx], ref), f"n_ctx {n_ctx}: max |diff| {np.abs(out[n_ctx] - ref).max()}"
    assert same < other / 100, f"n_ctx {n_ctx}: KL {same:.3e} to llama.cpp, the other factors {other:.3e}"


# ---- issue 30 part 3: mistral3's attention temperature -------------------------------------------------

def test_mistral3_positions_past_the_original_context_are_refused(quarrel_bin, workdir):
    """mistral3's llama 4 attention temperature multiplies q by 1 + t ln(floor(pos / n_ctx_orig) + 1): exactly 1
    below the original context (1024 in the tiny preset), where we match llama.cpp (tests/data/ref); past it
    decoding is refused with the reason, not run with a wrong scale."""
    path = synth(quarrel_bin, workdir / "mistral3-Q8_0.gguf", "mistral3", "Q8_0", seed=3)
    for n, ok in ((1024, True), (1025, False)):
        ids = workdir / f"m3-{n}.json"
        ids.write_text(json.dumps([1] + [300 + i % 1500 for i in range(n - 1)]))
        r = subprocess.run([quarrel_bin, "logits", "-m", str(path), "--tokens", str(ids), "-o",
                            str(workdir / "m3.npy"), "--ctx", "2048", "--backend", "cpu"], capture_output=True, text=True)
        if ok:
            assert r.returncode == 0, r.stderr
        else:
            assert r.returncode != 0
            assert "position 1024 is past the model's original context 1024" in r.stderr, r.stderr
