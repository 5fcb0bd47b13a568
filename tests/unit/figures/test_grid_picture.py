"""The grid's picture (attnviz.figures.grid_picture): the PNG any decoder reads back exactly, Plotly's colours, and
every tile's head, hover and dimming the same as the Plotly figure's."""

import base64
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image

from attnviz.figures.grid_picture import grid_palette, grid_picture, palette_png
from attnviz.figures.heads import MASKED_LEVEL, grid_colorscale, head_grid, head_grid_figure
from tests.plotly_json import decode, spec_of


def read_png(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """An independent decoder's view (Pillow): the indices and the palette."""
    image = Image.open(io.BytesIO(data))
    assert image.mode == "P" and image.format == "PNG"
    return np.asarray(image), np.array(image.getpalette()[: 3 * 256], dtype=np.uint8).reshape(-1, 3)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 1), (13, 29), (300, 260)])
def test_the_png_reads_back_exactly(shape):
    levels = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    palette = np.random.default_rng(1).integers(0, 256, (256, 3), dtype=np.uint8)
    read, read_palette = read_png(palette_png(levels, palette))
    assert read.shape == shape and np.array_equal(read, levels)
    assert np.array_equal(read_palette, palette)


def test_an_empty_mosaic_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        palette_png(np.zeros((0, 3), np.uint8), grid_palette())


def test_the_palette_is_viridis_by_level_and_grey_where_masked():
    palette = grid_palette()
    assert palette.shape == (256, 3) and palette.dtype == np.uint8
    assert tuple(palette[0]) == (0x44, 0x01, 0x54)  # Viridis' first stop
    # level L is the heatmap's colour scale at L / 255, which Plotly interpolates linearly in RGB between its stops
    # (here by hand, from the stops the figure sends)
    scale = [(at, [float(v) for v in re.findall(r"[\d.]+", color)] if color.startswith("rgb") else color)
             for at, color in grid_colorscale()]  # fmt: skip
    stops = [(at, c) for at, c in scale if not isinstance(c, str)]
    for level in range(MASKED_LEVEL):
        x = level / MASKED_LEVEL
        hi = next(i for i, (at, _) in enumerate(stops) if at >= x - 1e-12)
        (a0, c0), (a1, c1) = stops[max(hi - 1, 0)], stops[hi]
        w = 0.0 if a1 == a0 else (x - a0) / (a1 - a0)
        expected = [u + (v - u) * w for u, v in zip(c0, c1, strict=True)]
        assert np.abs(palette[level].astype(float) - expected).max() <= 0.5 + 1e-6, level  # rounded to whole values
    # between stops Plotly interpolates linearly in RGB: each channel moves monotonically between neighbours
    green = palette[:MASKED_LEVEL, 1].astype(int)
    assert (np.diff(green) >= 0).all()  # Viridis' green rises from purple to yellow


def test_the_picture_is_the_figures_grid():
    torch.manual_seed(0)
    maps = torch.rand(3, 4, 9, 9)
    maps[:, :, 0, 1:] = float("nan")
    flags = np.full((3, 4), "", dtype=object)
    flags[1, 2] = "sink"
    shown = np.ones((3, 4), bool)
    shown[2, 0] = False
    grid = head_grid(maps, flags=flags, shown=shown)
    picture = grid_picture(grid, label="grid", hint="click")
    spec = spec_of(head_grid_figure(grid))
    levels, palette = read_png(base64.b64decode(picture["png"]))
    assert np.array_equal(levels, decode(spec["data"][0]["z"]))  # the same mosaic, level for level
    assert np.array_equal(palette, grid_palette())
    trace = next(t for t in spec["data"] if t.get("name") == "tiles")
    assert [cell for row in picture["heads"] for cell in row] == trace["customdata"]
    assert ["<br>".join(lines) for row in picture["hover"] for lines in row] == trace["text"]
    assert picture["hover"][1][2] == ["L1 H2", "sink"] and "dimmed" in picture["hover"][2][0][-1]
    assert picture["dimmed"][2] == [True, False, False, False, False]  # the mean column is never dimmed
    assert picture["cols"] == spec["layout"]["xaxis"]["ticktext"] and picture["rows"] == ["L0", "L1", "L2"]
    assert (picture["n_layer"], picture["n_col"], picture["th"], picture["tw"]) == (3, 5, 9, 9)
    assert picture["tile_px"] == grid.cell_px  # a short grid: the Plotly figure's cell
