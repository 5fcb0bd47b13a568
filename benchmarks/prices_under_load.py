"""Prices under load: what the pages quote and re-estimate against the real time, with the cores held by others.

``python -m benchmarks.prices_under_load [--model smollm2|tiny] [--tokens 16] [--json]``

Each job is priced as its page prices it, on this machine as it is (other users' work included), then two
``python -c "while True: pass"`` processes are started (each keeps a core busy: on a 2-core machine both are taken)
and the job runs under a recording progress bar, as the page runs it:

- the sweep (Ablation) and exact patching (Patching): the page times its first passes ("timed s"), and quotes the
  rest. "old" is what it quoted before issue 37: that figure, however busy the machine is by the click; "quote" is
  what it quotes now: the same figure times a short probe taken now against the probe taken as it was timed
  (:func:`attnviz.app.progress.quote`). The busy loops start between the timing and the quote (the issue's case:
  timed on a quieter machine than the one it runs on).
- the flow (Rollout): the page times a sample of the max-flows; "old" is the sample timed before the load
  (what the page kept), "quote" the sample timed again now, under it (what it does now).
- the lines view (Heads): the capture (its bar: a layer a step) and the lines' threshold, no price before.

For each: the bar's predicted total (elapsed + time left) at its first state with an estimate ("bar first"), at
half the work, and at its last state before the end ("final"), against the real time; errors are predicted / real
- 1. The busy loops are killed by their pids when each job ends, however it ends.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from attnviz.app.progress import probed, quote
from attnviz.core.progress import Progress, ProgressState
from attnviz.core.time_agreement import TimeLog
from attnviz.labs import rollout
from attnviz.labs.heads_matter import ablation, patching

CLEAN = "When Mary and John went to the store, John gave a drink to"  # the indirect-object prompt: 15 tokens
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
TEXT = "The cat sat on the mat because it was tired, and then it slept in the sun all afternoon long."
BUSY = "while True: pass"
SETTLE_S = 4.0  # the busy loops run this long before a job is quoted: the scheduler has spread them by then


@contextmanager
def loaded(n: int = 2) -> Iterator[list[int]]:
    """``n`` busy-loop processes (a core each) while the block runs; killed by their pids when it ends."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
    try:
        print(f"  busy loops {[p.pid for p in procs]} started", file=sys.stderr, flush=True)
        time.sleep(SETTLE_S)
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


