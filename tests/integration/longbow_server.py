#!/usr/bin/env python3
"""A pyarrow.flight server that behaves like Longbow, for testing our Flight client.

It follows the wire facts of docs (design.md, "Longbow over Arrow Flight"):
  * a data server (DoPut, DoGet, DoAction) and a meta server (GetFlightInfo, ListFlights, DoGet,
    DoAction), both plain arrow.flight.protocol.FlightService, on ports given on the command line
    (0 = pick a free port; the chosen ports are printed as the first stdout line, as JSON);
  * DoPut with a PATH descriptor naming the dataset (created by the first put). The schema must have
    `id` int64 and `vector` FixedSizeList<float32, dim>; later puts must match the stored schema, or
    the call fails with INVALID_ARGUMENT. Ingest is asynchronous: batches are queued and a worker
    thread stores them (optionally slowly, --ingest-delay-ms per batch). While the queue holds more
    than --slow-down-rows rows, every received batch is answered by a PutResult whose app_metadata
    is {"status":"slow_down"};
  * DoAction check_readiness {"dataset"} answers {"status": READY | BUSY | NOT_FOUND, "reason"};
  * DoGet tickets are JSON: a scan {"dataset", "filters": [{"field","op","value"}]} streams the stored
    schema; a search {"search": {"dataset", "vector", "k"}} streams `id` uint64 and `score` float32
    with score = 1/(1+distance) (brute force; metric from the schema metadata longbow.metric);
  * GetFlightInfo returns no schema and no endpoints (only the descriptor and the row count).
Rows are idempotent: they are upserted by id (the last write of an id wins), so re-sending a stream
after a failure leaves every id exactly once; with --append the store keeps every row it is sent (a
store that appends: a re-sent row is a duplicate), for testing clients that must not rely on upserts. With --data-dir every stored batch is also appended to
an Arrow IPC stream file there and reloaded at start (a server killed mid-write loses at most the
batches not yet stored). Extra actions for tests: "stats" (JSON counters) and "reset".
"""
import argparse
import json
import os
import queue
import re
import signal
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class Dataset:
    def __init__(self, name, schema):
        self.name = name
        self.schema = schema
        self.batches = []           # stored batches (insertion order)
        self.pending_rows = 0       # queued, not yet stored
        self.active_puts = 0        # DoPut streams in progress
        self.rows_stored = 0
        self.max_backlog_rows = 0
        self.slow_downs_sent = 0
        self.puts = 0
        self.put_errors = 0
        self.cache = None           # deduplicated table, rebuilt after new data
        self.writer = None          # (file, ipc writer) of this run's segment when persisting

    def metric(self):
        md = self.schema.metadata or {}
        return md.get(b"longbow.metric", b"euclidean").decode()


