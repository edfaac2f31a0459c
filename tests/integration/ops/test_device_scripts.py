"""The device-machine scripts, run here on the CPU (their dry-run modes), so that they keep working between
GPU sessions: bench/gpu_check.py with the CPU as the "GPU" backend (a synth model and a real model file as
it is: identical backends must give KLD 0 and top-1 100 % on the teacher-forced prefill) and
bench/gpu_serve_smoke.py against a CPU server (16 concurrent requests all complete)."""
import json
import re
import os
import pathlib
import subprocess
import sys

import pytest

from ops_helpers import srv

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bundle(quarrel_bin, tmp_path_factory):
    """A directory that looks like the GPU bundle to the scripts: `quarrel` is the binary under test."""
    d = tmp_path_factory.mktemp("bundle")
    (d / "quarrel").symlink_to(pathlib.Path(quarrel_bin).resolve())
    return d


def run_check(bundle, out, models, extra=()):
    env = {**os.environ, "BUNDLE": str(bundle), "OUT": str(out), "MODEL_DIR": str(out / "models")}
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--models", models, "--prompts", "2",
                        "--gen", "8", "--no-leak", "--gpu-backend", "cpu", *extra],
                       capture_output=True, text=True, timeout=600, env=env)
    rows = [json.loads(l) for l in (out / "gpu_check.jsonl").read_text().splitlines()] if (out / "gpu_check.jsonl").exists() else []
    return r, rows


def test_gpu_check_dry_run_synth(bundle, tmp_path):
    r, rows = run_check(bundle, tmp_path, "llama:tiny", ["--types", "Q8_0"])
    assert len(rows) == 1, r.stdout + r.stderr
    row = rows[0]
    assert row["model"] == "llama-tiny-Q8_0"
    assert row["mean_kld"] == 0.0 and row["top1"] == 1.0, row  # the same backend twice: identical logits
    assert row["n_gen"] == 2 and row["same_gen"] == 2, row
    assert "| llama-tiny-Q8_0 |" in (tmp_path / "gpu_check.md").read_text()


def test_gpu_check_dry_run_real_file(bundle, tmp_path):
    model = srv.models_dir() / srv.SMOLLM
    if not model.exists():
        pytest.fail(f"model {model} not found: run scripts/setup.sh (or set QUARREL_MODELS_DIR)")
    r, rows = run_check(bundle, tmp_path, f"file:{model}")
    assert len(rows) == 1, r.stdout + r.stderr
    assert rows[0]["mean_kld"] == 0.0 and rows[0]["top1"] == 1.0, rows[0]
    # the prompts are chunks of real text tokenized by the model, not random ids
    name = model.name.removesuffix(".gguf")
    ids = json.loads((tmp_path / f"prompt_{name}_0.json").read_text())
    assert len(ids) == 64
    text = subprocess.run([str(bundle / "quarrel"), "detokenize", "-m", str(model), "--ids", json.dumps(ids)],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert text.stdout.strip() and text.stdout.strip().split()[0] in (ROOT / "tests/data/ref/teacher_text.txt").read_text()


def test_gpu_check_missing_real_file(bundle, tmp_path):
    r, rows = run_check(bundle, tmp_path, f"file:{tmp_path}/nope.gguf")
    assert r.returncode == 1 and not rows
    assert "not found" in r.stdout + r.stderr


def test_serve_smoke_cpu(quarrel_bin, tmp_path):
    model = tmp_path / "gh.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", "granitehybrid", "--preset", "tiny", "--type", "Q8_0", "-o",
                    str(model)], check=True, capture_output=True, timeout=300)
    port = str(srv.free_port())
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_serve_smoke.py"), quarrel_bin, str(model), port, "cpu"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "16/16 returned 48 tokens" in r.stdout, r.stdout
    assert 'quarrel_ssm_divergence_total{model="gh"} 0' in r.stdout, r.stdout


