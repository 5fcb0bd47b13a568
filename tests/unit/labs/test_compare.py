"""Side by side: the JSD on hand-computed cases, the token alignment, b − a, the mask variant, the figures, one
head in A and B, the rounding, and the measured estimate."""

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from attnviz.core.capture import FULL_VIEW_TOKENS
from attnviz.core.progress import Progress
from attnviz.core.tokenizer import Token
from attnviz.figures.compare import (
    jsd_scale,
    make_compare_head_figure,
    make_compare_jsd_figure,
    make_compare_stat_figure,
    selected_head,
)
from attnviz.labs import compare as cmp
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.registry import EMBEDDED, SourceSpec
from attnviz.models.source import Encoding
from tests.plotly_json import decode, spec_of
from tests.tolerances import bound, derived_bound
from tests.unit.labs.role_patterns import pattern, record_of

T = 8

# A JSD of n ≤ 3 keys by hand: its float32 inputs round by eps/2 each, its float64 sum is cast to float32 once.
JSD_BY_HAND = derived_bound("float32", 1.0, 3 + 1)


def retokened(record, texts):
    """``record`` with its tokens renamed, so that an alignment can be chosen by hand."""
    return dataclasses.replace(record, tokens=[Token(text, i, i + 1) for i, text in enumerate(texts)])


def plain_jsd(p, q):
    """JSD in bits from its definition H(m) - (H(p) + H(q)) / 2, in plain Python."""

    def h(x):
        return -sum(v * math.log2(v) for v in x if v > 0)

    m = [(a + b) / 2 for a, b in zip(p, q, strict=True)]
    return h(m) - (h(p) + h(q)) / 2


# --- the divergence itself


def test_identical_distributions_are_0_and_disjoint_ones_1():
    p = torch.tensor([[0.2, 0.3, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert torch.equal(cmp.jensen_shannon(p, p), torch.zeros(2))
    disjoint = cmp.jensen_shannon(torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.25, 0.75]))
    assert float(disjoint) == pytest.approx(1.0, abs=JSD_BY_HAND)


def test_a_small_case_by_hand():
    # m = (3/4, 1/4): H(m) = 2 - ¾·log2 3, H(p) = 1, H(q) = 0 -> 1.5 - ¾·log2 3 = 0.311278
    value = float(cmp.jensen_shannon(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])))
    assert value == pytest.approx(1.5 - 0.75 * math.log2(3), abs=JSD_BY_HAND)
    assert value == pytest.approx(plain_jsd([0.5, 0.5], [1.0, 0.0]), abs=JSD_BY_HAND)
    p, q = [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]
    assert float(cmp.jensen_shannon(torch.tensor(p), torch.tensor(q))) == pytest.approx(
        plain_jsd(p, q), abs=JSD_BY_HAND
    )


# --- alignment


@pytest.mark.parametrize(
    ("a", "b", "pos_a", "pos_b"),
    [
        ("abcd", "abcd", (0, 1, 2, 3), (0, 1, 2, 3)),
        ("abcd", "axcd", (0, 2, 3), (0, 2, 3)),  # a substitution
        ("abc", "azbc", (0, 1, 2), (0, 2, 3)),  # an insertion shifts B's positions
        ("abcde", "cde", (2, 3, 4), (0, 1, 2)),  # A's start cut
        ("abc", "xyz", (), ()),
        ("aaaa", "aa", (0, 1), (0, 1)),  # a repeated token aligns once per occurrence
    ],
)
def test_alignment(a, b, pos_a, pos_b):
    alignment = cmp.align_tokens(list(a), list(b))
    assert (alignment.a, alignment.b) == (pos_a, pos_b)
    assert all(a[i] == b[j] for i, j in zip(alignment.a, alignment.b, strict=True))
    assert (alignment.n_a, alignment.n_b, alignment.cut) == (len(a), len(b), 0)


