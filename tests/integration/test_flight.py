"""Our Flight client (driven through the flight-tool test driver) against longbow_server.py, a
pyarrow.flight server that behaves like Longbow. pyarrow's own Flight client is the referee: what we
push is read back with it, bit for bit."""
import json
import os
import socket
import subprocess
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest


def run(tool, *args, check=True, timeout=180):
    p = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"flight-tool {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


def last_json(p):
    return json.loads(p.stdout.strip().splitlines()[-1])


def client(srv, scheme="grpc", **kw):
    return fl.connect(f"{scheme}://{srv.data}", **kw)


def scan(srv, dataset, filters=None, **kw):
    ticket = fl.Ticket(json.dumps({"dataset": dataset, "filters": filters or []}).encode())
    return client(srv, **kw).do_get(ticket).read_all()


def action(srv, kind, body=b"", **kw):
    return [json.loads(r.body.to_pybytes()) for r in client(srv, **kw).do_action(fl.Action(kind, body))]


def stats(srv, dataset):
    return action(srv, "stats")[0][dataset]


def synthetic(ids, dim, seed=0):
    """The vectors flight-tool --synthetic pushes (see synthetic_vector in flight_tool.c)."""
    ids = np.asarray(ids, np.int64)[:, None]
    x = (ids * 1000003 + np.arange(dim, dtype=np.int64)[None, :] * 7919 + seed) % 2001
    return (x - 1000).astype(np.float32) / np.float32(1000)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_inputs(tmp_path, ids, vec, texts=None, metas=None):
    ids.astype(np.int64).tofile(tmp_path / "ids.bin")
    vec.astype(np.float32).tofile(tmp_path / "vec.bin")
    args = ["--ids", tmp_path / "ids.bin", "--vectors", tmp_path / "vec.bin", "--dim", vec.shape[1]]
    if texts is not None:
        with open(tmp_path / "docs.jsonl", "w", encoding="utf-8") as f:
            for t, m in zip(texts, metas):
                f.write(json.dumps({"text": t, "metadata": m}, ensure_ascii=False) + "\n")
        args += ["--docs", tmp_path / "docs.jsonl"]
    return args


def test_push_10k_and_read_back_bit_exact(longbow, flight_tool, tmp_path):
    srv = longbow("--ingest-delay-ms", "2")
    rng = np.random.default_rng(42)
    n, dim = 10_000, 384
    ids = rng.choice(2**32 - 1, size=n, replace=False).astype(np.int64)
    vec = rng.standard_normal((n, dim)).astype(np.float32)
    vec[0, :6] = [0.0, -0.0, np.inf, -np.inf, 1e-45, np.finfo(np.float32).max]
    vec.view(np.uint32)[1, 0] = 0x7FC01234  # a NaN with a payload
    texts = [("" if i % 97 == 0 else f"document {i} \u2014 \u00fcn\u00efc\u00f6d\u00e9 \u2713 " + "x" * (i % 50))
             for i in range(n)]
    metas = [json.dumps({"i": i, "tag": "ab"[i % 2], "quote": "\"q\""}) for i in range(n)]
    args = write_inputs(tmp_path, ids, vec, texts, metas)
    out = last_json(run(flight_tool, "push", "--data", srv.data, "--dataset", "docs", "--metric", "cosine",
                        "--batch-rows", 1000, "--wait-ready", 30000, *args))
    assert out["ok"] and out["rows"] == n and out["batches"] == 10 and out["attempts"] == 1
    assert out["bytes"] > n * dim * 4

    t = scan(srv, "docs")
    assert t.num_rows == n
    assert t.schema.names == ["id", "vector", "text", "metadata"]
    assert t.schema.field("vector").type == pa.list_(pa.float32(), dim)
    assert t.schema.metadata[b"longbow.metric"] == b"cosine"
    assert t.schema.metadata[b"longbow.vector_type"] == b"float32"
    t = t.sort_by("id")
    order = np.argsort(ids)
    assert np.array_equal(t["id"].to_numpy(), ids[order])
    got = t["vector"].combine_chunks().flatten().to_numpy()
    assert np.array_equal(got.view(np.uint32), vec[order].ravel().view(np.uint32))  # bit-exact, NaN payload too
    assert t["text"].to_pylist() == [texts[i] for i in order]
    assert t["metadata"].to_pylist() == [metas[i] for i in order]

    # our own DoGet + decoder + encoder: pyarrow reads the file back equal to its own scan
    res = last_json(run(flight_tool, "get", "--data", srv.data, "--dataset", "docs", "--out", tmp_path / "scan.arrows"))
    assert res["rows"] == n and res["metric"] == "cosine"
    ours = pa.ipc.open_stream(tmp_path / "scan.arrows").read_all().sort_by("id")
    assert ours.schema.equals(t.schema, check_metadata=True)
    for name in ["id", "text", "metadata"]:
        assert ours[name].equals(t[name])
    assert np.array_equal(ours["vector"].combine_chunks().flatten().to_numpy().view(np.uint32), got.view(np.uint32))

    # a filtered scan
    res = last_json(run(flight_tool, "get", "--data", srv.data, "--dataset", "docs", "--filters",
                        json.dumps([{"field": "id", "op": "<", "value": int(np.sort(ids)[99])}])))
    assert res["rows"] == 99


