"""How honest the progress bars' time estimates are: ``python -m benchmarks.estimates [--smollm2]``.

Each job runs once with a recording :class:`~attnviz.core.progress.Progress`, as
the app runs it: the embedded model's capture at a few lengths, the Scaling
lab's three scales on that capture, a training of the three runs, the Cost
page's measurement (in its child process) and the Head roles sink captures,
and the Ablation page's single-head sweep (embedded 6 x 8 and MiniLM, at a
sentence and at the sweep's longest, 256 tokens), and the Rollout page's flow
(MiniLM at 53 tokens; SmolLM2 at its 60 with ``--smollm2``), priced before it runs too.
For each, the table gives the total the bar predicted (elapsed + time left)
after its first step and when a quarter of the work (by weight) was done, the
real total, and the errors; a job the page prices before it runs (the sweep,
from a pass it times at the text's length) also gives that prediction
("before"), against the same real total. ``--smollm2`` adds SmolLM2's capture
at 2,048 and 8,192 tokens (what the app keeps: q and k too), the Scaling lab
on the first, and its sweep at the issue's 11-token sentence and at 64 tokens
(ten minutes more or so). The default run takes a few minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch

from attnviz.core.progress import Progress, ProgressState
from attnviz.labs import compare, head_roles, rollout, scaling
from attnviz.labs.cost import paths as cost
from attnviz.labs.cost.capture_bench import benchmark_text
from attnviz.labs.heads_matter import ablation
from attnviz.labs.heads_matter.common import token_limit
from attnviz.labs.training.runs import TrainingConfig, train_scale
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.settings import SWEEP_TOKENS

QUARTER = 0.25
SENTENCE = "The cat sat on the mat because it was tired."  # the sentence: 11 tokens on SmolLM2

Job = tuple[str, Callable[[Progress], Any]] | tuple[str, Callable[[Progress], Any], Callable[[], float]]


def predicted_total(states: list[ProgressState], when: Callable[[ProgressState], bool]) -> tuple[float, float] | None:
    """(elapsed + the estimate of what is left, the fraction done) at the first state ``when`` accepts that has one."""
    for state in states:
        if state.remaining_s is not None and when(state):
            return state.elapsed_s + state.remaining_s, state.fraction
    return None


def timed(name: str, job: Callable[[Progress], Any], prepare: Callable[[], float] | None = None) -> dict:
    """Run ``job(progress)`` once: the bar's predictions against the real time. ``prepare()``, when given, runs
    first, untimed (what the page does before the click), and returns the page's prediction of the job."""
    before = None if prepare is None else prepare()
    states: list[ProgressState] = []
    start = time.perf_counter()
    job(Progress(on_update=states.append))
    real = time.perf_counter() - start
    n_stages = max((s.n_stages for s in states), default=1)
    first = predicted_total(states, lambda s: True)
    quarter = predicted_total(states, lambda s: s.fraction >= QUARTER)
    row = {"job": name, "steps": sum(1 for _ in states), "stages": n_stages, "real_s": real}
    row["before_s"], row["before_error"] = before, None if before is None else before / real - 1
    for key, found in (("first", first), ("quarter", quarter)):
        row[f"{key}_s"] = None if found is None else found[0]
        row[f"{key}_at"] = None if found is None else found[1]
        row[f"{key}_error"] = None if found is None else found[0] / real - 1
    return row


def sweep_job(name: str, source, text: str, max_tokens: int) -> Job:
    """The Ablation page's sweep: its baseline pass, timed, prices it before the click (untimed, as on the page);
    then the pieces left, under the bar."""
    held = {}

    def prepare() -> float:
        held["baseline"] = ablation.sweep_baseline(source, text, max_tokens)
        return held["baseline"].seconds(held["baseline"].first)

    def job(progress: Progress) -> None:
        ablation.run_pieces(source, text, held["baseline"], {}, progress)

    n = len(source.encode(text, token_limit(max_tokens, SWEEP_TOKENS)).tokens)
    return (f"sweep, {name}, {n:,} tokens", job, prepare)


def flow_job(name: str, source, text: str, max_tokens: int) -> Job:
    """The Rollout page's flow through every layer: the page prices it before the click by timing a sample of the
    graph's own max-flows (untimed here, as there); then the max-flows, under the bar."""
    held = {}

    def prepare() -> float:
        held["maps"] = rollout.rollout_maps(source.run(text, max_tokens))
        return rollout.measured_flow_seconds(rollout.flow_input(held["maps"], held["maps"].n_layer - 1))

    def job(progress: Progress) -> None:
        rollout.flow_map(held["maps"], held["maps"].n_layer - 1, progress)

    n = min(len(source.encode(text, max_tokens).tokens), rollout.FLOW_TOKENS)
    return (f"flow, {name}, {n:,} tokens", job, prepare)


