"""The notebook view's payload (attnviz.notebook.payload) and its HTML (attnviz.notebook.html), on weights built by hand:
every map decodes back to the weights it came from, within half a level (1/65534 / 2), masked cells marked, the
statistics those of the record, user text never read as markup."""

import base64
import json
import math
import zlib

import numpy as np
import pytest
import torch

from attnviz.models.given import given_record, layer_weights
from attnviz.notebook import html
from attnviz.notebook.payload import MASKED, TOP, Kind, _pooled, encode_maps, map_factors, view_payload

HALF_LEVEL = 0.5 / TOP  # a weight is stored as round(w * 65534): it reads back within half a level


def decode(maps: dict) -> np.ndarray:
    raw = zlib.decompress(base64.b64decode(maps["data"]))
    shape = (maps["n_layer"], maps["n_head"], maps["q"], maps["k"])
    return np.frombuffer(raw, dtype="<u2").reshape(shape)


def causal_weights(n_layer=3, n_head=2, T=5, seed=0) -> tuple[torch.Tensor, ...]:  # noqa: N803 (T: the tokens)
    generator = torch.Generator().manual_seed(seed)
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = torch.randn(n_layer, 1, n_head, T, T, generator=generator).masked_fill(above, -math.inf)
    return tuple(torch.softmax(scores[i], dim=-1) for i in range(n_layer))


def record_of(weights, tokens=None):
    T = weights[0].shape[-1]
    tokens = tokens or [f"t{i}" for i in range(T)]
    return given_record(layer_weights(weights, "attention", T, T), tokens)


def test_levels_read_back_within_half_a_level_and_masked_cells_are_marked():
    maps = torch.tensor([[0.0, 1.0, math.nan], [0.25, 1 / 3, 0.999999]])
    levels = decode({"data": encode_maps(maps), "n_layer": 1, "n_head": 1, "q": 2, "k": 3})[0, 0]
    assert levels[0, 2] == MASKED
    assert levels[0, 0] == 0 and levels[0, 1] == TOP
    read = levels.astype(np.float64) / TOP
    for (r, c), w in {(1, 0): 0.25, (1, 1): 1 / 3, (1, 2): 0.999999}.items():
        assert abs(read[r, c] - w) <= HALF_LEVEL


def test_pooling_takes_the_largest_weight_and_keeps_masked_only_where_all_are():
    maps = torch.tensor(
        [
            [0.1, 0.2, math.nan, math.nan, 0.5],
            [0.3, 0.0, math.nan, 0.4, 0.0],
            [math.nan, math.nan, math.nan, math.nan, 0.9],
        ]
    )
    pooled = _pooled(maps, 2, 2)
    # cells: rows {0,1} x cols {0,1} -> 0.3; {0,1} x {2,3} -> 0.4; {0,1} x {4} -> 0.5; {2} x {0,1} -> masked ...
    expected = torch.tensor([[0.3, 0.4, 0.5], [math.nan, math.nan, 0.9]])
    assert torch.equal(pooled.isnan(), expected.isnan())
    assert torch.equal(pooled.nan_to_num(-7), expected.nan_to_num(-7))


