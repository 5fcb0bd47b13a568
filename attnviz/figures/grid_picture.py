"""The layer x head grid as a picture a page's own canvas draws (:mod:`attnviz.app.grid_canvas`), not a Plotly chart.

A Plotly chart costs a new visitor the 4.7 MB plotly.js bundle before anything is drawn (1.4 MB on the wire,
then about a second of the browser's work), and Streamlit lays it out twice. The grid is a mosaic of
colour levels, which a ``<canvas>`` draws in a few milliseconds: :func:`grid_picture` sends it as one palette
PNG (the mosaic's levels as indices into a 256-colour palette: 20-60 kB for a 200,000-cell mosaic), the palette
being exactly the colours Plotly's heatmap gives those levels (:func:`grid_palette`), with each tile's head, hover
text and dimming, so the canvas and the Plotly figure (:func:`attnviz.figures.heads.head_grid_figure`, the
export) draw the same grid.
"""

from __future__ import annotations

import base64
import functools
import struct
import zlib

import numpy as np
from plotly.colors import sample_colorscale, unlabel_rgb

from attnviz.figures.heads import DIM_COLOR, MASKED_LEVEL, HeadGrid, grid_colorscale

PNG_LEVEL = 6  # zlib level: 9 takes twice as long for a percent or two less


@functools.cache
def grid_palette() -> np.ndarray:
    """(256, 3) uint8, read-only (computed once): level L's colour in :func:`grid_colorscale` at zmin 0, zmax :data:`MASKED_LEVEL` (Plotly's
    heatmap maps L to L / 255 and interpolates the scale's stops linearly in RGB), rounded to whole values."""
    colors = sample_colorscale(grid_colorscale(), [level / MASKED_LEVEL for level in range(MASKED_LEVEL + 1)])
    palette = np.array([[round(c) for c in unlabel_rgb(color)] for color in colors], dtype=np.uint8)
    palette.flags.writeable = False
    return palette


def palette_png(levels: np.ndarray, palette: np.ndarray) -> bytes:
    """A palette PNG (colour type 3, 8 bits): ``levels`` (h, w) uint8 indexing ``palette`` (256, 3) uint8."""
    levels = np.ascontiguousarray(levels, dtype=np.uint8)
    if levels.ndim != 2 or 0 in levels.shape:
        raise ValueError(f"levels must be a non-empty (height, width) array, got {levels.shape}")
    height, width = levels.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), levels], axis=1)  # filter type 0 before each row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            chunk(b"IHDR", header),
            chunk(b"PLTE", np.ascontiguousarray(palette, dtype=np.uint8).tobytes()),
            chunk(b"IDAT", zlib.compress(rows.tobytes(), PNG_LEVEL)),
            chunk(b"IEND", b""),
        ]
    )


def grid_picture(grid: HeadGrid, label: str, hint: str) -> dict:
    """What the grid's canvas draws (JSON): the mosaic as a base64 palette PNG, the tiles' sizes in cells and in
    pixels, their heads (``[layer, head]``, what a click sends back), hover lines and dimming, the column names,
    and ``label`` (the chart's accessible name) and ``hint`` (the last hover line: what a click does)."""
    png = palette_png(grid.levels, grid_palette())
    return {
        "png": base64.b64encode(png).decode("ascii"),
        "th": grid.th,
        "tw": grid.tw,
        "n_layer": grid.n_layer,
        "n_col": grid.n_col,
        # a tile's side where the width allows (the canvas shrinks it to fit a narrower column): the Plotly figure's
        # cell, within its height's cap
        "tile_px": grid.tile_px,
        "heads": [[[layer, head] for head in row] for layer, row in enumerate(grid.heads)],
        "hover": grid.hover,
        "dimmed": grid.dimmed.tolist(),
        "dim_color": DIM_COLOR,
        "cols": grid.col_names,
        "rows": [f"L{layer}" for layer in range(grid.n_layer)],
        "label": label,
        "hint": hint,
    }
