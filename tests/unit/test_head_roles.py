"""Head roles, similarity and the sink against length, on hand-made patterns whose answers are known."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from attnviz import head_roles as hr
from attnviz.capture import capture_attention
from attnviz.embedded import EmbeddedConfig, EmbeddedModel
from attnviz.head_roles_figures import (
    make_head_roles_figure,
    make_head_similarity_figure,
    make_role_stability_figure,
    make_sink_vs_length_figure,
)
from attnviz.masks import KeyRanges
from attnviz.record import AttentionRecord
from attnviz.tokenizer import Token

T = 24  # long enough that a uniform head's rows spread beyond the local window


def pattern(kind: str, n: int = T) -> torch.Tensor:
    """Causal target weights (n, n) of one head whose role is known."""
    weights = torch.zeros(n, n)
    for i in range(n):
        if kind == "sink":
            weights[i, 0] = 1.0
        elif kind == "previous-token":
            weights[i, max(0, i - 1)] = 1.0
        elif kind == "self":
            weights[i, i] = 1.0
        elif kind == "uniform":
            weights[i, : i + 1] = 1.0 / (i + 1)
    return weights


def record_of(heads: list[list[torch.Tensor]]) -> AttentionRecord:
    """A causal record whose layer l, head h has weights heads[l][h] (n, n), up to softmax rounding.

    With k the identity and scale 1, q's rows are the scores, so q = log(weights) gives them back.
    """
    n = heads[0][0].shape[0]
    keys = KeyRanges.causal(n)
    layers = []
    for layer in heads:
        q = torch.stack(layer).clamp_min(1e-12).log().clamp_min(-60.0)  # (n_head, n, n): head_dim = n
        k = torch.eye(n).expand(len(layer), n, n)  # (n_head, n, n)
        _, capture = capture_attention(q, k, k.clone(), keys, scale=1.0, bin_size=1)
        layers.append(capture)
    tokens = [Token(f"t{i}", i, i + 1) for i in range(n)]
    return AttentionRecord(
        "hand-made", tokens, layers, n_kv_head=len(heads[0]), causal=True, implementation="test", n_input_tokens=n
    )


KINDS = ["sink", "previous-token", "self", "uniform"]


@pytest.fixture(scope="module")
def record():
    return record_of([[pattern(kind) for kind in KINDS], [pattern(kind) for kind in KINDS]])


def test_the_record_reproduces_the_hand_made_weights(record):
    for h, kind in enumerate(KINDS):
        assert torch.allclose(record.weights(0, h), pattern(kind), atol=1e-6), kind


def test_each_known_head_gets_its_role(record):
    roles = hr.head_roles(record)
    assert list(roles.columns[:5]) == ["layer", "head", "role", "score", "entropy_without_sink"]
    assert roles["role"].tolist() == KINDS * 2
    sink = roles.iloc[0]
    assert sink["score"] == pytest.approx(1.0, abs=1e-5)
    assert roles.iloc[3]["score"] == pytest.approx(1.0, abs=1e-5)  # uniform: entropy_norm 1


def test_a_local_head_and_a_content_head():
    n, local, content = T, torch.zeros(T, T), torch.zeros(T, T)
    for i in range(n):
        near = list(range(max(0, i - 2), i + 1))
        local[i, near] = 1.0 / len(near)
        far = [j for j in range(i + 1) if j % 5 == 2] or [i]  # attends to a kind of token, wherever it is
        content[i, far] = 1.0 / len(far)
    roles = hr.head_roles(record_of([[local, content]]))
    assert roles["role"].tolist() == ["local", "content"]


def test_entropy_without_the_sink_matches_a_direct_computation():
    w = torch.tensor([[0.7, 0.1, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    h = -torch.special.xlogy(w, w).sum(-1)
    got = hr.entropy_without_first(h, w[:, 0])
    rest = w[:, 1:] / w[:, 1:].sum(-1, keepdim=True)
    direct = -torch.special.xlogy(rest, rest).sum(-1)
    assert torch.allclose(got[:2], direct[:2], atol=1e-6)
    assert math.isnan(got[2])  # nothing left once the sink is removed


def test_entropy_without_sink_column(record):
    roles = hr.head_roles(record)
    assert roles.iloc[0]["entropy_without_sink"] != roles.iloc[0]["entropy_without_sink"]  # a pure sink: NaN
    # a uniform causal row over i + 1 keys leaves log(i) once the first is gone: mean over rows 2.. (row 1 leaves 0)
    expected = np.mean([math.log(i) for i in range(1, T)])
    assert roles.iloc[3]["entropy_without_sink"] == pytest.approx(expected, abs=1e-4)


def test_js_distance_is_zero_for_identical_heads_symmetric_and_bounded():
    torch.manual_seed(0)
    rows = torch.softmax(torch.randn(5, 7, 9), dim=-1)  # (N, R, K)
    rows[3] = rows[1]
    d = hr.js_distance_matrix(rows)
    assert d.shape == (5, 5)
    assert torch.allclose(d, d.T)
    assert float(d[1, 3]) == pytest.approx(0.0, abs=1e-3)
    assert torch.diagonal(d).abs().max() < 1e-3
    assert float(d.max()) <= 1.0 and float(d[0, 1]) > 0.05
    disjoint = torch.zeros(2, 1, 4)
    disjoint[0, 0, 0], disjoint[1, 0, 1] = 1.0, 1.0
    assert float(hr.js_distance_matrix(disjoint)[0, 1]) == pytest.approx(1.0, abs=1e-6)


def test_clustering_groups_duplicated_heads():
    heads = [pattern(kind) for kind in KINDS] + [pattern("sink"), pattern("self")]  # heads 4, 5 copy 0, 2
    similarity = hr.head_similarity(record_of([heads]))
    assert similarity.distance.shape == (6, 6)
    groups = similarity.groups(0.05)
    assert sorted(sorted(g) for g in groups) == [[0, 4], [2, 5]]
    for group in groups:  # each group is a contiguous run of the dendrogram order
        at = sorted(similarity.order.index(i) for i in group)
        assert at == list(range(at[0], at[0] + len(at)))
    assert sorted(similarity.order) == list(range(6))


def test_average_linkage_on_points_on_a_line():
    x = np.array([0.0, 0.1, 5.0, 5.2, 20.0])
    merges = hr.average_linkage(np.abs(x[:, None] - x[None, :]))
    assert merges[:, 2].tolist() == pytest.approx([0.1, 0.2, 5.05, 17.425])
    assert merges[:2, :2].tolist() == [[0, 1], [2, 3]]
    assert merges[-1, 3] == 5
    assert hr.redundant_groups(merges, 5, 1.0) == [[0, 1], [2, 3]]


def test_role_stability_counts_the_most_common_role():
    model = EmbeddedModel(EmbeddedConfig(n_head=2, n_layer=2, causal=True))
    texts = ["The cat sat on the mat.", "A dog ran.", "x"]  # "x" has one token and is skipped
    stability = hr.role_stability(model, texts, 64)
    assert list(stability.columns) == ["layer", "head", "role", "share", "n_prompts"]
    assert len(stability) == 4 and (stability["n_prompts"] == 2).all()
    assert stability["share"].between(0.5, 1.0).all()
    assert set(stability["role"]) <= set(hr.ROLES)


def test_sink_vs_length_on_the_embedded_model():
    model = EmbeddedModel(EmbeddedConfig(n_head=2, n_layer=2))
    sinks = hr.sink_vs_length(model, "The cat sat on the mat.", (16, 64))
    assert list(sinks.columns) == ["length", "layer", "head", "first_token_weight"]
    assert len(sinks) == 2 * 2 * 2
    assert sorted(set(sinks["length"])) == [16, 64]
    assert sinks["first_token_weight"].between(0, 1).all()


def test_figures(record):
    roles = hr.head_roles(record)
    fig = make_head_roles_figure(roles)
    assert fig.data[0].type == "heatmap" and np.asarray(fig.data[0].z).shape == (2, 4)
    similarity = hr.head_similarity(record)
    fig = make_head_similarity_figure(similarity, threshold=0.05)
    assert np.asarray(fig.data[0].z).shape == (8, 8)
    assert len(fig.layout.shapes) == 4  # each of the four kinds appears twice
    stability = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "role": ["sink", "self"], "share": [1.0, 0.5]})
    assert np.asarray(make_role_stability_figure(stability).data[0].z).shape == (1, 2)
    sinks = pd.DataFrame(
        {
            "length": [8, 8, 16, 16],
            "layer": [0, 0, 0, 0],
            "head": [0, 1, 0, 1],
            "first_token_weight": [0.5, 0.1, 0.6, 0.1],
        }
    )
    fig = make_sink_vs_length_figure(sinks, top=1)
    assert [t.name for t in fig.data] == ["L0 mean", "L0 H0"]
