"""The pieces a lab's heads run in, and the loop that runs them: counted, priced and timed a pass at a time."""

import pytest

from attnviz.core.progress import Progress, ProgressState
from attnviz.core.time_agreement import TimeLog
from attnviz.labs.heads_matter import schedule

HEADS = [(layer, head) for layer in range(3) for head in range(4)]


def test_pieces_follow_the_rows_each_first_head_allows():
    assert schedule.cut_pieces(HEADS, lambda head: 5) == [HEADS[:5], HEADS[5:10], HEADS[10:]]
    # later layers hold more rows (a resumed pass from there is quicker): the size is read at each piece's first head
    pieces = schedule.cut_pieces(HEADS, lambda head: 3 if head[0] == 0 else 6)
    assert pieces == [HEADS[:3], HEADS[3:6], HEADS[6:12]]
    assert schedule.cut_pieces([], lambda head: 1) == []
    with pytest.raises(ValueError, match="0 rows"):
        schedule.cut_pieces(HEADS, lambda head: 0)  # never a loop that does not end


def test_passes_are_counted_priced_and_timed_and_a_stop_keeps_the_passes_that_ended():
    pieces = schedule.cut_pieces(HEADS[2:], lambda head: 4)  # two heads done before: [4, 4, 2]
    ticks = iter(range(100))
    log = TimeLog(wall=lambda: float(next(ticks)), cpu=lambda: 0.0)
    states: list[ProgressState] = []
    done: dict = {}

    def run(piece):
        if piece[0][0] == 2:
            raise KeyboardInterrupt  # a stop, during the third pass
        done.update(dict.fromkeys(piece, 1.0))

    def price(piece):
        return 2.0 * len(piece)

    with pytest.raises(KeyboardInterrupt):
        schedule.run_passes(pieces, run, Progress(on_update=states.append), "x", len(HEADS), price, log)
    assert list(done) == HEADS[2:10]
    assert [(s.done, s.total) for s in states] == [(2, 12), (6, 12), (10, 12)]
    assert states[0].remaining_s == pytest.approx(2.0 * 10)  # the price of the ten heads left, before a pass ran
    assert [(lap.layer, lap.predicted_s, lap.wall_s) for lap in log.laps] == [(0, 8.0, 1.0), (1, 8.0, 1.0)]


def test_unpriced_passes_keep_no_laps():
    log, seen = TimeLog(), []
    schedule.run_passes([HEADS[:6], HEADS[6:]], seen.append, None, "x", len(HEADS), None, log)
    assert seen == [HEADS[:6], HEADS[6:]] and log.laps == []
