"""MoE / hybrid models (issue 9): bad metadata gives a clear error, and `quarrel run --stats` reports
the MoE / SSM counters.

Bad files are made from tiny synth models (F16, so every tensor copies as a plain array) with one
metadata key removed or changed, through the gguf package's reader and writer."""
import json
import subprocess

import numpy as np
import pytest

import gguf  # noqa: E402  (gguf 0.19, tools/requirements.txt)


def synth(quarrel_bin, tmp_path, arch, preset, typ="F16"):
    out = tmp_path / f"{arch}-{preset}-{typ}.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", arch, "--preset", preset, "--type", typ, "--seed", "1", "-o",
                    str(out)], check=True, capture_output=True)
    return out


def rewrite(src, dst, drop=(), change=None, drop_tensors=(), add_tensors=None):
    """Copies src to dst without the keys in `drop` and with the scalar values in `change`, without the
    tensors in `drop_tensors` and with the F32 arrays of `add_tensors` (name -> array)."""
    change = change or {}
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop:
            continue
        vtype = f.types[0]
        val = change.get(name, f.contents())
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, val, vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(name, val, vtype)
    for t in r.tensors:
        if t.name not in drop_tensors:
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    for name, arr in (add_tensors or {}).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def load_error(quarrel_bin, path, tmp_path):
    ids = tmp_path / "ids.json"
    ids.write_text("[1, 2, 3]")
    r = subprocess.run([quarrel_bin, "logits", "-m", str(path), "--tokens", str(ids), "-o", str(tmp_path / "o.npy"),
                        "--backend", "cpu"], capture_output=True, text=True)
    return r


def assert_load_error(quarrel_bin, path, tmp_path, expect):
    """Loading `path` fails cleanly with `expect` in the message."""
    r = load_error(quarrel_bin, path, tmp_path)
    assert r.returncode != 0
    assert expect in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "Segmentation" not in r.stderr


