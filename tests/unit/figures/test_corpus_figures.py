"""The corpus scatter: its points, error bars and hover are the summary's numbers; the filters keep what they say."""

import math

import numpy as np
import pandas as pd

from attnviz.figures.corpus import (
    filter_heads,
    flag_shares,
    head_metrics,
    make_corpus_scatter_figure,
    metric_columns,
)
from attnviz.i18n.translate import t

# a summary's "heads" as the run writes them (design B): two layers of two heads, one statistic with a NaN spread
HEADS = [
    {
        "layer": layer,
        "head": head,
        "n_texts": 10 + layer,
        "entropy": {"mean": 1.0 + layer + 0.25 * head, "std": 0.1 * (head + 1), "min": 0.5, "max": 2.5},
        "prev_token_weight": {"mean": 0.2 * head + 0.05 * layer, "std": 0.02 + 0.01 * layer, "min": 0.0, "max": 0.9},
        "first_token_weight": {"mean": 0.5, "std": None if head else 0.03, "min": 0.4, "max": 0.6},
    }
    for layer in range(2)
    for head in range(2)
]
PROBE = pd.DataFrame({"layer": [1, 1, 0, 0], "head": [1, 0, 1, 0], "induction": [0.9, 0.1, 0.2, 0.0]})


def test_head_metrics_reads_the_summary_and_joins_the_probe_by_head():
    metrics = head_metrics(HEADS, PROBE)
    assert metric_columns(metrics) == ["entropy", "prev_token_weight", "first_token_weight", "induction"]
    assert list(metrics["entropy_std"]) == [0.1, 0.2, 0.1, 0.2] and list(metrics["n_texts"]) == [10, 10, 11, 11]
    assert list(metrics["induction"]) == [0.0, 0.2, 0.1, 0.9]  # joined on (layer, head), not on row order
    assert math.isnan(metrics["first_token_weight_std"][1])  # JSON null: NaN, no bar


def test_the_scatter_draws_each_head_at_its_means_with_its_std_as_bars():
    metrics = head_metrics(HEADS, PROBE)
    fig = make_corpus_scatter_figure(metrics, "prev_token_weight", "entropy")
    points = fig.data[0]
    assert list(points.x) == [h["prev_token_weight"]["mean"] for h in HEADS]
    assert list(points.y) == [h["entropy"]["mean"] for h in HEADS]
    assert list(points.error_x.array) == [h["prev_token_weight"]["std"] for h in HEADS]
    assert list(points.error_y.array) == [h["entropy"]["std"] for h in HEADS]
    assert list(points.marker.color) == [0, 0, 1, 1] and [list(c) for c in points.customdata] == [[0], [1], [2], [3]]
    entropy, prev = HEADS[3]["entropy"], HEADS[3]["prev_token_weight"]
    assert points.text[3] == (
        f"<b>L1 H1</b><br>{t('stat_names.prev_token_weight')}: {prev['mean']:.3f} ± {prev['std']:.3f}"
        f"<br>{t('stat_names.entropy')}: {entropy['mean']:.3f} ± {entropy['std']:.3f}<br>{t('corpus_fig.n_texts', n=11)}"
    )


def test_the_probe_and_a_null_spread_have_no_bar():
    metrics = head_metrics(HEADS, PROBE)
    points = make_corpus_scatter_figure(metrics, "first_token_weight", "induction").data[0]
    assert np.isnan(np.asarray(points.error_y.array, float)).all()  # the probe's score: one number a head
    assert np.isnan(points.error_x.array[1]) and points.error_x.array[0] == 0.03
    assert points.text[3].split("<br>")[2] == f"{t('corpus_fig.induction')}: 0.900"  # no "±"


def test_a_selected_head_is_ringed_where_its_point_is():
    metrics = head_metrics(HEADS, PROBE)
    fig = make_corpus_scatter_figure(metrics, "prev_token_weight", "entropy", selected={"layer": 1, "head": 0})
    assert len(fig.data) == 2 and list(fig.data[1].x) == [HEADS[2]["prev_token_weight"]["mean"]]
    assert list(fig.data[1].y) == [HEADS[2]["entropy"]["mean"]]


def test_the_filters_keep_a_layer_range_a_minimum_of_texts_and_flags_held_on_most_texts():
    metrics = head_metrics(HEADS)
    assert list(filter_heads(metrics, layers=(1, 1))["layer"]) == [1, 1]
    assert list(filter_heads(metrics, min_texts=11)["layer"]) == [1, 1]
    assert len(filter_heads(metrics, min_texts=12)) == 0
    # the summary's flag counts: L0 H1 a sink on 7 of its 10 texts, L1 H0 on 3 of its 11: only the first holds it
    # on most texts
    flagged = {(0, 1): {"sink": 7, "uniform": 3}, (1, 0): {"sink": 3}}
    metrics = head_metrics([{**h, "flags": flagged.get((h["layer"], h["head"]), {})} for h in HEADS])
    shares = flag_shares(metrics, ("sink", "uniform", "saturated"))
    np.testing.assert_allclose(shares["sink"], [0, 7 / 10, 3 / 11, 0])
    np.testing.assert_allclose(shares["uniform"], [0, 3 / 10, 0, 0])
    np.testing.assert_array_equal(shares["saturated"], 0.0)
    kept = filter_heads(metrics, flags=["sink"], flag_share=shares)
    assert list(zip(kept["layer"], kept["head"], strict=True)) == [(0, 1)]


def test_an_encoder_decoders_heads_are_named_and_filtered_by_stack_and_kind():
    heads = [{**h, "stack": "decoder", "kind": kind} for h in HEADS[:2] for kind in ("causal", "cross")]
    metrics = head_metrics(heads)
    points = make_corpus_scatter_figure(metrics, "entropy", "prev_token_weight").data[0]
    assert points.text[1].startswith("<b>decoder cross L0 H0</b>")
    kept = filter_heads(metrics, stack="decoder", kind="cross")
    assert list(kept["kind"]) == ["cross", "cross"] and list(kept["head"]) == [0, 1]
