"""Per-head statistics on cases small enough to compute by hand."""

import math

import pytest
import torch

from attnviz.core.head_stats import entropy, head_flags, head_statistics, normalized_entropy
from attnviz.core.masks import (
    causal_mask,
)


def test_entropy_uniform_and_one_hot():
    assert entropy(torch.full((4,), 0.25)).item() == pytest.approx(math.log(4))
    assert entropy(torch.tensor([1.0, 0.0, 0.0])).item() == 0.0
    assert entropy(torch.tensor([0.5, 0.5, 0.0])).item() == pytest.approx(math.log(2))
    norm = normalized_entropy(torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]), torch.tensor([2, 1]))
    assert norm[0].item() == pytest.approx(1.0)
    assert math.isnan(norm[1].item())  # one visible key: normalised entropy is undefined


def test_previous_token_head_by_hand():
    # 3 tokens, causal; every row puts all weight on the previous token (row 0, which sees
    # only itself, has no choice to make and is left out)
    w = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    stats = head_statistics(w[None], causal_mask(3)).iloc[0]
    assert stats["entropy"] == pytest.approx(0.0)
    assert stats["entropy_norm"] == pytest.approx(0.0)
    assert stats["max_weight"] == pytest.approx(1.0)
    assert stats["first_token_weight"] == pytest.approx(1 / 2)  # rows 1 and 2: 1 and 0
    assert stats["prev_token_weight"] == pytest.approx(1.0)
    assert stats["self_weight"] == pytest.approx(0.0)
    assert stats["mean_distance"] == pytest.approx(1.0)
    assert stats["flags"] == "saturated, sink, previous-token"


def test_one_visible_key_is_not_a_choice():
    # a one-token causal input: every statistic is undefined, and no head is flagged
    stats = head_statistics(torch.ones(1, 2, 1, 1), causal_mask(1))
    assert stats[["entropy", "max_weight", "first_token_weight"]].isna().all().all()
    assert (stats["flags"] == "").all()


def test_uniform_causal_head_by_hand():
    w = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [0.25, 0.25, 0.25, 0.25]])
    stats = head_statistics(w[None], causal_mask(4)).iloc[0]
    # row 0 sees one key and is left out; rows 1..3 are uniform over 2, 3 and 4 keys
    assert stats["entropy"] == pytest.approx((math.log(2) + math.log(3) + math.log(4)) / 3)
    assert stats["entropy_norm"] == pytest.approx(1.0)
    assert stats["max_weight"] == pytest.approx((0.5 + 1 / 3 + 0.25) / 3)
    assert stats["prev_token_weight"] == pytest.approx((0.5 + 1 / 3 + 0.25) / 3)
    # mean distance: row1 0.5, row2 (2+1+0)/3 = 1, row3 (3+2+1+0)/4 = 1.5
    assert stats["mean_distance"] == pytest.approx((0.5 + 1 + 1.5) / 3)
    assert "uniform" in stats["flags"] and "saturated" not in stats["flags"]


def test_fully_masked_rows_are_left_out_and_layers_indexed():
    w = torch.zeros(2, 3, 2, 2)  # (n_layer, n_head, q, k)
    w[..., 1, :] = torch.tensor([0.0, 1.0])  # row 0 is dead (all zero), row 1 attends to itself
    mask = torch.tensor([[False, False], [True, True]])
    stats = head_statistics(w, mask)
    assert list(stats["layer"]) == [0, 0, 0, 1, 1, 1] and list(stats["head"]) == [0, 1, 2, 0, 1, 2]
    assert stats["self_weight"].tolist() == pytest.approx([1.0] * 6)
    assert stats["first_token_weight"].tolist() == pytest.approx([0.0] * 6)


def test_shape_error_and_flags():
    with pytest.raises(ValueError, match="n_layer, n_head"):
        head_statistics(torch.zeros(3, 3))
    assert head_flags({"entropy_norm": float("nan"), "max_weight": 0.95}) == ["saturated"]


def test_head_statistics_rejects_an_integer_mask_and_no_keys():
    weights = torch.full((1, 2, 3, 3), 1 / 3)
    with pytest.raises(TypeError, match=r"torch\.uint8"):
        head_statistics(weights, causal_mask(3).to(torch.uint8))
    with pytest.raises(ValueError, match="k_len = 0"):
        head_statistics(torch.ones(1, 2, 3, 0))


def test_head_statistics_skips_a_finfo_min_row():
    weights = torch.tensor([[[0.5, 0.5], [0.0, 0.0]]])  # (n_head=1, q_len=2, k_len=2); row 1 saw nothing
    mask = torch.tensor([[0.0, 0.0], [torch.finfo(torch.float32).min] * 2])
    stats = head_statistics(weights, mask).iloc[0]
    assert stats["entropy_norm"] == pytest.approx(1.0)  # only row 0 counted
