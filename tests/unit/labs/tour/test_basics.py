"""The first steps' numbers and rules (attnviz.labs.tour.basics), on small hand-made inputs whose answer is known."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from attnviz.labs import scaling
from attnviz.labs.tour import basics


def test_clear_head_is_the_strongest_previous_token_head():
    stats = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "prev_token_weight": [0.1, 0.7, 0.9, 0.9]})
    assert basics.clear_head(stats) == (1, 0)  # ties: the first
    stats["prev_token_weight"] = math.nan  # a one-token text: no row has a previous token
    assert basics.clear_head(stats) == (0, 0)


def test_row_story_names_the_heaviest_visible_keys_and_the_sum():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.2, 0.5, 0.3]])  # (q_len, k_len), causal
    visible = torch.ones(3, 3, dtype=torch.bool).tril()
    story = basics.row_story(weights, 2, visible)
    assert [k for k, _ in story.top] == [1, 2, 0]
    assert story.top[0][1] == pytest.approx(0.5) and story.total == pytest.approx(1.0)
    short = basics.row_story(weights, 1, visible)  # two visible keys: never a masked one, whatever TOP_KEYS is
    assert [k for k, _ in short.top] == [0, 1]


def test_collapsed_counts_and_the_framed_head_follow_scalings_table():
    heads = pd.DataFrame(
        {
            "layer": [0, 0, 1],
            "head": [0, 1, 0],
            "saturated_share_none": [1.0, 0.5, 0.49],
            "saturated_share_sqrt_dk": [0.6, 0.0, 0.0],
            "saturated_share_sqrt_dmodel": [0.0, 0.0, math.nan],
        }
    )
    assert basics.collapsed_counts(heads) == {"sqrt_dk": 1, "none": 2, "sqrt_dmodel": 0, "n_heads": 3}
    assert basics.scale_head(heads) == (0, 1)  # the largest drop: 0.5 -> 0.0


def test_scale_multiples_hold_the_slider_and_no_scale():
    multiples = basics.scale_multiples(64)
    assert set(scaling.SLIDER_MULTIPLES) <= set(multiples) and 8.0 in multiples and 1.0 in multiples
    assert multiples == sorted(multiples)
    assert math.sqrt(48) in basics.scale_multiples(48)


def test_vanishing_share_reads_the_curve_at_the_multiple():
    curve = SimpleNamespace(multiples=[0.5, 1.0, 8.0], vanishing_share=[0.0, 0.1, 0.6])
    assert basics.vanishing_share(curve, 8.0) == 0.6
    assert basics.vanishing_share(curve, 2.0) is None


@pytest.mark.parametrize(
    "before,after,changed",
    [
        ((1, 11, 576), (1, 9, 11, 64), [1, 3]),  # split: n_head and head_dim appear
        ((1, 9, 11, 64), (1, 9, 11, 11), [3]),  # scores: head_dim -> k_len
        ((1, 9, 11, 11), (1, 9, 11, 11), []),  # scale: the values change, not the shape
        ((1, 9, 11, 64), (1, 11, 576), [2]),  # merge
        (None, (1, 11, 576), []),
    ],
)
def test_changed_axes(before, after, changed):
    assert basics.changed_axes(before, after) == changed


def test_step_shapes_chain_each_step_to_the_one_before():
    def step(key, shown, shape):
        return SimpleNamespace(key=key, shown=shown, shapes={shown: torch.Size(shape), "other": torch.Size([2])})

    walk = SimpleNamespace(
        tokens=[None] * 5,
        d_model=8,
        steps=[
            step("project", "q", (1, 5, 8)),
            step("split", "q", (1, 2, 5, 4)),
            step("scores", "scores", (1, 2, 5, 5)),
        ],
    )
    assert basics.step_shapes(walk) == [
        ("project", (1, 5, 8), []),
        ("split", (1, 2, 5, 4), [1, 3]),
        ("scores", (1, 2, 5, 5), [3]),
    ]
