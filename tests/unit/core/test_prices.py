"""Honest prices: a resumed job priced on what is left at the speed its last passes went, a price timed on a quiet
machine scaled by a probe taken now, and the count the bar shows equal to the button's (fake clocks throughout)."""

import io

import pytest

from attnviz.cli.prices import price_text, stderr_progress, step_line
from attnviz.core import device_speed
from attnviz.core.progress import NO_PROGRESS, ProgressState
from attnviz.core.time_agreement import Lap, TimeLog, price_left, recent_ratio
from attnviz.labs.heads_matter import ablation, patching


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def lap(predicted: float, wall: float, scale: float = 1.0) -> Lap:
    return Lap(layer=0, predicted_s=predicted * scale, wall_s=wall, cpu_s=wall, scale=scale)


def test_a_continue_prices_what_is_left_at_the_speed_of_the_last_passes():
    """A stopped run: two passes as priced (2 s each), then three at 3x their price (6 s) once the machine got
    busy. What is left, priced 20 s, is quoted 60 s from those last three, not 20 s, nor the whole job's price."""
    laps = [lap(2.0, 2.0), lap(2.0, 2.0), lap(2.0, 6.0), lap(2.0, 6.0), lap(2.0, 6.0)]
    price = price_left(20.0, laps)
    assert (price.seconds, price.basis, price.passes) == (pytest.approx(60.0), "recent", 3)
    assert price_left(0.0, laps).seconds == 0.0  # nothing left: nothing quoted, whatever the speed


def test_a_quoted_lap_keeps_its_scale_so_the_speed_is_read_against_the_lab_price():
    # priced 2 s by the lab, quoted 5 s (a probe said 2.5x), took 5 s: the machine ran at 2.5x the lab's price
    assert recent_ratio([lap(2.0, 5.0, scale=2.5)] * 3) == (pytest.approx(2.5), 3)
    clock = FakeClock()
    log = TimeLog(wall=clock, cpu=clock, scale=2.5)
    with log.part(3, 2.0):
        clock.advance(5.0)
    assert (log.laps[0].predicted_s, log.laps[0].scale, log.laps[0].wall_s) == (5.0, 2.5, 5.0)


def test_before_any_pass_a_fresh_probe_scales_the_price_and_without_one_it_stands():
    assert price_left(20.0, (), fresh=2.0).seconds == pytest.approx(40.0)
    assert price_left(20.0, (), fresh=2.0).basis == "fresh"
    assert (price_left(20.0).seconds, price_left(20.0).basis) == (20.0, "timed")
    assert price_left(20.0, [lap(1.0, 3.0)], fresh=0.5).basis == "recent"  # a run's own passes win over a probe


def test_the_probe_is_reused_for_three_seconds_then_taken_again(monkeypatch):
    taken = []
    monkeypatch.setattr(device_speed, "probe_seconds", lambda device=None: taken.append(device) or 0.05 * len(taken))
    monkeypatch.setattr(device_speed, "_probes", {})
    clock = FakeClock()
    assert device_speed.current_probe(None, clock=clock) == pytest.approx(0.05)
    clock.advance(2.5)
    assert device_speed.current_probe(None, clock=clock) == pytest.approx(0.05)  # reused
    clock.advance(1.0)
    assert device_speed.current_probe(None, clock=clock) == pytest.approx(0.10)  # 3.5 s old: taken again
    assert device_speed.load_factor(0.05, 0.15) == pytest.approx(3.0)
    assert device_speed.load_factor(None, 0.15) is None
    # within the bound the estimates are held to (a factor of 1.5), a probe's difference is its own noise
    assert device_speed.load_factor(0.10, 0.14) == 1.0 and device_speed.load_factor(0.10, 0.07) == 1.0
    assert device_speed.load_factor(0.10, 0.05) == pytest.approx(0.5)  # quieter now than when it was timed


def test_the_probe_is_a_real_timing():
    seconds = device_speed.probe_seconds(None, budget_s=0.01)
    assert 0 < seconds < 60


def test_the_sweeps_bar_counts_every_head_the_button_counted_those_timed_done(monkeypatch):
    """The button says 8 heads; timing ran 2 of them. The bar's stage is 8, starting at 2 done, priced at the
    passes' price; before, it was a stage of the 6 left ("Head 1 of 6")."""
    heads = [(layer, head) for layer in range(2) for head in range(4)]
    baseline = ablation.SweepBaseline(
        model="m", mode="zero", n_head=4, max_tokens=3, values=None, logits=False, layers_run=2, heads=heads,
        rows=2, pass_seconds=1.0, timed_rows=2, first={(0, 0): 0.1, (0, 1): 0.2},
    )  # fmt: skip
    monkeypatch.setattr(ablation, "sweep_piece", lambda source, text, base, piece, losses=None: dict.fromkeys(piece))
    states: list[ProgressState] = []
    from attnviz.core.progress import Progress

    ablation.run_pieces(None, "x", baseline, {}, Progress(on_update=states.append))
    assert {s.total for s in states} == {len(heads)}
    assert [s.done for s in states] == [2, 4, 6, 8]
    assert states[0].remaining_s == pytest.approx(baseline.seconds(baseline.first))  # the price, as the button's
    assert states[0].basis == "price"


def test_exact_patching_counts_every_head_the_timing_passes_done(monkeypatch):
    heads = [(layer, head) for layer in range(3) for head in range(4)]
    monkeypatch.setattr(patching, "patch_rows", lambda pair: 4)
    monkeypatch.setattr(patching, "patch_piece", lambda source, pair, piece: dict.fromkeys(piece, 0.0))
    states: list[ProgressState] = []
    from attnviz.core.progress import Progress

    done = {head: 0.0 for head in heads[:4] + heads[-4:]}  # the plan's first and last pass
    patching.patch_heads(None, None, heads, Progress(on_update=states.append), done, price=lambda piece: 3.0)
    assert [(s.done, s.total) for s in states] == [(8, 12), (12, 12)]
    assert states[0].remaining_s == pytest.approx(3.0)  # one pass left at its price


def test_the_cli_writes_a_line_every_ten_seconds_with_the_time_left_from_the_last_passes():
    clock, stream = FakeClock(), io.StringIO()
    progress = stderr_progress("head", quiet=False, clock=clock, stream=stream)
    progress.stage("ablation_lib.progress_heads", 40, done=8, prices=[1.0] * 32)
    assert stream.getvalue() == ""  # a short job prints only its price
    for _ in range(4):
        clock.advance(12.0)  # 8 heads a pass, priced 8 s, took 12 s
        progress.step(8)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "head 16 of 40, about 36 s left, from the last passes (1)"
    assert lines[-1] == "head 32 of 40, about 12 s left, from the last passes (3)"
    assert len(lines) == 3  # the last pass ends the job: no line for 40 of 40
    assert stderr_progress("head", quiet=True) is NO_PROGRESS


def test_the_cli_price_counts_the_heads_timing_ran():
    assert price_text(270, 32, 41.2) == "about 41 s here for the 238 left (32 of the 270 run while timing)"
    state = ProgressState("x", 48, 270, 1, 1, 0.2, 10.0, 95.0, basis="price")
    assert step_line("head", state) == "head 48 of 270, about 1 min 35 s left, as priced"
    assert price_text(8, 8, 0.2) == "about 0 s here: all 8 ran while timing"  # not "about 1 s for the 0 left"
