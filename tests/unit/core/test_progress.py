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


def test_passes_that_slow_down_three_times_halfway_move_the_time_left():
    """Ten passes of 2 s, then another process takes the cores: the last five take 6 s. Once three slow passes
    (18 s, past RECENT_SECONDS) are done, the time left is priced at 6 s a pass, not at the mean of every pass."""
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.run", 20)
    for _ in range(10):
        clock.advance(2.0)
        progress.step()
    assert states[-1].remaining_s == pytest.approx(10 * 2.0)
    for _ in range(3):
        clock.advance(6.0)
        progress.step()
    state = states[-1]
    assert state.remaining_s == pytest.approx(7 * 6.0)  # the mean of passes 2-13 would give 7 x 3 = 21 s
    assert (state.basis, state.basis_passes) == ("recent", 3)


def test_a_short_pass_window_grows_until_it_holds_five_seconds():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.layer", 40)
    for seconds in [0.5] * 10 + [1.5] * 4:  # three passes of 1.5 s are 4.5 s: a fourth is taken
        clock.advance(seconds)
        progress.step()
    assert states[-1].basis_passes == 4
    assert states[-1].remaining_s == pytest.approx(26 * 1.5)


def test_a_priced_stage_shows_its_price_first_then_scales_it_by_its_last_passes():
    """Four passes of 4 heads, priced 1 s a head (4 s a pass), 8 heads done before (the timing passes): the bar
    counts 8 of 24 at once, priced 16 s; passes that take 2x their price double what is left."""
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.run", 24, done=8, prices=[1.0] * 16)
    first = states[-1]
    assert (first.done, first.total, first.remaining_s, first.basis) == (8, 24, pytest.approx(16.0), "price")
    clock.advance(8.0)
    progress.step(4)
    after = states[-1]
    assert (after.done, after.total) == (12, 24)
    assert after.remaining_s == pytest.approx(12 * 1.0 * 2.0)  # 12 heads left at twice their price
    assert (after.basis, after.basis_passes) == ("recent", 1)


def test_a_priced_stage_follows_cheaper_later_passes_by_their_price():
    """Later passes priced at half (a resumed sweep's last layers run fewer layers): real / price stays 1, so the
    time left is the price left, which a per-head mean would overstate."""
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.run", 8, prices=[2.0] * 4 + [1.0] * 4)
    for seconds in (4.0, 4.0, 2.0):
        clock.advance(seconds)
        progress.step(2)
    assert states[-1].remaining_s == pytest.approx(2.0)


def test_a_price_factor_scales_the_price_before_the_first_pass_only():
    clock = FakeClock()
    states = []
    progress = Progress(on_update=states.append, clock=clock, price_factor=2.5)  # the machine is 2.5x slower now
    progress.stage("progress.run", 10, prices=[1.0] * 10)
    assert states[-1].remaining_s == pytest.approx(25.0)
    clock.advance(1.0)  # and then it is not: the pass took its unscaled price
    progress.step()
    assert states[-1].remaining_s == pytest.approx(9.0)


def test_steps_done_before_count_but_are_not_timed():
    clock = FakeClock()
    progress, states = recorded(clock)
    progress.stage("progress.run", 10, done=6)  # a stopped run's 6: counted, no time
    assert (states[-1].done, states[-1].total, states[-1].remaining_s) == (6, 10, None)
    assert states[-1].fraction == pytest.approx(0.6)
    clock.advance(3.0)
    progress.step()
    assert (states[-1].done, states[-1].remaining_s) == (7, pytest.approx(3 * 3.0))
    with pytest.raises(ValueError, match="3 prices for the 4 steps left"):
        progress.stage("progress.run", 10, done=6, prices=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="11 steps done before"):
        progress.stage("progress.run", 10, done=11)
