#!/usr/bin/env python3
"""DoPut throughput of our Flight client over loopback, against the Longbow-like test server.

Starts tests/integration/longbow_server.py --discard (it decodes every batch and counts the rows but
keeps nothing) on free ports, runs flight-push-bench (bench/flight_push.c) and prints its JSON line
plus a one-line summary. Target: >= 200 MB/s of payload.

usage: .venv/bin/python bench/flight_push.py [--bin build/flight-push-bench] [--rows N] [--dim D]
                                             [--batch-rows B] [--repeat R] [--text]
"""
import argparse
import json
import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "flight-push-bench"))
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch-rows", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--text", action="store_true", help="add a short utf8 text column")
    a = ap.parse_args()
    if not pathlib.Path(a.bin).exists():
        sys.exit(f"{a.bin} not found: build it first (cmake --build build --target flight-push-bench)")

    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "integration" / "longbow_server.py"),
                               "--data-port", "0", "--meta-port", "0", "--discard"],
                              stdout=subprocess.PIPE, text=True)
    try:
        ports = json.loads(server.stdout.readline())
        cmd = [a.bin, "--data", f"127.0.0.1:{ports['data_port']}", "--rows", str(a.rows), "--dim", str(a.dim),
               "--batch-rows", str(a.batch_rows), "--repeat", str(a.repeat)] + (["--text"] if a.text else [])
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            sys.exit(f"flight-push-bench failed: {out.stderr}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(res))
        verdict = "meets" if res["payload_mb_per_s"] >= 200 else "BELOW"
        print(f"flight push: {res['payload_mb_per_s']:.1f} MB/s best, {res['mean_payload_mb_per_s']:.1f} MB/s mean "
              f"({res['rows']} rows x dim {res['dim']}, {res['batch_rows']} rows/batch, {res['repeat']} runs) "
              f"-- {verdict} the 200 MB/s target")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