class Recorder(list):
    """The states a job's bar drew, and a line on stderr every 10 s (where a long run is)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name, self.last = name, time.perf_counter()

    def __call__(self, state: ProgressState) -> None:
        self.append(state)
        if time.perf_counter() - self.last >= 10.0:
            self.last = time.perf_counter()
            left = "—" if state.remaining_s is None else f"{state.remaining_s:.1f} s ({state.basis})"
            print(f"  {self.name}: {state.done}/{state.total}, {state.elapsed_s:.1f} s, left {left}", file=sys.stderr)


def predicted(states: list[ProgressState], when: Callable[[ProgressState], bool]) -> float | None:
    for state in states:
        if state.remaining_s is not None and when(state):
            return state.elapsed_s + state.remaining_s
    return None


def bar_row(name: str, states: list[ProgressState], real: float, old: float | None, new: float | None) -> dict:
    """The quotes and the bar's predictions of the whole job's time against ``real``."""
    running = [s for s in states if s.fraction < 1.0]
    final = running[-1] if running else None
    row = {
        "job": name,
        "real_s": real,
        "old_s": old,
        "quote_s": new,
        "bar_first_s": predicted(states, lambda s: True),
        "bar_half_s": predicted(states, lambda s: s.fraction >= 0.5),
        "final_s": None if final is None or final.remaining_s is None else final.elapsed_s + final.remaining_s,
        "final_at": None if final is None else final.fraction,
        "final_basis": None if final is None else f"{final.basis} ({final.basis_passes})",
    }
    for key in ("old", "quote", "bar_first", "bar_half", "final"):
        value = row[f"{key}_s"]
        row[f"{key}_error"] = None if value is None else value / real - 1
    return row


def sweep(source, text: str, tokens: int) -> dict:
    name = ("sweep", text)
    baseline = probed(name, lambda: ablation.sweep_baseline(source, text, tokens))()
    old = baseline.seconds(baseline.first)
    with loaded():
        price = quote(name, old)
        states = Recorder("sweep")
        start = time.perf_counter()
        log = TimeLog(scale=price.factor)
        progress = Progress(on_update=states, price_factor=price.factor)
        ablation.run_pieces(source, text, baseline, {}, progress, {}, log)
        real = time.perf_counter() - start
    row = bar_row(f"sweep ({len(baseline.heads)} heads, {baseline.n_tokens} tokens)", states, real, old, price.seconds)
    return {**row, "timed_s": None, "probe_factor": price.factor}


def patch(source, tokens: int) -> dict:
    from attnviz.models.source import Capability

    lm = Capability.GENERATE in source.capabilities  # the embedded model (a check) has no LM head: its hidden states
    metric = patching.Metric("logit-diff", (" Mary", " John")) if lm else patching.Metric("hidden")
    pair = patching.run_pair(source, CLEAN, CORRUPT, tokens, metric)
    name = ("patch", CLEAN)
    plan = probed(name, lambda: patching.plan_patching(source, pair))()
    old = plan.seconds()
    with loaded():
        price = quote(name, old)
        states = Recorder("patch")
        start = time.perf_counter()
        log = TimeLog(scale=price.factor)
        progress = Progress(on_update=states, price_factor=price.factor)
        patching.patch_heads(source, pair, plan.heads, progress, dict(plan.done), log, plan.piece_seconds)
        real = time.perf_counter() - start
    row = bar_row(f"patching ({len(plan.heads)} heads, {pair.n_tokens} tokens)", states, real, old, price.seconds)
    return {**row, "probe_factor": price.factor}


def flow(source, text: str, tokens: int) -> dict:
    maps = rollout.rollout_maps(source.run(text, tokens))
    weights = rollout.flow_input(maps, maps.n_layer - 1)
    old = rollout.measured_flow_seconds(weights)  # timed before the load: what the page kept before
    with loaded():
        new = rollout.measured_flow_seconds(weights)  # timed now, as the page times it now
        states = Recorder("flow")
        start = time.perf_counter()
        rollout.flow_map(maps, maps.n_layer - 1, Progress(on_update=states))
        real = time.perf_counter() - start
    return bar_row(f"flow ({maps.n_layer} layers, {weights.shape[-1]} tokens)", states, real, old, new)


def lines_view(source, text: str, tokens: int) -> dict:
    from attnviz.figures.lines import line_threshold

    source.run(text, tokens)  # warm: the page's first capture of a model pays for lazy set-up once
    with loaded():
        states = Recorder("lines")
        start = time.perf_counter()
        record = source.run(text, tokens, progress=Progress(on_update=states))
        line_threshold(torch.stack([record.weights(layer, None) for layer in range(record.n_layer)]).numpy())
        real = time.perf_counter() - start
    return bar_row(f"lines view (capture + lines, {record.q_len} tokens)", states, real, None, None)


def source_of(model: str):
    if model == "tiny":
        from attnviz.models.embedded.config import EmbeddedConfig
        from attnviz.models.embedded.model import EmbeddedModel

        return EmbeddedModel(EmbeddedConfig(d_model=64, n_head=4, n_layer=4, causal=True))
    from attnviz.models.hf.loading import load_hf_source

    return load_hf_source(model)


def cell(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.0%}" if percent else f"{value:.1f}"


def at(fraction: float | None) -> str:
    return "—" if fraction is None else f"{fraction:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2 (default), or tiny: the embedded model, a check")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--jobs", nargs="+", default=["sweep", "patch", "flow", "lines"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the rows as JSON to this file")
    args = parser.parse_args()
    source = source_of(args.model)
    runs = {
        "sweep": lambda: sweep(source, TEXT, args.tokens),
        "patch": lambda: patch(source, args.tokens),
        "flow": lambda: flow(source, TEXT, args.tokens),
        "lines": lambda: lines_view(source, TEXT, args.tokens),
    }
    rows = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a time limit's kill still ends the busy loops
    for job in args.jobs:
        print(f"{job}: started", file=sys.stderr, flush=True)
        started = time.perf_counter()
        rows.append(runs[job]())
        # each row as it ends, on stderr: a run cut short by a time limit keeps the jobs it finished
        print(f"{job}: {time.perf_counter() - started:.1f} s, {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    if args.out:
        with open(args.out, "w") as file:
            json.dump(rows, file, indent=2)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    with open("/proc/loadavg") as file:
        load = file.read().split()[:3]
    print(f"Prices under load: {args.model}, {torch.get_num_threads()} threads, 2 busy loops; load {' '.join(load)}")
    print(f"{'job':<44} {'old':>6} {'err':>6} {'quote':>6} {'err':>6} {'bar 1st':>7} {'err':>6} "
          f"{'final':>6} {'err':>6} {'at':>5} {'real s':>7}")  # fmt: skip
    for r in rows:
        print(
            f"{r['job']:<44} {cell(r['old_s']):>6} {cell(r['old_error'], True):>6} {cell(r['quote_s']):>6} "
            f"{cell(r['quote_error'], True):>6} {cell(r['bar_first_s']):>7} {cell(r['bar_first_error'], True):>6} "
            f"{cell(r['final_s']):>6} {cell(r['final_error'], True):>6} {at(r['final_at']):>5} "
            f"{r['real_s']:>7.1f}"
        )
        factor = r.get("probe_factor")
        print(
            f"{'':<44} final from: {r['final_basis']}; probe now / then: {'—' if factor is None else f'{factor:.2f}'}"
        )


if __name__ == "__main__":
    main()
