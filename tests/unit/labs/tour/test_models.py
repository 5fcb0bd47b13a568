"""The tour's model-design steps: merged heads against a hand computation and against the record's own weights,
what a merge keeps, and the small choices the steps make (KV head counts, the framed key block)."""

import math

import pytest
import torch

from attnviz.labs.cost.paths import tiling_example
from attnviz.labs.tour.models import (
    head_merges,
    kv_choices,
    max_score_block,
    merge_choices,
    merge_heads,
    merged_scores,
    most_varied_layer,
    most_varied_row,
)
from attnviz.models.registry import embedded_spec, open_source
from tests.tolerances import bound


@pytest.fixture(scope="module")
def record():
    """The embedded default (4 heads of 16 dims, 2 layers, causal, random seeded weights) on a short text."""
    source = open_source(embedded_spec("cpu", d_model=64, n_head=4, n_layer=2, seed=0, causal=True))
    return source.run("the cat sat on the mat because it was tired", 64)


def test_merged_scores_by_hand():
    # two query heads of 2 dims reading one K head (GQA), two rows, two keys
    q = torch.tensor([[[1.0, 0.0], [0.0, 2.0]], [[3.0, 1.0], [1.0, 1.0]]])  # (n_head=2, T=2, hd=2)
    k = torch.tensor([[[1.0, 2.0], [2.0, -1.0]]])  # (n_kv_head=1, S=2, hd=2)
    # head 0: q·k = [[1, 2], [4, -2]]; head 1: [[5, 5], [3, 1]]; one head of 4 dims: their sum over √4
    merged = merged_scores(q, k, 1)
    assert merged.shape == (1, 2, 2)
    assert torch.equal(merged[0], torch.tensor([[6.0, 7.0], [7.0, -1.0]], dtype=merged.dtype) / 2)
    # unmerged: each head's own q·k over √2, the model's usual scale
    own = merged_scores(q, k, 2)
    assert torch.allclose(
        own, torch.tensor([[[1.0, 2.0], [4.0, -2.0]], [[5.0, 5.0], [3.0, 1.0]]]).double() / math.sqrt(2)
    )
    # the concatenated subspaces, computed the long way round
    q_cat, k_cat = torch.cat([q[0], q[1]], dim=-1), torch.cat([k[0], k[0]], dim=-1)  # (T, 4), (S, 4)
    assert torch.allclose(merged[0], (q_cat @ k_cat.T).double() / 2)
    with pytest.raises(ValueError, match="divide"):
        merged_scores(q, k, 3)


def test_unmerged_heads_are_the_records_weights(record):
    merge = merge_heads(record, 1, record.n_head)
    assert torch.allclose(merge.weights, record.weights(1, None), atol=bound("attention"))
    assert merge.kept == 1.0
    assert merge.width == 16


def test_one_wide_head_keeps_one_choice(record):
    merges = head_merges(record, 0)
    assert list(merges) == merge_choices(4) == [1, 2, 4]
    one = merges[1]
    assert one.width == 64 and one.weights.shape == (1, record.q_len, record.k_len)
    rows = one.rows.nonzero().flatten().tolist()
    assert rows and 0 not in rows  # the first query sees one key: nothing to compare
    assert all(one.distinct(r) == 1 for r in rows)
    assert one.mean_distinct() == 1.0
    assert merges[4].mean_distinct(merged=False) >= 1.0
    for merge in merges.values():
        assert 0.0 <= merge.kept <= 1.0
        # weights of every visible row sum to 1, masked cells are 0
        assert torch.allclose(merge.weights.sum(-1)[:, rows], torch.ones(merge.n_merged, len(rows)), atol=1e-6)
        assert float(merge.weights[:, 0, 1:].abs().max()) == 0.0
    # kept counts the pairs where a head's merged head agrees with it: by hand for the one-head merge
    own_top, one_top = merges[4].head_top[:, rows], one.top[0, rows]
    assert one.kept == pytest.approx(float((own_top == one_top).float().mean()))


def test_defaults_are_rules(record):
    layer = most_varied_layer(record)
    means = [merge_heads(record, i, record.n_head).mean_distinct(merged=False) for i in range(record.n_layer)]
    assert means[layer] == max(means) and layer == means.index(max(means))
    merge = merge_heads(record, layer, record.n_head)
    row = most_varied_row(merge)
    assert merge.distinct(row, merged=False) == max(
        merge.distinct(r, merged=False) for r in merge.rows.nonzero().flatten().tolist()
    )


def test_kv_choices_and_framed_block():
    assert kv_choices(9) == [1, 3, 9]
    example = tiling_example(24, 8, 0)
    framed = max_score_block(example.steps)
    best = max(float(s.scores.max()) for s in example.steps)
    assert float(example.steps[framed].scores.max()) == best
    assert example.steps[framed].m == pytest.approx(example.steps[-1].m)  # the running max settles there
