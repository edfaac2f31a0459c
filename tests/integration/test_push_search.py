"""`quarrel push` and `quarrel search` (MiniLM, all-MiniLM-L6-v2) against longbow_server.py, with
pyarrow.flight as the referee:
  * a push of 10,000 texts arrives complete: every id, each vector bit-exact against `quarrel embed -o`
    of the same file, the text and the metadata;
  * `quarrel search` finds the right nearest neighbour for 20 queries;
  * the server killed mid-push and restarted, then the same push again: every id exactly once;
  * issue 35, each against the stand-in: a plain re-push of the same input sends nothing, even to a
    store that appends (--append: no upsert by id), and a partly stored input sends only the rest;
    malformed URIs (port 99999) are usage errors; an unreachable server, a refused or missing API key,
    a dataset that stays BUSY and a schema mismatch each fail fast with their own message, before any
    embedding; the API key (--flight-key or QUARREL_FLIGHT_KEY) is sent and never printed;
  * bad input gives a clear error and a nonzero exit.
The model is $QUARREL_MODELS_DIR/all-MiniLM-L6-v2.f16.gguf (scripts/setup.sh); a missing one fails.
"""
import json
import os
import pathlib
import subprocess
import time

import numpy as np
import pyarrow.flight as fl
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))
COLORS = ["red", "green", "blue", "amber", "violet", "silver", "black", "white", "orange", "teal"]
THINGS = ["kettle", "bicycle", "lantern", "violin", "tractor", "umbrella", "compass", "telescope", "piano", "canoe",
          "rocket", "garden", "castle", "bridge", "harbor", "forest", "desert", "glacier", "volcano", "library"]


@pytest.fixture(scope="session")
def minilm(quarrel_bin, tmp_path_factory):
    """MiniLM quantized to Q8_0 by `quarrel quantize` (3x faster than F16 on CPU: the 10,000-row push
    stays within seconds on 2 cores; tests/ref/test_embed.py checks the F16 model's accuracy)."""
    p = MODELS / "all-MiniLM-L6-v2.f16.gguf"
    if not p.exists():
        pytest.fail(f"MiniLM model missing: {p} (run scripts/setup.sh)")
    q = tmp_path_factory.mktemp("minilm") / "all-MiniLM-L6-v2.q8_0.gguf"
    subprocess.run([quarrel_bin, "quantize", str(p), str(q), "Q8_0"], check=True, capture_output=True)
    return q


def text_of(i):
    """A short unique text per row (few tokens, to keep 10,000 rows quick on 2 cores)."""
    return f"{COLORS[i % 10]} {THINGS[(i // 10) % 20]} {i}"


def write_texts(path, ids, with_meta=True):
    with open(path, "w") as f:
        for i in ids:
            row = {"id": int(i), "text": text_of(int(i))}
            if with_meta:
                row["metadata"] = {"n": int(i), "even": int(i) % 2 == 0}
            f.write(json.dumps(row) + "\n")


def quarrel(bin_, *args, timeout=300, check=True):
    p = subprocess.run([bin_, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"quarrel {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


def scan(srv, dataset):
    ticket = fl.Ticket(json.dumps({"dataset": dataset, "filters": []}).encode())
    return fl.connect(f"grpc://{srv.data}").do_get(ticket).read_all()


def stats(srv):
    c = fl.connect(f"grpc://{srv.data}")
    return [json.loads(r.body.to_pybytes()) for r in c.do_action(fl.Action("stats", b""))][0]


N = 10_000


@pytest.fixture(scope="module")
def pushed(quarrel_bin, minilm, tmp_path_factory):
    """One server with the 10,000 rows pushed (shared by the read-back and search tests)."""
    # load this folder's conftest by path: `import conftest` may resolve to tests/integration/server's
    import importlib.util
    spec = importlib.util.spec_from_file_location("integration_conftest", pathlib.Path(__file__).with_name("conftest.py"))
    lb_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lb_conftest)
    srv = lb_conftest.LongbowServer([])
    tmp = tmp_path_factory.mktemp("push")
    ids = np.arange(1000, 1000 + N)
    write_texts(tmp / "texts.jsonl", ids)
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--meta", f"grpc://{srv.meta}",
                "--dataset", "docs", "-f", tmp / "texts.jsonl", "--batch", 256, "--metric", "cosine")
    yield srv, tmp, ids, p.stderr
    srv.stop()


