"""Greedy decoding with a KV cache against recomputing the prefix: ``python -m benchmarks.decode [--new 512 1024]``.

Two models, each timed per generated token, cache and recompute side by side in
one run, from a short prompt, float32 on the CPU with torch.set_num_threads(2):

* the embedded model, d_model 256, 4 layers, 8 heads (MHA), causal, seed 0,
  decoded with attnviz's KVCache; it has no language-model head, so the next
  token is the argmax of the last hidden state against 512 made-up token
  embeddings (see :meth:`attnviz.models.embedded.model.EmbeddedModel.readout_table`);
* SmolLM2-135M (30 layers, 9 query heads, 3 K/V heads) with transformers'
  DynamicCache against a full forward pass per step.

Recompute grows with the square of the length. Before each recompute run a
two-pass pilot (steps 0 and n - 1) estimates its total; above ``--budget``
seconds the run is replaced by timing the recompute step at every
``--sample-every``-th position on the tokens the cached run produced (what
greedy recompute would produce too), interpolated between samples, and the
row says so. ``--json PATH`` writes every per-position time for plotting.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from attnviz.labs.kv.measure import decode_timing, recompute_seconds_at
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.registry import EMBEDDED as EMBEDDED_KEY
from attnviz.models.registry import SourceSpec, open_source

PROMPT = "Once upon a time, in a small village,"
EMBEDDED = EmbeddedConfig(d_model=256, n_head=8, n_layer=4, seed=0, causal=True)


def _load(name: str):
    return open_source(SourceSpec(EMBEDDED_KEY, config=EMBEDDED) if name == "embedded" else SourceSpec("smollm2"))


def _pilot_estimate(source, tokens: list[int], n_new: int) -> float:
    """Recompute total for n_new tokens, from the first and last step (linear in between: a slight over-estimate)."""
    first, last = recompute_seconds_at(source, PROMPT, tokens, [0, n_new - 1])
    return n_new * (first + last) / 2


def measure(source, label: str, n_new: int, budget: float, sample_every: int) -> dict:
    """One model at one length: the cached run, then the recompute run (or its sampled stand-in)."""
    cache = decode_timing(source, PROMPT, n_new, mode="cache")
    estimated = _pilot_estimate(source, cache.tokens, n_new)
    if estimated <= budget:
        recompute = decode_timing(source, PROMPT, n_new, mode="recompute")
        recompute_seconds, how = recompute.seconds_per_token, "measured"
        same_tokens = recompute.tokens == cache.tokens
        sampled_steps = None
    else:
        sampled_steps = sorted({*range(0, n_new, sample_every), n_new - 1})
        sampled = recompute_seconds_at(source, PROMPT, cache.tokens, sampled_steps)
        recompute_seconds = np.interp(np.arange(n_new), sampled_steps, sampled).tolist()
        how = f"sampled every {sample_every} (full run estimated {estimated:,.0f} s)"
        same_tokens = None
    cache_total, recompute_total = cache.total, float(sum(recompute_seconds))
    return {
        "model": label,
        "n_new": n_new,
        "n_prompt": cache.n_prompt,
        "positions": cache.positions,
        "cache_seconds": cache.seconds_per_token,
        "recompute_seconds": recompute_seconds,
        "recompute_sampled_steps": sampled_steps,
        "recompute": how,
        "cache_mean_s": cache_total / n_new,
        "recompute_mean_s": recompute_total / n_new,
        "cache_total_s": cache_total,
        "recompute_total_s": recompute_total,
        "speedup": recompute_total / cache_total,
        "same_tokens": same_tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new", type=int, nargs="+", default=[512, 1024], help="generated tokens per run")
    parser.add_argument("--models", nargs="+", default=["embedded", "smollm2"], choices=["embedded", "smollm2"])
    parser.add_argument("--budget", type=float, default=600.0, help="longest full recompute run, seconds")
    parser.add_argument("--sample-every", type=int, default=32, help="recompute sampling stride above the budget")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", metavar="PATH", help="write the per-position times here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = []
    for name in args.models:
        source = _load(name)
        label = "embedded (d_model 256, 4 layers, 8 heads)" if name == "embedded" else "SmolLM2-135M"
        for mode in ("cache", "recompute"):  # warm-up: first calls pay one-off set-up costs
            decode_timing(source, PROMPT, 4, mode=mode)
        for n_new in args.new:
            rows.append(measure(source, label, n_new, args.budget, args.sample_every))
            r = rows[-1]
            print(f"  done: {label}, {n_new} tokens, {time.perf_counter() - start:.0f} s so far", flush=True)

    print(
        f"\ngreedy decoding, prompt {PROMPT!r}, float32 on the CPU, torch {torch.__version__}, "
        f"{args.threads} threads; time per generated token (token 0 includes the prefill)"
    )
    print(
        f"{'model':<42} {'tokens':>6} {'cache s/tok':>11} {'recomp s/tok':>12} "
        f"{'cache s':>8} {'recomp s':>9} {'speed-up':>8}  same tokens  recompute"
    )
    for r in rows:
        same = "-" if r["same_tokens"] is None else ("yes" if r["same_tokens"] else "NO")
        print(
            f"{r['model']:<42} {r['n_new']:>6} {r['cache_mean_s']:>11.4f} {r['recompute_mean_s']:>12.4f} "
            f"{r['cache_total_s']:>8.1f} {r['recompute_total_s']:>9.1f} {r['speedup']:>7.1f}x  {same:<11}  "
            f"{r['recompute']}"
        )
    total = time.perf_counter() - start
    print(f"total {total:.0f} s")
    if args.json:
        setup = {
            "prompt": PROMPT,
            "threads": args.threads,
            "torch": torch.__version__,
            "machine": platform.machine(),
            "embedded_config": {"d_model": 256, "n_head": 8, "n_layer": 4, "causal": True, "seed": 0},
            "seconds": total,
        }
        with open(args.json, "w") as handle:
            json.dump({"setup": setup, "rows": rows}, handle)


if __name__ == "__main__":
    main()
