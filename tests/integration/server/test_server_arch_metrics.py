"""Issue 9's MoE and Mamba2 (SSM) metrics on /metrics: `quarrel serve` on tiny synthetic models
(`quarrel synth`: granitehybrid = Mamba2 + attention with MoE FFNs, mixtral-tiny = llama + experts),
the counts checked exactly against the tokens each request ran, `promtool check metrics` on the text,
and a dense model (SmolLM2) that exports none of these families.

Exact counts: with --no-prefix-cache, ignore_eos and a prompt shorter than the prefill chunk, a
request of P prompt and C generated tokens runs C forward passes (the prompt, then C - 1 decode rows:
the last token is never fed back) over P + C - 1 rows. One histogram observation is one MoE layer (or
one Mamba2 mixer) of one pass, so _count grows by C x layers. Every row a MoE layer computes is routed
to k experts: P + C - 1 rows in each layer but the last, which computes only the rows whose logits are
wanted (one per pass: C rows), so a layer's selections grow by k x (P + C - 1), the last one's by k x C.

Divergence: a copy of the hybrid whose Mamba2 A parameters are positive (stored A = -exp(A_log) is
negative in a sound model) makes the scan state grow by about exp(dt * A) per token; a prompt of a few
tokens stays finite, one of ~900 overflows to Inf, the CPU backend reports "ssm state diverged", the
request gets a 500 INFERENCE_ERROR and quarrel_ssm_divergence_total grows.
"""
import importlib.util
import json
import pathlib
import re
import subprocess

import gguf
import pytest
import requests
from websockets.sync.client import connect

from conftest import Server

ROOT = pathlib.Path(__file__).resolve().parents[3]
MOE_FAMILIES = {"quarrel_moe_layer_latency_seconds": "histogram", "quarrel_moe_routing_latency_seconds": "histogram",
                "quarrel_moe_expert_selection": "untyped", "quarrel_moe_expert_utilization": "gauge"}
SSM_FAMILIES = {"quarrel_ssm_scan_latency_seconds": "histogram", "quarrel_ssm_conv_latency_seconds": "histogram",
                "quarrel_ssm_state_bytes": "gauge", "quarrel_ssm_divergence_total": "counter"}


