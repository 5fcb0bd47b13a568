"""The Head roles page's slow parts on SmolLM2-135M: ``python -m benchmarks.head_roles [--case sink:64,256,512 ...]``.

Each case runs in a fresh Python so that its peak resident memory (VmHWM,
model load included) is its own; seconds are the call alone, model load
excluded. Cases:

- ``sink:L1,L2,...``: :func:`attnviz.labs.head_roles.sink_vs_length` at those
  lengths on the benchmark paragraph (one capture per length, q and k not
  kept), what the page's "attention sink against length" section runs;
- ``outputs``: :func:`attnviz.labs.head_roles.head_output_norms` on a long text,
  every layer rerun by our own module on at most ``OUTPUT_TOKENS`` tokens, what
  the page runs to find dead heads.

The page quotes these numbers before a long run (``SINK_SECONDS_PER_TOKEN`` in
attnviz.labs.head_roles) and asks for a confirmation past ``SINK_CONFIRM_TOKENS``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from attnviz.labs.cost.peak_memory import run_child, status_bytes

DEFAULT_CASES = ("sink:64,256,512", "sink:64,256,512,1024,2048", "sink:8192", "outputs")


def run_case_here(case: str, threads: int) -> dict:
    """One case in this process: seconds for the call (model load excluded), the peak RSS in MB."""
    import torch

    from attnviz.labs import head_roles
    from attnviz.labs.cost.capture_bench import benchmark_text
    from attnviz.models.hf.loading import load_hf_source

    torch.set_num_threads(threads)
    source = load_hf_source("smollm2")
    loaded_mb = status_bytes("VmRSS") / 2**20
    if case.startswith("sink:"):
        lengths = tuple(int(n) for n in case.removeprefix("sink:").split(","))
        text = benchmark_text(20)  # one paragraph: sink_vs_length repeats it to each length, as the page does
        per_length = {}
        for n in lengths:  # one length a call: the same captures as one call with every length, each timed
            start = time.perf_counter()
            head_roles.sink_vs_length(source, text, (n,))
            per_length[n] = time.perf_counter() - start
        seconds, tokens = sum(per_length.values()), max(lengths)
    elif case == "outputs":
        text = benchmark_text(head_roles.OUTPUT_TOKENS)
        start = time.perf_counter()
        norms = head_roles.head_output_norms(source, text, head_roles.OUTPUT_TOKENS)
        seconds = time.perf_counter() - start
        tokens = norms.n_tokens
    else:
        raise ValueError(f"case must be sink:L1,L2,... or outputs, not {case!r}")
    peak_mb = status_bytes("VmHWM") / 2**20
    extra = {"seconds_per_length": per_length} if case.startswith("sink:") else {}
    return {
        "case": case,
        "tokens": tokens,
        "threads": threads,
        "seconds": seconds,
        "peak_rss_mb": peak_mb,
        "model_rss_mb": loaded_mb,
        "above_model_mb": peak_mb - loaded_mb,
        **extra,
    }


def run_case(case: str, threads: int, timeout_s: float = 1800.0) -> dict:
    """:func:`run_case_here` in a fresh Python; a case that runs out of memory or fails says so."""
    args = ["-m", "benchmarks.head_roles", "--child", case, "--threads", str(threads)]
    proc = run_child(args, timeout_s, fixed_malloc=False)  # the whole program's peak, as users run it
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = "killed (out of memory?)" if proc.returncode < 0 else (lines[-1] if lines else f"exit {proc.returncode}")
        return {"case": case, "failed": why}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", default=list(DEFAULT_CASES))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case_here(args.child, args.threads)))
        return
    rows = []
    for case in args.case:
        rows.append(run_case(case, args.threads))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Head roles page, SmolLM2-135M, {args.threads} thread(s); each case in a fresh process")
    print(f"{'case':<28} {'tokens':>6} {'seconds':>8} {'peak RSS MB':>12} {'above model MB':>15}  seconds per length")
    for r in rows:
        if r.get("failed"):
            print(f"{r['case']:<28}  failed: {r['failed']}")
            continue
        each = ", ".join(f"{n}: {s:.1f}" for n, s in r.get("seconds_per_length", {}).items())
        print(
            f"{r['case']:<28} {r['tokens']:>6} {r['seconds']:>8.1f} {r['peak_rss_mb']:>12,.0f} "
            f"{r['above_model_mb']:>15,.0f}  {each}"
        )


if __name__ == "__main__":
    main()