def test_search_returns_nearest_neighbour(longbow, flight_tool, tmp_path):
    srv = longbow()
    rng = np.random.default_rng(9)
    n, dim = 2000, 32
    ids = np.arange(5000, 5000 + n, dtype=np.int64)
    vec = rng.standard_normal((n, dim)).astype(np.float32)
    args = write_inputs(tmp_path, ids, vec)
    run(flight_tool, "push", "--data", srv.data, "--dataset", "nn", "--metric", "euclidean", "--no-text",
        "--wait-ready", 30000, *args)
    run(flight_tool, "push", "--data", srv.data, "--dataset", "nncos", "--metric", "cosine", "--wait-ready", 30000,
        *args)
    for i in [0, 17, 1234, n - 1]:
        q = (vec[i] + 1e-3 * rng.standard_normal(dim)).astype(np.float32)
        q.tofile(tmp_path / "q.bin")
        p = run(flight_tool, "search", "--data", srv.data, "--dataset", "nn", "--query", tmp_path / "q.bin",
                "--k", 5)
        hits = [json.loads(line) for line in p.stdout.splitlines()]
        assert len(hits) == 5 and hits[0]["id"] == ids[i]
        d = np.sqrt(((vec.astype(np.float64) - q.astype(np.float64)) ** 2).sum(axis=1))
        best = np.argsort(d, kind="stable")[:5]
        assert [h["id"] for h in hits] == ids[best].tolist()
        assert np.allclose([h["score"] for h in hits], 1 / (1 + d[best]), rtol=1e-6)
        assert hits[0]["score"] > hits[1]["score"]
        # cosine: a scaled copy of a stored vector is its own nearest neighbour with score ~1
        (3.5 * vec[i]).astype(np.float32).tofile(tmp_path / "q.bin")
        p = run(flight_tool, "search", "--data", srv.data, "--dataset", "nncos", "--query", tmp_path / "q.bin",
                "--k", 1)
        hit = json.loads(p.stdout)
        assert hit["id"] == ids[i] and abs(hit["score"] - 1.0) < 1e-5
    # a query of the wrong dimension is refused by the server, and said so
    np.zeros(dim + 1, np.float32).tofile(tmp_path / "q.bin")
    p = run(flight_tool, "search", "--data", srv.data, "--dataset", "nn", "--query", tmp_path / "q.bin", check=False)
    assert p.returncode == 1 and "INVALID_ARGUMENT" in p.stderr and "dim" in p.stderr


def test_schema_mismatch_gives_clear_error(longbow, flight_tool):
    srv = longbow()
    run(flight_tool, "push", "--data", srv.data, "--dataset", "m", "--synthetic", 100, "--dim", 8, "--wait-ready",
        10000)
    p = run(flight_tool, "push", "--data", srv.data, "--dataset", "m", "--synthetic", 10, "--dim", 16, check=False)
    assert p.returncode == 1
    assert "DoPut: INVALID_ARGUMENT: schema mismatch for dataset 'm'" in p.stderr
    assert "[8]" in p.stderr and "[16]" in p.stderr
    assert "\n" not in p.stderr.strip()  # one clear line, no server traceback
    assert last_json(p)["grpc_status"] == "INVALID_ARGUMENT"
    p = run(flight_tool, "push", "--data", srv.data, "--dataset", "m", "--synthetic", 10, "--dim", 8, "--no-text",
            check=False)
    assert p.returncode == 1 and "schema mismatch" in p.stderr
    assert scan(srv, "m").num_rows == 100  # the refused puts stored nothing