def test_push_10k_complete_and_bit_exact(quarrel_bin, minilm, pushed):
    srv, tmp, ids, log = pushed
    assert f"push: {N} rows" in log and "rows/s" in log and "dim 384" in log
    t = scan(srv, "docs").sort_by("id")
    assert t.num_rows == N
    assert np.array_equal(t["id"].to_numpy(), ids)
    assert t.schema.metadata[b"longbow.metric"] == b"cosine"
    got = t["vector"].combine_chunks().flatten().to_numpy().reshape(N, 384)
    # `quarrel embed -o` of a random subset (a text's vector does not depend on the texts that share its
    # forward pass: test_embed.py::test_minilm_batching_invariant), bit for bit
    pick = np.sort(np.random.default_rng(1).choice(N, 400, replace=False))
    write_texts(tmp / "subset.jsonl", ids[pick])
    quarrel(quarrel_bin, "embed", "-m", minilm, "-f", tmp / "subset.jsonl", "-o", tmp / "ref.npy", "--batch", 100)
    want = np.load(tmp / "ref.npy")
    assert np.array_equal(got[pick].view(np.uint32), want.view(np.uint32))  # bit-exact float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    texts = t["text"].to_pylist()
    metas = t["metadata"].to_pylist()
    for k in (0, 1, 4567, N - 1):
        assert texts[k] == text_of(int(ids[k]))
        assert json.loads(metas[k]) == {"n": int(ids[k]), "even": int(ids[k]) % 2 == 0}


def test_search_nearest_neighbour(quarrel_bin, minilm, pushed):
    srv, tmp, ids, _ = pushed
    rng = np.random.default_rng(5)
    for i in rng.choice(ids, 20, replace=False):
        p = quarrel(quarrel_bin, "search", "--flight", f"grpc://{srv.data}", "--dataset", "docs", "-m", minilm,
                    "-p", text_of(int(i)), "-k", 5)
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 5, p.stdout
        hid, score, text = lines[0].split("\t")
        assert int(hid) == i and text == text_of(int(i)), lines
        assert float(score) > 0.99  # cosine distance ~0 -> score 1/(1+d) ~ 1
        assert all(float(a.split("\t")[1]) >= float(b.split("\t")[1]) for a, b in zip(lines, lines[1:]))