def test_a_long_differing_middle_is_aligned_over_the_limit_and_the_rest_counted():
    a = ["<s>", *"abcdef", "</s>"]
    b = ["<s>", *"abcxyz", "</s>"]
    alignment = cmp.align_tokens(a, b, limit=2)
    # the common start (<s> a b c) and end (</s>) are free; of the middles (def, xyz) 2 tokens each are read
    assert alignment.a == (0, 1, 2, 3, 7) and alignment.b == (0, 1, 2, 3, 7)
    assert alignment.cut == 2
    long_a, long_b = ["p", *"abcdef", "s"], ["p", *"fedcba", "s"]
    assert cmp.align_tokens(long_a, long_b, limit=2).cut == 8


def test_spread_keeps_the_ends_and_caps_the_count():
    assert cmp.spread(10, 4) == [0, 3, 6, 9]
    assert cmp.spread(3, 5) == [0, 1, 2]
    assert len(cmp.spread(8192, cmp.JSD_QUERIES)) == cmp.JSD_QUERIES


# --- per-head JSD on records whose patterns are known


def test_head_jsd_identical_disjoint_and_by_hand():
    a = record_of([[pattern("sink", T), pattern("uniform", T), pattern("self", T)]])
    b = record_of([[pattern("sink", T), pattern("previous-token", T), pattern("sink", T)]])
    table = cmp.head_jsd(a, b, cmp.align_tokens([t.text for t in a.tokens], [t.text for t in b.tokens]))
    assert list(table.columns) == ["layer", "head", "jsd", "n_queries"]
    assert table["n_queries"].tolist() == [T - 1] * 3  # row 0 sees one key under the causal mask: left out
    jsd = table["jsd"].tolist()
    stat = bound("record_statistics")  # the hand-made records' softmax rounding (tests/tolerances.py)
    assert jsd[0] == pytest.approx(0.0, abs=stat)  # the same sink in both
    assert jsd[2] == pytest.approx(1.0, abs=stat)  # itself against the first token: disjoint on every row i >= 1
    # uniform over keys 0..i against one-hot on i - 1, row by row from the definition
    by_hand = []
    for i in range(1, T):
        n = i + 1
        uniform = [1 / n] * n
        previous = [1.0 if k == i - 1 else 0.0 for k in range(n)]
        by_hand.append(plain_jsd(uniform, previous))
    assert jsd[1] == pytest.approx(sum(by_hand) / len(by_hand), abs=stat)


def test_rows_are_restricted_to_the_aligned_keys_and_renormalised():
    texts = [f"t{i}" for i in range(T)]
    changed = [*texts[:3], "other", *texts[4:]]  # B's token 3 differs: key 3 is left out of both
    uniform = pattern("uniform", T)
    a = record_of([[uniform, pattern("self", T)]])
    b = retokened(record_of([[uniform, pattern("self", T)]]), changed)
    alignment = cmp.align_tokens(texts, changed)
    assert 3 not in alignment.a
    table = cmp.head_jsd(a, b, alignment)
    assert table["jsd"].iloc[0] == pytest.approx(
        0.0, abs=bound("record_statistics")
    )  # uniform stays uniform over the kept keys
    # a self head on an unaligned key has no weight left on aligned keys: that query is not compared
    assert table["n_queries"].tolist() == [T - 2, T - 2]  # row 0 (one key) and row 3 (unaligned query) left out
    half = retokened(record_of([[uniform, pattern("sink", T)]]), ["x", *texts[1:]])  # the sink's key unaligned
    sinks = cmp.head_jsd(
        retokened(record_of([[uniform, pattern("sink", T)]]), ["y", *texts[1:]]),
        half,
        cmp.align_tokens(["y", *texts[1:]], ["x", *texts[1:]]),
    )
    assert sinks["n_queries"].iloc[1] == 0 and math.isnan(sinks["jsd"].iloc[1])


