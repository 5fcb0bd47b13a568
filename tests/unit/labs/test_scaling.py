"""The scaling lab on hand-computed cases and against every weight computed at once."""

import math

import pytest
import torch

from attnviz.labs import scaling
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.tolerances import bound, derived_bound

TEXT = "the cat sat on the mat because it was tired and the dog barked at the cat all night long"


@pytest.fixture(scope="module")
def embedded():
    model = EmbeddedModel(EmbeddedConfig(d_model=64, n_head=4, n_kv_head=2, n_layer=2, causal=True))
    record = model.run(TEXT, 64)
    return model, record, scaling.scaling_rows(record, model.d_model, model.head_dim)


def test_softmax_rows_by_hand():
    scores = torch.tensor([[math.log(3.0), 0.0, -math.inf], [-math.inf, -math.inf, -math.inf]])
    entropy, max_weight, weights = scaling.softmax_rows(scores)
    expected = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    by_hand = derived_bound("float32", math.log(4), 2 * 2)  # two float32 terms w·log w, |log w| ≤ ln 4, and their sum
    assert entropy[0].item() == pytest.approx(expected, abs=by_hand) and max_weight[0].item() == pytest.approx(0.75)
    assert weights[0].tolist() == pytest.approx([0.75, 0.25, 0.0])
    assert (entropy[1].item(), max_weight[1].item()) == (0.0, 0.0) and weights[1].abs().sum().item() == 0.0


def test_the_three_scales():
    assert scaling.scale_factors(64, 576) == {"sqrt_dk": 0.125, "none": 1.0, "sqrt_dmodel": pytest.approx(1 / 24)}


@pytest.mark.slow
def test_random_variance_follows_d_k_and_the_scale_holds_it_at_one():
    table = scaling.random_variance(dims=(4, 64, 1024), samples=20_000)
    # sampling, not rounding: X = q·k / √d of standard normals has Var(X²) = 2 + 6/d ≤ 3.5, so a variance of 20,000
    # samples has a standard error ≤ √(3.5 / 20000) = 0.013, and 0.05 is about 4 of them (the generator is seeded)
    for row in table.to_dict("records"):
        assert row["var_unscaled"] / row["d_k"] == pytest.approx(1.0, abs=0.05)
        assert row["var_scaled"] == pytest.approx(1.0, abs=0.05)


