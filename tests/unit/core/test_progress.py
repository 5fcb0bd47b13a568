"""The progress reporter: counts, stages and estimates on a fake clock, computed by hand."""

import pytest

from attnviz.core.progress import NO_PROGRESS, Progress, or_none, stage_seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def recorded(clock: FakeClock):
    states = []
    return Progress(on_update=states.append, clock=clock), states


def test_equal_steps_of_two_seconds_leave_fourteen_after_three_of_ten():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.layer", 10)
    for _ in range(3):
        clock.advance(2.0)
        progress.step()
    state = states[-1]
    assert (state.done, state.total, state.label) == (3, 10, "progress.layer")
    assert state.elapsed_s == pytest.approx(6.0)
    assert state.remaining_s == pytest.approx(14.0)  # 7 steps x 2 s
    assert state.fraction == pytest.approx(0.3)
    assert [s.done for s in states] == [1, 2, 3]


def test_no_estimate_before_the_first_step():
    clock = FakeClock()
    progress, _ = recorded(clock)
    progress.stage("progress.layer", 4)
    clock.advance(5.0)
    state = progress.state()
    assert state.remaining_s is None
    assert state.elapsed_s == pytest.approx(5.0)


def test_the_first_step_is_left_out_from_the_second_on():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.step", 6)
    clock.advance(5.0)  # the first carries warm-up (building the models)
    progress.step()
    assert states[-1].remaining_s == pytest.approx(5 * 5.0)  # one step: all there is to go on
    for seconds in (1.0, 2.0):
        clock.advance(seconds)
        progress.step()
    assert states[-1].remaining_s == pytest.approx(3 * 1.5)  # the mean of steps 2 and 3


def test_weighted_steps_extrapolate_by_weight_once_two_weights_are_done():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.length", 4, weights=[1, 2, 3, 4])
    clock.advance(1.0)
    progress.step()
    assert states[-1].remaining_s is None  # one size: overhead and growth cannot be told apart
    clock.advance(2.0)
    progress.step()
    assert states[-1].remaining_s == pytest.approx(7.0)  # fit a=1 s per unit, b=0: 3 + 4
    assert states[-1].fraction == pytest.approx(3 / 10)


def test_weighted_steps_fit_a_per_step_overhead():
    # each step costs 0.5 s + 1 s per unit: after weights 1 and 2 (1.5 s, 2.5 s), 4 and 8 cost 4.5 + 8.5
    assert stage_seconds([1, 2, 4, 8], [1.5, 2.5]) == pytest.approx(13.0)


def test_stage_transitions_keep_counts_per_stage_and_estimate_the_planned_ones():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.plan([("progress.layer", 2), ("progress.step", 3)])
    progress.stage("progress.layer", 2)
    clock.advance(1.0)
    progress.step()
    first = states[-1]
    assert (first.stage, first.n_stages, first.done, first.total) == (1, 2, 1, 2)
    assert first.remaining_s == pytest.approx(1.0 + 3 * 1.0)  # 1 more here, 3 later at 1 s per unit
    clock.advance(1.0)
    progress.step()
    progress.stage("progress.step", 3)
    clock.advance(4.0)
    progress.step()
    second = states[-1]
    assert (second.label, second.stage, second.done, second.total) == ("progress.step", 2, 1, 3)
    assert second.remaining_s == pytest.approx(8.0)  # its own rate now: 2 steps x 4 s
    assert second.elapsed_s == pytest.approx(6.0)
    assert second.fraction == pytest.approx(3 / 5)


def test_an_unplanned_stage_is_added_and_steps_past_the_total_leave_nothing():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.layer", 1)
    clock.advance(1.0)
    progress.step()
    clock.advance(1.0)
    progress.step()  # a hybrid model's extra attention call
    assert (states[-1].done, states[-1].total, states[-1].remaining_s) == (2, 2, 0.0)  # the stage grew
    progress.stage("progress.prompt", 2, prompt="x")
    clock.advance(3.0)
    progress.step()
    assert states[-1].values == {"done": 1, "total": 2, "prompt": "x"}
    assert (states[-1].stage, states[-1].n_stages) == (2, 2)


def test_a_plan_begins_with_the_first_step_without_a_stage_call():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.plan([("progress.run", 4)])
    clock.advance(3.0)
    progress.step()
    assert (states[-1].label, states[-1].done, states[-1].remaining_s) == ("progress.run", 1, pytest.approx(9.0))


def test_no_progress_is_the_default_and_does_nothing():
    assert or_none(None) is NO_PROGRESS
    NO_PROGRESS.plan([("progress.layer", 3)])
    NO_PROGRESS.stage("progress.layer", 3)
    NO_PROGRESS.step()
    assert NO_PROGRESS.state().done == 0
    progress = Progress()
    assert or_none(progress) is progress


def test_bad_stages_raise_with_the_numbers():
    progress = Progress()
    with pytest.raises(ValueError, match="before any stage"):
        progress.step()
    with pytest.raises(ValueError, match="2 weights for 3 steps"):
        progress.stage("progress.layer", 3, weights=[1, 2])


def test_a_planned_stage_keeps_its_weights_when_it_begins_without_any():
    """Generation: 4 decode steps of 1 s, then 2 captured layers weighing 10 decode steps each (the context)."""
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.plan([("progress.token", 4), ("progress.layer", 2, [10.0, 10.0])])
    progress.stage("progress.token", 4)
    for _ in range(2):
        clock.advance(1.0)
        progress.step()
    assert states[-1].remaining_s == pytest.approx(2 * 1.0 + 20 * 1.0)  # 2 steps here, then 20 units at 1 s
    assert states[-1].fraction == pytest.approx(2 / 24)
    for _ in range(2):
        clock.advance(1.0)
        progress.step()
    progress.stage("progress.layer", 2)  # as the capture begins its stage: no weights given, the plan's kept
    clock.advance(10.0)
    progress.step()
    assert states[-1].fraction == pytest.approx(14 / 24)
    progress.plan([("progress.layer", 3, [5.0, 5.0, 5.0])])
    progress.stage("progress.layer", 2)  # another total: the plan's weights no longer fit, each step weighs 1
    clock.advance(1.0)
    progress.step()
    assert states[-1].fraction == pytest.approx(1 / 2)