class Store:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.datasets = {}
        self.queue = queue.Queue()
        self.seq = int(time.time() * 1000)
        if args.data_dir:
            os.makedirs(args.data_dir, exist_ok=True)
            self._load()
        self.worker = threading.Thread(target=self._ingest_loop, daemon=True)
        self.worker.start()

    # ---- persistence -------------------------------------------------------------------------
    def _load(self):
        files = sorted(f for f in os.listdir(self.args.data_dir) if f.endswith(".arrows"))
        for f in files:
            name = f.split(".")[0]
            try:
                reader = pa.ipc.open_stream(os.path.join(self.args.data_dir, f))
            except (pa.ArrowInvalid, OSError):
                continue  # a segment killed before its schema was written
            ds = self.datasets.get(name)
            if ds is None:
                ds = self.datasets[name] = Dataset(name, reader.schema)
            while True:
                try:
                    b = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):
                    break  # truncated tail of a killed server
                ds.batches.append(b)
                ds.rows_stored += b.num_rows

    def _persist(self, ds, batch):
        if not self.args.data_dir:
            return
        if ds.writer is None:
            path = os.path.join(self.args.data_dir, f"{ds.name}.{self.seq}.arrows")
            f = open(path, "wb", buffering=0)
            ds.writer = (f, pa.ipc.new_stream(f, ds.schema))
        ds.writer[1].write_batch(batch)

    # ---- ingest ------------------------------------------------------------------------------
    def _ingest_loop(self):
        while True:
            name, batch = self.queue.get()
            if self.args.ingest_delay_ms > 0:
                time.sleep(self.args.ingest_delay_ms / 1000.0)
            with self.lock:
                ds = self.datasets.get(name)
                if ds is None:
                    continue
                if not self.args.discard:
                    self._persist(ds, batch)
                    ds.batches.append(batch)
                    ds.cache = None
                ds.rows_stored += batch.num_rows
                ds.pending_rows -= batch.num_rows

    def open_put(self, name, schema):
        if not NAME_RE.match(name):
            raise pa.ArrowInvalid(f"bad dataset name {name!r}")
        with self.lock:
            ds = self.datasets.get(name)
            if ds is None:
                check_new_schema(schema)
                ds = self.datasets[name] = Dataset(name, schema)
            elif not schema.remove_metadata().equals(ds.schema.remove_metadata()):
                ds.put_errors += 1
                raise pa.ArrowInvalid(
                    f"schema mismatch for dataset '{name}': stored {describe(ds.schema)}, got {describe(schema)}")
            ds.active_puts += 1
            ds.puts += 1
            return ds

    def close_put(self, ds):
        with self.lock:
            ds.active_puts -= 1

    def enqueue(self, ds, batch):
        """Queues a batch; returns True when the client should slow down."""
        with self.lock:
            ds.pending_rows += batch.num_rows
            ds.max_backlog_rows = max(ds.max_backlog_rows, ds.pending_rows)
            slow = self.args.slow_down_rows > 0 and ds.pending_rows > self.args.slow_down_rows
            if slow:
                ds.slow_downs_sent += 1
        self.queue.put((ds.name, batch))
        return slow

    # ---- reads -------------------------------------------------------------------------------
    def table(self, name):
        """The dataset's rows, one per id (last write wins), in the order of their last write."""
        with self.lock:
            ds = self.datasets.get(name)
            if ds is None:
                raise KeyError(f"dataset '{name}' not found")
            if ds.cache is None:
                t = pa.Table.from_batches(ds.batches, schema=ds.schema)
                ids = t.column("id").to_numpy()
                if len(ids) and not self.args.append:
                    _, first_in_reversed = np.unique(ids[::-1], return_index=True)
                    keep = np.sort(len(ids) - 1 - first_in_reversed)
                    t = t.take(pa.array(keep))
                ds.cache = t.combine_chunks()
            return ds.cache, ds

    def readiness(self, name):
        with self.lock:
            if not name:
                busy = sum(d.pending_rows for d in self.datasets.values())
                return {"status": "BUSY" if busy else "READY"}
            ds = self.datasets.get(name)
            if ds is None:
                return {"status": "NOT_FOUND", "reason": "dataset not found"}
            if ds.pending_rows > 0 or ds.active_puts > 0:
                return {"status": "BUSY",
                        "reason": f"{ds.pending_rows} rows pending ingestion, {ds.active_puts} active streams"}
            return {"status": "READY", "index_len": ds.rows_stored}

    def stats(self):
        with self.lock:
            out = {}
            for name, ds in self.datasets.items():
                unique = len(set(np.concatenate([b.column(0).to_numpy() for b in ds.batches]).tolist())) \
                    if ds.batches else 0
                out[name] = {"rows_stored": ds.rows_stored, "rows_unique": unique, "batches": len(ds.batches),
                             "pending_rows": ds.pending_rows, "max_backlog_rows": ds.max_backlog_rows,
                             "slow_downs_sent": ds.slow_downs_sent, "puts": ds.puts, "put_errors": ds.put_errors}
            return out