def test_gpu_report_ratio_targets_and_drops(tmp_path):
    res = tmp_path / "results.jsonl"
    f = "gpt-oss-20b-MXFP4_MOE.gguf"
    lines = [{"kind": "device", "name": "NVIDIA H100 80GB HBM3"}, {"kind": "bandwidth", "gbps": 3000.0},
             {"kind": "quarrel", "label": "std", "file": f, "bytes": 12 << 30,
              "result": {"n_prompt": 512, "n_gen": 128, "n_depth": 0, "pp_tps": 4512.7, "pp_sd": 10.0, "tg_tps": 489.0,
                         "tg_sd": 1.0}},
             {"kind": "llama", "file": f, "bytes": 12 << 30, "n_prompt": 512, "n_gen": 0, "avg_ts": 8751.3, "stddev_ts": 1.0},
             {"kind": "llama", "file": f, "bytes": 12 << 30, "n_prompt": 0, "n_gen": 128, "avg_ts": 311.5, "stddev_ts": 1.0}]
    res.write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"devices": {
        "NVIDIA H100 80GB HBM3": {"gpt-oss-20b-MXFP4_MOE pp512": 11669.5, "gpt-oss-20b-MXFP4_MOE tg128": 489.5},
        "NVIDIA H200": {"gpt-oss-20b-MXFP4_MOE pp512": 1.0, "gpt-oss-20b-MXFP4_MOE tg128": 1.0}}}))

    def report():
        r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_report.py"), str(res)], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "GPU_BASELINE": str(base)})
        assert r.returncode == 0, r.stderr
        rows = {l.split("|")[3].strip(): [c.strip() for c in l.split("|")] for l in r.stdout.splitlines()
                if l.startswith("| gpt-oss")}
        return r.stdout, rows

    out, rows = report()
    assert rows["pp512"][6] == "0.52x" and rows["pp512"][8] == "NO" and rows["pp512"][11] == "0.39x DROP"
    assert rows["tg128"][6] == "1.57x" and rows["tg128"][8] == "yes" and rows["tg128"][11] == "1.00x"  # MoE: >= 1.5x
    assert "Targets met: 1, missed: 1" in out
    assert "gpt-oss-20b-MXFP4_MOE pp512: 4512.7 vs 11669.5" in out
    assert "NVIDIA H100 80GB HBM3 figures" in out
    # another GPU is compared with its own figures only; one without figures gets none
    res.write_text(res.read_text().replace("NVIDIA H100 80GB HBM3", "NVIDIA H200"))
    out, rows = report()
    assert rows["tg128"][11] == "489.00x" and "DROP" not in out
    res.write_text(res.read_text().replace("NVIDIA H200", "NVIDIA B200"))
    out, rows = report()
    assert rows["tg128"][11] == "-" and rows["pp512"][11] == "-" and "no baseline figures for this GPU" in out


def test_gpu_baseline_keys_match_report_labels():
    devices = json.loads((ROOT / "bench" / "gpu_baseline.json").read_text())["devices"]
    assert set(devices) >= {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    for figures in devices.values():
        assert figures
        for key, v in figures.items():
            stem, _, label = key.partition(" ")
            # gpu_report.py's labels: f"{test}{n}" + f" @ d{depth}" (pp512, tg128, pp512 @ d4096, pp30000, ...)
            assert re.fullmatch(r"(pp|tg)[1-9][0-9]*( @ d[1-9][0-9]*)?", label), key
            assert isinstance(v, (int, float)) and v > 0, key


def test_gpu_unpack_replaces_a_stale_bundle(tmp_path):
    """bench/gpu_unpack.sh (sourced by the bench/gpu_*.sh scripts): a warm device machine keeps the previous call's
    build-gpu/bundle; the carried archive must replace it when it differs, and be unpacked once when it does not."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "gpu_unpack.sh").write_text((ROOT / "bench" / "gpu_unpack.sh").read_text())
    src = tmp_path / "src" / "bundle"
    src.mkdir(parents=True)
    (tmp_path / "build-gpu" / "bundlexz").mkdir(parents=True)

    def carry(text):
        (src / "quarrel").write_text(text)
        subprocess.run(["tar", "-C", str(tmp_path / "src"), "-cJf", "build-gpu/bundlexz/bundle.tar.xz", "bundle"],
                       cwd=tmp_path, check=True)

    def unpack():
        subprocess.run(["bash", "-c", "set -u; . bench/gpu_unpack.sh"], cwd=tmp_path, check=True)
        return (tmp_path / "build-gpu" / "bundle" / "quarrel").read_text()

    carry("build 1")
    assert unpack() == "build 1"
    (tmp_path / "build-gpu" / "bundle" / "quarrel").write_text("touched")  # the same archive: not unpacked again
    assert unpack() == "touched"
    carry("build 2")  # a new call carries a new archive onto the warm machine
    assert unpack() == "build 2"