def test_the_jsd_reads_at_most_max_queries_rows():
    a = record_of([[pattern("uniform", T)]])
    b = record_of([[pattern("previous-token", T)]])
    alignment = cmp.align_tokens([t.text for t in a.tokens], [t.text for t in b.tokens])
    # queries 0, 4 and 7 are read; row 0 sees one key under the causal mask and is left out
    assert cmp.head_jsd(a, b, alignment, max_queries=3)["n_queries"].iloc[0] == 2
    assert cmp.head_jsd(a, b, alignment)["n_queries"].iloc[0] == T - 1


def test_shapes_that_differ_are_said_not_paired():
    one = record_of([[pattern("sink", T)]])
    two = record_of([[pattern("sink", T)], [pattern("self", T)]])
    with pytest.raises(ValueError, match="differ in shape"):
        cmp.head_jsd(one, two, cmp.align_tokens(["a"], ["a"]))
    comparison = cmp.compare_records(one, two)
    assert comparison.diff is None and comparison.jsd is None and not comparison.same_shape
    assert comparison.note.key == "compare_lib.shapes_differ"
    assert comparison.largest().empty
    fig = spec_of(make_compare_stat_figure(comparison, "entropy"))
    assert len(fig["data"]) == 2  # A and B, no difference
    with pytest.raises(ValueError):
        make_compare_jsd_figure(comparison)


# --- statistics: b − a


def test_the_diff_is_b_minus_a_and_the_largest_are_ordered():
    a = record_of([[pattern("sink", T), pattern("uniform", T)], [pattern("self", T), pattern("uniform", T)]])
    b = record_of([[pattern("sink", T), pattern("previous-token", T)], [pattern("sink", T), pattern("uniform", T)]])
    comparison = cmp.compare_records(a, b)
    assert list(comparison.diff.columns) == ["layer", "head", *a.stat_columns]
    for column in a.stat_columns:
        expected = b.statistics[column].to_numpy() - a.statistics[column].to_numpy()
        np.testing.assert_array_equal(comparison.diff[column].to_numpy(), expected)  # the same subtraction: exact
    # self -> sink: the hand-made records' softmax rounding (tests/tolerances.py)
    assert comparison.diff["first_token_weight"].iloc[2] == pytest.approx(1.0, abs=bound("record_statistics"))
    largest = comparison.largest("first_token_weight", n=2)
    assert largest[["layer", "head"]].values.tolist() == [[1, 0], [0, 1]]
    assert list(largest.columns) == ["layer", "head", "jsd", "a", "b", "diff"]
    by_jsd = comparison.largest()
    assert by_jsd["jsd"].is_monotonic_decreasing and by_jsd.iloc[0][["layer", "head"]].tolist() == [1, 0]
    with pytest.raises(ValueError):
        comparison.largest("no_such_statistic")


def test_no_tokens_is_a_value_error():
    empty = dataclasses.replace(record_of([[pattern("sink", T)]]), tokens=[])
    with pytest.raises(ValueError):
        cmp.compare_records(empty, empty)


# --- models: the same tokens; masks: the same weights


def test_same_tokens_reads_ids_where_both_have_them():
    tokens = [Token("a", 0, 1), Token("b", 1, 2)]
    assert cmp.same_tokens(Encoding(None, tokens, 2), Encoding(None, list(tokens), 2))
    assert not cmp.same_tokens(Encoding([1, 2], tokens, 2), Encoding([1, 3], tokens, 2))
    other = Encoding(None, [Token("a", 0, 1), Token("c", 1, 2)], 2)
    assert not cmp.same_tokens(Encoding(None, tokens, 2), other)
    assert not cmp.same_tokens(Encoding([1, 2], tokens, 2), Encoding(None, tokens, 2))  # a vocabulary and none
    raw = [Token("a", 0, 1, raw="Ġa"), Token("b", 1, 2)]
    assert not cmp.same_tokens(Encoding(None, tokens, 2), Encoding(None, raw, 2))  # shown alike, read otherwise
    why = cmp.tokens_differ("A", "B", Encoding(None, tokens, 2), other)
    assert why.values["at"] == 1 and why.values["token_b"] == "c"


