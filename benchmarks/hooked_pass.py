"""The one hooked pass against the code before it: ``python -m benchmarks.hooked_pass --before DIR [--rounds 3]``.

Issue 38 rebuilt every pass through a Hugging Face model as one call over hook points found once at load, and
promised the same speed or better. This times, on SmolLM2 in float32 here, in fresh processes that alternate
between this checkout and ``--before`` (a checkout of the code before the change, e.g. ``git worktree add DIR
<commit>``), so both see the same machine in the same run:

- the capture of a text of ``--tokens`` tokens (one ``run``, the Heads page's work);
- the exact single-head sweep (every head ablated alone, resumed passes) on 64 tokens;
- the estimate (attribution patching of every head's zero ablation: one forward, one backward) on 64 tokens.

Each process loads the model once, runs each job once untimed (first-call costs), then times it a few times
(:data:`REPEATS`) and keeps the fastest, the run least disturbed by the machine's other work. Prints one JSON
object: each job's median over the rounds, before and after, and their ratio (after / before; below 1 is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TEXT = "The cat sat on the mat because it was warm, and the dog slept by the door until the rain stopped. "
JOBS = ("capture", "sweep", "estimate")
REPEATS = {"capture": 3, "sweep": 2, "estimate": 7}  # timed runs in a process, the fastest kept


def _labs():
    """The sweep's and the estimate's modules, wherever this checkout keeps them (moved into heads_matter/)."""
    try:
        from attnviz.labs.heads_matter import ablation, attribution
    except ImportError:  # the code before issue 38
        from attnviz.labs import ablation, attribution
    return ablation, attribution


def measure(tokens: int) -> dict[str, float]:
    """Seconds of each job in this process (the checkout on sys.path[0])."""
    import torch

    from attnviz.models.registry import SourceSpec, open_source

    torch.set_num_threads(2)
    ablation, attribution = _labs()
    source = open_source(SourceSpec("smollm2"))
    long_text = TEXT * (tokens // 20 + 1)
    jobs = {
        "capture": lambda: source.run(long_text, tokens),
        "sweep": lambda: ablation.ablation_sweep(source, TEXT * 3, 64),
        "estimate": lambda: attribution.estimate_ablation(source, TEXT * 3, 64),
    }
    seconds = {}
    for name, job in jobs.items():
        job()  # untimed: first-call costs (the hook points found, the layer cache's check)
        times = []
        for _ in range(REPEATS[name]):
            start = time.perf_counter()
            job()
            times.append(time.perf_counter() - start)
        seconds[name] = min(times)  # the least disturbed by the machine's other work
    return seconds


def _child(tree: Path, tokens: int) -> dict[str, float]:
    """:func:`measure` in a fresh process that imports attnviz from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", str(tokens)]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of the code before issue 38")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # a child: time this checkout, print JSON
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return
    if args.before is None:
        parser.error("--before DIR is required")
    after_tree = Path(__file__).resolve().parents[1]
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):  # alternating, so a busy moment of the machine falls on both
        runs["before"].append(_child(args.before.resolve(), args.tokens))
        runs["after"].append(_child(after_tree, args.tokens))
    report = {"model": "smollm2", "dtype": "float32", "capture_tokens": args.tokens, "rounds": args.rounds}
    for job in JOBS:
        before = statistics.median(r[job] for r in runs["before"])
        after = statistics.median(r[job] for r in runs["after"])
        report[job] = {"before_s": round(before, 3), "after_s": round(after, 3), "ratio": round(after / before, 3)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