@pytest.mark.parametrize(
    ("n_heads", "q", "k", "budget", "factor"),
    [(4, 10, 10, 400, 1), (4, 10, 10, 399, 2), (1, 100, 100, 2500, 2), (1, 101, 100, 2500, 3), (2, 7, 3, 1, 7)],
)
def test_map_factor_is_the_smallest_that_fits_the_budget(n_heads, q, k, budget, factor):
    assert map_factors(n_heads, q, k, budget) == (factor, factor)
    per_head = max(1, budget // n_heads)
    assert math.ceil(q / factor) * math.ceil(k / factor) <= per_head or factor == max(q, k)
    if factor > 1:
        assert math.ceil(q / (factor - 1)) * math.ceil(k / (factor - 1)) > per_head


def test_a_short_text_is_drawn_exactly_with_its_mask():
    weights = causal_weights()
    record = record_of(weights)
    payload = view_payload([Kind("self", record)], title="given")
    (kind,) = payload["kinds"]
    maps = kind["maps"]
    assert (maps["q"], maps["k"], maps["bin_q"], maps["bin_k"]) == (5, 5, 1, 1)
    assert kind["lines"] is True and kind["causal"] is True
    levels = decode(maps)
    above = np.triu(np.ones((5, 5), dtype=bool), 1)
    assert (levels[:, :, above] == MASKED).all()
    read = levels.astype(np.float64) / TOP
    given = torch.stack([w[0] for w in weights]).numpy()
    assert np.abs(read[:, :, ~above] - given[:, :, ~above]).max() <= HALF_LEVEL
    json.dumps(payload, allow_nan=False)  # what the page reads: no NaN, every value JSON


def test_statistics_and_flags_are_the_records():
    record = record_of(causal_weights())
    stats = view_payload([Kind("self", record)], title="given")["kinds"][0]["stats"]
    frame = record.statistics
    for row in frame.itertuples(index=False):
        values = stats["values"][f"{row.layer},{row.head}"]
        for name, value in zip(stats["names"], values, strict=True):
            expected = float(getattr(row, name))
            assert value == expected or (value is None and not math.isfinite(expected))


def test_include_layers_draws_those_rows_and_their_maps():
    weights = causal_weights(n_layer=4)
    record = record_of(weights)
    kind = view_payload([Kind("self", record, layers=(1, 3), selected=(3, 1))], title="given")["kinds"][0]
    assert kind["layers"] == [1, 3] and kind["grid"]["rows"] == ["L1", "L3"]
    assert kind["grid"]["heads"][1][0] == [3, 0] and kind["selected"] == [3, 1]
    levels = decode(kind["maps"]).astype(np.float64) / TOP
    assert abs(levels[1, 1, 4, 2] - float(weights[3][0, 1, 4, 2])) <= HALF_LEVEL


def test_a_long_text_is_pooled_within_the_cell_budget(monkeypatch):
    import attnviz.notebook.payload as payload

    monkeypatch.setattr(payload, "MAX_CELLS", 2 * 3 * 8 * 8)  # 3 layers x 2 heads of 8 x 8 cells
    record = record_of(causal_weights(T=20))
    maps = view_payload([Kind("self", record)], title="given")["kinds"][0]["maps"]
    assert maps["q"] * maps["k"] <= 64 and maps["bin_q"] == maps["bin_k"] > 1
    # each pooled cell holds the largest weight under it (within half a level)
    levels = decode(maps).astype(np.float64) / TOP
    b = maps["bin_q"]
    pooled_max = record.pooled_grid("max")
    exact = torch.stack([record.weights(layer, None) for layer in range(3)])
    cell = exact[2, 1, 0:b, 0:b].max().item()
    assert abs(levels[2, 1, 0, 0] - cell) <= HALF_LEVEL
    assert pooled_max.shape[-1] >= maps["q"]


@pytest.mark.parametrize(("options", "says"), [({"view": "grid"}, "view must be"), ({"theme": "blue"}, "display_mode")])
def test_bad_view_options_say_what_is_allowed(options, says):
    record = record_of(causal_weights())
    with pytest.raises(ValueError, match=says):
        view_payload([Kind("self", record)], title="given", **options)


def test_user_text_cannot_close_the_script_that_holds_it():
    tokens = ["</script><img src=x onerror=alert(1)>", "&amp;", "<b>", "a", "b"]
    payload = view_payload([Kind("self", record_of(causal_weights(), tokens))], title="<i>model</i>")
    text = html.view_html(payload, with_script=False)
    assert "</script><img" not in text and "<b>" not in text and "<i>model" not in text
    start = text.index('type="application/json"')
    body = text[text.index(">", start) + 1 : text.index("</script>", start)]
    assert json.loads(body)["kinds"][0]["queries"][0] == "0 </script><img src=x onerror=alert(1)>"


def test_the_script_goes_into_the_first_view_a_kernel_shows_and_every_returned_one(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    html.forget_script()
    payload = view_payload([Kind("self", record_of(causal_weights()))], title="given")
    script = "<style>"  # the viewer's style and script go together
    assert html.shown(payload, "view") is None and html.shown(payload, "view") is None
    assert script in shown[0].data and script not in shown[1].data
    returned = html.shown(payload, "return")
    assert script in returned.data and returned._repr_html_() == returned.data
    html.forget_script()
    html.shown(payload, "view")
    assert script in shown[2].data
    with pytest.raises(ValueError, match="html_action must be"):
        html.shown(payload, "show")


def test_on_colab_every_view_carries_the_script(monkeypatch):
    """Colab draws each output in an iframe of its own: a later view cannot use an earlier one's script."""
    import sys
    import types

    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    html.forget_script()
    payload = view_payload([Kind("self", record_of(causal_weights()))], title="given")
    html.shown(payload, "view")
    html.shown(payload, "view")
    assert all("<style>" in view.data for view in shown)
