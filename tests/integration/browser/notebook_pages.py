"""Pages for the notebook viewer's browser tests (test_browser_notebook_view.py): a view's payload built by hand from
small weights, as docs/notebook.md's contract says (the grid as attnviz.figures draws it for the Heads page, every
head's map as 16-bit levels, zlib and base64), and an HTML file holding views and the viewer's script and style, to
open as file:// with the network blocked."""

from __future__ import annotations

import base64
import json
import math
import zlib

import numpy as np
import torch

from attnviz.figures.grid_picture import grid_palette, grid_picture
from attnviz.figures.heads import head_grid, quantize_grid
from attnviz.notebook.assets import viewer_css, viewer_script

MASKED = 65535  # a cell with no visible key
TOP = 65534  # the level of a weight of 1


def causal_weights(seed: int, n_layer: int, n_head: int, n: int) -> np.ndarray:
    """(n_layer, n_head, n, n) softmax rows over the visible keys, NaN above the diagonal (a decoder's mask)."""
    scores = np.random.default_rng(seed).normal(0.0, 2.0, (n_layer, n_head, n, n))
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    scores[..., future] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    weights[..., future] = np.nan
    return weights


def levels16(weights: np.ndarray) -> np.ndarray:
    """Weights (NaN where masked) -> the payload's uint16 levels."""
    levels = np.round(np.nan_to_num(np.clip(weights, 0.0, 1.0)) * TOP).astype(np.uint16)
    levels[np.isnan(weights)] = MASKED
    return levels


def colour_of(level16: int, gamma: float = 1.0) -> list[int]:
    """The RGBA a map's cell of that 16-bit level is drawn in: the grid's colour of its weight, grey where masked;
    at gamma 0.5 the colour of level min(254, round(255 * √weight)) (in float64, as the script computes it)."""
    if level16 == MASKED:
        return [*grid_palette()[255].tolist(), 255]
    if gamma != 1.0:
        return [*grid_palette()[min(254, math.floor(255 * (level16 / TOP) ** gamma + 0.5))].tolist(), 255]
    weight = torch.tensor([[level16 / TOP]], dtype=torch.float64)
    return [*grid_palette()[int(quantize_grid(weight)[0, 0])].tolist(), 255]


def hand_kind(
    weights: np.ndarray,
    queries: list[str],
    keys: list[str] | None = None,
    *,
    kind_id: str = "self",
    title: str = "",
    bin_size: int = 1,
    sentence_b: int | None = None,
    selected: tuple[int, int] = (0, 0),
    lines: bool | None = None,
    tile_px: int | None = None,
    gamma: float = 1.0,
) -> dict:
    """One kind of the payload from ``weights`` (n_layer, n_head, q, k) at the view's cells (``bin_size`` tokens a
    cell), layers 0..n_layer-1; its grid drawn at both colour scales, ``gamma``'s first."""
    n_layer, n_head, q, k = weights.shape
    keys = queries if keys is None else keys
    pictures = {}
    for scale in (1.0, 0.5):
        grid = head_grid(torch.from_numpy(weights).float(), gamma=scale)
        pictures[str(scale)] = grid_picture(grid, "the grid", "click: this head large")
        if tile_px is not None:
            pictures[str(scale)]["tile_px"] = tile_px
    names = ["max_weight", "row_mean"]
    values = {
        f"{layer},{head}": [float(np.nanmax(weights[layer, head])), None if head == 1 else float(head)]
        for layer in range(n_layer)
        for head in range(n_head)
    }
    flags = {
        f"{layer},{head}": "sink" if (layer, head) == (0, 1) else ""
        for layer in range(n_layer)
        for head in range(n_head)
    }
    data = zlib.compress(levels16(weights).astype("<u2").tobytes(), 6)
    return {
        "id": kind_id,
        "title": title or kind_id,
        "queries": queries,
        "keys": keys,
        "causal": True,
        "grid": pictures[str(gamma)],
        "grids": pictures,
        "layers": list(range(n_layer)),
        "stats": {"names": names, "labels": ["max weight", "row mean"], "values": values, "flags": flags},
        "maps": {
            "n_layer": n_layer,
            "n_head": n_head,
            "q": q,
            "k": k,
            "bin_q": bin_size,
            "bin_k": bin_size,
            "data": base64.b64encode(data).decode("ascii"),
        },
        "lines": bin_size == 1 if lines is None else lines,
        "selected": list(selected),
        "sentence_b": sentence_b,
    }


def hand_payload(
    kinds: list[dict],
    *,
    view: str = "head",
    theme: str = "light",
    title: str = "a hand-built view",
    gamma: float | None = None,
) -> dict:
    """A view of ``kinds``; ``gamma`` (the first colour scale) left out as a payload before it had one."""
    extra = {} if gamma is None else {"gamma": gamma}
    return {
        "v": 1,
        "view": view,
        "title": title,
        "note": "built by hand for a test",
        "theme": theme,
        "words": {"layer": "Layer", "head": "Head", "a_to_b": "A→B", "lines": "Lines", "map": "Map"},
        "kind": 0,
        "kinds": kinds,
        **extra,
    }


def _in_script(payload: dict) -> str:
    text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def view_markup(element: str, payload: dict) -> str:
    """One output as html.py writes it: the element with its fallback text, its payload, its place in the queue."""
    return (
        f'<div class="attnviz-nb" id="{element}" data-drawn="0">the viewer\'s script is missing</div>\n'
        f'<script type="application/json" id="{element}-data">{_in_script(payload)}</script>\n'
        f'<script>(window.__attnvizQueue = window.__attnvizQueue || []).push("{element}"); '
        "window.attnvizNotebook && window.attnvizNotebook.drain();</script>\n"
    )


def assets_markup() -> str:
    return f"<style>{viewer_css()}</style>\n<script>{viewer_script()}</script>\n"


def page_html(*parts: str) -> str:
    """A page of ``parts`` (views and copies of the assets, in the order given), as a saved notebook holds them."""
    body = "".join(parts)
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body style="margin: 8px">\n{body}</body></html>\n'
    )