def describe(schema):
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def check_new_schema(schema):
    names = schema.names
    if "id" not in names or schema.field("id").type != pa.int64():
        raise pa.ArrowInvalid(f"schema needs an `id` int64 column, got {describe(schema)}")
    if "vector" not in names:
        raise pa.ArrowInvalid(f"schema needs a `vector` column, got {describe(schema)}")
    t = schema.field("vector").type
    if not pa.types.is_fixed_size_list(t) or t.value_type != pa.float32():
        raise pa.ArrowInvalid(f"`vector` must be fixed_size_list<float32>, got {t}")


OPS = {"==": pc.equal, "=": pc.equal, "!=": pc.not_equal, ">": pc.greater, ">=": pc.greater_equal,
       "<": pc.less, "<=": pc.less_equal}


def apply_filters(t, filters):
    for f in filters or []:
        op = OPS.get(f.get("op") or f.get("operator"))
        if op is None or f.get("field") not in t.column_names:
            raise pa.ArrowInvalid(f"bad filter {f!r}")
        t = t.filter(op(t.column(f["field"]), pa.scalar(f["value"]).cast(t.schema.field(f["field"]).type)))
    return t


def search(store, req):
    name = req.get("dataset")
    q = np.asarray(req.get("vector", []), dtype=np.float32)
    k = int(req.get("k", 10))
    t, ds = store.table(name)
    dim = ds.schema.field("vector").type.list_size
    if q.shape != (dim,):
        raise pa.ArrowInvalid(f"query has {q.size} values, dataset '{name}' has dim {dim}")
    out_schema = pa.schema([("id", pa.uint64()), ("score", pa.float32())])
    if t.num_rows == 0 or k < 1:
        return pa.table({"id": pa.array([], pa.uint64()), "score": pa.array([], pa.float32())}, schema=out_schema)
    x = t.column("vector").combine_chunks().flatten().to_numpy().reshape(-1, dim).astype(np.float64)
    qd = q.astype(np.float64)
    metric = ds.metric()
    if metric == "cosine":
        dist = 1.0 - (x @ qd) / (np.linalg.norm(x, axis=1) * np.linalg.norm(qd) + 1e-30)
    elif metric == "dot_product":
        dist = 1.0 - x @ qd
    else:
        dist = np.sqrt(((x - qd) ** 2).sum(axis=1))
    score = 1.0 / (1.0 + dist)
    ids = t.column("id").to_numpy()
    order = np.lexsort((ids, -score))[:k]
    return pa.table({"id": pa.array(ids[order].astype(np.uint64)),
                     "score": pa.array(score[order].astype(np.float32))}, schema=out_schema)


class Handlers:
    """The FlightService methods shared by the data and meta servers."""

    def __init__(self, store):
        self.store = store

    def do_get(self, context, ticket):
        try:
            req = json.loads(ticket.ticket.decode())
        except (ValueError, UnicodeDecodeError):
            raise pa.ArrowInvalid("ticket is not JSON")
        if "search" in req:
            return fl.RecordBatchStream(search(self.store, req["search"]))
        t, _ = self.store.table(req.get("dataset"))
        return fl.RecordBatchStream(apply_filters(t, req.get("filters")))

    def do_action(self, context, action):
        body = action.body.to_pybytes()
        req = json.loads(body) if body.strip() else {}
        if action.type == "check_readiness":
            yield json.dumps(self.store.readiness(req.get("dataset", ""))).encode()
        elif action.type == "stats":
            yield json.dumps(self.store.stats()).encode()
        elif action.type == "reset":
            with self.store.lock:
                self.store.datasets.clear()
            yield b'{"status": "reset_all_success"}'
        else:
            raise pa.ArrowNotImplementedError(f"unknown action {action.type}")

    def list_actions(self, context):
        return [("check_readiness", "dataset readiness"), ("stats", "test counters"), ("reset", "drop all")]