def test_the_mask_variant_keeps_the_weights_and_flips_the_mask():
    spec = SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(n_layer=2, causal=False))
    causal = cmp.mask_variant(spec, True)
    assert causal.config.causal and causal.config.seed == spec.config.seed
    assert cmp.mask_variant(SourceSpec("smollm2"), True) is None  # its mask is not a setting
    text = "the cat sat on the mat"
    bidirectional = EmbeddedModel(spec.config).run(text, 64)
    masked = EmbeddedModel(causal.config).run(text, 64)
    last = len(bidirectional.tokens) - 1
    # layer 0's last query sees every key under both masks: the same weights give the same row, up to the rounding
    # of the capture's masked and unmasked kernels (two routes: tests/tolerances.py)
    row = (last, last + 1)
    tol = bound("attention")
    torch.testing.assert_close(bidirectional.weights(0, None, row), masked.weights(0, None, row), atol=tol, rtol=0)
    comparison = cmp.compare_records(bidirectional, masked)
    assert (comparison.jsd["jsd"] > 1e-4).all()  # every head's pattern changes once the future is hidden


def test_layer_0_of_the_embedded_model_is_unmoved_by_a_substitution():
    # layer 0's scores depend on each token and its position only: off the substituted key, a row renormalised
    # over the aligned keys is the same in both, so its JSD is 0; deeper layers mix the change in
    model = EmbeddedModel(EmbeddedConfig(n_layer=2))
    a, b = model.run("the cat sat on the mat", 64), model.run("the dog sat on the mat", 64)
    jsd = cmp.compare_records(a, b).jsd
    # the rows differ by the renormalisation's rounding alone, a relative r = derived_bound(float32, 1, T) of each
    # weight; the JSD is second order in it, ≤ Σ δ²/p / (8 ln 2) = r² / (8 ln 2) bits
    r = derived_bound("float32", 1.0, len(a.tokens))
    assert (jsd[jsd["layer"] == 0]["jsd"] <= r**2 / (8 * math.log(2))).all()
    assert (jsd[jsd["layer"] == 1]["jsd"] > 1e-4).any()


# --- figures


def test_the_statistic_figure_shares_a_scale_and_centres_the_difference():
    a = record_of([[pattern("sink", T), pattern("uniform", T)]])
    b = record_of([[pattern("self", T), pattern("uniform", T)]])
    comparison = cmp.compare_records(a, b)
    fig = spec_of(make_compare_stat_figure(comparison, "first_token_weight"))
    grid_a, grid_b, grid_d = fig["data"]
    assert (grid_a["zmin"], grid_a["zmax"]) == (grid_b["zmin"], grid_b["zmax"])
    assert grid_d["zmid"] == 0 and grid_d["zmin"] == -grid_d["zmax"]
    # the grids are float32: a's, b's and b − a's float64 values each rounded once, of size ≤ 1
    rounded_grids = derived_bound("float32", 1.0, 3)
    np.testing.assert_allclose(decode(grid_d["z"]), decode(grid_b["z"]) - decode(grid_a["z"]), atol=rounded_grids)
    stat = bound("record_statistics")  # the hand-made records' softmax rounding (tests/tolerances.py)
    assert decode(grid_d["z"])[0, 0] == pytest.approx(-1.0, abs=stat)
    with pytest.raises(ValueError):
        make_compare_stat_figure(comparison, "no_such_statistic")
    jsd = spec_of(make_compare_jsd_figure(comparison))["data"][0]
    assert (jsd["zmin"], jsd["zmax"]) == (0, 1)
    assert decode(jsd["z"])[0, 0] == pytest.approx(1.0, abs=stat)
    assert decode(jsd["z"])[0, 1] == pytest.approx(0.0, abs=stat)
    # the largest JSD is drawn black, not in the pink Streamlit's theme puts where a scale says "#000004"
    assert jsd["colorscale"][-1] == [1.0, "rgb(0,0,4)"]
    assert not [c for _, c in jsd["colorscale"] if re.fullmatch(r"#0000[0-9a-fA-F]{2}", c)]


