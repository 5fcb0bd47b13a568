"""The single-head ablation sweep on SmolLM2-135M: ``python -m benchmarks.ablation [--tokens 256] [--threads 2]``.

Issue 29's target: the sweep resumed mid-model (each pass from its heads' layer, the layers' outputs cached once)
and its faster reduction, against today's sweep (every pass whole, every row's log-softmax in float64:
:func:`todays_sweep`, kept here as it ran) in this one run: ≥ 1.8 times faster, the same numbers (≤ 1e-6).

Times, in one process and on one text of ``--tokens`` tokens (model load excluded):

- ``forward``: one plain forward of the model (every position's logits), the yardstick;
- ``ablation``: :func:`attnviz.labs.heads_matter.effect.ablation_effect`, some heads ablated together (two passes);
- ``sweep``: :func:`attnviz.labs.heads_matter.ablation.ablation_sweep`, every one of the 30 x 9 heads ablated alone, several
  per batched pass, each pass reduced to one KL a head as it goes.

Prints one JSON object, with the prediction the page and the CLI make before the sweep (from its baseline pass, timed
here at this length: :func:`attnviz.labs.heads_matter.ablation.sweep_baseline`) beside the real time. benchmarks/estimates.py
compares it, and the progress bar's, on several models and lengths.
"""

from __future__ import annotations

import argparse
import json
import time


def todays_kl_rows(before, after, positions: int = 128):
    """The sweep's reduction as it was before issue 29: every row's log-softmax in float64."""
    import torch

    out = torch.empty(after.shape[:2], dtype=torch.float64)
    for start in range(0, before.shape[0], positions):
        end = min(before.shape[0], start + positions)
        log_p = torch.log_softmax(before[start:end].double(), dim=-1)
        p = log_p.exp()
        for row in range(after.shape[0]):
            log_q = torch.log_softmax(after[row, start:end].double(), dim=-1)
            out[row, start:end] = (p * (log_p - log_q)).sum(dim=-1).clamp_min(0.0)
    return out


def todays_sweep(source, text: str, tokens: int, mode: str) -> tuple[dict, float]:
    """The sweep as it ran before issue 29 (every pass the whole forward, the old reduction): {head: kl_mean}."""
    from attnviz.labs.heads_matter import ablation

    start = time.perf_counter()
    baseline = ablation.sweep_baseline(source, text, tokens, mode, resume=False)
    values = dict(baseline.first)  # its first pass ran while timing, as today's did
    for piece in baseline.pieces(values):
        after = source.ablated_outputs(text, baseline.max_tokens, [[head] for head in piece], mode).values
        kl = todays_kl_rows(baseline.values, after)
        values.update({head: float(row[:-1].mean()) for head, row in zip(piece, kl, strict=True)})
    return values, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", default="zero")
    args = parser.parse_args()

    import torch

    from attnviz.labs.cost.capture_bench import benchmark_text
    from attnviz.labs.heads_matter import ablation
    from attnviz.labs.heads_matter.effect import ablation_effect
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
    ablation_effect(source, text, args.tokens, [(layer, 0) for layer in range(source.n_layer)], args.mode)
    effect = time.perf_counter() - start
    today, today_seconds = todays_sweep(source, text, args.tokens, args.mode)
    start = time.perf_counter()
    baseline = ablation.sweep_baseline(source, text, args.tokens, args.mode)
    timing = time.perf_counter() - start
    predicted = baseline.seconds(baseline.first)
    start = time.perf_counter()
    sweep = ablation.sweep_result(baseline, ablation.run_pieces(source, text, baseline, {}))
    seconds = timing + time.perf_counter() - start
    n_heads = source.n_layer * source.n_head
    differences = [abs(sweep.values[layer][head] - value) for (layer, head), value in today.items()]
    print(
        json.dumps(
            {
                "model": source.name,
                "tokens": int(ids.shape[1]),
                "threads": args.threads,
                "mode": args.mode,
                "forward_seconds": round(forward, 3),
                "ablation_seconds": round(effect, 3),
                "todays_sweep_seconds": round(today_seconds, 3),
                "sweep_seconds": round(seconds, 3),
                "speedup": round(today_seconds / seconds, 2),
                "speedup_target": 1.8,
                "max_difference_from_today": max(differences),
                "resumed": sweep.resumed is None,
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