def test_rewrite_roundtrip_loads(quarrel_bin, tmp_path):
    """The rewriting itself keeps a good file good (so the failures below come from the edits)."""
    src = synth(quarrel_bin, tmp_path, "granitehybrid", "tiny")
    r = load_error(quarrel_bin, rewrite(src, tmp_path / "same.gguf"), tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("arch,preset,drop,change,expect", [
    ("granitehybrid", "tiny", ["granitehybrid.ssm.state_size"], None, "missing metadata key granitehybrid.ssm.state_size"),
    ("nemotron_h", "tiny", ["nemotron_h.ssm.conv_kernel"], None, "missing metadata key nemotron_h.ssm.conv_kernel"),
    ("nemotron_h", "tiny", [], {"nemotron_h.ssm.group_count": 3}, "ssm.group_count 3"),
    ("llama", "mixtral-tiny", [], {"llama.expert_count": 0}, "expert_count is 0 or missing"),
    ("llama", "mixtral-tiny", [], {"llama.expert_used_count": 8}, "top-k > experts"),
    ("gpt-oss", "tiny", ["gpt-oss.expert_count"], None, "expert_count"),
    ("gpt-oss", "tiny", ["gpt-oss.expert_used_count"], None, "missing metadata key gpt-oss.expert_used_count"),
    # the Qwen family (issue 30): the expert widths are required keys, top-k is checked
    ("qwen3", "tiny", ["qwen3.attention.layer_norm_rms_epsilon"], None,
     "missing metadata key qwen3.attention.layer_norm_rms_epsilon"),
    ("qwen3moe", "tiny", ["qwen3moe.expert_feed_forward_length"], None,
     "missing metadata key qwen3moe.expert_feed_forward_length"),
    ("qwen3moe", "tiny", [], {"qwen3moe.expert_used_count": 200}, "top-k > experts"),
    ("qwen2moe", "tiny", ["qwen2moe.expert_shared_feed_forward_length"], None,
     "missing metadata key qwen2moe.expert_shared_feed_forward_length"),
    # issue 30 part 2: rope scaling keys
    ("phi3", "tiny", [], {"phi3.rope.dimension_count": 80}, "phi3.rope.dimension_count = 80 is out of range"),
    ("llama", "yarn-tiny", [], {"llama.rope.scaling.type": "dynamic"}, "'dynamic' is not supported"),
    ("llama", "yarn-tiny", [], {"llama.rope.scaling.factor": -2.0}, "rope scaling factor -2 must be > 0"),
    # issue 30 part 3
    ("olmo2", "olmo3-tiny", [], {"olmo2.attention.sliding_window_pattern": [True, False]},
     "olmo2.attention.sliding_window_pattern must be 4 booleans"),
    ("granitemoe", "tiny", ["granitemoe.expert_used_count"], None, "missing metadata key granitemoe.expert_used_count"),
    ("glm4", "tiny", [], {"glm4.rope.dimension_count": 96}, "glm4.rope.dimension_count = 96 is out of range"),
    # issue 30 part 4: deepseek2's MLA form and routing keys
    ("deepseek2", "lite-tiny", ["deepseek2.attention.key_length_mla"], None, "the old unsplit attn_kv_b form"),
    ("deepseek2", "lite-tiny", ["deepseek2.attention.kv_lora_rank"], None,
     "missing metadata key deepseek2.attention.kv_lora_rank"),
    ("deepseek2", "lite-tiny", [], {"deepseek2.attention.key_length": 128}, "key_length = kv_lora_rank + rope"),
    ("deepseek2", "tiny", [], {"deepseek2.expert_group_used_count": 4}, "do not fit 8 experts"),
    ("deepseek2", "lite-tiny", ["deepseek2.expert_shared_count"], None, "missing metadata key deepseek2.expert_shared_count"),
])
def test_bad_metadata_is_a_clear_error(quarrel_bin, tmp_path, arch, preset, drop, change, expect):
    src = synth(quarrel_bin, tmp_path, arch, preset)
    bad = rewrite(src, tmp_path / "bad.gguf", drop=drop, change=change)
    assert_load_error(quarrel_bin, bad, tmp_path, expect)


@pytest.mark.parametrize("arch,preset,drop,add,expect", [
    # the arch table's tensors per layer kind: a Mamba2 layer (granitehybrid layer 0), an MoE layer's
    # experts (nemotron_h_moe layer 1), a required per-arch extra (gpt-oss sinks, nemotron's LayerNorm bias)
    ("granitehybrid", "tiny", ["blk.0.ssm_a"], None, "missing tensor blk.0.ssm_a (required by architecture granitehybrid)"),
    ("nemotron_h_moe", "tiny", ["blk.1.ffn_down_exps.weight"], None, "missing tensor blk.1.ffn_down_exps.weight"),
    ("nemotron_h", "tiny", ["blk.1.ffn_up.weight"], None, "missing tensor blk.1.ffn_up.weight"),
    ("gpt-oss", "tiny", ["blk.1.attn_sinks.weight"], None, "missing tensor blk.1.attn_sinks.weight"),
    ("nemotron", "tiny", ["output_norm.bias"], None, "missing tensor output_norm.bias"),
    ("llama", "mixtral-tiny", ["blk.1.ffn_gate_inp.weight"], None, "missing tensor blk.1.ffn_gate_inp.weight (expert_count is"),
    # issue 30 part 2: phi3's fused tensors and LongRoPE factors, gemma2's post-norms
    ("phi3", "tiny", ["blk.1.attn_qkv.weight"], None, "missing tensor blk.1.attn_qkv.weight (required by architecture phi3)"),
    ("phi3", "tiny", ["rope_factors_long.weight"], {"rope_factors_long.weight": np.ones(16, dtype=np.float32)},
     "rope_factors_long.weight has shape [16"),
    ("gemma2", "tiny", ["blk.0.post_ffw_norm.weight"], None, "missing tensor blk.0.post_ffw_norm.weight"),
    # a bias the table does not bind is refused, not ignored (granite's FFN has none)
    ("granite", "tiny", [], {"blk.0.ffn_up.bias": np.zeros(512, dtype=np.float32)}, "bias tensors are not supported"),
    ("granitehybrid", "tiny", [], {"blk.2.attn_q.bias": np.zeros(7, dtype=np.float32)}, "blk.2.attn_q.bias has shape [7"),
    # the Qwen family: q/k norms, the shared expert's gate, the routers, biases it does not have
    ("qwen3", "tiny", ["blk.1.attn_k_norm.weight"], None, "missing tensor blk.1.attn_k_norm.weight (required by architecture qwen3)"),
    ("qwen2moe", "tiny", ["blk.0.ffn_gate_inp_shexp.weight"], None,
     "missing tensor blk.0.ffn_gate_inp_shexp.weight (required by architecture qwen2moe)"),
    ("qwen2moe", "tiny", ["blk.1.ffn_gate_inp.weight"], None, "missing tensor blk.1.ffn_gate_inp.weight (expert_count is"),
    ("qwen2", "tiny", [], {"blk.0.ffn_down.bias": np.zeros(256, dtype=np.float32)}, "bias tensors are not supported"),
    ("qwen2", "tiny", ["blk.0.attn_k.bias"], {"blk.0.attn_k.bias": np.zeros(64, dtype=np.float32)},
     "blk.0.attn_k.bias has shape [64"),
    # issue 30 part 3: olmo2's q norm over all heads (not per head), glm4's fused gate|up and post-norms,
    # granitemoe's experts
    ("olmo2", "tiny", ["blk.1.attn_q_norm.weight"], {"blk.1.attn_q_norm.weight": np.ones(64, dtype=np.float32)},
     "blk.1.attn_q_norm.weight has shape [64"),
    ("olmo2", "tiny", ["blk.0.post_ffw_norm.weight"], None, "missing tensor blk.0.post_ffw_norm.weight (required by architecture olmo2)"),
    ("glm4", "tiny", ["blk.1.ffn_up.weight"], None, "missing tensor blk.1.ffn_up.weight (required by architecture glm4)"),
    ("glm4", "tiny", ["blk.0.post_attention_norm.weight"], None, "missing tensor blk.0.post_attention_norm.weight"),
    ("granitemoe", "tiny", ["blk.1.ffn_gate_inp.weight"], None, "missing tensor blk.1.ffn_gate_inp.weight (expert_count is"),
    ("mistral3", "tiny", ["blk.0.ffn_norm.weight"], None, "missing tensor blk.0.ffn_norm.weight (required by architecture mistral3)"),
    # issue 30 part 4: deepseek2's MLA tensors, q's low-rank pair, the leading dense blocks
    ("deepseek2", "tiny", ["blk.1.attn_k_b.weight"], None, "missing tensor blk.1.attn_k_b.weight (required by architecture deepseek2)"),
    ("deepseek2", "tiny", ["blk.0.attn_q_a.weight"], None, "missing tensor blk.0.attn_q_a.weight (required by architecture deepseek2 with attention.q_lora_rank 128)"),
    ("deepseek2", "lite-tiny", ["blk.0.attn_q.weight"], None, "missing tensor blk.0.attn_q.weight"),
    ("deepseek2", "lite-tiny", ["blk.1.ffn_gate_inp.weight"], None,
     "missing tensor blk.1.ffn_gate_inp.weight (required by architecture deepseek2)"),
])
def test_bad_tensors_are_a_clear_error(quarrel_bin, tmp_path, arch, preset, drop, add, expect):
    src = synth(quarrel_bin, tmp_path, arch, preset)
    bad = rewrite(src, tmp_path / "bad.gguf", drop_tensors=drop, add_tensors=add)
    assert_load_error(quarrel_bin, bad, tmp_path, expect)


def test_mtp_blocks_are_not_run(quarrel_bin, tmp_path):
    """A multi-token-prediction block after the trunk (DeepSeek-V3 / GLM-4.5 files: {arch}.nextn_predict_layers,
    counted in block_count) is not run, as llama.cpp's n_layer() leaves it out: the logits equal those of the file
    without it, its tensors (a bias among them) are not refused, and a count that leaves no layer is."""
    src = synth(quarrel_bin, tmp_path, "deepseek2", "lite-tiny", "F32")
    r = gguf.GGUFReader(str(src))
    extra = {t.name.replace("blk.1.", "blk.2.", 1): np.asarray(t.data).copy() * 3.0 for t in r.tensors
             if t.name.startswith("blk.1.")}
    extra["blk.2.exp_probs_b.bias"] = np.ones(8, dtype=np.float32)
    extra["blk.2.nextn.eh_proj.weight"] = np.zeros((256, 512), dtype=np.float32)
    mtp = tmp_path / "mtp.gguf"
    w = gguf.GGUFWriter(str(mtp), "deepseek2")
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        val = 3 if name == "deepseek2.block_count" else f.contents()
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, val, f.types[0], sub_type=f.types[-1])
        else:
            w.add_key_value(name, val, f.types[0])
    w.add_key_value("deepseek2.nextn_predict_layers", 1, gguf.GGUFValueType.UINT32)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    for name, arr in extra.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([(i * 37) % 1900 + 5 for i in range(40)]))
    out = []
    for path in (src, mtp):
        o = tmp_path / f"{path.stem}.npy"
        p = subprocess.run([quarrel_bin, "logits", "-m", str(path), "--tokens", str(ids), "-o", str(o), "--backend",
                            "cpu"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        out.append(np.load(o))
    assert np.array_equal(out[0], out[1])
    bad = rewrite(mtp, tmp_path / "bad.gguf", change={"deepseek2.nextn_predict_layers": 3})
    assert_load_error(quarrel_bin, bad, tmp_path, "nextn_predict_layers = 3 leaves no layer")


def test_run_stats_reports_moe_and_ssm(quarrel_bin, tmp_path):
    model = synth(quarrel_bin, tmp_path, "granitehybrid", "tiny", "Q8_0")
    r = subprocess.run([quarrel_bin, "run", "-m", str(model), "-p", "hello world", "-n", "8", "--temp", "0",
                        "--stats", "--backend", "cpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    for name in ["quarrel_moe_layer_latency_seconds", "quarrel_moe_routing_latency_seconds",
                 "quarrel_moe_expert_selection{layer=\"0\",expert=\"0\"}", "quarrel_moe_expert_utilization",
                 "quarrel_ssm_scan_latency_seconds", "quarrel_ssm_conv_latency_seconds", "quarrel_ssm_state_bytes",
                 "quarrel_ssm_divergence_total 0"]:
        assert name in err, f"{name} missing from --stats:\n{err}"
    # every token of every MoE layer picks n_used = 2 experts: the counts of layer 0 sum to 2 x tokens run
    sel = [int(l.rsplit(" ", 1)[1]) for l in err.splitlines() if l.startswith('quarrel_moe_expert_selection{layer="0"')]
    assert len(sel) == 4 and sum(sel) > 0 and sum(sel) % 2 == 0