class DataServer(fl.FlightServerBase):
    def __init__(self, location, store, **kw):
        super().__init__(location, **kw)
        self.h = Handlers(store)
        self.store = store

    def do_put(self, context, descriptor, reader, writer):
        if descriptor.descriptor_type != fl.DescriptorType.PATH or not descriptor.path:
            raise pa.ArrowInvalid("DoPut needs a PATH descriptor naming the dataset")
        name = descriptor.path[0].decode()
        ds = self.store.open_put(name, reader.schema)
        try:
            for chunk in reader:
                if chunk.data is None:
                    continue
                if self.store.enqueue(ds, chunk.data):
                    writer.write(pa.py_buffer(b'{"status":"slow_down"}'))
        finally:
            self.store.close_put(ds)

    def do_get(self, context, ticket):
        return self.h.do_get(context, ticket)

    def do_action(self, context, action):
        return self.h.do_action(context, action)

    def list_actions(self, context):
        return self.h.list_actions(context)


class MetaServer(fl.FlightServerBase):
    def __init__(self, location, store, **kw):
        super().__init__(location, **kw)
        self.h = Handlers(store)
        self.store = store

    def get_flight_info(self, context, descriptor):
        name = descriptor.path[0].decode() if descriptor.path else ""
        with self.store.lock:
            ds = self.store.datasets.get(name)
            if ds is None:
                raise KeyError(f"dataset '{name}' not found")
            rows = ds.rows_stored
        return fl.FlightInfo(None, descriptor, [], rows, -1)

    def list_flights(self, context, criteria):
        with self.store.lock:
            items = [(n, d.rows_stored) for n, d in sorted(self.store.datasets.items())]
        for name, rows in items:
            yield fl.FlightInfo(None, fl.FlightDescriptor.for_path(name), [], rows, -1)

    def do_get(self, context, ticket):
        return self.h.do_get(context, ticket)

    def do_action(self, context, action):
        return self.h.do_action(context, action)


class BearerAuth(fl.ServerMiddlewareFactory):
    def __init__(self, token):
        self.token = token

    def start_call(self, info, headers):
        got = headers.get("authorization", [])
        if f"Bearer {self.token}" not in got:
            raise fl.FlightUnauthenticatedError("missing or wrong bearer token")
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--data-port", type=int, default=3000)
    ap.add_argument("--meta-port", type=int, default=3001)
    ap.add_argument("--data-dir", help="persist stored batches here and reload them at start")
    ap.add_argument("--ingest-delay-ms", type=float, default=0.0, help="time to store one batch")
    ap.add_argument("--slow-down-rows", type=int, default=0, help="backlog that triggers slow_down (0 = never)")
    ap.add_argument("--discard", action="store_true", help="count rows but keep nothing (benchmarks)")
    ap.add_argument("--append", action="store_true", help="keep every row sent (no upsert by id)")
    ap.add_argument("--token", help="require 'authorization: Bearer TOKEN'")
    ap.add_argument("--tls-cert", help="PEM certificate (enables TLS)")
    ap.add_argument("--tls-key", help="PEM private key")
    args = ap.parse_args(argv)

    store = Store(args)
    kw = {}
    scheme = "grpc"
    if args.tls_cert:
        with open(args.tls_cert, "rb") as c, open(args.tls_key, "rb") as k:
            kw["tls_certificates"] = [fl.CertKeyPair(c.read(), k.read())]
        scheme = "grpc+tls"
    if args.token:
        kw["middleware"] = {"auth": BearerAuth(args.token)}
    data = DataServer(f"{scheme}://{args.host}:{args.data_port}", store, **kw)
    meta = MetaServer(f"{scheme}://{args.host}:{args.meta_port}", store, **kw)
    print(json.dumps({"data_port": data.port, "meta_port": meta.port, "pid": os.getpid()}), flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(0.2):
        pass
    data.shutdown()
    meta.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
