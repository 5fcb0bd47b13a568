"""What a notebook view draws, as one JSON object (the viewer's script, :mod:`attnviz.notebook.assets`, draws it in
the output cell with no kernel and no network): :func:`view_payload`.

A view holds one or more kinds of attention (one for a decoder or an encoder; encoder, decoder and cross for an
encoder-decoder), each an :class:`~attnviz.models.record.AttentionRecord` however it was made (attnviz's bounded
capture of a model in memory, or the full weights a BertViz call hands over). For each kind it carries:

- the layer x head grid as the Heads page draws it (:func:`attnviz.figures.heads.head_grid` and
  :func:`attnviz.figures.grid_picture.grid_picture`: the same tiles, colours, flags and hover);
- every head's statistics and flags (the record's :attr:`~attnviz.models.record.AttentionRecord.statistics`);
- every head's map, so that a click on the grid draws any head large without asking the kernel (a saved notebook
  has none): the record's max-pooled maps at the finest resolution that keeps the view within :data:`MAX_CELLS`
  cells in all, each weight as a 16-bit level (``w * 65534``, 1.5e-5 apart), zlib-compressed; exact (one weight a
  cell) for a short text.
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnviz.figures.base import head_label
from attnviz.figures.grid_picture import grid_palette, grid_picture
from attnviz.figures.heads import SQRT_BY_ITSELF_TOKENS, flag_names, grid_view, head_grid, stat_name
from attnviz.figures.lines import fits
from attnviz.i18n.translate import t
from attnviz.models.record import AttentionRecord, token_labels

VERSION = 1
MAX_CELLS = 2**21  # every head's map in one view, in cells: 4 MB of 16-bit levels before compression
MASKED = 65535  # a cell with no visible key
TOP = 65534  # the level of a weight of 1
VIEWS = ("head", "model")
THEMES = ("light", "dark")
GAMMAS = (1.0, 0.5)  # colour by the weight, or by √weight (the Heads page's "emphasise small weights")
WORDS = (  # every word the viewer's script draws (attnviz/notebook/viewer.js), from the catalogues' [notebook]
    "layer",
    "head",
    "mean",
    "query",
    "key",
    "weight",
    "queries",
    "keys",
    "max_over",
    "mean_over",
    "masked",
    "map",
    "lines",
    "all",
    "a_to_a",
    "b_to_b",
    "a_to_b",
    "b_to_a",
    "statistic",
    "value",
    "flags",
    "no_stats",
    "no_decoder",
    "emphasise",
)


@dataclass(frozen=True)
class Kind:
    """One kind of attention a view shows: its record and what the view opens on."""

    id: str  # "self", "encoder", "decoder" or "cross"
    record: AttentionRecord
    layers: tuple[int, ...] | None = None  # the model's layers drawn (include_layers), all when None
    shown_heads: tuple[int, ...] | None = None  # heads drawn at full strength in the grid, the others dimmed
    selected: tuple[int, int] | None = None  # (layer, head) drawn large first
    sentence_b: int | None = None  # BertViz's sentence_b_start


def _pooled(maps: Tensor, factor_q: int, factor_k: int) -> Tensor:
    """Max-pool (..., q, k) by whole factors, keeping NaN (masked) only where every cell under it is NaN; the last
    cell of a side may cover fewer tokens."""
    if factor_q == 1 and factor_k == 1:
        return maps
    q, k = maps.shape[-2:]
    pad_q, pad_k = -q % factor_q, -k % factor_k
    filled = torch.nn.functional.pad(maps.nan_to_num(-1.0), (0, pad_k, 0, pad_q), value=-1.0)
    lead = filled.shape[:-2]
    blocks = filled.reshape(*lead, (q + pad_q) // factor_q, factor_q, (k + pad_k) // factor_k, factor_k)
    pooled = blocks.amax(dim=(-3, -1))
    return pooled.masked_fill(pooled < 0, math.nan)


def map_factors(n_heads: int, q: int, k: int, max_cells: int | None = None) -> tuple[int, int]:
    """How many of the record's cells a side the view's cells hold, so that ``n_heads`` maps of (q, k) cells fit in
    ``max_cells`` (1, 1: as recorded); the same factor on both sides, so a cell stays square in tokens."""
    per_head = max(1, (MAX_CELLS if max_cells is None else max_cells) // max(1, n_heads))
    if q * k <= per_head:
        return 1, 1
    factor = 1
    while math.ceil(q / factor) * math.ceil(k / factor) > per_head:
        factor += 1
    return factor, factor


def exact_maps(record: AttentionRecord, layers: Sequence[int]) -> Tensor:
    """Every head's full-resolution weights of ``layers``, NaN where the layer's mask hides a key (or a pad's row):
    (len(layers), n_head, q_len, k_len), float32."""
    maps = [record.weights(layer, None).float().masked_fill(~record.mask(layer), math.nan) for layer in layers]
    return torch.stack(maps)


def encode_maps(maps: Tensor) -> str:
    """(..., q, k) weights with NaN where masked -> base64 of zlib(uint16 little-endian levels)."""
    values = maps.double().clamp(0.0, 1.0)  # float64: w * 65534 is exact (24 + 16 bits), so the level is the nearest
    levels = (values.nan_to_num(0.0) * TOP).round().to(torch.int32)
    levels = levels.masked_fill(maps.isnan(), MASKED).cpu().numpy().astype("<u2")
    return base64.b64encode(zlib.compress(levels.tobytes(), 6)).decode("ascii")


def _stats(record: AttentionRecord, layers: Sequence[int]) -> dict:
    frame = record.statistics
    names = [c for c in frame.columns if c not in ("layer", "head", "flags")]
    wanted = set(layers)
    values, flags = {}, {}
    for row in frame.itertuples(index=False):
        layer, head = int(row.layer), int(row.head)
        if layer not in wanted:
            continue
        values[f"{layer},{head}"] = [
            None if not math.isfinite(float(getattr(row, n))) else float(getattr(row, n)) for n in names
        ]
        flags[f"{layer},{head}"] = flag_names(row.flags) if row.flags else ""
    return {"names": names, "labels": [stat_name(n) for n in names], "values": values, "flags": flags}


def _kind_title(kind: Kind) -> str:
    return t(f"notebook.kind_{kind.id}")


def gamma_of(record: AttentionRecord) -> float:
    """The colour scale a record is drawn on first, as the Heads page draws it: √weight (0.5) past
    :data:`~attnviz.figures.heads.SQRT_BY_ITSELF_TOKENS` tokens, where most weights are tiny, else the weight (1.0)."""
    return 0.5 if max(record.q_len, record.k_len) > SQRT_BY_ITSELF_TOKENS else 1.0


def kind_payload(kind: Kind, view: str, n_heads_total: int, gamma: float | None = None) -> dict:
    """One kind's part of :func:`view_payload` (``n_heads_total``: heads over every kind, sharing the cells;
    ``gamma``: the colour scale, 1.0 or 0.5, by the text's length when None)."""
    record = kind.record
    layers = list(range(record.n_layer)) if kind.layers is None else list(kind.layers)
    if not layers or any(not 0 <= layer < record.n_layer for layer in layers):
        raise ValueError(f"layers must be among 0..{record.n_layer - 1}, got {layers}")
    pooled = record.pooled_grid("max")[layers]  # (L, H, P, Pk)
    grid_options = grid_view(record.statistics, record.n_layer, record.n_head)
    flags = grid_options["flags"][layers]
    shown = None
    if kind.shown_heads is not None:
        shown = np.zeros((len(layers), record.n_head), dtype=bool)
        shown[:, list(kind.shown_heads)] = True
    tile = 64 if view == "model" else None
    pictures = {}
    for gamma in GAMMAS:  # the grid at both colour scales: the view's √ toggle swaps them, with no kernel
        grid = head_grid(pooled, mean=record.mean_grid()[layers], flags=flags, shown=shown, tile=tile, gamma=gamma)
        picture = grid_picture(grid, t("notebook.grid_label", model=record.model_name), t("grid_canvas.hint"))
        picture["rows"] = [f"L{layer}" for layer in layers]
        picture["heads"] = [[[layer, head] for head in row] for layer, row in zip(layers, grid.heads, strict=True)]
        if view == "model":
            picture["tile_px"] = max(picture["tile_px"], 40)
        pictures[str(gamma)] = picture
    if record.full_view and n_heads_total * record.q_len * record.k_len <= MAX_CELLS:
        maps, bin_size, factor_q, factor_k = exact_maps(record, layers), 1, 1, 1  # every weight, read back exactly
    else:
        factor_q, factor_k = map_factors(n_heads_total, *pooled.shape[-2:])
        maps, bin_size = _pooled(pooled, factor_q, factor_k), record.bin_size
    exact = bin_size == 1 and factor_q == factor_k == 1
    first = kind.selected or (layers[0], 0)
    if first[0] not in layers or not 0 <= first[1] < record.n_head:
        raise ValueError(f"the head to open, {first}, is not among the layers and heads drawn")
    return {
        "id": kind.id,
        "title": _kind_title(kind),
        "queries": token_labels(record.tokens, None),
        "keys": token_labels(record.keys_tokens, None),
        "causal": bool(record.causal),
        "grid": pictures[str(gamma_of(record) if gamma is None else gamma)],
        "grids": pictures,  # {"1.0": ..., "0.5": ...}: the grid at each colour scale
        "layers": layers,
        "head_names": [head_label(h) for h in range(record.n_head)],
        "stats": _stats(record, layers),
        "maps": {
            "n_layer": len(layers),
            "n_head": record.n_head,
            "q": int(maps.shape[-2]),
            "k": int(maps.shape[-1]),
            "bin_q": bin_size * factor_q,
            "bin_k": bin_size * factor_k,
            "data": encode_maps(maps),
            "palette": grid_palette().tolist(),
        },
        "lines": exact and fits(record.q_len, 1, 1) and fits(record.k_len, 1, 1),
        "selected": [int(first[0]), int(first[1])],
        "sentence_b": kind.sentence_b,
    }


def view_payload(
    kinds: Sequence[Kind],
    *,
    view: str = "head",
    title: str,
    note: str = "",
    theme: str = "light",
    gamma: float | None = None,
) -> dict:
    """The JSON object one notebook view draws (its keys: docs/notebook.md; its drawing: the viewer's script).
    ``gamma``: 1.0 (colour by weight) or 0.5 (by √weight); None: √ past 128 tokens, as the Heads page."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, not {view!r}")
    if theme not in THEMES:
        raise ValueError(f"display_mode must be one of {THEMES}, not {theme!r}")
    if not kinds:
        raise ValueError("a view needs at least one kind of attention")
    if gamma is not None and gamma not in GAMMAS:
        raise ValueError(f"gamma must be one of {GAMMAS} (colour by weight, or by √weight), not {gamma!r}")
    n_heads_total = sum(len(k.layers or range(k.record.n_layer)) * k.record.n_head for k in kinds)
    return {
        "v": VERSION,
        "view": view,
        "title": title,
        "note": note,
        "theme": theme,
        "words": {word: t(f"notebook.{word}") for word in WORDS},
        "kind": 0,
        "gamma": gamma_of(kinds[0].record) if gamma is None else gamma,  # the large map's and lines' first scale
        "kinds": [kind_payload(kind, view, n_heads_total, gamma) for kind in kinds],
    }
