"""Value-weighted attention through the embedded model's record: norms against its own w_v and w_o, the map, the
Token view's rows and columns, the exports and the figures."""

from __future__ import annotations

import math

import pytest
import torch

from attnviz.core.value_norms import LOW_NORM_STAT
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.tolerances import derived_bound

TEXT = "the cat sat on the mat because it was warm and the dog slept"


@pytest.fixture(scope="module")
def model_and_values():
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=2, causal=True))
    seen: list = []
    hooks = [b.attn.w_v.register_forward_hook(lambda m, a, out: seen.append(out.detach())) for b in model.blocks]
    try:
        record = model.run(TEXT, 64)
    finally:
        for h in hooks:
            h.remove()
    return model, record, seen


def test_norms_equal_w_v_and_w_o(model_and_values):
    model, record, seen = model_and_values
    n_head, n_kv, hd = model.n_head, model.n_kv_head, model.head_dim
    assert model.has_value_norms and record.has_value_norms
    for layer, (block, v_out) in enumerate(zip(model.blocks, seen, strict=True)):
        v = v_out[0].view(-1, n_kv, hd).transpose(0, 1).repeat_interleave(n_head // n_kv, dim=0)  # (n_head, T, hd)
        w_o = block.attn.w_o.weight.detach()  # (d_model, n_head * hd)
        direct = torch.stack(
            [torch.linalg.vector_norm(v[h] @ w_o[:, h * hd : (h + 1) * hd].T, dim=-1) for h in range(n_head)]
        )
        # the QR factor's route against v @ W_O: hd products a component, d_model squares a norm
        tol = derived_bound("float32", float(direct.abs().max()), hd + model.d_model)
        torch.testing.assert_close(record.value_norms(layer), direct, atol=tol, rtol=0)
        torch.testing.assert_close(record.value_weighted(layer, 2), record.weights(layer, 2) * direct[2][None, :])
        mean = (record.weights(layer, None) * direct[:, None, :]).mean(dim=0)
        torch.testing.assert_close(record.value_weighted(layer, "mean"), mean)


def test_the_statistic_is_a_share(model_and_values):
    _, record, _ = model_and_values
    assert LOW_NORM_STAT in record.stat_columns
    share = record.statistics[LOW_NORM_STAT]
    assert share.notna().all() and share.between(0.0, 1.0).all()


def test_token_view_rows_and_columns_are_scaled_by_their_keys(model_and_values):
    from attnviz.labs import token_view

    _, record, _ = model_and_values
    token, layer = 5, 1
    norms = record.value_norms(layer)  # (n_head, k_len)
    row = token_view.token_weights(record, layer, token, token_view.ATTENDS_TO, values=True)
    raw_row = token_view.token_weights(record, layer, token, token_view.ATTENDS_TO)
    torch.testing.assert_close(row.nan_to_num(-1), (raw_row * norms).nan_to_num(-1))
    column = token_view.token_weights(record, layer, token, token_view.ATTENDED_BY, values=True)
    raw_column = token_view.token_weights(record, layer, token, token_view.ATTENDED_BY)
    torch.testing.assert_close(column.nan_to_num(-1), (raw_column * norms[:, token : token + 1]).nan_to_num(-1))
    assert math.isnan(float(row[0, token + 1]))  # a causal row's future stays masked
    layers = token_view.across_layers(record, token, token_view.ATTENDS_TO, values=True)
    torch.testing.assert_close(layers[layer].nan_to_num(-1), row.nan_to_num(-1))


def test_exports_carry_the_map_and_the_norms(model_and_values):
    from attnviz.app import exports

    _, record, _ = model_and_values
    tensors = exports.head_export(record, 1, 3, (2, 6), (0, 4)).build()
    torch.testing.assert_close(tensors["value_weighted"], record.value_weighted(1, 3, (2, 6), (0, 4)))
    torch.testing.assert_close(tensors["value_norms"], record.value_norms(1, 3, (0, 4)))
    stats = exports.statistics_tensors(record)
    assert stats["value_norms"].shape == (record.n_layer, record.n_head, record.k_len)
    assert stats[f"rows.{LOW_NORM_STAT}"].shape == (record.n_layer, record.n_head, record.q_len)
    assert f"heads.{LOW_NORM_STAT}" in stats


def test_the_figure_is_the_weights_figure_in_other_units(model_and_values):
    from attnviz.figures.heads import make_value_weighted_heatmap_figure, make_value_weighted_row_figure

    _, record, _ = model_and_values
    mapped = record.value_weighted(0, 1)
    labels = record.labels()
    fig = make_value_weighted_heatmap_figure(mapped, labels, labels, mask=record.mask(0))
    trace = fig.data[0]
    top = float(mapped.masked_fill(~record.mask(0), 0).max())
    assert trace.zmax == pytest.approx(top) and trace.zmin == 0
    assert trace.colorbar.title.text == "‖α·vW_O‖" and "‖α·v W_O‖" in trace.hovertemplate
    z = torch.tensor(trace.z, dtype=torch.float32)
    torch.testing.assert_close(z.nan_to_num(-1), mapped.masked_fill(~record.mask(0), math.nan).nan_to_num(-1))
    row = make_value_weighted_row_figure(mapped[3], labels)
    assert row.layout.yaxis.title.text == "‖α·vW_O‖"


def test_a_record_without_norms_says_so(model_and_values):
    from dataclasses import replace

    _, record, _ = model_and_values
    bare = replace(record, layers=[replace(layer, value_norms=None) for layer in record.layers])
    assert not bare.has_value_norms and LOW_NORM_STAT not in bare.stat_columns
    with pytest.raises(ValueError):
        bare.value_weighted(0, 0)


def test_one_token_and_no_tokens():
    model = EmbeddedModel(EmbeddedConfig(d_model=16, n_head=2, n_layer=1))
    one = model.run("cat", 8)
    assert one.has_value_norms and one.value_weighted(0, 0).shape == (1, 1)
    empty = model.run("", 8)
    assert empty.q_len == 0 and empty.value_norms(0).shape == (2, 0)
