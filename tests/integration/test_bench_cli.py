"""`quarrel bench` on the CPU with the default model: the batched-decode mode (--parallel / -np, llama.cpp's
llama-batched-bench), its bad values, and the median of the single-sequence mode. Small sizes: a few
seconds on 2 cores."""
import json
import os
import subprocess
import sys

import pytest


# Runs argv[1:] and prints its peak RSS in KiB (ru_maxrss of that child alone) after its output.
RSS_HELPER = """
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


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


def test_repacked_weights_resident_once(quarrel_bin, smollm2, tmp_path):
    """A weight repacked at load time is resident once: its file pages are dropped and stay dropped while the model
    runs. Linux 6.18 with large page-cache folios mapped a whole 2 MB folio back (one PMD) when a pass read a small
    weight lying next to packed ones (a norm vector), so most of SmolLM2 Q8_0's file came back: peak RSS 250 MB for a
    145 MB file (llama.cpp: 165 MB), 167 MB since the packed weights' pages are MADV_NOHUGEPAGE. Q8_0 is repacked on
    AVX-512 hosts; elsewhere the weights are used in place and the bound holds as it is."""
    q8 = tmp_path / "smollm2-q8_0.gguf"
    subprocess.run([quarrel_bin, "quantize", smollm2, str(q8), "Q8_0", "--allow-requantize"], check=True,
                   capture_output=True, timeout=120)
    fd = os.open(q8, os.O_RDONLY)  # out of the page cache: the load reads it back as a model file usually is read
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    args = [quarrel_bin, "bench", "-m", str(q8), "--backend", "cpu", "-t", "2", "-p", "64", "-n", "32", "-r", "1"]
    # the peak of bench alone: spawned from a small helper process, because a child's ru_maxrss also counts the
    # memory of the process it was spawned from until its exec (a vfork'd child shares pytest's, hundreds of MiB late
    # in a run)
    r = subprocess.run([sys.executable, "-c", RSS_HELPER, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    peak_mb, file_mb = int(r.stdout.split()[-1]) / 1024, q8.stat().st_size / 2**20
    assert peak_mb <= file_mb + 48, f"peak RSS {peak_mb:.0f} MiB for a {file_mb:.0f} MiB model"
