"""The pitfalls' numbers: the growth fit on exact power laws, the mask's cells, the collapsed heads against the
Scaling lab's table, the sink finding against the record's statistics, the training sentences."""

import math

import numpy as np
import pytest
import torch

from attnviz.core.head_stats import SATURATED_MAX_WEIGHT, SINK_FIRST_TOKEN
from attnviz.labs import scaling
from attnviz.labs.masks.builder import decode_mask
from attnviz.labs.masks.doctor import parse_expect
from attnviz.labs.masks.effects import meant_keep
from attnviz.labs.tour import pitfalls
from attnviz.labs.training.runs import AttentionSummary, RunResult
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel

TEXT = "the cat sat on the mat because it was tired and the dog barked at the cat all night long"
SIZES = (256, 512, 1024, 2048, 4096, 8192)
# a least-squares slope through exact powers, in float64: log n spans ~3.5, the values are exact to ~1e-16 relative
FIT = 1e-9


def power_rows(path: str, exponent: float, overhead: float = 0.0) -> list[dict]:
    return [{"path": path, "tokens": n, "peak_mb": overhead + 1e-4 * n**exponent} for n in SIZES]


def test_growth_exponent_of_exact_powers():
    rows = power_rows("naive", 2.0) + power_rows("fused", 1.0)
    assert pitfalls.growth_exponent(rows, "naive") == pytest.approx(2.0, abs=FIT)
    assert pitfalls.growth_exponent(rows, "fused") == pytest.approx(1.0, abs=FIT)
    assert pitfalls.growth_exponent(rows, "naive", points=len(SIZES)) == pytest.approx(2.0, abs=FIT)


def test_growth_exponent_fits_the_long_end_where_a_fixed_overhead_no_longer_hides_the_growth():
    rows = power_rows("naive", 2.0, overhead=5.0)  # 5 MB of overhead: the short lengths look flat
    over_all = pitfalls.growth_exponent(rows, "naive", points=len(SIZES))
    at_the_end = pitfalls.growth_exponent(rows, "naive")
    exact_end = np.polyfit(np.log(SIZES[-3:]), np.log([5.0 + 1e-4 * n**2 for n in SIZES[-3:]]), 1)[0]
    assert at_the_end == pytest.approx(exact_end, abs=FIT) and over_all < at_the_end < 2.0


def test_growth_exponent_needs_two_positive_lengths():
    with pytest.raises(ValueError, match="two measured lengths"):
        pitfalls.growth_exponent(power_rows("naive", 2.0)[:1], "naive")
    with pytest.raises(ValueError, match="positive"):
        pitfalls.growth_exponent([{**r, "peak_mb": 0.0} for r in power_rows("naive", 2.0)], "naive")


def test_the_memory_sentence_states_the_fit():
    rows = power_rows("naive", 2.0) + power_rows("fused", 1.0)
    said = pitfalls.memory_number(rows, "naive").render("en")
    assert "n^2.00" in said and "2,048" in said and "8,192" in said
    assert "n^2.00 naive, n^1.00 fused" in pitfalls.memory_row(rows).render("en")


def test_the_decode_step_and_its_wrong_cells():
    assert [pitfalls.decode_queries(n) for n in (3, 4, 11, 38)] == [2, 2, 5, 19]
    with pytest.raises(ValueError):
        pitfalls.decode_queries(2)
    T = 11
    meant = meant_keep(decode_mask(T, 5, "right").keep, parse_expect("causal"))
    assert torch.equal(meant, torch.ones(T, T, dtype=torch.bool).tril())
    right, plus_one, minus_one = (decode_mask(T, 5, align) for align in ("right", "plus_one", "minus_one"))
    assert not pitfalls.leaking_cells(right, meant).any() and not pitfalls.hidden_cells(right, meant).any()
    # one more: each of the 5 queries but the last (whose next key does not exist) sees the next token
    assert int(pitfalls.leaking_cells(plus_one, meant).sum()) == 4 and not pitfalls.hidden_cells(plus_one, meant).any()
    assert (
        int(pitfalls.hidden_cells(minus_one, meant).sum()) == 5 and not pitfalls.leaking_cells(minus_one, meant).any()
    )