def test_kill_mid_push_then_resume(quarrel_bin, minilm, longbow, tmp_path):
    srv = longbow("--data-dir", str(tmp_path / "data"), "--ingest-delay-ms", "5")
    n = 2000
    ids = np.arange(n)
    write_texts(tmp_path / "texts.jsonl", ids)
    args = ["push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--dataset", "kill", "-f", tmp_path / "texts.jsonl",
            "--batch", 50]
    proc = subprocess.Popen([quarrel_bin, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while stats(srv).get("kill", {}).get("rows_stored", 0) < 300:
        assert time.time() < deadline and proc.poll() is None, "the push ended before the kill"
        time.sleep(0.02)
    srv.kill()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "re-run the same command" in err, err
    srv.restart()
    stored = stats(srv)["kill"]["rows_stored"]
    assert 0 < stored < n
    p = quarrel(quarrel_bin, *args)
    skipped = already_stored(p.stderr)
    assert skipped > 0
    got = scan(srv, "kill")["id"].to_numpy()
    assert len(got) == n and np.array_equal(np.sort(got), ids)  # every id exactly once
    # a plain re-run sends nothing
    p = quarrel(quarrel_bin, *args)
    assert already_stored(p.stderr) == n and f"push: 0 rows ({n} skipped)" in p.stderr, p.stderr
    got = scan(srv, "kill")["id"].to_numpy()
    assert len(got) == n and len(np.unique(got)) == n
    # --resume is still accepted
    p = quarrel(quarrel_bin, *args, "--resume")
    assert already_stored(p.stderr) == n


def already_stored(log):
    """N of 'push: N of M rows already stored in DATASET (skipped)'."""
    line = next(ln for ln in log.splitlines() if "rows already stored" in ln)
    return int(line.split("push: ")[1].split(" of ")[0])


def test_repush_is_idempotent_on_an_appending_store(quarrel_bin, minilm, longbow, tmp_path):
    """Issue 35: 1,000 lines pushed twice to a store that appends gave 2,000 rows. Now the second push
    reads the stored ids (DoGet scan) and sends nothing; an input that is partly stored sends the rest."""
    srv = longbow("--append")
    ids = np.arange(5000, 6000)
    write_texts(tmp_path / "all.jsonl", ids)
    write_texts(tmp_path / "part.jsonl", ids[::3])
    base = ["push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--dataset", "app", "--batch", 128]
    quarrel(quarrel_bin, *base, "-f", tmp_path / "part.jsonl")
    p = quarrel(quarrel_bin, *base, "-f", tmp_path / "all.jsonl")
    assert already_stored(p.stderr) == len(ids[::3]) and f"push: {len(ids) - len(ids[::3])} rows" in p.stderr, p.stderr
    p = quarrel(quarrel_bin, *base, "-f", tmp_path / "all.jsonl")
    assert already_stored(p.stderr) == len(ids) and "push: 0 rows" in p.stderr, p.stderr
    got = scan(srv, "app")["id"].to_numpy()
    assert len(got) == len(ids) and np.array_equal(np.sort(got), ids)  # no duplicates on an appending store
    assert stats(srv)["app"]["rows_stored"] == len(ids)
    # a repeated id inside one input is sent once (its first line)
    with open(tmp_path / "rep.jsonl", "w") as f:
        for i in (1, 2, 1, 3, 2):
            f.write(json.dumps({"id": i, "text": f"text {i}"}) + "\n")
    p = quarrel(quarrel_bin, *base, "--dataset", "rep", "-f", tmp_path / "rep.jsonl")
    assert "2 lines repeat an earlier line's id" in p.stderr
    assert sorted(scan(srv, "rep")["id"].to_pylist()) == [1, 2, 3]
    # --send-all skips the read: on an appending store it duplicates, as documented
    p = quarrel(quarrel_bin, *base, "--dataset", "rep", "-f", tmp_path / "rep.jsonl", "--send-all")
    assert "push: 3 rows" in p.stderr
    assert len(scan(srv, "rep")) == 6


@pytest.mark.parametrize("uri,why", [("grpc://127.0.0.1:99999", "1 to 65535"), ("grpc://127.0.0.1:0", "1 to 65535"),
                                     ("grpc://127.0.0.1", "HOST:PORT"), ("grpc://:3000", "HOST:PORT"),
                                     ("grpc://127.0.0.1:3000/x", "nothing after"), ("http://127.0.0.1:3000", "scheme")])
def test_bad_uri_is_a_usage_error(quarrel_bin, minilm, tmp_path, uri, why):
    write_texts(tmp_path / "t.jsonl", range(3))
    for cmd in (["push", "--dataset", "d", "-f", tmp_path / "t.jsonl"], ["search", "--dataset", "d", "-p", "x"]):
        p = quarrel(quarrel_bin, *cmd, "-m", minilm, "--flight", uri, check=False)
        assert p.returncode == 2 and why in p.stderr and "bad Flight address" in p.stderr, p.stderr
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", "grpc://127.0.0.1:3000", "--meta", uri, "--dataset", "d",
                "-f", tmp_path / "t.jsonl", check=False)
    assert p.returncode == 2 and why in p.stderr


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def many_texts(path, n=3000):
    """Enough rows that embedding them takes far longer than the checks (several seconds on 2 cores)."""
    write_texts(path, range(n))


def assert_failed_fast(p, t0, msg):
    dt = time.time() - t0
    assert p.returncode == 1 and msg in p.stderr, p.stderr
    assert "rows/s" not in p.stderr and "push: 0/" not in p.stderr, p.stderr  # nothing embedded or sent
    assert dt < 8, f"took {dt:.1f} s"


def test_unreachable_server_fails_before_embedding(quarrel_bin, minilm, tmp_path):
    many_texts(tmp_path / "t.jsonl")
    t0 = time.time()
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", f"grpc://127.0.0.1:{free_port()}", "--dataset", "d",
                "-f", tmp_path / "t.jsonl", check=False)
    assert_failed_fast(p, t0, "cannot reach the Flight server")


def test_schema_mismatch_clear_error(quarrel_bin, minilm, longbow, tmp_path):
    srv = longbow()
    # a dataset whose vectors have another dimension
    import pyarrow as pa
    schema = pa.schema([("id", pa.int64()), ("vector", pa.list_(pa.float32(), 8))])
    c = fl.connect(f"grpc://{srv.data}")
    w, _ = c.do_put(fl.FlightDescriptor.for_path("mm"), schema)
    w.write_table(pa.table({"id": pa.array([1], pa.int64()),
                            "vector": pa.FixedSizeListArray.from_arrays(pa.array([0.0] * 8, pa.float32()), 8)},
                           schema=schema))
    w.close()
    many_texts(tmp_path / "t.jsonl")
    t0 = time.time()
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--dataset", "mm", "-f",
                tmp_path / "t.jsonl", check=False)
    assert_failed_fast(p, t0, "holds another schema")
    assert "fixed_size_list<float32>[8]" in p.stderr and "fixed_size_list<float32>[384]" in p.stderr, p.stderr
    assert stats(srv)["mm"]["puts"] == 1  # only ours above: push never opened a DoPut


