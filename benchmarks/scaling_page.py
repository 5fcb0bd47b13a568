"""The Scaling page's compute time: ``python -m benchmarks.scaling_page [--tokens 512 2048]``.

SmolLM2-135M on a paragraph repeated to each length. Measured side by side in
one run: the capture the page reads (shared with the Heads page, so usually
already cached), the recomputation of every head under the three scales (once
per text and model, then cached), and what one rerun recomputes when the user
picks another head or moves the scale slider (four panels and their statistics,
and the gradient curve).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from attnviz.labs import scaling
from attnviz.labs.cost.capture_bench import benchmark_text
from attnviz.models.hf.loading import load_hf_source


def measure(tokens: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    source = load_hf_source("smollm2")
    text = benchmark_text(tokens)
    start = time.perf_counter()
    record = source.run(text, tokens)
    capture_s = time.perf_counter() - start
    start = time.perf_counter()
    rows = scaling.scaling_rows(record, source.d_model, source.head_dim)
    rows.table()
    rows_s = time.perf_counter() - start
    factors = rows.factors
    side = min(record.q_len, 128)
    start = time.perf_counter()
    for factor in (*factors.values(), factors["sqrt_dk"] * 2):
        scaling.head_row_stats(record, 12, 3, factor, scaling.SATURATED)
        scaling.head_under_scale(record, 12, 3, factor, (0, side), (0, side))
    pick_s = time.perf_counter() - start
    start = time.perf_counter()
    scaling.gradient_curve(record, 12, 3, scaling.gradient_multiples(factors))
    gradient_s = time.perf_counter() - start
    return {
        "tokens": record.q_len,
        "threads": threads,
        "capture_s": capture_s,
        "three_scales_s": rows_s,
        "pick_head_s": pick_s,
        "gradient_s": gradient_s,
        "three_scales_vs_capture": rows_s / capture_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(n, args.threads) for n in args.tokens]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Scaling page, SmolLM2-135M, {args.threads} thread(s)")
    print(
        f"{'tokens':>6} {'capture s':>10} {'3 scales s':>11} {'x capture':>10} {'pick head s':>12} {'gradient s':>11}"
    )
    for r in rows:
        print(
            f"{r['tokens']:>6} {r['capture_s']:>10.2f} {r['three_scales_s']:>11.2f} {r['three_scales_vs_capture']:>10.2f} "
            f"{r['pick_head_s']:>12.2f} {r['gradient_s']:>11.2f}"
        )


if __name__ == "__main__":
    main()
