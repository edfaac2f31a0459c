#!/usr/bin/env python3
"""bench/gpu_report.py — the ratio table of bench/gpu.sh from its results.jsonl (stdout: markdown).

Rows: one per (file, test) with quarrel's and llama.cpp's t/s, the ratio quarrel / llama.cpp, the
issue-5 target, and for decode the share of the bandwidth roofline: t/s x file bytes / measured
device-to-device copy bandwidth (a decode step reads every weight once).

The "vs last" column compares quarrel's figure with bench/gpu_baseline.json (the last accepted figures
of the GPU the run was on, by the name nvidia-smi gives: gpu.sh's "device" line, else llama-bench's
gpu_info; another baseline file with GPU_BASELINE=path, none with GPU_BASELINE=): a figure below 0.93x
of it is marked DROP and counted at the end, so that a regression shows in the run that makes it. A
GPU with no figures there gets none (figures of one GPU say nothing about another's).

    python3 bench/gpu_report.py /tmp/gpu_bench/results.jsonl
"""
import json
import os
import sys

DROP = 0.93  # below this share of the baseline a figure is a regression (run-to-run noise: +-3 %)


def load_baseline(device):
    """The baseline figures of GPU `device` (its nvidia-smi name; None: unknown), and the name they are under."""
    path = os.environ.get("GPU_BASELINE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_baseline.json"))
    if not device or not path or not os.path.exists(path):
        return {}, None
    with open(path) as f:
        figures = json.load(f).get("devices", {}).get(device)
    return (figures, device) if figures else ({}, None)

# issue 5 acceptance: (file prefix, test) -> minimum ratio
TARGETS = {
    ("mistral-7b-Q4_K_M", "tg"): 1.3, ("mistral-7b-Q4_0", "tg"): 1.3, ("mistral-7b-Q8_0", "tg"): 1.1,
    ("mistral-7b-F16", "tg"): 1.0, ("tinyllama-1.1b-Q4_K_M", "tg"): 1.3,
}
# issue 9 acceptance: decode >= 1.5x on the MoE / hybrid presets (any type)
MOE_PRESETS = ("granite-4.0-h-tiny", "nemotron-3-nano-30b-a3b", "gpt-oss-20b", "mixtral-8x7b")


def target(stem, test, depth):
    if test == "pp" and stem == "mistral-7b-Q4_K_M":
        return 1.5  # issue 29: prompt processing at every depth (and a 30,000-token prompt)
    if test == "pp" and stem == "mistral-7b-F16":
        return 1.1  # issue 29
    if test == "pp":
        return 1.0
    if depth > 0:
        return 1.0
    if test == "tg" and stem.startswith(MOE_PRESETS):
        return 1.5
    return TARGETS.get((stem, test))