def test_the_jsd_is_bounded_by_cells_and_its_cost_predicted():
    assert cmp.jsd_queries(2, 4, 7) == cmp.JSD_QUERIES
    assert cmp.jsd_queries(30, 9, 8192) == cmp.JSD_CELLS // (30 * 9 * 8192) == 60  # SmolLM2 at 8,192 tokens
    assert cmp.jsd_queries(100, 100, 8192) == cmp.MIN_JSD_QUERIES
    one = record_of([[pattern("sink", T)]])
    two = record_of([[pattern("sink", T)], [pattern("self", T)]])
    assert cmp.comparison_seconds(one, two) == 0.0  # the heads differ in shape: no row is read
    # T queries x T keys x 1 head x 1 layer, both sides, q·k over head_dim T plus the JSD's work per weight
    assert cmp.comparison_seconds(one, one) == pytest.approx(
        2 * T * T * (2 * T + cmp.CELL_FLOPS) / cmp.FLOPS_PER_SECOND
    )
    assert cmp.comparison_need(one, one).nbytes == 8 * cmp.CHUNK_ELEMENTS * 4


# --- issue 25: a readable Side by side


def mixed(eps: float, n: int = T) -> torch.Tensor:
    """A uniform head with ``eps`` of each row moved onto the query itself: a small, known change of pattern."""
    return (1 - eps) * pattern("uniform", n) + eps * pattern("self", n)


def test_the_jsd_reads_runs_of_consecutive_rows_spread_along_the_text():
    rows = cmp.jsd_rows(2001, 248)  # SmolLM2 at 2,001 tokens
    assert len(rows) <= 248 and rows[0] == 0 and rows[-1] == 2000
    runs = sum(1 for i, r in enumerate(rows) if i == 0 or rows[i - 1] != r - 1)
    assert cmp.QUERY_RUNS <= runs <= 16  # a few blocks read whole, not 248 single rows
    assert cmp.jsd_rows(10, 256) == list(range(10))
    assert cmp.jsd_rows(8, 3) == [0, 4, 7]  # too few queries for runs: single rows, spread


def test_the_jsd_grid_is_scaled_to_its_values_and_says_so():
    a = record_of([[pattern("uniform", T), pattern("uniform", T)]])
    b = record_of([[mixed(0.05), mixed(0.02)]])
    comparison = cmp.compare_records(a, b)
    top = float(comparison.jsd["jsd"].max())
    assert 0.001 < top < 0.1  # a typical small change
    low, high = jsd_scale(comparison)
    assert low == 0 and top <= high <= top * 1.1  # fitted: 0 to the largest, rounded up to 2 digits
    trace = spec_of(make_compare_jsd_figure(comparison))["data"][0]
    assert (trace["zmin"], trace["zmax"]) == (0, high)
    assert trace["colorbar"]["ticktext"][-1] == f"{high:g}"  # the top of the scale is written on the bar
    same = cmp.compare_records(a, a)
    assert jsd_scale(same) == (0.0, cmp.FLOAT_FLOOR)  # every head unmoved: no scale stretched over rounding


def test_a_click_on_the_jsd_grid_names_its_head_and_the_head_is_outlined():
    a = record_of([[pattern("uniform", T), pattern("uniform", T)], [pattern("sink", T), pattern("self", T)]])
    b = record_of([[mixed(0.05), mixed(0.02)], [pattern("sink", T), pattern("previous-token", T)]])
    comparison = cmp.compare_records(a, b)
    assert comparison.most_moved() == (1, 1)  # self -> previous token: the largest JSD
    fig = make_compare_jsd_figure(comparison, selected=(1, 1))
    trace = spec_of(fig)["data"][0]
    custom = decode(trace["customdata"])
    assert custom.shape == (2, 2, 3) and custom[1, 0].tolist()[:2] == [1, 0]
    assert selected_head({"selection": {"points": [{"customdata": [1, 0, 7]}]}}) == (1, 0)
    assert selected_head({"selection": {"points": []}}) is None
    (shape,) = fig.layout.shapes
    assert (shape.x0, shape.y0) == (0.5, 0.5)


