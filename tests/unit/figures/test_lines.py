"""Every head as lines: which weights are drawn, where each line goes, what a hover says and where a click leads."""

import json

import numpy as np
import pytest
import torch

from attnviz.figures.heads import selected_tile
from attnviz.figures.lines import (
    COLUMN_INSET,
    MAX_POINTS,
    MAX_SEGMENTS,
    MIN_WEIGHT,
    PANEL_GAP,
    fits,
    line_threshold,
    make_lines_figure,
    most_tokens,
)

STEP = 1.0 + PANEL_GAP


def causal(n_layer: int, n_head: int, n: int, seed: int = 0) -> np.ndarray:
    """Random causal softmax weights (n_layer, n_head, n, n), 0 above the diagonal."""
    scores = torch.randn(n_layer, n_head, n, n, generator=torch.Generator().manual_seed(seed)) * 3
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1).numpy()


def segments(fig) -> list[tuple[float, float, float, float]]:
    """Every drawn line as (x0, y0, x1, y1), from the line traces (NaN between segments)."""
    out = []
    for trace in fig.data:
        if trace.mode != "lines":
            continue
        xs, ys = np.asarray(trace.x, dtype=float).reshape(-1, 3), np.asarray(trace.y, dtype=float).reshape(-1, 3)
        assert np.isnan(xs[:, 2]).all() and np.isnan(ys[:, 2]).all()
        out += [(x[0], y[0], x[1], y[1]) for x, y in zip(xs, ys, strict=True)]
    return out


def test_a_hand_made_head_draws_a_line_from_each_query_to_each_key_it_weighs():
    weights = np.zeros((1, 1, 3, 3), dtype=np.float32)
    weights[0, 0] = [[1.0, 0, 0], [0.995, 0.005, 0], [0.2, 0.3, 0.5]]  # 0.005 is under MIN_WEIGHT: not drawn
    lines = line_threshold(weights)
    assert lines.threshold == MIN_WEIGHT and lines.n_drawn == lines.n_visible == 5
    fig = make_lines_figure(lines, ["0 a", "1 b", "2 c"], ["0 a", "1 b", "2 c"])
    left, right = COLUMN_INSET
    rows = {0: 0.0, 1: 0.5, 2: 1.0}  # three tokens: top, middle, bottom of the panel
    expected = {(left, -rows[q], right, -rows[k]) for q, k in [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2)]}
    assert {tuple(round(v, 6) for v in s) for s in segments(fig)} == {tuple(round(v, 6) for v in e) for e in expected}
    points = next(trace for trace in fig.data if trace.hovertemplate)
    hover = points.text[2]  # the third query: its keys, heaviest first, exact
    assert hover.index("2 c: 0.50000") < hover.index("1 b: 0.30000") < hover.index("0 a: 0.20000")
    assert "1 b: 0.00500" in points.text[1]  # the hover lists a weight too light to draw


def test_panels_are_laid_out_layers_down_and_heads_across():
    lines = line_threshold(causal(2, 3, 4))
    fig = make_lines_figure(lines, list("abcd"), list("abcd"))
    points = next(trace for trace in fig.data if trace.hovertemplate)
    for (layer, head), x, y in zip(points.customdata, points.x, points.y, strict=True):
        assert abs(x - (head * STEP + COLUMN_INSET[0])) < 1e-5
        assert -(layer * STEP + 1.0) - 1e-5 <= y <= -(layer * STEP) + 1e-5
    assert list(fig.layout.yaxis.ticktext) == ["L0", "L1"] and list(fig.layout.xaxis.ticktext) == ["H0", "H1", "H2"]


def test_a_click_on_a_query_opens_its_head():
    fig = make_lines_figure(line_threshold(causal(3, 2, 5)), list("abcde"), list("abcde"))
    points = next(trace for trace in fig.data if trace.hovertemplate)
    i = 2 * 2 * 5 + 1 * 5 + 3  # layer 2, head 1, query 3
    layer, head = points.customdata[i]
    assert selected_tile({"selection": {"points": [{"customdata": [layer, head]}]}}) == (2, 1)


def test_past_the_budget_only_the_heaviest_lines_are_drawn():
    weights = causal(30, 9, 32)  # SmolLM2's heads at 32 tokens: about 80,000 weights of at least 0.01
    lines = line_threshold(weights)
    visible = weights[weights >= MIN_WEIGHT]
    assert lines.n_visible == visible.size > MAX_SEGMENTS
    assert lines.n_drawn == int((weights >= lines.threshold).sum()) and abs(lines.n_drawn - MAX_SEGMENTS) <= 2
    assert (np.sort(visible)[::-1][MAX_SEGMENTS - 1]) == pytest.approx(lines.threshold)
    fig = make_lines_figure(lines, [f"{i} t" for i in range(32)], [f"{i} t" for i in range(32)])
    assert len(segments(fig)) == lines.n_drawn
    assert len(fig.to_json()) < 1.5 * 2**20  # one update of the page stays under 1.5 MB


def test_token_text_is_data_in_the_hover():
    weights = np.ones((1, 1, 1, 1), dtype=np.float32)
    fig = make_lines_figure(line_threshold(weights), ["0 <b>%{x}</b>"], ["0 <b>%{x}</b>"])
    hover = next(trace for trace in fig.data if trace.hovertemplate).text[0]
    assert "<b>" not in hover and "%{x}" not in hover and "1.00000" in hover
    assert len(segments(fig)) == 1  # one token: its one line, weight 1


def test_how_long_a_text_is_drawn_depends_on_the_heads():
    assert most_tokens(30, 9) == 32 and fits(32, 30, 9) and not fits(33, 30, 9) and not fits(0, 30, 9)
    assert most_tokens(80, 64) == MAX_POINTS // 5120 == 1
    assert most_tokens(100, 128) == 0 and not fits(1, 100, 128)


def test_the_figure_serialises_without_python_objects():
    fig = make_lines_figure(line_threshold(causal(1, 2, 3)), list("abc"), list("abc"))
    json.loads(fig.to_json())
