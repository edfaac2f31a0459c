"""Mamba2 kernels vs a float64 numpy reference written from the Mamba2 paper's recurrence.

For head h (group g = h // (n_head // n_group)) and token t:
    dt_t  = softplus(dt_raw[t, h] + dt_bias[h])           (identity above 20, as the reference kernels)
    S_t   = exp(dt_t * A[h]) * S_{t-1} + dt_t * x_t[h] (outer) B_t[g]       S: [head_dim, d_state]
    y_t   = S_t @ C_t[g] + D[h] * x_t[h]
and the causal depthwise conv1d over the last d_conv inputs (the state holds the previous d_conv - 1),
followed by + bias and SiLU. The C kernels (ssm-tool, the CPU backend's ops) must agree within 1e-5
(relative to the largest reference value) on random inputs with extreme dt (softplus 1e-4 .. 1e2),
4096-token sequences, multi-sequence batches split into passes, and a fuzz run that finds no NaN/Inf
where float64 has none. Every scan test runs both forms of the CPU scan (the recurrence, and the chunked
SSD form of prefill runs).
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(params=["recurrent", "ssd"])
def ssm_tool(quarrel_bin, request, monkeypatch):
    """The tool, with the CPU scan in one of its two forms (QUARREL_SSM_SCAN): the recurrence row by row,
    or the chunked SSD form for runs of >= 32 rows of one sequence."""
    path = pathlib.Path(os.environ.get("QUARREL_SSM_TOOL", pathlib.Path(quarrel_bin).parent / "tests/unit/ssm-tool"))
    if not path.exists():
        pytest.fail(f"ssm-tool not found at {path}: build the tests (cmake --build build)")
    monkeypatch.setenv("QUARREL_SSM_SCAN", request.param)
    return str(path)


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def ref_scan(xbc, dt, dt_bias, A, D, state, seq, n_head, head_dim, n_group, d_state):
    di = n_head * head_dim
    S = state.astype(np.float64).copy()  # [n_seq, n_head, head_dim, d_state]
    y = np.zeros((len(seq), di))
    g = np.arange(n_head) // (n_head // n_group)
    for t in range(len(seq)):
        s = seq[t]
        row = xbc[t].astype(np.float64)
        x = row[:di].reshape(n_head, head_dim)
        B = row[di:di + n_group * d_state].reshape(n_group, d_state)[g]
        C = row[di + n_group * d_state:].reshape(n_group, d_state)[g]
        d = softplus(dt[t].astype(np.float64) + dt_bias)
        dA = np.exp(d * A)
        S[s] = S[s] * dA[:, None, None] + (d[:, None] * x)[:, :, None] * B[:, None, :]
        y[t] = (np.einsum("hpn,hn->hp", S[s], C) + D[:, None] * x).reshape(-1)
    return y, S


def ref_conv(x, w, b, state, seq):
    K = w.shape[1]
    st = state.astype(np.float64).copy()  # [n_seq, K-1, C]
    out = np.zeros(x.shape)
    for t in range(len(seq)):
        s = seq[t]
        win = np.concatenate([st[s], x[t:t + 1].astype(np.float64)], axis=0)  # [K, C]
        v = (win * w.T.astype(np.float64)).sum(0) + b
        out[t] = v / (1.0 + np.exp(-v))
        st[s] = win[1:]
    return out, st


def run_tool(tool, tmp_path, mode, header, arrays, seq, n_out, n_batch=0, scalar=False):
    inp, outp = tmp_path / f"{mode}.in", tmp_path / f"{mode}.out"
    with open(inp, "wb") as f:
        f.write(np.array(header, dtype=np.int32).tobytes())
        for a in arrays:
            f.write(np.ascontiguousarray(a, dtype=np.float32).tobytes())
        f.write(np.array(seq, dtype=np.int32).tobytes())
    cmd = [tool, mode, str(inp), str(outp), str(n_batch)] + (["--scalar"] if scalar else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = np.fromfile(outp, dtype=np.float32) if outp.exists() else None
    return r, out


def make_scan_case(rng, n_tok, n_head=4, head_dim=16, n_group=2, d_state=32, n_seq=1, dt_lo=1e-4, dt_hi=1e2):
    di = n_head * head_dim
    C = di + 2 * n_group * d_state
    xbc = rng.standard_normal((n_tok, C)).astype(np.float32)
    # raw dt so that softplus(dt + bias) spans [dt_lo, dt_hi] log-uniformly
    target = np.exp(rng.uniform(np.log(dt_lo), np.log(dt_hi), (n_tok, n_head)))
    raw = np.where(target > 20.0, target, np.log(np.expm1(target)))
    dt_bias = rng.uniform(-0.5, 0.5, n_head).astype(np.float32)
    dt = (raw - dt_bias).astype(np.float32)
    A = -np.exp(rng.uniform(np.log(0.01), np.log(10.0), n_head)).astype(np.float32)
    D = rng.uniform(0.5, 1.5, n_head).astype(np.float32)
    state = (0.1 * rng.standard_normal((n_seq, n_head, head_dim, d_state))).astype(np.float32)
    seq = rng.integers(0, n_seq, n_tok) if n_seq > 1 else np.zeros(n_tok, dtype=np.int64)
    return dict(xbc=xbc, dt=dt, dt_bias=dt_bias, A=A, D=D, state=state, seq=seq, n_head=n_head, head_dim=head_dim,
                n_group=n_group, d_state=d_state, n_seq=n_seq)


def check_scan(tool, tmp_path, c, n_batch=0, scalar=False, tol=1e-5):
    n_tok = len(c["seq"])
    di = c["n_head"] * c["head_dim"]
    header = [n_tok, c["n_head"], c["head_dim"], c["n_group"], c["d_state"], c["n_seq"]]
    r, out = run_tool(tool, tmp_path, "scan", header, [c["xbc"], c["dt"], c["dt_bias"], c["A"], c["D"], c["state"]],
                      c["seq"], None, n_batch, scalar)
    assert r.returncode == 0, r.stderr
    y = out[: n_tok * di].reshape(n_tok, di)
    S = out[n_tok * di:].reshape(c["state"].shape)
    yr, Sr = ref_scan(c["xbc"], c["dt"], c["dt_bias"].astype(np.float64), c["A"].astype(np.float64),
                      c["D"].astype(np.float64), c["state"], c["seq"], c["n_head"], c["head_dim"], c["n_group"],
                      c["d_state"])
    assert np.isfinite(y).all() and np.isfinite(S).all()
    ey = np.abs(y - yr).max() / np.abs(yr).max()
    es = np.abs(S - Sr).max() / np.abs(Sr).max()
    assert ey <= tol, f"y: relative error {ey:.2e} > {tol}"
    assert es <= tol, f"state: relative error {es:.2e} > {tol}"
    return ey, es


def test_scan_extreme_dt(ssm_tool, tmp_path):
    rng = np.random.default_rng(1)
    ey, es = check_scan(ssm_tool, tmp_path, make_scan_case(rng, 256))
    print(f"scan, dt 1e-4..1e2: y {ey:.2e}, state {es:.2e}")


def test_scan_scalar_path(ssm_tool, tmp_path):
    rng = np.random.default_rng(2)
    check_scan(ssm_tool, tmp_path, make_scan_case(rng, 128, d_state=48), scalar=True)  # d_state % 32 != 0: tail


def test_scan_long_sequence(ssm_tool, tmp_path):
    rng = np.random.default_rng(3)
    ey, es = check_scan(ssm_tool, tmp_path, make_scan_case(rng, 4096, n_head=2, head_dim=8, n_group=1, d_state=32,
                                                          dt_lo=1e-4, dt_hi=1.0))
    print(f"scan, 4096 tokens: y {ey:.2e}, state {es:.2e}")


def test_scan_sequences_interleaved_in_passes(ssm_tool, tmp_path):
    rng = np.random.default_rng(4)
    c = make_scan_case(rng, 300, n_seq=3)
    check_scan(ssm_tool, tmp_path, c, n_batch=7)  # rows of 3 sequences, passes of 7 rows


def test_scan_fuzz_no_nan(ssm_tool, tmp_path):
    rng = np.random.default_rng(5)
    for i in range(12):
        c = make_scan_case(rng, int(rng.integers(1, 200)), n_head=int(rng.choice([1, 2, 4])), head_dim=8,
                           n_group=1, d_state=int(rng.choice([16, 32, 64])), dt_lo=1e-4, dt_hi=1e2)
        c["xbc"] *= np.float32(10.0 ** rng.uniform(-3, 2))  # inputs from tiny to large
        c["A"] = -np.exp(rng.uniform(np.log(1e-4), np.log(50.0), c["n_head"])).astype(np.float32)
        check_scan(ssm_tool, tmp_path, c, n_batch=int(rng.integers(1, 64)))


def test_scan_divergence_is_an_error(ssm_tool, tmp_path):
    rng = np.random.default_rng(6)
    c = make_scan_case(rng, 8)
    c["xbc"][3, 0] = np.float32(np.inf)  # an Inf input makes the state non-finite
    header = [8, c["n_head"], c["head_dim"], c["n_group"], c["d_state"], 1]
    r, _ = run_tool(ssm_tool, tmp_path, "scan", header,
                    [c["xbc"], c["dt"], c["dt_bias"], c["A"], c["D"], c["state"]], c["seq"], None)
    assert r.returncode == 2 and "diverged" in r.stderr, r.stderr


@pytest.mark.parametrize("n_batch", [0, 1, 5])
def test_conv_matches_reference(ssm_tool, tmp_path, n_batch):
    rng = np.random.default_rng(7 + n_batch)
    n_tok, C, K, n_seq = 4096 if n_batch == 0 else 200, 40, 4, 2
    x = rng.standard_normal((n_tok, C)).astype(np.float32)
    w = (0.5 * rng.standard_normal((C, K))).astype(np.float32)
    b = (0.1 * rng.standard_normal(C)).astype(np.float32)
    state = rng.standard_normal((n_seq, K - 1, C)).astype(np.float32)
    seq = rng.integers(0, n_seq, n_tok)
    r, out = run_tool(ssm_tool, tmp_path, "conv", [n_tok, C, K, n_seq], [x, w, b, state], seq, None, n_batch)
    assert r.returncode == 0, r.stderr
    y = out[: n_tok * C].reshape(n_tok, C)
    st = out[n_tok * C:].reshape(n_seq, K - 1, C)
    yr, sr = ref_conv(x, w, b.astype(np.float64), state, seq)
    err = np.abs(y - yr).max() / np.abs(yr).max()
    assert err <= 1e-5, f"conv: relative error {err:.2e}"
    assert np.array_equal(st, sr.astype(np.float32)), "conv state must hold the last d_conv - 1 inputs exactly"