def test_readiness_polling(longbow, flight_tool):
    srv = longbow("--ingest-delay-ms", "60")
    out = last_json(run(flight_tool, "push", "--data", srv.data, "--dataset", "r", "--synthetic", 3000, "--dim", 16,
                        "--batch-rows", 100))
    assert out["rows"] == 3000
    state = action(srv, "check_readiness", b'{"dataset": "r"}')[0]
    assert state["status"] == "BUSY" and "pending" in state["reason"]  # ingest is asynchronous
    t0 = time.time()
    run(flight_tool, "ready", "--data", srv.data, "--dataset", "r", "--wait-ms", 20000)
    assert time.time() - t0 > 0.1  # it had to poll
    assert action(srv, "check_readiness", b'{"dataset": "r"}')[0]["status"] == "READY"
    assert scan(srv, "r").num_rows == 3000
    p = run(flight_tool, "ready", "--data", srv.data, "--dataset", "nope", "--wait-ms", 300, check=False)
    assert p.returncode == 1 and "not ready after 300 ms" in p.stderr and "NOT_FOUND" in p.stderr


def test_flight_info_and_list(longbow, flight_tool):
    srv = longbow()
    for name, n in [("a", 10), ("b", 25)]:
        run(flight_tool, "push", "--data", srv.data, "--dataset", name, "--synthetic", n, "--dim", 4,
            "--wait-ready", 10000)
    info = last_json(run(flight_tool, "info", "--data", srv.data, "--meta", srv.meta, "--dataset", "b"))
    assert info == {"has_schema": False, "schema": "", "path": ["b"], "total_records": 25, "total_bytes": -1,
                    "endpoints": 0}
    p = run(flight_tool, "list", "--data", srv.data, "--meta", srv.meta)
    listed = [json.loads(line) for line in p.stdout.splitlines()]
    assert [(x["path"], x["total_records"]) for x in listed] == [(["a"], 10), (["b"], 25)]
    p = run(flight_tool, "info", "--meta", srv.meta, "--dataset", "zzz", check=False)
    assert p.returncode == 1 and "GetFlightInfo: NOT_FOUND" in p.stderr
    # the meta port is a different server: it has no DoPut
    p = run(flight_tool, "push", "--data", srv.meta, "--dataset", "a", "--synthetic", 1, "--dim", 4, check=False)
    assert p.returncode == 1 and "UNIMPLEMENTED" in p.stderr


def test_slow_down_is_honoured_with_bounded_memory(longbow, flight_tool):
    threshold, batch = 1000, 200
    srv = longbow("--ingest-delay-ms", "15", "--slow-down-rows", str(threshold))
    common = ["--data", srv.data, "--synthetic", 20000, "--dim", 64, "--batch-rows", batch, "--wait-ready", 60000]
    out = last_json(run(flight_tool, "push", "--dataset", "slow", *common))
    st = stats(srv, "slow")
    assert out["ok"] and out["rows"] == 20000
    assert out["slow_downs"] > 0 and out["put_results"] >= out["slow_downs"] and out["backoff_s"] > 0.2
    assert st["slow_downs_sent"] == out["slow_downs"]
    assert st["max_backlog_rows"] <= threshold + 10 * batch, st  # the client backed off
    assert out["max_rss_kb"] < 100_000
    # the same push ignoring slow_down floods the server: the bound above is a real check
    out2 = last_json(run(flight_tool, "push", "--dataset", "flood", "--ignore-slow-down", *common))
    st2 = stats(srv, "flood")
    assert out2["slow_downs"] > 0 and out2["backoff_s"] == 0
    assert st2["max_backlog_rows"] > threshold + 10 * batch, st2
    assert scan(srv, "slow").num_rows == 20000 and scan(srv, "flood").num_rows == 20000
    # the client streams: pushing 150 MB takes a few MB of memory
    big = longbow("--discard")
    out3 = last_json(run(flight_tool, "push", "--data", big.data, "--dataset", "big", "--synthetic", 150_000,
                         "--dim", 256, "--batch-rows", 1000))
    assert out3["ok"] and out3["bytes"] > 150_000_000
    assert out3["max_rss_kb"] < 50_000, out3


