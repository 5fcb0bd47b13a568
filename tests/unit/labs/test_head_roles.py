"""Head roles, similarity and the sink against length, on hand-made patterns whose answers are known."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from attnviz.core.attention import MultiHeadAttention, scaled_dot_product_attention
from attnviz.core.tokenizer import Token
from attnviz.errors import ParityUnsupportedError
from attnviz.figures.head_roles import (
    make_head_roles_figure,
)
from attnviz.labs import head_roles as hr
from attnviz.labs.head_roles.rules import OUTPUT_AUTO_MACS
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import LayerInput
from tests.tolerances import bound, derived_bound
from tests.unit.labs.role_patterns import (
    KINDS,
    T,
    known_roles_record,
    pattern,
    record_of,
)


def test_the_record_reproduces_the_hand_made_weights():
    record = known_roles_record()
    for h, kind in enumerate(KINDS):
        assert torch.allclose(record.weights(0, h), pattern(kind), atol=bound("record_weights"), rtol=0), kind


def test_each_known_head_gets_its_role():
    record = known_roles_record()
    roles = hr.head_roles(record)
    assert list(roles.columns[:5]) == ["layer", "head", "role", "score", "entropy_without_sink"]
    assert roles["role"].tolist() == KINDS * 2
    sink = roles.iloc[0]
    stat = bound("record_statistics")  # the hand-made records' softmax rounding (tests/tolerances.py)
    assert sink["score"] == pytest.approx(1.0, abs=stat)
    assert roles.iloc[3]["score"] == pytest.approx(1.0, abs=stat)  # uniform: entropy_norm 1


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
    # two float32 routes to an entropy (≤ ln 4) of 4 keys, the shortcut's divided by the rest, 1 − w0 ≥ 0.3
    tol = derived_bound("float32", math.log(4) / 0.3, 2 * 4)
    assert torch.allclose(got[:2], direct[:2], atol=tol, rtol=0)
    assert math.isnan(got[2])  # nothing left once the sink is removed


def test_entropy_without_sink_column():
    record = known_roles_record()
    roles = hr.head_roles(record)
    assert roles.iloc[0]["entropy_without_sink"] != roles.iloc[0]["entropy_without_sink"]  # a pure sink: NaN
    # a uniform causal row over i + 1 keys leaves log(i) once the first is gone: mean over rows 2.. (row 1 leaves 0)
    expected = np.mean([math.log(i) for i in range(1, T)])
    # the record's entropy (record_statistics) divided by the rest, 1 − w0 ≥ 1/2 on rows 1..
    assert roles.iloc[3]["entropy_without_sink"] == pytest.approx(expected, abs=2 * bound("record_statistics"))


def test_js_distance_is_zero_for_identical_heads_symmetric_and_bounded():
    torch.manual_seed(0)
    rows = torch.softmax(torch.randn(5, 7, 9), dim=-1)  # (N, R, K)
    rows[3] = rows[1]
    d = hr.js_distance_matrix(rows)
    assert d.shape == (5, 5)
    assert torch.allclose(d, d.T)
    # identical heads: the mixture's entropy and the heads' own (≤ ln 9 nats over 9 keys) come from float32 sums of
    # other shapes, so their JSD (bits) is 0 up to that rounding, and the distance is its square root
    same = math.sqrt(derived_bound("float32", math.log(9), 9) / math.log(2))
    assert float(d[1, 3]) == pytest.approx(0.0, abs=same)
    assert torch.equal(torch.diagonal(d), torch.zeros(5))  # the diagonal is never computed: exactly 0
    assert float(d.max()) <= 1.0 and float(d[0, 1]) > 0.05
    disjoint = torch.zeros(2, 1, 4)
    disjoint[0, 0, 0], disjoint[1, 0, 1] = 1.0, 1.0
    # one-hot rows: own entropies exactly 0, the mixture's ln 2 from 2 float32 terms, divided by ln 2
    assert float(hr.js_distance_matrix(disjoint)[0, 1]) == pytest.approx(1.0, abs=derived_bound("float32", 1.0, 2))


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


def hand_layer(zero_head: int | None = None) -> LayerInput:
    """d_model 2, two heads of one feature each; W_Q = W_K = 0 (uniform causal rows), W_V = I, W_O = diag(3, 4).

    x = [[1, 2], [3, 4]], so v = x and the causal row averages are out_0 = [1, 2] (head 0 reads feature 0) and
    out_1 = [2, 3] (feature 1). Head 0's output norms are 3·[1, 2] (mean 4.5), head 1's 4·[2, 3] (mean 10).
    """
    mha = MultiHeadAttention(2, 2, bias=False)
    with torch.no_grad():
        mha.w_q.weight.zero_()
        mha.w_k.weight.zero_()
        mha.w_v.weight.copy_(torch.eye(2))
        mha.w_o.weight.copy_(torch.diag(torch.tensor([3.0, 4.0])))
        if zero_head is not None:
            mha.w_o.weight[:, zero_head] = 0.0  # head_dim 1: the head's slice of W_O is one column
    tokens = [Token("a", 0, 1), Token("b", 1, 2)]
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # (1, T, d_model)
    mask = torch.tril(torch.ones(2, 2, dtype=torch.bool))
    return LayerInput(0, mha, hidden, mask, None, 1.0, tokens, 2)


def test_head_output_norms_by_hand():
    assert hr.layer_output_norms(hand_layer()).tolist() == pytest.approx([4.5, 10.0])
    assert hr.layer_output_norms(hand_layer(zero_head=1)).tolist() == pytest.approx([4.5, 0.0])


def test_the_heads_outputs_sum_to_the_layers_output():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, n_kv_head=2)  # GQA: two query heads per value head
    x = torch.randn(1, 7, 16)
    mask = torch.tril(torch.ones(7, 7, dtype=torch.bool))
    expected, _ = mha(x, x, x, mask=mask, scale=0.3)  # (1, T, d_model)
    q, k, v = mha.project_qkv(x, x, x)
    out, _ = scaled_dot_product_attention(q, k, v, mask, 0.3)  # (1, n_head, T, head_dim)
    parts = hr.per_head_output(out, mha.w_o.weight)  # (1, n_head, T, d_model)
    assert parts.shape == (1, 4, 7, 16)
    # two routes to the output: one matmul over d_model 16 against 4 heads' matmuls over head_dim 4, summed
    tol = derived_bound("float32", float(expected.detach().abs().max()), 16 + 4)
    torch.testing.assert_close(parts.sum(dim=1) + mha.w_o.bias, expected, atol=tol, rtol=0)


def test_a_zeroed_w_o_slice_makes_that_head_dead_and_no_other():
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=True))
    head_dim = model.head_dim
    with torch.no_grad():
        model.blocks[1].attn.w_o.weight[:, 2 * head_dim : 3 * head_dim] = 0.0  # layer 1, head 2
    text = "The cat sat on the mat because it was tired."
    outputs = hr.head_output_norms(model, text, 64)
    assert outputs.norm.shape == (2, 4) and outputs.n_tokens == len(model.encode(text, 64).tokens)
    expected = np.zeros((2, 4), dtype=bool)
    expected[1, 2] = True
    assert (outputs.dead == expected).all()
    assert outputs.norm[1, 2] == 0.0 and (np.delete(outputs.share.ravel(), 6) > 0.5).all()

    roles = hr.head_roles(model.run(text, 64), outputs)
    dead = roles[(roles["layer"] == 1) & (roles["head"] == 2)].iloc[0]
    assert dead["role"] == "dead" and dead["score"] == 0.0 and dead["attention_role"] in hr.ROLES
    assert (roles.drop(index=dead.name)["role"] != "dead").all()
    assert (roles["role"] == roles["attention_role"]).sum() == 7


def test_without_outputs_no_head_is_dead():
    record = known_roles_record()
    roles = hr.head_roles(record)
    assert roles["output_norm"].isna().all() and (roles["role"] != "dead").all()


def test_dead_share_is_relative_to_the_layers_median_head():
    # layer 0: median (0.9 + 1.0) / 2 = 0.95, so the line is 0.095; layer 1 has no output at all: nothing to compare
    outputs = hr.HeadOutputs(np.array([[1.0, 1.2, 0.05, 0.9], [0.0, 0.0, 0.0, 0.0]]), 8, 8)
    assert outputs.share[0].tolist() == pytest.approx([1.0 / 0.95, 1.2 / 0.95, 0.05 / 0.95, 0.9 / 0.95])
    assert outputs.dead.tolist() == [[False, False, True, False], [False] * 4]
    assert hr.assign_role({"entropy_norm": 1.0, "first_token_weight": 1.0, "output_share": 0.05}) == ("dead", 0.05)
    assert hr.assign_role({"entropy_norm": 1.0, "first_token_weight": 1.0, "output_share": 0.2})[0] == "sink"


class NoLayers:
    """A source that cannot rerun its layers with our module (as a model family attnviz does not reproduce)."""

    n_layer = 2

    def attention_layers(self, text, max_tokens, layers=None):
        raise ParityUnsupportedError("not a layer attnviz reproduces")


def test_a_source_without_layers_has_no_dead_role():
    with pytest.raises(ParityUnsupportedError):
        hr.head_output_norms(NoLayers(), "some text", 64)


def test_parse_prompts_ignores_empty_lines_and_keeps_at_most_eight():
    assert hr.parse_prompts("  one \n\n\t\ntwo\n") == (["one", "two"], 0)
    assert hr.parse_prompts("") == ([], 0)
    many = "\n".join(f"prompt {i}" for i in range(11))
    prompts, ignored = hr.parse_prompts(many)
    assert prompts == [f"prompt {i}" for i in range(8)] and ignored == 3
    assert hr.parse_prompts("a\nb\nc", max_prompts=2) == (["a", "b"], 1)
    huge = "x" * (hr.STABILITY_PROMPT_CHARS + 10) + "\nlast"
    assert hr.parse_prompts(huge) == (["x" * hr.STABILITY_PROMPT_CHARS], 0)  # read no further than the bound


def test_role_stability_on_own_prompts_with_the_dead_role():
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=True))
    with torch.no_grad():
        model.blocks[0].attn.w_o.weight[:, : model.head_dim] = 0.0  # layer 0, head 0: dead on every prompt
    prompts, _ = hr.parse_prompts("The cat sat on the mat.\n\nA dog ran far away today.\nx\n")
    stability = hr.role_stability(model, prompts, 64, with_outputs=True)
    assert (stability["n_prompts"] == 2).all()  # "x" has one token
    first = stability.iloc[0]
    assert (first["layer"], first["head"], first["role"], first["share"]) == (0, 0, "dead", 1.0)
    assert (stability.iloc[1:]["role"] != "dead").all()


def test_role_stability_cuts_each_prompt():
    seen = []

    class Counting(EmbeddedModel):
        def run(self, text, max_tokens, *, keep_qk=True):
            seen.append(max_tokens)
            return super().run(text, max_tokens, keep_qk=keep_qk)

    model = Counting(EmbeddedConfig(n_head=2, n_layer=1))
    hr.role_stability(model, ["The cat sat on the mat."], 8192)
    assert seen == [hr.STABILITY_TOKENS]


def test_sink_cost_bounds():
    smollm2_like = type("S", (), {"n_layer": 30, "n_head": 9, "max_positions": 8192})()
    assert hr.sink_lengths(smollm2_like, (512, 64, 99999)) == (64, 512, 8192)
    assert hr.sink_cells(smollm2_like, (64,)) == 30 * 9 * 64 * 64
    assert hr.sink_seconds(smollm2_like, (8192,)) == pytest.approx(hr.SINK_8192_SECONDS + hr.SINK_SECONDS_PER_LENGTH)
    assert (
        hr.sink_seconds(smollm2_like, hr.SINK_LENGTHS)
        < hr.SINK_CONFIRM_SECONDS
        < hr.sink_seconds(smollm2_like, (8192,))
    )
    hr.check_sink_cost(smollm2_like, hr.SINK_CHOICES)  # every length the page offers, on SmolLM2: allowed
    wide = type("W", (), {"n_layer": 12, "n_head": 64, "max_positions": 8192})()  # the embedded model's largest
    hr.check_sink_cost(wide, (512, 2048))
    with pytest.raises(ValueError, match="attention cells"):
        hr.check_sink_cost(wide, (8192,))
    with pytest.raises(ValueError, match="attention cells"):
        hr.sink_vs_length(wide, "text", (8192,))  # refused before anything runs


def test_the_roles_map_shows_dead_heads():
    roles = pd.DataFrame(
        {"layer": [0, 0], "head": [0, 1], "role": ["dead", "sink"], "score": [0.0, 1.0], "entropy_without_sink": [1, 1]}
    )
    fig = make_head_roles_figure(roles)
    assert [t.name for t in fig.data[1:]] == ["sink (1)", "dead (1)"]
    assert np.asarray(fig.data[0].z).tolist() == [[hr.ROLES.index("dead"), hr.ROLES.index("sink")]]


def test_finding_dead_heads_is_automatic_only_where_it_is_cheap():
    embedded = EmbeddedModel(EmbeddedConfig())  # the sidebar's default: 2 layers of 64
    largest_embedded = type("E", (), {"n_layer": 12, "d_model": 1024})()
    smollm2_like = type("S", (), {"n_layer": 30, "d_model": 576})()
    llama_7b_like = type("L", (), {"n_layer": 32, "d_model": 4096})()  # a local folder: the user is asked first
    assert hr.output_cost_macs(embedded, 8192) == 2 * 2 * hr.OUTPUT_TOKENS * 12 * 64 * 64  # tokens capped at 128
    assert hr.output_cost_macs(largest_embedded, 8192) <= OUTPUT_AUTO_MACS
    assert hr.output_cost_macs(smollm2_like, 8192) <= OUTPUT_AUTO_MACS < hr.output_cost_macs(llama_7b_like, 8192)
    assert hr.output_seconds(smollm2_like, 128) == pytest.approx(0.45)
    assert hr.output_seconds(smollm2_like, 16) == pytest.approx(0.45 / 8)