def jobs(smollm2: bool, lengths: list[int]) -> list[Job]:
    model = EmbeddedModel(EmbeddedConfig(d_model=256, n_head=8, n_layer=6, causal=True))
    out: list[Job] = []
    records = {}
    for n in lengths:
        text = benchmark_text(n)

        def capture(progress, text=text, n=n):
            records[n] = model.run(text, n, progress=progress)

        out.append((f"capture, embedded 6x8, {n:,} tokens", capture))
    longest = max(lengths)
    out.append(
        (
            f"scaling, embedded, {longest:,} tokens",
            lambda progress: scaling.scaling_rows(records[longest], model.d_model, model.head_dim, progress),
        )
    )
    config = TrainingConfig(steps=60)
    out.append((f"training, defaults, {config.steps} steps", lambda progress: train_scale(config, progress=progress)))
    sizes = (256, 512, 1024, 2048)
    out.append(
        (f"cost, child process, up to {sizes[-1]:,}", lambda progress: cost.measure_in_child(sizes, progress=progress))
    )
    out.append(
        (
            "sink vs length, embedded, 256-1,536",
            lambda progress: head_roles.sink_vs_length(model, benchmark_text(256), (256, 512, 1024, 1536), progress),
        )
    )
    shortest = min(lengths)
    out.append(  # Side by side: the longer text against its own start (the shorter capture), layer by layer; the
        (  # page prices it before the click by timing its first layers (measured_seconds)
            f"compare, embedded, {longest:,} vs {shortest:,} tokens",
            lambda progress: compare.compare_records(records[longest], records[shortest], progress=progress),
            lambda: compare.measured_seconds(
                records[longest], records[shortest], compare.align_records(records[longest], records[shortest])
            ),
        )
    )
    from attnviz.models.hf.loading import load_hf_source

    minilm = load_hf_source("minilm")
    for name, source in (("embedded 6x8", model), ("MiniLM", minilm)):
        out.append(sweep_job(name, source, SENTENCE, 256))
        out.append(sweep_job(name, source, benchmark_text(256), 256))
    out.append(flow_job("MiniLM", minilm, benchmark_text(53), 53))  # the 53 tokens: the whole text
    if smollm2:
        source = load_hf_source("smollm2")
        smollm2_records = {}
        for n in (2048, 8192):  # the page's longest job: 30 layers, one to three minutes

            def capture_smollm2(progress, n=n):
                smollm2_records[n] = source.run(benchmark_text(n), n, keep_qk=True, progress=progress)

            out.append((f"capture, SmolLM2, {n:,} tokens", capture_smollm2))
        out.append(
            (
                "scaling, SmolLM2, 2,048 tokens",
                lambda progress: scaling.scaling_rows(smollm2_records[2048], source.d_model, source.head_dim, progress),
            )
        )
        out.append(sweep_job("SmolLM2", source, SENTENCE, 256))  # 270 heads: minutes each
        out.append(sweep_job("SmolLM2", source, benchmark_text(64), 64))
        out.append(flow_job("SmolLM2", source, benchmark_text(60), 60))  # flow's bound on its 30 layers
    return out


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--smollm2", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [timed(*job) for job in jobs(args.smollm2, args.lengths)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"Progress estimates against the real time, {torch.get_num_threads()} thread(s)")
    print("predicted total = elapsed + the bar's estimate of what is left; error = predicted / real - 1")
    print("before = what the page says before the job starts (the sweep: from a pass timed here), where it says one")
    header = (
        f"{'job':<38} {'steps':>5} {'before':>7} {'err':>6} {'after 1st':>9} {'err':>6} {'at 25 %':>8} {'err':>6} "
        f"{'real s':>7}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['job']:<38} {r['steps']:>5} {seconds(r['before_s']):>7} {percent(r['before_error']):>6} "
            f"{seconds(r['first_s']):>9} {percent(r['first_error']):>6} "
            f"{seconds(r['quarter_s']):>8} {percent(r['quarter_error']):>6} {r['real_s']:>7.1f}"
        )


if __name__ == "__main__":
    main()