def test_busy_dataset_fails_before_embedding(quarrel_bin, minilm, longbow, tmp_path):
    """A dataset still ingesting is waited for (up to --wait-ms), then refused with its own message."""
    srv = longbow("--ingest-delay-ms", "3000")
    import pyarrow as pa
    schema = pa.schema([("id", pa.int64()), ("vector", pa.list_(pa.float32(), 384))])
    c = fl.connect(f"grpc://{srv.data}")
    w, _ = c.do_put(fl.FlightDescriptor.for_path("busy"), schema)
    for k in range(3):
        w.write_table(pa.table({"id": pa.array([k], pa.int64()), "vector": pa.FixedSizeListArray.from_arrays(
            pa.array([0.0] * 384, pa.float32()), 384)}, schema=schema))
    w.close()
    many_texts(tmp_path / "t.jsonl")
    t0 = time.time()
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--dataset", "busy", "-f",
                tmp_path / "t.jsonl", "--wait-ms", "300", check=False)
    assert_failed_fast(p, t0, "not ready")
    assert "BUSY" in p.stderr and "nothing was embedded" in p.stderr, p.stderr


def test_api_key(quarrel_bin, minilm, longbow, tmp_path, monkeypatch):
    """Longbow's optional `authorization: Bearer KEY`: --flight-key or QUARREL_FLIGHT_KEY; a missing or
    wrong key fails before embedding with its own message, and the key never appears in the output."""
    key = "s3cr3t-k3y-7f1e"
    srv = longbow("--token", key)
    write_texts(tmp_path / "t.jsonl", range(20))
    many_texts(tmp_path / "many.jsonl")
    base = ["push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--meta", f"grpc://{srv.meta}", "--dataset", "k"]
    t0 = time.time()
    p = quarrel(quarrel_bin, *base, "-f", tmp_path / "many.jsonl", check=False)
    assert_failed_fast(p, t0, "needs an API key")
    t0 = time.time()
    p = quarrel(quarrel_bin, *base, "-f", tmp_path / "many.jsonl", "--flight-key", "wrong-" + key, check=False)
    assert_failed_fast(p, t0, "refused the API key")
    assert key not in p.stderr + p.stdout
    p = quarrel(quarrel_bin, *base, "-f", tmp_path / "t.jsonl", "--flight-key", key)
    assert "push: 20 rows" in p.stderr and key not in p.stderr + p.stdout
    assert len(scan_auth(srv, "k", key)) == 20
    monkeypatch.setenv("QUARREL_FLIGHT_KEY", key)
    p = quarrel(quarrel_bin, *base, "-f", tmp_path / "t.jsonl")
    assert already_stored(p.stderr) == 20 and key not in p.stderr + p.stdout
    p = quarrel(quarrel_bin, "search", "--flight", f"grpc://{srv.data}", "--dataset", "k", "-m", minilm, "-p",
                text_of(7), "-k", 1)
    assert p.stdout.split("\t")[0] == "7" and key not in p.stderr + p.stdout
    monkeypatch.delenv("QUARREL_FLIGHT_KEY")
    p = quarrel(quarrel_bin, "search", "--flight", f"grpc://{srv.data}", "--dataset", "k", "-m", minilm, "-p", "x",
                check=False)
    assert p.returncode == 1 and key not in p.stderr + p.stdout


def scan_auth(srv, dataset, key):
    c = fl.connect(f"grpc://{srv.data}")
    opts = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {key}".encode())])
    ticket = fl.Ticket(json.dumps({"dataset": dataset, "filters": []}).encode())
    return c.do_get(ticket, opts).read_all()


@pytest.mark.parametrize("content,msg", [(None, "cannot open"), ("", "holds no texts"),
                                         ('{"text": "a"}\n{oops\n', "malformed JSON")])
def test_push_bad_input(quarrel_bin, minilm, longbow, tmp_path, content, msg):
    srv = longbow()
    f = tmp_path / "in.jsonl"
    if content is not None:
        f.write_text(content)
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", f"grpc://{srv.data}", "--dataset", "bad", "-f", f,
                check=False)
    assert p.returncode == 1 and msg in p.stderr, p.stderr
    p = quarrel(quarrel_bin, "push", "-m", minilm, "--flight", "http://x", "--dataset", "bad", "-f", f, check=False)
    assert p.returncode == 2 and "Flight address" in p.stderr
