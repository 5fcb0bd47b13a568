"""A job's predicted time beside the time it took, by hand: within the bound, and each reason they differ."""

import pytest

from attnviz.core.time_agreement import TIME_FACTOR, TIME_FLOOR_S, Lap, TimeLog, cpu_share, time_verdict
from attnviz.i18n.message import Message


def lap(predicted: float, wall: float, cpu: float, layer: int = 0, others: int = 0) -> Lap:
    return Lap(layer, predicted, wall, cpu, others)


def test_the_bound_is_the_inverted_thirty_percent_target_and_a_second():
    assert TIME_FACTOR > 1 / 0.7 and TIME_FACTOR == 1.5 and TIME_FLOOR_S == 1.0


def test_nothing_ran_says_nothing():
    assert time_verdict([]) is None


def test_within_a_factor_of_one_and_a_half_agrees():
    # 20 s predicted; 29 s taken is 1.45x: within. The sums are over the laps.
    verdict = time_verdict([lap(10, 14, 28), lap(10, 15, 30)], timed_share=2.0)
    assert verdict.agrees and verdict.reason == "agree"
    assert (verdict.predicted_s, verdict.wall_s, verdict.cpu_s) == (20, 29, 58)
    assert str(verdict.message).startswith("Predicted 20.0 s, took 29.0 s: within the stated bound")
    assert time_verdict([lap(20, 13.5, 27)]).agrees  # 20 / 13.5 = 1.48x quicker: within


def test_under_a_second_apart_always_agrees():
    # 0.02 s predicted, 0.9 s taken: 45x, but under the floor (no page quotes under "1 s")
    assert time_verdict([lap(0.02, 0.92, 0.1)]).agrees


def test_slower_with_other_requests_running_is_shared():
    verdict = time_verdict([lap(10, 12, 20), lap(10, 25, 40, others=2)], timed_share=2.0)  # 37 / 20 = 1.85x
    assert not verdict.agrees and verdict.reason == "shared"
    text = str(verdict.message)
    assert "Predicted 20.0 s, took 37.0 s: 1.9× longer" in text and "up to 2 at once" in text


def test_slower_at_the_predicted_cpu_time_is_load():
    # 10 s predicted at 2 CPU s a second: 20 CPU s implied; 30 s taken with 22 CPU s (within 1.5 x 20): it waited
    verdict = time_verdict([lap(10, 30, 22)], timed_share=2.0)
    assert verdict.reason == "load"
    assert "The machine was busy: the work's CPU time (22.0 s) is about what the timed passes implied (20.0 s)" in str(
        verdict.message
    )


def test_slower_with_more_cpu_time_is_the_prediction_off_and_names_the_layer():
    # 10 s predicted (4 + 6), 30 s taken with 60 CPU s, three times the 20 implied: the work cost more.
    # Layer 3's passes: 6 s predicted, 24 s taken (18 off); layer 0's: 4 against 6 (2 off)
    verdict = time_verdict([lap(4, 6, 12, layer=0), lap(6, 24, 48, layer=3)], timed_share=2.0)
    assert verdict.reason == "off"
    text = str(verdict.message)
    assert "3.0× longer" in text and "the passes from layer 3 (6.00 s predicted, 24.00 s taken)" in text


def test_without_the_timing_share_slower_cannot_be_called_load():
    assert time_verdict([lap(10, 30, 22)]).reason == "off"


def test_quicker_than_a_busy_timing_is_timed_busy():
    # timed at 0.5 CPU s a second (the pass waited for cores); the run got 2.0: 20 s predicted, 8 s taken
    verdict = time_verdict([lap(20, 8, 16)], timed_share=0.5)
    assert verdict.reason == "timed_busy" and "2.5× quicker" in str(verdict.message)
    assert "they got 0.50 CPU seconds a second, the run 2.00" in str(verdict.message)
    assert time_verdict([lap(20, 8, 16)], timed_share=2.0).reason == "off"  # the same share: the price was off


def test_the_message_is_a_key_and_its_numbers_and_reads_in_chinese():
    verdict = time_verdict([lap(10, 30, 22)], timed_share=2.0)
    assert isinstance(verdict.message, Message) and verdict.message.key == "time_agree.slower"
    assert "机器当时很忙" in verdict.message.render("zh")


def test_a_log_keeps_a_lap_per_part_that_ended_and_none_for_one_that_raised():
    clock = {"wall": 0.0, "cpu": 0.0}
    laps = []
    log = TimeLog(laps, others=lambda: 3, wall=lambda: clock["wall"], cpu=lambda: clock["cpu"])
    with log.part(2, 1.5):
        clock["wall"] += 2.0
        clock["cpu"] += 3.0
    with pytest.raises(KeyboardInterrupt), log.part(5, 1.0):
        clock["wall"] += 1.0
        raise KeyboardInterrupt  # a stop: the part did not end
    assert laps == [Lap(2, 1.5, 2.0, 3.0, 3)] and log.laps is laps
    assert cpu_share(2.0, 3.0) == 1.5 and cpu_share(0.0, 1.0) is None
