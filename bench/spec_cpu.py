#!/usr/bin/env python3
"""spec_cpu.py — speculative decoding on the CPU: decode tokens/s of `quarrel run` with a drafter against plain
decoding, per prompt, on a prompt set (issue 34).

For each prompt the plain and the speculative run alternate (their order flips every repetition, so a shared
machine's drift hits both alike); the per-prompt speed is the median over the repetitions, and the report is
the median over prompts of speculative / plain decode tokens/s, with the acceptance rate from `--verbose`.
Greedy outputs are compared too: every speculative run must print the same token ids as the plain one.

  bench/spec_cpu.py -m TARGET.gguf --spec ngram [--prompts bench/data/spec_code_edit.jsonl]
  bench/spec_cpu.py -m smol-f16.gguf --draft-model smol-q4_1.gguf
  bench/spec_cpu.py ... --prompts bench/data/spec_open_ended.jsonl   # text a drafter rarely predicts
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = re.compile(r"decode (\d+) tok, ([0-9.]+) t/s")
SPEC = re.compile(r"speculative: (\d+) drafted, (\d+) accepted")


def run(args, prompt, extra):
    cmd = [args.bin, "run", "-m", args.model, "--chat", "-p", prompt, "--temp", "0", "-n", str(args.n),
           "-t", str(args.threads), "--ids-only", "--ignore-eos", "-v", "--backend", args.backend] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = TIMING.search(p.stderr)
    s = SPEC.search(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1]), float(m.group(2)), (int(s.group(1)), int(s.group(2))) if s else (0, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--spec", default=None, help="ngram (default without --draft-model)")
    ap.add_argument("--draft-model", default=None)
    ap.add_argument("--draft-max", type=int, default=None)
    ap.add_argument("--draft-p-min", type=float, default=None, help="the draft's confidence floor (quarrel's default: 0.75)")
    ap.add_argument("--prompts", default=os.path.join(ROOT, "bench/data/spec_code_edit.jsonl"))
    ap.add_argument("-n", type=int, default=128, help="tokens generated per run")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--bin", default=os.environ.get("QUARREL_BIN", os.path.join(ROOT, "build/quarrel")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    extra = ["--draft-model", args.draft_model] if args.draft_model else ["--spec", args.spec or "ngram"]
    if args.draft_max:
        extra += ["--draft-max", str(args.draft_max)]
    if args.draft_p_min is not None:
        extra += ["--draft-p-min", str(args.draft_p_min)]
    prompts = [json.loads(l)["prompt"] for l in open(args.prompts) if l.strip()]
    rows, mismatches, drafted, accepted = [], 0, 0, 0
    for i, prompt in enumerate(prompts):
        plain, spec, outs = [], [], {False: [], True: []}
        for r in range(args.reps):
            order = [False, True] if (r + i) % 2 == 0 else [True, False]
            for use in order:
                ids, tps, (d, a) = run(args, prompt, extra if use else [])
                (spec if use else plain).append(tps)
                outs[use].append(ids)
                if use:
                    drafted, accepted = drafted + d, accepted + a
        mismatches += sum(ids != outs[False][0] for ids in outs[True] + outs[False])
        rows.append((statistics.median(plain), statistics.median(spec)))
        if not args.json:
            print(f"prompt {i:2d}: plain {rows[-1][0]:7.2f} t/s  spec {rows[-1][1]:7.2f} t/s  ratio "
                  f"{rows[-1][1] / rows[-1][0]:.3f}", flush=True)
    ratios = [s / p for p, s in rows]
    res = {"model": os.path.basename(args.model), "drafter": " ".join(extra), "prompts": len(prompts),
           "reps": args.reps, "n": args.n, "median_ratio": statistics.median(ratios),
           "plain_tps_median": statistics.median(p for p, _ in rows),
           "spec_tps_median": statistics.median(s for _, s in rows),
           "acceptance": accepted / drafted if drafted else 0.0, "drafted": drafted, "accepted": accepted,
           "greedy_mismatches": mismatches}
    print(json.dumps(res) if args.json else
          f"median speculative / plain decode ratio {res['median_ratio']:.3f} over {len(prompts)} prompts "
          f"(acceptance {100 * res['acceptance']:.1f}%, {mismatches} greedy mismatches)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
