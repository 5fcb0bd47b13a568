"""The Rollout page's map: its values, greyed cells, escaped labels and words, in both languages."""

import numpy as np
import pytest
import torch

from attnviz.core.tokenizer import Token
from attnviz.figures.base import weight_colorscale
from attnviz.figures.rollout import colour_note, colour_scale, make_rollout_figure
from attnviz.i18n.translate import set_language
from tests.plotly_json import decode, spec_of

TOKENS = [Token("<b>x</b>", 0, 1), Token("%{z}", 1, 2), Token("c" * 40, 2, 3)]
VALUES = torch.tensor([[1.0, 0.0, 0.0], [0.35, 0.65, 0.0], [0.2, 0.3, 0.5]])
CAUSAL = torch.ones(3, 3, dtype=torch.bool).tril()


@pytest.mark.parametrize("kind", ["rollout", "flow", "layer_mean"])
def test_the_map_draws_the_values_and_greys_what_no_path_reaches(kind):
    spec = spec_of(make_rollout_figure(VALUES, TOKENS, kind=kind, layer=4, mask=CAUSAL))
    main = spec["data"][0]
    assert main["type"] == "heatmap"
    z = decode(main["z"])
    assert z.shape == (3, 3) and z[1, 0] == pytest.approx(0.35) and np.isnan(z[0, 2])
    # the scale tops at the largest value outside the first column (0.65): the first column saturates, no other
    assert main["zmin"] == 0 and main["zmax"] == pytest.approx(0.65)
    assert "L4" in spec["layout"]["title"]["text"]
    assert ("output" in spec["layout"]["yaxis"]["title"]["text"]) == (kind != "layer_mean")
    assert spec["layout"]["xaxis"]["title"]["text"] == "input token"
    assert "%{z:.4g}" in main["hovertemplate"] and "{what}" not in main["hovertemplate"]
    # user text is escaped in labels; the 40-character token is cut and gets its own hover rows
    assert "&lt;b&gt;" in main["y"][0] and "<b>" not in main["y"][0]
    assert len(spec["data"]) > 1


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="kind"):
        make_rollout_figure(VALUES, TOKENS, kind="sideways", layer=0)
    with pytest.raises(ValueError, match="3 tokens"):
        make_rollout_figure(torch.zeros(2, 2), TOKENS, kind="rollout", layer=0)


def test_the_words_follow_the_language():
    set_language("zh")
    try:
        spec = spec_of(make_rollout_figure(VALUES, TOKENS, kind="flow", layer=1))
    finally:
        set_language("en")
    assert spec["layout"]["xaxis"]["title"]["text"] == "输入词元"
    assert "流" in spec["data"][0]["hovertemplate"]


def rollout_like(n: int = 40, first: float = 0.999, seed: int = 0) -> torch.Tensor:
    """A causal map whose rows sum to 1 with ``first`` of each row in token 0's column and the rest spread over
    orders of magnitude, as rollout through SmolLM2's 30 layers."""
    g = torch.Generator().manual_seed(seed)
    rest = (10.0 ** (-6 * torch.rand(n, n, generator=g))).tril()
    rest[:, 0] = 0
    rest = (1 - first) * rest / rest.sum(-1, keepdim=True).clamp_min(1e-30)
    rest[:, 0] = first
    rest[0] = torch.zeros(n)
    rest[0, 0] = 1.0
    return rest


def test_the_first_column_cannot_hide_the_rest():
    values = rollout_like()
    mask = torch.ones(40, 40, dtype=torch.bool).tril()
    scale = colour_scale(values, mask)
    outside = values[:, 1:][mask[:, 1:]]
    assert scale.top == pytest.approx(float(outside.max())) and scale.top < 0.01
    assert scale.first_share > 0.99 and scale.saturated == 40  # the first column's cells, all of them
    assert scale.mode == "log" and scale.bottom == pytest.approx(scale.top * 1e-4)
    spec = spec_of(
        make_rollout_figure(
            values, [Token(f"t{i}", i, i + 1) for i in range(40)], kind="rollout", layer=29, mask=mask, colour=scale
        )
    )
    cells = [trace for trace in spec["data"] if trace["type"] == "heatmap"]
    assert cells[0]["zmax"] == pytest.approx(scale.top) and cells[0]["showscale"] is False
    # the values stay as they are (hover shows them); the colour key is a cell-less trace running in log10
    assert decode(cells[0]["z"])[5, 0] == pytest.approx(0.999)
    key = spec["data"][-1]  # no cells: a point-less trace that carries the bar
    assert key["type"] == "scatter" and key["x"] == [None]
    marker = key["marker"]
    assert marker["cmin"] == pytest.approx(np.log10(scale.bottom)) and marker["cmax"] == pytest.approx(
        np.log10(scale.top)
    )
    assert marker["colorbar"]["ticktext"][-1].startswith("1e-") and "(log)" in marker["colorbar"]["title"]["text"]
    # the log colours: a value 100 times the bottom sits half-way along the scale
    stops = cells[0]["colorscale"]
    assert stops[0][0] == 0 and stops[1][0] == pytest.approx(1e-4) and stops[-1][0] == pytest.approx(1.0)
    assert stops[1 + (len(stops) - 2) // 2][0] == pytest.approx(1e-2, rel=1e-6)
    note = str(colour_note(scale))
    assert "automatically: log" in note and "40 cells of the first column" in note and "99.9%" in note


def test_auto_colour_follows_the_spread_and_the_reader_can_override():
    even = torch.full((6, 6), 1 / 6)
    assert colour_scale(even).mode == "linear" and colour_scale(even).saturated == 0
    half = rollout_like(12, first=0.6)
    half = torch.where(half > 0, half.clamp_min(0.02), half)
    assert colour_scale(half).mode == "sqrt"  # concentrated, not spread over decades
    for choice in ("linear", "sqrt", "log"):
        scale = colour_scale(rollout_like(), choice=choice)
        assert scale.mode == choice == scale.chosen
    assert "Colour: linear" in str(colour_note(colour_scale(rollout_like(), choice="linear")))
    with pytest.raises(ValueError, match="colour"):
        colour_scale(even, choice="rainbow")


def test_sqrt_colour_is_the_heads_pages_scaled_to_the_top():
    values = rollout_like(20, first=0.7)
    scale = colour_scale(values, choice="sqrt")
    spec = spec_of(
        make_rollout_figure(values, [Token(f"t{i}", i, i + 1) for i in range(20)], kind="flow", layer=3, colour=scale)
    )
    main = spec["data"][0]
    assert main["colorscale"] == [list(stop) for stop in weight_colorscale(0.5)]
    ticks = main["colorbar"]["tickvals"]
    assert ticks[-1] == pytest.approx(scale.top) and ticks[1] == pytest.approx(0.01 * scale.top)
    assert "(√)" in main["colorbar"]["title"]["text"]


def test_a_one_token_map_is_drawn_on_the_plain_scale():
    scale = colour_scale(torch.ones(1, 1))
    assert scale.top == 1.0 and scale.saturated == 0 and scale.mode == "linear"
    spec = spec_of(make_rollout_figure(torch.ones(1, 1), TOKENS[:1], kind="rollout", layer=0))
    assert spec["data"][0]["zmax"] == 1.0