def test_correct_scale_reproduces_the_capture_and_the_others_are_recomputed(embedded):
    _, record, rows = embedded
    table = rows.table()
    entropy_routes = bound(
        "row_statistics"
    )  # the table's recomputed softmax against the capture's (tests/tolerances.py)
    assert table["entropy_sqrt_dk"].to_numpy() == pytest.approx(
        record.statistics["entropy"].to_numpy(), abs=entropy_routes
    )
    # "none" by hand from the kept q and k: softmax(q·k) over the causal keys, averaged over rows that see ≥ 2 keys
    layer, head = 1, 3
    q, k = record.layers[layer].q[head], record.layers[layer].k[head // 2]
    scores = (q @ k.T).masked_fill(~torch.ones(len(q), len(q), dtype=torch.bool).tril(), -math.inf)
    p = scores.softmax(-1)
    entropy = -torch.special.xlogy(p, p).sum(-1)[1:].mean().item()
    saturated = (p.amax(-1)[1:] >= 0.9).float().mean().item()
    row = table.query(f"layer == {layer} and head == {head}").iloc[0]
    # two routes to an unscaled score (head_dim products, as large as the largest |q·k|); an entropy moves by
    # Σ w|log w + H| ≤ 2 ln T times a score's error
    largest = float(scores[scores.isfinite()].abs().max())
    unscaled = derived_bound("float32", largest, q.shape[-1]) * 2 * math.log(len(q))
    assert row["entropy_none"] == pytest.approx(entropy, abs=unscaled)
    # a mean of 0/1 flags, float32 here against the table's: one rounding of a share ≤ 1
    assert row["saturated_share_none"] == pytest.approx(saturated, abs=derived_bound("float32", 1.0, 1))
    # one head under any scale, the same numbers the table gives (its own score matmul: another route)
    stats = scaling.head_row_stats(record, layer, head, 1.0, 0.9)
    assert stats["entropy"] == pytest.approx(row["entropy_none"], abs=unscaled)


def test_without_the_scale_rows_saturate_and_with_d_model_they_flatten(embedded):
    _, _, rows = embedded
    table = rows.table()
    mean = {kind: table[f"entropy_norm_{kind}"].mean() for kind in scaling.SCALE_KINDS}
    assert mean["none"] < mean["sqrt_dk"] < mean["sqrt_dmodel"]
    share = {kind: table[f"saturated_share_{kind}"].mean() for kind in scaling.SCALE_KINDS}
    assert share["none"] > share["sqrt_dk"] >= share["sqrt_dmodel"]
    # a lower threshold counts more rows as saturated
    assert rows.table(0.5)["saturated_share_sqrt_dk"].mean() > share["sqrt_dk"]


def test_layer_variance_is_the_variance_of_every_visible_score(embedded):
    _, record, rows = embedded
    layers = rows.layer_variance()
    capture = record.layers[0]
    keep = torch.ones(record.q_len, record.q_len, dtype=torch.bool).tril()
    per_head = [((capture.q[h] @ capture.k[h // 2].T)[keep]).double().var(unbiased=False) for h in range(4)]
    # scores from two routes, each off by eps relative to its head_dim products; a variance is of their squares
    assert layers.loc[0, "var_qk"] == pytest.approx(
        float(torch.stack(per_head).mean()), rel=2 * derived_bound("float32", 1.0, capture.q.shape[-1])
    )
    assert layers.loc[0, "ratio_to_dk"] == pytest.approx(layers.loc[0, "var_qk"] / 16)
    assert layers.loc[0, "var_sqrt_dk"] == pytest.approx(layers.loc[0, "var_qk"] / 16)


def test_jacobian_norm_is_the_softmax_jacobians(embedded):
    _, record, _ = embedded
    curve = scaling.gradient_curve(record, 0, 1, multiples=[1.0, 64.0])
    # by autograd, on the same rows
    capture = record.layers[0]
    q, k = capture.q[1], capture.k[0]
    live = record.live_rows()[0].nonzero()[:, 0]
    norms = []
    for r in live:
        s = (q[r] @ k[: r + 1].T) * 0.25
        jacobian = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), s)
        norms.append(jacobian.norm())
    # a closed form against autograd's Jacobian, from scores of two routes: a weight moves by ≤ 2 × a score's error
    # (here relative to the scaled scores), and the Frobenius norm sums T² squares
    largest = float((q @ k.T).abs().max()) * 0.25
    rel = 2 * derived_bound("float32", largest, q.shape[-1]) + derived_bound("float32", 1.0, len(q) ** 2)
    assert curve.jacobian_norm[0] == pytest.approx(float(torch.stack(norms).mean()), rel=rel)
    # a 64x scale saturates rows: less gradient passes and more rows pass none
    assert curve.jacobian_norm[1] < curve.jacobian_norm[0] and curve.vanishing_share[1] > curve.vanishing_share[0]


def test_the_json_contract(embedded):
    _, _, rows = embedded
    out = scaling.scaling_json(rows)
    assert set(out) == {"head_dim", "d_model", "scales", "heads"}
    assert out["scales"] == {"sqrt_dk": 0.25, "none": 1.0, "sqrt_dmodel": 0.125}
    assert len(out["heads"]) == 2 * 4
    first = out["heads"][0]
    assert set(first) == {"layer", "head", "entropy", "entropy_norm", "saturated_share"}
    assert all(set(first[stat]) == {"sqrt_dk", "none", "sqrt_dmodel"} for stat in ("entropy", "entropy_norm"))


def test_the_lab_reads_fewer_tokens_when_a_model_has_more_heads():
    # SmolLM2's 30 x 9 heads read all 2,048 tokens the lab allows; never more than the user asked for
    assert scaling.tokens_within_budget(30, 9, 8192) == 2048
    assert scaling.tokens_within_budget(30, 9, 300) == 300
    # the embedded model's largest setting: 12 x 64 heads, so 12 * 64 * T * T stays within the same scores
    within = scaling.tokens_within_budget(12, 64, 8192)
    assert within == 1214
    assert 12 * 64 * within**2 <= 30 * 9 * 2048**2 < 12 * 64 * (within + 1) ** 2
