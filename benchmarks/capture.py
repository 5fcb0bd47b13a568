"""The capture against a plain forward pass, side by side: ``python -m benchmarks.capture [--tokens 2048 8192]``.

SmolLM2-135M on a paragraph repeated to the given length. Each case runs in a
fresh Python and reports its whole peak RSS (model included) and the time of
the pass itself: a plain ``attn_implementation="sdpa"`` forward, the capture
with every statistic and the pooled maps (the CLI's path), the same keeping q
and k (the app's path), and, at 2,048 tokens, the full record the app used to
keep (eager attention, every weight as float32). Targets at 8,192 tokens: peak
RSS <= 3 GB and time <= 1.3x the sdpa forward (issue 18; it was 3x).
``--cases`` runs some cases only (e.g. ``sdpa capture capture+qk``).
"""

from __future__ import annotations

import argparse
import json

from attnviz.labs.cost.capture_bench import CASES, capture_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = capture_benchmark(args.tokens, cases=args.cases, threads=args.threads)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"SmolLM2-135M, {args.threads} thread(s); each case in a fresh process")
    print(f"{'case':<13} {'tokens':>6} {'seconds':>8} {'x sdpa':>7} {'peak RSS MB':>12} {'x sdpa':>7}  target")
    for r in rows:
        if r.get("failed"):
            print(f"{r['case']:<13} {r['tokens']:>6}  failed: {r['failed']}")
            continue
        t = "-" if r["time_vs_sdpa"] is None else f"{r['time_vs_sdpa']:.2f}"
        m = "-" if r["rss_vs_sdpa"] is None else f"{r['rss_vs_sdpa']:.2f}"
        target = "" if "met" not in r else ("met" if r["met"] else "NOT met") + f" ({r['target']})"
        print(
            f"{r['case']:<13} {r['tokens']:>6} {r['seconds']:>8.1f} {t:>7} {r['peak_rss_mb']:>12,.0f} {m:>7}  {target}"
        )


if __name__ == "__main__":
    main()
