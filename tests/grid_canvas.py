"""The Heads page's grid as AppTest sees it: the picture its canvas component was sent (attnviz.app.grid_canvas)."""

import base64
import io
import json

import numpy as np
from PIL import Image
from streamlit.testing.v1 import AppTest

GRID_COMPONENT = "attnviz_head_grid"


def grid_data(at: AppTest) -> dict:
    """The picture the page sent its grid's canvas (attnviz.figures.grid_picture): exactly one grid on the page."""
    (grid,) = [e for e in at.get("bidi_component") if e.proto.component_name == GRID_COMPONENT]
    return json.loads(grid.proto.json)


def has_grid(at: AppTest) -> bool:
    """Whether the page drew the grid's canvas."""
    return any(e.proto.component_name == GRID_COMPONENT for e in at.get("bidi_component"))


def grid_levels(data: dict) -> np.ndarray:
    """The picture's mosaic of colour levels, read by an independent PNG decoder (Pillow)."""
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data["png"]))))


def grid_palette_of(data: dict) -> np.ndarray:
    """The picture's palette, (256, 3) uint8, as Pillow reads it."""
    palette = Image.open(io.BytesIO(base64.b64decode(data["png"]))).getpalette()
    return np.array(palette[: 3 * 256], dtype=np.uint8).reshape(-1, 3)
