"""The fused statistics route against the reference capture and a plain forward: ``python -m benchmarks.fused_capture``.

SmolLM2-135M on a paragraph repeated to 2,048 and 8,192 tokens (``--tokens``), four cases in one run, each in a
fresh Python so its peak RSS (VmHWM, model load included) is its own:

- ``sdpa``: the model loaded with ``attn_implementation="sdpa"``, one forward pass (the yardstick);
- ``reference``: :meth:`HFSource.run` with ``keep_qk=False`` and its statistics (what ``attnviz heads`` does:
  every layer's scores formed chunk by chunk, exp'd and reduced, pooled maps included);
- ``statistics``: :meth:`HFSource.run_statistics` on the text alone, as a corpus runs it by default: the
  reference route without pooled maps (the same statistics, exactly);
- ``fused``: the same with the fused route switched on
  (``attnviz.core.capture.fused.STATISTICS_ROUTE = "fused"``): every layer through torch's fused kernel with
  augmented values, the row max from chunked q·kᵀ; no pooled maps, no q or k.

Ratios are to the sdpa forward of the same size in the same run. The issue's target: the fused route <= 1.3x
the sdpa forward at 8,192 tokens, peak memory no higher than the reference's. Timing uses ``--threads`` intra-op
threads (1 by default, as benchmarks/capture.py's targets were set); the load average is printed, since other
work on the machine slows every case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from attnviz.labs.cost.capture_bench import benchmark_text
from attnviz.labs.cost.peak_memory import run_child, status_bytes
from attnviz.models.statistics import statistics_frame

CASES = ("sdpa", "reference", "statistics", "fused")
TARGET_TIME_RATIO = 1.3  # the fused route / the sdpa forward at 8,192 tokens (issue 41)


def run_case_here(case: str, tokens: int, threads: int) -> dict:
    """One case in this process: the pass's seconds (model load excluded), its routes and the peak RSS in MB."""
    import torch

    torch.set_num_threads(threads)
    text = benchmark_text(tokens)
    routes, frame = None, None
    if case == "sdpa":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from attnviz.models.registry import bundled_folder, largest_bundled

        folder = bundled_folder(largest_bundled())
        ids = torch.tensor([AutoTokenizer.from_pretrained(folder)(text)["input_ids"][:tokens]])  # what run() reads
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", dtype=torch.float32).eval()
        start = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, logits_to_keep=1)
        seconds, n_tokens = time.perf_counter() - start, int(ids.shape[1])
    else:
        from attnviz.models.registry import SourceSpec, largest_bundled, open_source

        source = open_source(SourceSpec(largest_bundled()))
        start = time.perf_counter()
        if case == "reference":
            record = source.run(text, tokens, keep_qk=False)
            _ = record.statistics
            n_tokens, routes = record.q_len, sorted({layer.route for layer in record.layers})
            seconds = time.perf_counter() - start
            frame = statistics_frame(record)
        else:
            from attnviz.core.capture import fused

            if case == "fused":
                fused.STATISTICS_ROUTE = "fused"  # the statistics pass's default is the reference (measured faster)
            (stats,) = source.run_statistics([text], tokens)
            seconds = time.perf_counter() - start
            n_tokens, routes, frame = stats.n_tokens, sorted(set(stats.routes)), stats.frame
    peak = status_bytes("VmHWM")
    return {
        "case": case,
        "tokens": n_tokens,
        "seconds": seconds,
        "peak_rss_mb": None if peak is None else peak / 2**20,
        "routes": routes,
        "stats": None if frame is None else frame.drop(columns="flags").to_dict("list"),
    }


def largest_differences(rows: list[dict], tokens: int, case: str) -> dict[str, float]:
    """``case``'s statistics against the reference's at ``tokens``: the largest |difference| per statistic over
    every head (NaN where both are NaN counts as equal)."""
    import numpy as np

    found = {r["case"]: r.get("stats") for r in rows if r["tokens"] == tokens}
    if not found.get("reference") or not found.get(case):
        return {}
    ref, fused = found["reference"], found[case]
    worst = {}
    for name in ref:
        if name in ("layer", "head"):
            continue
        a, b = np.asarray(ref[name], dtype=float), np.asarray(fused[name], dtype=float)
        worst[name] = float(np.nanmax(np.abs(a - b))) if np.isfinite(a).any() else 0.0
    return worst


def run_case(case: str, tokens: int, threads: int, timeout_s: float = 3600.0) -> dict:
    """:func:`run_case_here` in a fresh Python; a case that fails says why."""
    args = ["-m", "benchmarks.fused_capture", "--child", case, str(tokens), "--threads", str(threads)]
    proc = run_child(args, timeout_s, fixed_malloc=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = "killed (out of memory?)" if proc.returncode < 0 else (lines[-1] if lines else f"exit {proc.returncode}")
        return {"case": case, "tokens": tokens, "seconds": None, "peak_rss_mb": None, "failed": why}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fused_benchmark(tokens: list[int], threads: int) -> list[dict]:
    """Every case at every size, then each one's time and memory against the sdpa forward of its size."""
    rows = []
    for n in tokens:
        for case in CASES:
            row = run_case(case, n, threads)
            row["load_average"] = os.getloadavg()[0]  # the 1-minute load as the case ended
            rows.append(row)
    for row in rows:
        base = next((r for r in rows if r["case"] == "sdpa" and r["tokens"] == row["tokens"]), {})
        ok = bool(base.get("seconds") and row.get("seconds"))
        row["time_vs_sdpa"] = row["seconds"] / base["seconds"] if ok else None
        row["rss_vs_sdpa"] = row["peak_rss_mb"] / base["peak_rss_mb"] if ok else None
        if row["case"] in ("statistics", "fused") and row["tokens"] >= 8192 and row["time_vs_sdpa"] is not None:
            row["met"] = row["time_vs_sdpa"] <= TARGET_TIME_RATIO
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "TOKENS"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case_here(args.child[0], int(args.child[1]), args.threads)))
        return
    start = time.perf_counter()
    rows = fused_benchmark(args.tokens, args.threads)
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "stats"} for r in rows], indent=2))
        return
    print(f"SmolLM2-135M, float32, {args.threads} thread(s), {os.cpu_count()} cores; each case in a fresh process")
    print(
        f"{'case':<10} {'tokens':>6} {'seconds':>8} {'x sdpa':>7} {'peak RSS MB':>12} {'x sdpa':>7} {'load':>5}  note"
    )
    for r in rows:
        if r.get("failed"):
            print(f"{r['case']:<10} {r['tokens']:>6}  failed: {r['failed']}")
            continue
        t = "-" if r["time_vs_sdpa"] is None else f"{r['time_vs_sdpa']:.2f}"
        m = "-" if r["rss_vs_sdpa"] is None else f"{r['rss_vs_sdpa']:.2f}"
        note = ",".join(r["routes"] or [])
        if "met" in r:
            note += f"  target <= {TARGET_TIME_RATIO}x: {'met' if r['met'] else 'NOT met'}"
        print(
            f"{r['case']:<10} {r['tokens']:>6} {r['seconds']:>8.1f} {t:>7} {r['peak_rss_mb']:>12,.0f} {m:>7} "
            f"{r['load_average']:>5.1f}  {note}"
        )
    for n in sorted({r["tokens"] for r in rows}):
        for case in ("statistics", "fused"):
            worst = largest_differences(rows, n, case)
            if worst:
                print(f"{case} - reference at {n} tokens, largest |difference| over every head (6 places):")
                print("  " + ", ".join(f"{name} {value:.1e}" for name, value in worst.items()))
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