def main(path):
    bw = None
    quarrel, llama, sizes, ab, active = {}, {}, {}, [], {}
    device = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"skipping a bad line: {e}", file=sys.stderr)
                continue
            if r["kind"] == "device":
                device = r.get("name") or device
            elif r["kind"] == "active":
                active[r["file"]] = r["active_bytes"]
            elif r["kind"] == "bandwidth":
                bw = float(r["gbps"])
            elif r["kind"] == "quarrel" and r["label"].startswith("ab-"):
                res = r["result"]
                ab.append((r["file"], r["label"][3:], res.get("pp_tps", 0), res.get("tg_tps", 0)))
            elif r["kind"] == "quarrel":
                res, fn = r["result"], r["file"]
                sizes[fn] = r["bytes"]
                d = int(res.get("n_depth", 0))
                if res.get("n_prompt", 0) and res.get("pp_tps", 0) > 0:
                    quarrel[(fn, "pp", res["n_prompt"], d)] = (res["pp_tps"], res["pp_sd"])
                if res.get("n_gen", 0) and res.get("tg_tps", 0) > 0:
                    quarrel[(fn, "tg", res["n_gen"], d)] = (res["tg_tps"], res["tg_sd"])
            elif r["kind"] == "llama":
                fn = r["file"]
                sizes[fn] = r["bytes"]
                test, n = ("pp", r["n_prompt"]) if r["n_gen"] == 0 else ("tg", r["n_gen"])
                samples = sorted(r.get("samples_ts") or [])
                # the median of its repetitions (llama-bench's first timed repetition is slow: its mean flatters us)
                med = (samples[len(samples) // 2] if len(samples) % 2 else
                       (samples[len(samples) // 2 - 1] + samples[len(samples) // 2]) / 2) if samples else r["avg_ts"]
                llama[(fn, test, n, int(r.get("n_depth", 0)))] = (med, r["stddev_ts"])
                device = device or r.get("gpu") or None
    keys = sorted(set(quarrel) | set(llama), key=lambda k: (k[0], k[3], k[1], k[2]))
    print("# quarrel vs llama.cpp on the GPU (bench/gpu.sh)\n")
    print(f"Copy bandwidth (device to device, read + write): {bw if bw else '?'} GB/s. "
          "Roofline % = t/s x bytes per decode step / copy bandwidth (decode only; the file's tensor bytes, "
          "for MoE models with the expert tensors scaled by experts used / experts).\n")
    base, base_name = load_baseline(device)
    print(f"GPU: {device or 'unknown'}; \"vs last\": "
          + (f"bench/gpu_baseline.json's {base_name} figures.\n" if base_name else "no baseline figures for this GPU.\n"))
    print("llama.cpp t/s: the median of llama-bench's samples_ts (± its stddev).\n")
    print("| file | GiB | test | quarrel t/s | llama.cpp t/s | ratio | target | ok | quarrel % roof | llama % roof "
          "| vs last |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    n_ok = n_bad = 0
    drops = []
    for k in keys:
        fn, test, n, d = k
        stem = fn[:-5] if fn.endswith(".gguf") else fn
        q, l = quarrel.get(k), llama.get(k)
        label = f"{test}{n}" + (f" @ d{d}" if d else "")
        ratio = q[0] / l[0] if q and l and l[0] > 0 else None
        tgt = target(stem, test, d)
        ok = ""
        if ratio is not None and tgt is not None:
            ok = "yes" if ratio >= tgt else "NO"
            n_ok += ratio >= tgt
            n_bad += ratio < tgt
        rb = active.get(fn, sizes.get(fn, 0))  # bytes one decode step reads (MoE: the routed experts only)
        roof = lambda v: (f"{100 * v[0] * rb / (bw * 1e9):.0f}%" if v and bw and test == "tg" else "-")
        fmt = lambda v: f"{v[0]:.2f} ± {v[1]:.2f}" if v else "-"
        last = base.get(f"{stem} {label}")
        vs = "-"
        if q and last:
            vs = f"{q[0] / last:.2f}x"
            if q[0] < DROP * last:
                vs += " DROP"
                drops.append(f"{stem} {label}: {q[0]:.1f} vs {last:.1f}")
        print(f"| {stem} | {sizes.get(fn, 0) / 2**30:.2f} | {label} | {fmt(q)} | {fmt(l)} | "
              f"{f'{ratio:.2f}x' if ratio is not None else '-'} | {f'>= {tgt}x' if tgt else '-'} | {ok} | "
              f"{roof(q)} | {roof(l)} | {vs} |")
    print(f"\nTargets met: {n_ok}, missed: {n_bad} (rows with both numbers and a target).")
    if drops:
        print(f"\nBelow {DROP}x of bench/gpu_baseline.json (regressions?): " + "; ".join(drops))
    if ab:
        print("\n## quarrel with one CUDA knob off (--ab; one repetition each)\n")
        print("| file | variant | pp512 t/s | tg128 t/s | tg vs default |")
        print("|---|---|---|---|---|")
        for fn, variant, pp, tg in ab:
            base = quarrel.get((fn, "tg", 128, 0))
            rel = f"{tg / base[0]:.2f}x" if base and base[0] > 0 and tg else "-"
            print(f"| {fn[:-5] if fn.endswith('.gguf') else fn} | {variant} | {pp:.1f} | {tg:.1f} | {rel} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpu_bench/results.jsonl")
