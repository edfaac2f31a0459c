"""`quarrel bench` on the CPU with the default model: the batched-decode mode (--parallel / -np, llama.cpp's
llama-batched-bench), its bad values, and the median of the single-sequence mode. Small sizes: a few
seconds on 2 cores."""
import json
import subprocess

import pytest


def bench(quarrel_bin, model, *args):
    return subprocess.run([quarrel_bin, "bench", "-m", model, "--backend", "cpu", "-t", "2", *args],
                          capture_output=True, text=True, timeout=120)


def test_parallel_json(quarrel_bin, smollm2):
    r = bench(quarrel_bin, smollm2, "-p", "16", "-n", "8", "-r", "2", "--parallel", "4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_parallel"] == 4 and out["n_prompt"] == 16 and out["n_gen"] == 8 and out["reps"] == 2
    for k in ("pp_tps", "tg_tps", "pp_median_tps", "tg_median_tps", "tg_seq_median_tps", "tg_step_median_ms"):
        assert out[k] > 0, (k, out)
    assert len(out["runs"]) == 2
    for run in out["runs"]:
        assert all(run[k] > 0 for k in ("pp_tps", "tg_tps", "tg_seq_tps", "tg_step_ms")), run
        # aggregate = sequences x per-sequence; the step time is the inverse of the per-sequence rate
        assert run["tg_tps"] == pytest.approx(4 * run["tg_seq_tps"], rel=1e-3)
        assert run["tg_step_ms"] == pytest.approx(1000 / run["tg_seq_tps"], rel=1e-3)


def test_parallel_table_with_depth(quarrel_bin, smollm2):
    # -np is llama.cpp's spelling; each of the 2 sequences starts from 8 cached tokens; -b 5 splits the prefill
    r = bench(quarrel_bin, smollm2, "-p", "8", "-n", "4", "-r", "2", "-np", "2", "-d", "8", "-b", "5")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| SmolLM2")]
    assert [row.split("|")[4].strip() for row in rows] == ["1", "2", "median"], r.stdout
    assert all("np2 pp8 tg4 @ d8" in row for row in rows), r.stdout
    assert "depth 8 filled" in r.stderr


@pytest.mark.parametrize("value", ["0", "100000", "-3", "four"])
def test_parallel_bad_value(quarrel_bin, smollm2, value):
    r = bench(quarrel_bin, smollm2, "-p", "16", "-n", "8", "--parallel", value)
    assert r.returncode == 2, (r.returncode, r.stderr)  # a usage error, never a signal
    assert f"--parallel: bad value '{value}'" in r.stderr and "[1, 4096]" in r.stderr, r.stderr
    assert not r.stdout


def test_parallel_kv_too_large(quarrel_bin, smollm2):
    r = bench(quarrel_bin, smollm2, "-p", "1000000", "-n", "8", "-np", "4096")
    assert r.returncode == 2, r.stderr
    assert "tokens of KV cache: too many" in r.stderr


def test_single_sequence_median(quarrel_bin, smollm2):
    r = bench(quarrel_bin, smollm2, "-p", "16", "-n", "8", "-r", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "n_parallel" not in out
    assert out["pp_median_tps"] > 0 and out["tg_median_tps"] > 0 and out["pp_tps"] > 0 and out["tg_tps"] > 0
    r = bench(quarrel_bin, smollm2, "-p", "16", "-n", "0", "-r", "2")
    assert r.returncode == 0, r.stderr
    assert "| model | threads | test | t/s | median |" in r.stdout
    row = [line for line in r.stdout.splitlines() if "| pp16 |" in line]
    assert len(row) == 1 and "±" in row[0] and float(row[0].split("|")[5]) > 0, r.stdout