def test_figures_are_rounded_and_float_rounding_reads_0():
    assert cmp.rounded(2e-15) == 0.0 and cmp.rounded(-3e-7) == 0.0
    assert cmp.rounded(0.0123456) == 0.0123 and cmp.rounded(-1234.5678) == -1230.0
    assert math.isnan(cmp.rounded(math.nan))
    a = record_of([[pattern("uniform", T), pattern("sink", T)]])
    noisy = record_of([[pattern("uniform", T) * (1 + 1e-7), mixed(0.3)]])  # head 0: only float rounding moved
    largest = cmp.compare_records(a, noisy).largest("entropy", digits=3)
    for column in ("jsd", "a", "b", "diff"):
        for value in largest[column]:
            assert value == 0 or abs(value) >= cmp.FLOAT_FLOOR, (column, value)
            assert value == float(f"{value:.3g}"), (column, value)
    unmoved = largest[largest["head"] == 0].iloc[0]
    assert unmoved["jsd"] == 0 and unmoved["diff"] == 0


def test_one_head_in_a_and_b_and_their_difference_at_full_resolution():
    texts = [f"t{i}" for i in range(T)]
    changed = [*texts[:3], "other", *texts[4:]]
    a = record_of([[pattern("uniform", T), pattern("self", T)]])
    b = retokened(record_of([[pattern("uniform", T), pattern("previous-token", T)]]), changed)
    a = retokened(a, texts)
    comparison = cmp.compare_records(a, b)
    pair = cmp.head_pair(comparison, 0, 1)
    full_a, full_b = a.weights(0, 1), b.weights(0, 1)
    hidden = ~a.mask(0)
    assert torch.equal(pair.a.nan_to_num(0.0), full_a.masked_fill(hidden, 0.0))  # the same record.weights call
    assert pair.a[hidden].isnan().all() and not pair.a[~hidden].isnan().any()
    keep = torch.tensor(comparison.alignment.a)  # every position but 3, the same in A and B
    expected = (full_b - full_a)[keep][:, keep]
    expected = expected.masked_fill(hidden[keep][:, keep], math.nan)
    # B − A read row by row against the whole heads': each side's weights from two routes (tests/tolerances.py)
    tol = 2 * bound("record_weights")
    torch.testing.assert_close(pair.diff, expected, atol=tol, rtol=0, equal_nan=True)
    assert pair.diff_spans == [(p, p + 1) for p in comparison.alignment.a]
    fig = spec_of(make_compare_head_figure(comparison, pair))
    grid_a, grid_b, grid_d = fig["data"]
    assert (grid_a["zmin"], grid_a["zmax"]) == (grid_b["zmin"], grid_b["zmax"])  # one colour scale
    assert grid_d["zmid"] == 0 and grid_d["zmin"] == -grid_d["zmax"]
    assert grid_a["y"][0] == "0 t0" and grid_d["y"][3] == "4 t4"  # the tokens, A's positions on B − A
    with pytest.raises(ValueError):
        cmp.head_pair(comparison, 0, 2)


def test_pooling_keeps_each_bins_largest_change_with_its_sign():
    values = torch.tensor([[0.1, -0.5, 0.2], [0.3, math.nan, 0.0], [math.nan, math.nan, -0.1]])
    pooled = cmp.pool_signed(values, 2)
    assert pooled.shape == (2, 2)
    assert pooled[0, 0] == -0.5 and pooled[0, 1] == pytest.approx(0.2) and pooled[1, 1] == pytest.approx(-0.1)
    assert math.isnan(pooled[1, 0])  # NaN only
    assert cmp.pool_signed(values, 1) is values  # size 1: nothing pooled