@pytest.fixture(scope="module")
def embedded():
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=4, n_kv_head=2, n_layer=2, causal=True))
    return model, model.run(TEXT, 64)


def test_collapsed_heads_equal_the_scaling_labs_table(embedded):
    model, record = embedded
    table = scaling.scaling_rows(record, model.d_model, model.head_dim).table()
    at_one = pitfalls.collapsed_heads(record, 1.0, model.head_dim, model.d_model)
    unscaled = pitfalls.collapsed_heads(record, math.sqrt(model.head_dim), model.head_dim, model.d_model)
    assert at_one == int((table["saturated_share_sqrt_dk"] >= pitfalls.COLLAPSED_SHARE).sum())
    assert unscaled == int((table["saturated_share_none"] >= pitfalls.COLLAPSED_SHARE).sum())
    # the scale moves the number: a larger scale collapses at least as many heads, 64 x collapses them all
    counts = [pitfalls.collapsed_heads(record, m, model.head_dim, model.d_model) for m in (0.0625, 1.0, 8.0, 64.0)]
    assert counts == sorted(counts) and counts[-1] == record.n_layer * record.n_head and counts[0] < counts[-1]


def test_the_sink_finding_reads_the_records_flags(embedded):
    _, record = embedded
    found = pitfalls.collapse(record)
    stats = record.statistics
    saturated = stats["max_weight"] >= SATURATED_MAX_WEIGHT
    assert found.n_heads == len(stats) and found.saturated == int(saturated.sum())
    assert found.sinks == int((saturated & (stats["first_token_weight"] >= SINK_FIRST_TOKEN)).sum())
    said = pitfalls.collapse_finding(found).render("en")
    assert f"{found.saturated} of {found.n_heads} heads" in said
    if found.head is not None:  # the sink head: its weight on token 0 and what it writes, from the record
        layer, head = found.head
        live = record.live_rows()[layer]
        assert found.first_weight == pytest.approx(float(record.weights(layer, head)[live, 0].mean()))
        norms = record.value_norms(layer, head)
        assert found.norm_ratio == pytest.approx(float(norms[0] / norms.median()))


def run(kind: str, accuracies: list[float], loss: float, accuracy: float) -> RunResult:
    summary = AttentionSummary(max_weight=0.5, answer_weight=0.5, wrong_saturated=0.0, score_std=1.0)
    losses = tuple(1.0 for _ in accuracies)
    return RunResult(kind, 1.0, losses, tuple(accuracies), loss, accuracy, 1.0, False, summary, summary)


def test_the_training_sentences_say_stuck_late_or_no_worse():
    learnt = [0.0] * 20 + [1.0] * 80  # the 10-step mean reaches 90 % at step 29
    late = [0.0] * 50 + [1.0] * 50
    results = [
        run("sqrt_dk", learnt, 0.01, 1.0),
        run("none", [0.3] * 100, 2.2, 0.35),
        run("sqrt_dmodel", late, 0.05, 0.99),
    ]
    said = pitfalls.scale_finding(results).render("en")
    assert "without a scale the run is **stuck**" in said and "1/√d_model it is **late, not stuck**" in said
    assert "at step 29" in pitfalls.scale_number(results, "sqrt_dk").render("en")
    assert "never reached 90%" in pitfalls.scale_number(results, "none").render("en")
    assert "loss 2.20, 35% right" in pitfalls.scale_row(results).render("en")
    level = [results[0], run("none", learnt, 0.011, 1.0), results[2]]
    assert "without a scale the run is **no worse**" in pitfalls.scale_finding(level).render("en")
