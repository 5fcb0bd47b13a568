"""The single-head ablation sweep on SmolLM2-135M: ``python -m benchmarks.ablation [--tokens 256] [--threads 2]``.

Times, in one process and on one text of ``--tokens`` tokens (model load excluded):

- ``forward``: one plain forward of the model (every position's logits), the yardstick;
- ``ablation``: :func:`attnviz.labs.ablation.ablation_effect`, some heads ablated together (two passes);
- ``sweep``: :func:`attnviz.labs.ablation.ablation_sweep`, every one of the 30 x 9 heads ablated alone, several
  per batched pass, each pass reduced to one KL a head as it goes.

Prints one JSON object, with the prediction the page and the CLI make before the sweep (from its baseline pass, timed
here at this length: :func:`attnviz.labs.ablation.sweep_baseline`) beside the real time. benchmarks/estimates.py
compares it, and the progress bar's, on several models and lengths.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", default="zero")
    args = parser.parse_args()

    import torch

    from attnviz.labs import ablation
    from attnviz.labs.cost.capture_bench import benchmark_text
    from attnviz.models.hf.loading import load_hf_source

    torch.set_num_threads(args.threads)
    source = load_hf_source("smollm2")
    text = benchmark_text(args.tokens)
    ids = torch.tensor([source.encode(text, args.tokens).ids])
    with torch.no_grad():
        source.model(input_ids=ids[:, :8])  # warm-up
        start = time.perf_counter()
        source.model(input_ids=ids, return_dict=True)
        forward = time.perf_counter() - start
    start = time.perf_counter()
    ablation.ablation_effect(source, text, args.tokens, [(layer, 0) for layer in range(source.n_layer)], args.mode)
    effect = time.perf_counter() - start
    start = time.perf_counter()
    baseline = ablation.sweep_baseline(source, text, args.tokens, args.mode)
    timing = time.perf_counter() - start
    predicted = baseline.seconds(baseline.first)
    start = time.perf_counter()
    sweep = ablation.sweep_result(baseline, ablation.run_pieces(source, text, baseline, {}))
    seconds = timing + time.perf_counter() - start
    n_heads = source.n_layer * source.n_head
    print(
        json.dumps(
            {
                "model": source.name,
                "tokens": int(ids.shape[1]),
                "threads": args.threads,
                "mode": args.mode,
                "forward_seconds": round(forward, 3),
                "ablation_seconds": round(effect, 3),
                "sweep_seconds": round(seconds, 3),
                "sweep_heads": n_heads,
                "rows_per_pass": sweep.rows_per_pass,
                "sweep_over_forward": round(seconds / forward, 1),
                "baseline_seconds": round(timing, 3),
                "predicted_seconds_after_baseline": round(predicted, 1),
                "real_seconds_after_baseline": round(seconds - timing, 1),
                "largest_kl_mean": max(v for row in sweep.values for v in row if v is not None),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