def test_server_killed_mid_push_then_rerun(longbow, flight_tool, tmp_path):
    data_dir = tmp_path / "data"
    srv = longbow("--data-dir", str(data_dir), "--ingest-delay-ms", "20", "--slow-down-rows", "1000")
    n, start, dim = 20000, 1_000_000, 32
    args = ["push", "--data", srv.data, "--dataset", "kill", "--synthetic", n, "--start-id", start, "--dim", dim,
            "--batch-rows", 250, "--seed", 3]
    proc = subprocess.Popen([flight_tool, *map(str, args), "--retries", "0", "--no-rewind"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while action(srv, "stats")[0].get("kill", {}).get("rows_stored", 0) < 2000:
        assert time.time() < deadline and proc.poll() is None, "the push ended before the kill"
        time.sleep(0.02)
    srv.kill()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "DoPut" in err, err
    assert not last_json(subprocess.CompletedProcess([], 1, out, err))["ok"]

    srv.restart()
    st = stats(srv, "kill")
    assert 0 < st["rows_stored"] < n  # a part survived on disk
    partial = st["rows_stored"]
    out = last_json(run(flight_tool, *args, "--wait-ready", 60000))  # same ports after the restart
    assert out["ok"] and out["rows"] == n
    t = scan(srv, "kill")
    got = t["id"].to_numpy()
    assert len(got) == n and len(np.unique(got)) == n  # every id exactly once
    assert np.array_equal(np.sort(got), np.arange(start, start + n))
    t = t.sort_by("id")
    vec = t["vector"].combine_chunks().flatten().to_numpy().reshape(n, dim)
    assert np.array_equal(vec.view(np.uint32), synthetic(np.arange(start, start + n), dim, seed=3).view(np.uint32))
    assert t["text"][5].as_py() == f"doc {start + 5}"
    st = stats(srv, "kill")
    assert st["rows_stored"] == partial + n and st["rows_unique"] == n  # re-sent rows were upserted


def test_retries_until_the_server_comes_up(longbow, flight_tool):
    data_port, meta_port = free_port(), free_port()
    args = ["push", "--data", f"127.0.0.1:{data_port}", "--dataset", "late", "--synthetic", 500, "--dim", 8,
            "--retries", 10, "--wait-ready", 20000]
    proc = subprocess.Popen([flight_tool, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.2)
    assert proc.poll() is None  # still retrying with backoff
    srv = longbow(data_port=data_port, meta_port=meta_port)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    res = json.loads(out.strip().splitlines()[-1])
    assert res["attempts"] >= 3 and res["rows"] == 500
    assert scan(srv, "late").num_rows == 500


def test_bearer_token(longbow, flight_tool):
    srv = longbow("--token", "s3cret")
    base = ["push", "--data", srv.data, "--dataset", "auth", "--synthetic", 50, "--dim", 4]
    p = run(flight_tool, *base, check=False)
    assert p.returncode == 1 and "UNAUTHENTICATED" in p.stderr
    p = run(flight_tool, *base, "--token", "wrong", check=False)
    assert p.returncode == 1 and "UNAUTHENTICATED" in p.stderr
    run(flight_tool, *base, "--token", "s3cret", "--wait-ready", 10000)
    info = last_json(run(flight_tool, "info", "--meta", srv.meta, "--dataset", "auth", "--token", "s3cret"))
    assert info["total_records"] == 50


def test_tls(longbow, flight_tool, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    srv = longbow("--tls-cert", str(cert), "--tls-key", str(key))
    out = last_json(run(flight_tool, "push", "--data", srv.data, "--dataset", "tls", "--synthetic", 300, "--dim", 8,
                        "--tls-root", cert, "--wait-ready", 10000))
    assert out["ok"] and out["rows"] == 300
    with open(cert, "rb") as f:
        t = scan(srv, "tls", scheme="grpc+tls", tls_root_certs=f.read())
    assert t.num_rows == 300
    p = run(flight_tool, "push", "--data", srv.data, "--dataset", "tls", "--synthetic", 1, "--dim", 8, "--retries",
            0, check=False)
    assert p.returncode == 1  # plaintext against a TLS server fails
