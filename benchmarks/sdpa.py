"""Attention speed and memory, side by side: ``python -m benchmarks.sdpa [--tokens 512 2048 4096] [--json]``.

Our fused path against torch's ``F.scaled_dot_product_attention`` (target
<= 1.05x its time) and our inspectable path against the naive four-line
attention (target <= 1.2x), at SmolLM2's shape (9 query heads, 3 K/V heads,
head_dim 64), float32 on the CPU. Timing uses one thread; peak memory is the
extra RSS of one call, each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import time

from attnviz.labs.cost.sdpa_bench import CASES, DEFAULT_TOKENS, describe_setup, run_benchmark


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=list(DEFAULT_TOKENS))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES), metavar="CASE")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each, after one warm-up")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    start = time.perf_counter()
    rows = run_benchmark(args.tokens, args.cases, repeats=args.repeats, memory=not args.no_memory)
    setup = describe_setup()
    if args.json:
        print(json.dumps({"setup": setup, "seconds": time.perf_counter() - start, "rows": rows}, indent=2))
        return
    print(
        f"attention, batch {setup['batch']}, n_head {setup['n_head']}, n_kv_head {setup['n_kv_head']}, "
        f"head_dim {setup['head_dim']}, {setup['dtype']} on the CPU, torch {setup['torch']}"
    )
    print(
        f"time: best of {args.repeats} after a warm-up, interleaved, torch.set_num_threads({setup['timing_threads']}) "
        f"on {setup['cpu_count']} cores; memory: peak extra RSS of one call, fresh process each"
    )
    header = (
        f"{'case':<22} {'tokens':>6} {'ours s':>8} {'ref s':>8} {'time x':>7} "
        f"{'ours MB':>9} {'ref MB':>9} {'mem x':>6} {'target':>7}  met"
    )
    print(header)
    for row in rows:
        print(
            f"{row['case']:<22} {row['tokens']:>6} {row['ours_s']:>8.4f} {row['reference_s']:>8.4f} "
            f"{row['time_ratio']:>7.2f} {_mb(row['ours_peak_mb']):>9} {_mb(row['reference_peak_mb']):>9} "
            f"{_ratio(row['memory_ratio']):>6} {row['target']:>7.2f}  {'yes' if row['met'] else 'NO'}"
        )
    print("references:")
    for case in args.cases:
        print(f"  {case}: ours = {CASES[case].ours_name}; reference = {CASES[case].reference_name}")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