def _ops_helpers():
    """tests/integration/ops/ops_helpers.py (find_tool, MOE_SSM_METRICS), loaded by path."""
    spec = importlib.util.spec_from_file_location("arch_ops_helpers", ROOT / "tests/integration/ops/ops_helpers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


OPS = _ops_helpers()


def synth(binary, out, arch, preset):
    subprocess.run([binary, "synth", "--arch", arch, "--preset", preset, "--type", "Q8_0", "-o", str(out), "-t", "2"],
                   check=True, capture_output=True, timeout=120)
    return str(out)


class Shape:
    """What the counts depend on, read from the GGUF: MoE layers, SSM layers, experts used per row."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        names = [t.name for t in r.tensors]
        self.moe = {int(n.split(".")[1]) for n in names if n.endswith(".ffn_gate_inp.weight")}  # MoE layer indices
        self.moe_layers = len(self.moe)
        self.ssm_layers = sum(n.endswith(".ssm_a") for n in names)
        self.n_layer = self.field(r, ".block_count")
        self.k = self.field(r, ".expert_used_count")

    @staticmethod
    def field(r, suffix):
        f = next(f for k, f in r.fields.items() if k.endswith(suffix))
        return int(f.parts[f.data[0]][0])

    def rows(self, layer, p, c):
        """Rows MoE layer `layer` computes for a request of p prompt and c generated tokens."""
        return c if layer == self.n_layer - 1 else p + c - 1


@pytest.fixture(scope="module")
def models(quarrel_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("arch-models")
    hybrid = synth(quarrel_bin, d / "hybrid.gguf", "granitehybrid", "tiny")
    moe = synth(quarrel_bin, d / "moe.gguf", "llama", "mixtral-tiny")
    return {"hybrid": hybrid, "moe": moe}


@pytest.fixture(scope="module")
def diverging(models, tmp_path_factory):
    """The hybrid with every Mamba2 A set to +5 (a state that grows until it overflows)."""
    path = tmp_path_factory.mktemp("arch-bad") / "diverging.gguf"
    path.write_bytes(pathlib.Path(models["hybrid"]).read_bytes())
    r = gguf.GGUFReader(str(path), "r+")
    n = 0
    for t in r.tensors:
        if t.name.endswith(".ssm_a"):
            t.data[:] = 5.0
            n += 1
    r.data.flush()
    assert n > 0
    return str(path)


def scrape(server):
    """(text, {family: type}, {series: value}) of /metrics."""
    text = requests.get(server.url + "/metrics", timeout=10).text
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, val = line.rsplit(" ", 1)
            values[key] = float(val)
    return text, types, values


def promtool_ok(text):
    promtool = OPS.find_tool("promtool", "apt-get install prometheus (scripts/setup.sh installs it)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr + "\n" + text


def selection(values, model):
    """{(layer, expert): count} of one model."""
    out = {}
    for key, v in values.items():
        m = re.fullmatch(r'quarrel_moe_expert_selection\{model="([^"]*)",layer="(\d+)",expert="(\d+)"\}', key)
        if m and m.group(1) == model:
            out[(int(m.group(2)), int(m.group(3)))] = v
    return out


def complete(server, model, prompt, n):
    r = requests.post(server.url + "/v1/completions", timeout=120,
                      json={"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True})
    return r


def run_ok(server, model, prompt, n):
    r = complete(server, model, prompt, n)
    assert r.status_code == 200, r.text
    u = r.json()["usage"]
    assert u["completion_tokens"] == n
    return u["prompt_tokens"], n


def hist(values, name, model):
    """(_count, _sum, the +Inf bucket) of one model's histogram."""
    lab = f'model="{model}"'
    return values[f"{name}_count{{{lab}}}"], values[f"{name}_sum{{{lab}}}"], values[f'{name}_bucket{{{lab},le="+Inf"}}']


@pytest.fixture(scope="module")
def arch_server(quarrel_bin, models):
    args = ["--parallel", "2", "--ctx", "4096", "--no-prefix-cache"]
    s = Server(quarrel_bin, [models["hybrid"], models["moe"]], args)
    yield s
    s.stop()


@pytest.mark.parametrize("model", ["hybrid", "moe"])
def test_arch_metrics_count_each_pass(arch_server, models, model):
    shape = Shape(models[model])
    assert shape.moe_layers > 0 and shape.k > 0
    assert (shape.ssm_layers > 0) == (model == "hybrid")
    _, types, before = scrape(arch_server)
    want = dict(MOE_FAMILIES, **SSM_FAMILIES)
    assert set(want) == OPS.MOE_SSM_METRICS  # the names the dashboard and the alert read
    for fam, typ in want.items():
        assert types.get(fam) == typ, (fam, types.get(fam))
    for prompt, n in (("The sea is", 4), ("One, two, three, four,", 7)):
        p, c = run_ok(arch_server, model, prompt, n)
        _, _, after = scrape(arch_server)
        # histograms: one observation per MoE layer / Mamba2 mixer per pass; C passes
        for name, layers in (("quarrel_moe_layer_latency_seconds", shape.moe_layers),
                             ("quarrel_moe_routing_latency_seconds", shape.moe_layers),
                             ("quarrel_ssm_scan_latency_seconds", shape.ssm_layers),
                             ("quarrel_ssm_conv_latency_seconds", shape.ssm_layers)):
            if not layers:
                assert f'{name}_count{{model="{model}"}}' not in after
                continue
            c0, s0, _ = hist(before, name, model)
            c1, s1, inf1 = hist(after, name, model)
            assert c1 - c0 == c * layers, (name, c0, c1, p, c)
            assert inf1 == c1 and s1 > s0, name
        # selections: every row a MoE layer computes is routed to k of its experts
        sel0, sel1 = selection(before, model), selection(after, model)
        assert {layer for layer, _ in sel1} == shape.moe
        for layer in shape.moe:
            grew = sum(v - sel0.get(key, 0) for key, v in sel1.items() if key[0] == layer)
            assert grew == shape.k * shape.rows(layer, p, c), (layer, p, c)
        assert all(sel1[key] >= sel0.get(key, 0) for key in sel1)
        util = after[f'quarrel_moe_expert_utilization{{model="{model}"}}']
        used = sum(v > 0 for v in sel1.values()) / len(sel1)
        assert 0 < util <= 1 and util == pytest.approx(used)
        if shape.ssm_layers:
            assert after[f'quarrel_ssm_state_bytes{{model="{model}"}}'] > 0
            assert after[f'quarrel_ssm_divergence_total{{model="{model}"}}'] == 0
        before = after
    promtool_ok(scrape(arch_server)[0])


def test_moe_only_model_exports_no_ssm_series(arch_server):
    _, _, values = scrape(arch_server)
    assert not [k for k in values if k.startswith("quarrel_ssm_") and 'model="moe"' in k]
    assert [k for k in values if k.startswith("quarrel_ssm_") and 'model="hybrid"' in k]


def test_ws_metrics_message_has_them(arch_server):
    """The WebSocket `metrics` message carries the same text as /metrics."""
    with connect(arch_server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "metrics"}))
        m = json.loads(ws.recv(timeout=60))
    text = m["payload"]["prometheus"]
    assert "# TYPE quarrel_moe_expert_selection untyped" in text and 'quarrel_ssm_state_bytes{model="hybrid"}' in text
    promtool_ok(text)


def test_ssm_divergence_fails_the_request_and_counts(make_server, models, diverging):
    s = make_server([diverging, models["moe"]], ["--parallel", "2", "--ctx", "4096", "--no-prefix-cache"])
    _, types, before = scrape(s)
    assert types["quarrel_ssm_divergence_total"] == "counter"
    key = 'quarrel_ssm_divergence_total{model="diverging"}'
    assert before[key] == 0
    run_ok(s, "diverging", "ab ab", 2)  # a few tokens: the state stays finite
    assert scrape(s)[2][key] == 0
    r = complete(s, "diverging", " ".join(["ab"] * 300), 2)  # ~900 tokens: it overflows
    assert r.status_code == 500, r.text
    assert r.json()["error"]["code"] == "INFERENCE_ERROR" and "diverged" in r.json()["error"]["message"]
    _, _, after = scrape(s)
    assert after[key] >= 1
    assert after['quarrel_errors_total{code="INFERENCE_ERROR"}'] >= 1
    # the server keeps serving: the same model (its states were reset) and the other one
    run_ok(s, "diverging", "ab ab", 2)
    run_ok(s, "moe", "The sea is", 3)
    text, _, final = scrape(s)
    assert final[key] == after[key]
    promtool_ok(text)


def test_dense_model_exports_no_arch_families(make_server, smollm):
    s = make_server([smollm], ["--parallel", "1", "--ctx", "1024"])
    r = requests.post(s.url + "/v1/completions", timeout=120,
                      json={"prompt": "The sea is", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    text, types, _ = scrape(s)
    assert not [f for f in types if f.startswith(("quarrel_moe_", "quarrel_ssm_"))]
    assert "quarrel_moe_" not in text and "quarrel_ssm_" not in text
    promtool_ok(text)