def test_a_long_head_is_pooled_and_read_in_bounded_chunks():
    model = EmbeddedModel(EmbeddedConfig(n_layer=1))
    words = ("the cat sat on the mat and " * 80).split()
    a = model.run(" ".join(words), 500)
    b = model.run(" ".join([*words[:50], "dog", *words[51:]]), 500)
    comparison = cmp.compare_records(a, b)
    assert len(comparison.alignment) > FULL_VIEW_TOKENS and not a.full_view
    whole = cmp.head_pair(comparison, 0, 0, max_side=100)
    chunked = cmp.head_pair(comparison, 0, 0, max_side=100, chunk_elements=4096)  # a few rows at a time
    assert whole.diff.shape[0] <= 100 and whole.a.shape == a.pooled(0, 0).shape
    torch.testing.assert_close(whole.diff, chunked.diff, equal_nan=True)
    size = whole.diff_spans[0][1] - whole.diff_spans[0][0]
    assert size == math.ceil(len(comparison.alignment) / 100)
    # the pooled difference is the full-resolution one, pooled
    n = len(comparison.alignment)
    keep_a, keep_b = torch.tensor(comparison.alignment.a), torch.tensor(comparison.alignment.b)
    rows_a = torch.cat([a.weights(0, 0, (r, min(r + 256, a.q_len)), (0, a.k_len)) for r in range(0, a.q_len, 256)])
    rows_b = torch.cat([b.weights(0, 0, (r, min(r + 256, b.q_len)), (0, b.k_len)) for r in range(0, b.q_len, 256)])
    change = rows_b[keep_b][:, keep_b] - rows_a[keep_a][:, keep_a]
    hidden = ~a.mask(0)[keep_a][:, keep_a] & ~b.mask(0)[keep_b][:, keep_b]
    expected = cmp.pool_signed(change.masked_fill(hidden, math.nan), size)
    assert expected.shape == (math.ceil(n / size),) * 2
    # chunks of rows against 256 rows at a time: each side's weights from two routes (tests/tolerances.py)
    tol = 2 * bound("attention")
    torch.testing.assert_close(whole.diff, expected, atol=tol, rtol=0, equal_nan=True)
    # past max_cells, every stride-th query of a bin is read: a bin's largest change can only be as large or smaller
    sampled = cmp.head_pair(comparison, 0, 0, max_side=100, max_cells=n * n // 3, chunk_elements=4096)
    assert sampled.stride == 4 and sampled.diff.shape == whole.diff.shape
    both = whole.diff.isfinite() & sampled.diff.isfinite()
    assert (sampled.diff[both].abs() <= whole.diff[both].abs() + tol).all()
    rows = [i for start in range(0, n, size) for i in range(start, min(start + size, n), 4)]
    by_hand = cmp.pool_signed(change.masked_fill(hidden, math.nan)[rows], size, math.ceil(size / 4))
    torch.testing.assert_close(sampled.diff, by_hand, atol=tol, rtol=0, equal_nan=True)


def test_the_comparison_reports_each_layer_and_its_time_is_measured_here():
    a = record_of([[pattern("uniform", T)], [pattern("sink", T)], [pattern("self", T)]])
    b = record_of([[mixed(0.1)], [pattern("sink", T)], [pattern("previous-token", T)]])
    states = []
    cmp.compare_records(a, b, progress=Progress(on_update=states.append))
    assert [(s.label, s.done, s.total) for s in states] == [("progress.layer", i, 3) for i in (1, 2, 3)]
    ticks = iter(range(100))
    alignment = cmp.align_records(a, b)
    # a clock that moves one second a call: each layer timed takes 1 s; the mean layer is counted n_layer times
    assert cmp.measured_seconds(a, b, alignment, clock=lambda: float(next(ticks))) == pytest.approx(3.0)
    assert cmp.measured_seconds(a, record_of([[pattern("sink", T)]]), alignment) == 0.0  # shapes differ
