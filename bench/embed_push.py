#!/usr/bin/env python3
"""End-to-end `quarrel push` throughput: N short JSON lines embedded by each MODEL and streamed to
tests/integration/longbow_server.py on loopback. Prints the command's summary line, the load average
and the CPU time the push used (rows per CPU-second is steadier than wall time on a shared machine).

usage: bench/embed_push.py [--quarrel build/quarrel] [-n 10000] [-t 2] MODEL.gguf [MODEL.gguf ...]
"""
import argparse
import json
import pathlib
import resource
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import conftest  # noqa: E402  (LongbowServer)

COLORS = ["red", "green", "blue", "amber", "violet", "silver", "black", "white", "orange", "teal"]
THINGS = ["kettle", "bicycle", "lantern", "violin", "tractor", "umbrella", "compass", "telescope", "piano", "canoe",
          "rocket", "garden", "castle", "bridge", "harbor", "forest", "desert", "glacier", "volcano", "library"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--quarrel", default=str(ROOT / "build" / "quarrel"))
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        texts = pathlib.Path(tmp) / "texts.jsonl"
        with open(texts, "w") as f:
            for i in range(a.n):
                f.write(json.dumps({"id": i, "text": f"{COLORS[i % 10]} {THINGS[(i // 10) % 20]} {i}",
                                    "metadata": {"n": i}}) + "\n")
        srv = conftest.LongbowServer([])
        try:
            for k, m in enumerate(a.models):
                load = open("/proc/loadavg").read().split()[:3]
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                p = subprocess.run([a.quarrel, "push", "-m", m, "--flight", f"grpc://{srv.data}", "--dataset",
                                    f"bench{k}", "-f", str(texts), "-t", str(a.t), "--batch", str(a.batch)],
                                   capture_output=True, text=True)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
                print(f"{pathlib.Path(m).name}: rc {p.returncode}, load {' '.join(load)}: {last}; "
                      f"CPU {cpu:.1f} s = {a.n / cpu:.0f} rows per CPU-second", flush=True)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
