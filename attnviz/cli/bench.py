"""``attnviz bench``: the benchmarks that need no browser (attention paths, the capture against a plain forward).

Its torch-backed imports are inside :func:`bench_command`, after the checks (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse

from attnviz import settings
from attnviz.cli.arguments import integer
from attnviz.cli.checks import check_bounds
from attnviz.cli.output import out

BENCH_THREADS_MAX = 256
BENCH_BOUNDS = {
    "sdpa_tokens": settings.Bound("--sdpa-tokens", 512, 1, settings.MAX_TOKENS.high),
    "capture_tokens": settings.Bound("--capture-tokens", 2048, 1, settings.MAX_TOKENS.high),
    "threads": settings.Bound("--threads", 1, 1, BENCH_THREADS_MAX),
}


def bench_command(args: argparse.Namespace) -> int:
    """The benchmarks that need no browser: attention paths, and the capture against a plain forward."""
    check_bounds(args, BENCH_BOUNDS)
    from attnviz.labs.cost.capture_bench import capture_benchmark
    from attnviz.labs.cost.sdpa_bench import describe_setup, run_benchmark

    rows = []
    if "sdpa" in args.suite:
        rows += [{"suite": "sdpa", **row} for row in run_benchmark(tokens=args.sdpa_tokens, memory=not args.no_memory)]
    if "capture" in args.suite:
        rows += [{"suite": "capture", **row} for row in capture_benchmark(args.capture_tokens, threads=args.threads)]
    if args.json:
        out.json({"setup": describe_setup(), "rows": rows}, indent=2)
    else:
        for row in rows:
            out.json(row)
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``bench``: the suites, their sizes, --threads, --no-memory, --json."""
    bench = sub.add_parser("bench", help="benchmarks: attention paths, and the capture against a plain forward")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--suite", nargs="+", choices=["sdpa", "capture"], default=["sdpa", "capture"])
    bench.add_argument("--sdpa-tokens", type=integer, nargs="+", default=[512, 2048, 4096])
    bench.add_argument("--capture-tokens", type=integer, nargs="+", default=[2048, 8192])
    bench.add_argument("--threads", type=integer, default=1, help="intra-op threads for the capture suite")
    bench.add_argument("--no-memory", action="store_true", help="skip the sdpa suite's memory runs")
    bench.set_defaults(func=bench_command, parser=bench)
