#!/usr/bin/env python3
"""bench/cupti_trace.py — read a kernel timeline written by bench/cupti_trace.c (libqrtrace.so).

  python3 bench/cupti_trace.py TRACE.csv [--steps N] [--nodes]

Takes the most replayed CUDA graph (the decode step), finds its period (kernels per replay) and,
over the last N replays, prints per kernel name: calls per step, the *marginal* time (this kernel's
end minus the previous kernel's end: what it adds to the critical path; these sum to the step),
its mean duration (start to end, which under programmatic dependent launch includes the wait for
the kernel before), and the step total. --nodes also prints the first 40 nodes of one step.
"""
import argparse
import bisect
import collections
import csv
import re
import sys


def short(name):
    n = re.sub(r"^_Z\d+", "", name)
    m = re.match(r"(\d+)?([A-Za-z_][A-Za-z0-9_]*)", name[3:] if name.startswith("_ZN") else n)
    base = m.group(2) if m else name
    # template arguments: keep the traits struct names (TQ4_0 ...) and the small ints
    tq = re.findall(r"T(Q\d_[0-9K]|Q\d_K|MXFP4|IQ4_NL|F16|BF16|F32)", name)
    return base[:40] + ("<" + ",".join(dict.fromkeys(tq)) + ">" if tq else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--nodes", action="store_true")
    ap.add_argument("--gaps", action="store_true", help="what runs between the last replays of the graph")
    a = ap.parse_args()
    rows = []
    with open(a.trace) as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), int(r["graph"]), int(r["grid"]), r["name"]))
    rows.sort()
    graphs = collections.Counter(r[2] for r in rows if r[2] != 0)
    if not graphs:
        print("no graph replays in the trace: per-kernel totals of everything")
        recs = rows
        period = len(recs)
        steps = [recs]
    else:
        gid = graphs.most_common(1)[0][0]
        recs = [r for r in rows if r[2] == gid]
        names = [r[4] for r in recs]
        period = None
        for p in range(1, len(names) // 2 + 1):
            if all(names[i] == names[i + p] for i in range(min(len(names) - p, 3 * p))):
                period = p
                break
        if period is None:
            sys.exit("cannot find the period of the graph's kernels")
        n_rep = len(recs) // period
        steps = [recs[i * period:(i + 1) * period] for i in range(n_rep)][-a.steps:]
        print(f"graph {gid}: {n_rep} replays of {period} kernels; using the last {len(steps)}")
    agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
    spans = []
    for st in steps:
        spans.append((st[-1][1] - st[0][0]) / 1e3)
        prev_end = st[0][0]
        for s, e, _, grid, name in st:
            k = short(name)
            marg = max(0, e - prev_end) / 1e3
            agg[k][0] += 1
            agg[k][1] += marg
            agg[k][2] += (e - s) / 1e3
            prev_end = max(prev_end, e)
    ns = len(steps)
    span = sum(spans) / ns
    print(f"step: {span:.1f} us (min {min(spans):.1f}, max {max(spans):.1f}) = {1e6 / span:.1f} steps/s; {period} kernels")
    if len(steps) > 1:
        per = [(steps[i + 1][0][0] - steps[i][0][0]) / 1e3 for i in range(len(steps) - 1)]
        p = sum(per) / len(per)
        print(f"replay to replay: {p:.1f} us = {1e6 / p:.1f} steps/s (the gap is host time: sampling, plan upload, launch)")
        if a.gaps and graphs:
            # kernels outside the graph between one replay's last kernel and the next one's first
            between = collections.defaultdict(lambda: [0, 0.0])
            idle = []
            starts = [r[0] for r in rows]
            for i in range(len(steps) - 1):
                t_end, t_next = steps[i][-1][1], steps[i + 1][0][0]
                busy = 0
                for s_, e_, g_, _, name in rows[bisect.bisect_left(starts, t_end):bisect.bisect_left(starts, t_next)]:
                    if g_ != gid and e_ <= t_next and not name.startswith("api:"):
                        between[short(name) + ("" if g_ == 0 else f" (graph {g_})")][0] += 1
                        between[short(name) + ("" if g_ == 0 else f" (graph {g_})")][1] += (e_ - s_) / 1e3
                        busy += e_ - s_
                idle.append(((t_next - t_end) - busy) / 1e3)
            n = len(steps) - 1
            print(f"between replays: GPU idle {sum(idle) / n:.1f} us a step (min {min(idle):.1f}, max {max(idle):.1f}); "
                  "kernels there:")
            for k, (c, d) in sorted(between.items(), key=lambda x: -x[1][1]):
                print(f"  {k:58s} {c / n:6.1f} calls {d / n:8.1f} us a step")
            if any(r[4].startswith("api:") for r in rows):  # QR_TRACE_API=1: the host's calls around the last gap
                t_end, t_next = steps[-2][-1][1], steps[-1][0][0]
                t_prev = steps[-2][0][0]
                print(f"the last gap on the host (us from the graph's last kernel end; the graph ran {(t_end - t_prev) / 1e3:.1f} us):")
                for s_, e_, g_, grid, name in rows[bisect.bisect_left(starts, t_prev):bisect.bisect_left(starts, t_next + 20000)]:
                    if g_ == gid:
                        continue
                    what = name if name.startswith(("api:", "memcpy:")) else "kernel " + short(name)
                    print(f"  {(s_ - t_end) / 1e3:9.1f} {(e_ - s_) / 1e3:8.1f}  {what} ({grid})")
    print(f"{'kernel':58s} {'calls':>6s} {'marg us':>8s} {'us/call':>8s} {'dur/call':>8s} {'share':>6s}")
    for k, (c, m, d) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"{k:58s} {c / ns:6.1f} {m / ns:8.1f} {m / c:8.2f} {d / c:8.2f} {100 * m / ns / span:5.1f}%")
    if a.nodes and steps:
        st = steps[-1]
        prev_end = st[0][0]
        print("\nnodes of the last step (start offset, duration, marginal, grid):")
        for s, e, _, grid, name in st[:40]:
            print(f"  {(s - st[0][0]) / 1e3:8.2f} {(e - s) / 1e3:7.2f} {max(0, e - prev_end) / 1e3:7.2f} {grid:6d} {short(name)}")
            prev_end = max(prev_end, e)


if __name__ == "__main__":
    main()
