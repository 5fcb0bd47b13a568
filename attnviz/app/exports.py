"""Files a figure, a table or a record's tensors leave the app as: HTML, PNG/SVG, CSV, safetensors and npz.

Pure functions, no Streamlit: the app offers them behind download buttons
whose data is a callable, so nothing here runs until someone clicks (an HTML file
inlines plotly.js, about 4.6 MB, and must open offline: BertViz's HTML draws
nothing without its CDN). A tensor export is refused above
:data:`TENSOR_EXPORT_MAX_BYTES`, before anything is built, because its size is
known from the shapes.
"""

from __future__ import annotations

import io
import json
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from safetensors.torch import save as save_safetensors
from torch import Tensor

from attnviz.errors import ExportTooLargeError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import tr
from attnviz.models.record import AttentionRecord, Head

TENSOR_EXPORT_MAX_BYTES = 64 * 2**20  # one tensor download, before serialising
TENSOR_FORMATS = {"safetensors": "application/octet-stream", "npz": "application/octet-stream"}
IMAGE_FORMATS = ("svg", "png")
PNG_SCALE = 2  # a PNG for a paper: twice the on-screen pixels; an SVG scales by itself
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a cell as a formula (CSV injection)
STATISTICS = ("entropy", "max_weight", "first_token_weight", "prev_token_weight", "self_weight", "mean_distance")


def file_stem(key: str) -> str:
    """A download's name from a widget key: ``heads_large`` -> ``attnviz-heads_large`` (only [A-Za-z0-9_-])."""
    return "attnviz-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", key).strip("-")[:80] or "figure")


def image_options(fig: go.Figure, key: str, fmt: str = "svg") -> dict:
    """Plotly's ``toImageButtonOptions``: the modebar's camera saves ``fmt`` at the figure's size, named after ``key``.

    A size the figure does not set (most are as wide as the page) is left to plotly,
    which then takes the size drawn on screen.
    """
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, not {fmt!r}")
    options = {"format": fmt, "filename": file_stem(key), "scale": PNG_SCALE if fmt == "png" else 1}
    for side in ("width", "height"):
        value = getattr(fig.layout, side)
        if value is not None:
            options[side] = int(value)
    return options


def chart_config(fig: go.Figure, key: str, fmt: str = "svg") -> dict:
    """The plotly config of every chart of the app."""
    return {"displaylogo": False, "toImageButtonOptions": image_options(fig, key, fmt)}


def figure_html(fig: go.Figure, key: str) -> bytes:
    """A standalone HTML page of the figure that opens offline: plotly.js is inlined, no ``<script src>``.

    Its camera button saves a PNG (the app's saves an SVG by default), so both are
    one click away. Plotly writes the figure's JSON with ``<``, ``>`` and ``/``
    escaped, so a token such as ``</script>`` stays data.
    """
    html = fig.to_html(include_plotlyjs=True, full_html=True, config=chart_config(fig, key, "png"))
    return html.encode("utf-8")


def table_csv(table: pd.DataFrame) -> bytes:
    """The table as UTF-8 CSV, index left out; a text cell that a spreadsheet would run as a formula gets a ``'``."""

    def defuse(value):
        return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value

    safe = table.copy()
    for column in safe.columns:
        if safe[column].dtype == object or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(defuse)
    return safe.to_csv(index=False).encode("utf-8")


def tensors_nbytes(tensors: Mapping[str, Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass(frozen=True)
class TensorExport:
    """Tensors offered for download: ``build`` runs only on a click; ``nbytes`` is known before, from the shapes."""

    build: Callable[[], dict[str, Tensor]]
    nbytes: int
    metadata: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tensors: Mapping[str, Tensor], metadata: Mapping[str, object] | None = None) -> TensorExport:
        """Tensors the page already holds (no copy until the click)."""
        held = dict(tensors)
        return cls(lambda: held, tensors_nbytes(held), metadata_strings(metadata or {}))

    @property
    def too_large(self) -> bool:
        return self.nbytes > TENSOR_EXPORT_MAX_BYTES


def held_weakly(record: AttentionRecord) -> Callable[[], AttentionRecord]:
    """``record`` for an export built on a click, without keeping it alive.

    Streamlit keeps a download button's callable until its session's next run or end, so a callable holding the
    record kept every idle session's last record in memory after the server's result cache had dropped it (one
    record per idle session, measured: benchmarks/soak.py). The click reads the record while the cache (or a
    running page) still holds it, and raises LookupError once it has gone: any rerun of the page captures it
    again and offers the export anew.
    """
    ref = weakref.ref(record)

    def get() -> AttentionRecord:
        held = ref()
        if held is None:
            raise LookupError("the record this export reads has left the server's result cache: rerun the page")
        return held

    return get


def metadata_strings(metadata: Mapping[str, object]) -> dict[str, str]:
    """safetensors metadata holds strings: numbers and strings as they are, anything else as JSON."""
    return {str(k): v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in metadata.items()}


def _cpu(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    # a fresh contiguous copy each: safetensors refuses views that share storage (a step's q and its split view)
    return {name: t.detach().to("cpu").contiguous().clone() for name, t in tensors.items()}


def tensor_file(export: TensorExport, fmt: str, max_bytes: int = TENSOR_EXPORT_MAX_BYTES) -> bytes:
    """The export serialised as ``fmt`` ("safetensors" or "npz"); ExportTooLargeError above ``max_bytes``.

    npz keeps the metadata as a 0-d unicode array ``__metadata__`` (JSON), which
    ``np.load`` reads without ``allow_pickle``.
    """
    if fmt not in TENSOR_FORMATS:
        raise ValueError(f"tensor format must be one of {', '.join(TENSOR_FORMATS)}, not {fmt!r}")
    if export.nbytes > max_bytes:
        raise ExportTooLargeError(msg("bounds.export_too_large", size=export.nbytes / 2**20, limit=max_bytes / 2**20))
    tensors = _cpu(export.build())
    if fmt == "safetensors":
        return save_safetensors(tensors, metadata=export.metadata or None)
    buffer = io.BytesIO()
    arrays = {name: t.numpy() for name, t in tensors.items()}
    np.savez(buffer, **arrays, __metadata__=np.array(json.dumps(export.metadata, ensure_ascii=False)))
    return buffer.getvalue()


def record_metadata(record: AttentionRecord, **extra) -> dict[str, str]:
    """What a record's export says about itself: the model, the tokens (as JSON) and the mask."""
    return metadata_strings(
        {
            "model": record.model_name,
            "implementation": record.implementation,
            "causal": record.causal,
            "tokens": [tok.text for tok in record.tokens],
            "mask": tr(record.mask_summary()),
            **extra,
        }
    )


def head_export(
    record: AttentionRecord,
    layer: int,
    head: Head,
    rows: tuple[int, int] | None = None,
    cols: tuple[int, int] | None = None,
    pooled: Tensor | None = None,
) -> TensorExport:
    """One head's full-resolution weights as drawn, ``weights`` (rows, cols), and the layer's mask there, ``mask``
    bool (rows, cols); with ``pooled``, the pooled map a long text is drawn as, ``pooled`` (P, Pk).

    Read from the record on the click; ``rows``/``cols`` (default: the whole head) is the window the page shows.
    """
    rows, cols = rows or (0, record.q_len), cols or (0, record.k_len)
    n_cells = (rows[1] - rows[0]) * (cols[1] - cols[0])
    held = held_weakly(record)

    def build() -> dict[str, Tensor]:
        record = held()
        tensors = {
            "weights": record.weights(layer, head, rows, cols),  # (rows, cols), 0 where masked
            "mask": record.mask(layer, rows, cols),  # bool (rows, cols), True where the query attends
        }
        if record.has_value_norms:  # value-weighted attention (Kobayashi et al. 2020), the same window
            tensors["value_weighted"] = record.value_weighted(layer, head, rows, cols)  # (rows, cols)
            tensors["value_norms"] = record.value_norms(layer, head, cols)  # (cols,) ‖v_j W_O^h‖
        if pooled is not None:
            tensors["pooled"] = pooled  # (P, Pk), NaN where a bin holds no visible cell
        return tensors

    size = n_cells * 5 + (0 if pooled is None else pooled.numel() * pooled.element_size())  # float32 + bool
    if record.has_value_norms:
        size += n_cells * 4 + (cols[1] - cols[0]) * 4
    meta = record_metadata(record, layer=layer, head=str(head), rows=list(rows), cols=list(cols))
    return TensorExport(build, size, meta)


def statistics_tensors(record: AttentionRecord) -> dict[str, Tensor]:
    """The record's per-head statistics: per query row, ``rows.<stat>`` (n_layer, n_head, q_len), with
    ``live_rows`` bool (n_layer, q_len), the rows averaged; and per head, ``heads.<column>`` (n_layer, n_head)."""
    names = (*STATISTICS, *(("sink_weight",) if record.has_sinks else ()))
    tensors = {f"rows.{name}": record.row_stat(name) for name in names}  # (n_layer, n_head, q_len)
    tensors["live_rows"] = record.live_rows()  # (n_layer, q_len)
    if record.has_value_norms:  # each key's ‖v_j W_O^h‖ and the rows' weight on small ones (attnviz.core.value_norms)
        tensors["value_norms"] = torch.stack([record.value_norms(layer) for layer in range(record.n_layer)])
        tensors["rows.low_norm_weight"] = record.row_stat("low_norm_weight")  # (n_layer, n_head, q_len)
    table = record.statistics
    for column in table.columns:
        if column in ("layer", "head") or not pd.api.types.is_numeric_dtype(table[column]):
            continue
        grid = torch.full((record.n_layer, record.n_head), float("nan"), dtype=torch.float32)
        where = (
            torch.from_numpy(table["layer"].to_numpy(dtype=np.int64, copy=True)),
            torch.from_numpy(table["head"].to_numpy(dtype=np.int64, copy=True)),
        )
        grid[where] = torch.from_numpy(table[column].to_numpy(dtype=np.float32, copy=True))
        tensors[f"heads.{column}"] = grid  # (n_layer, n_head)
    return tensors


def statistics_export(record: AttentionRecord) -> TensorExport:
    """:func:`statistics_tensors`, built on the click (a 30-layer model's rows at 4,096 tokens are ~26 MB)."""
    rows = record.n_layer * record.n_head * record.q_len * 4 * (len(STATISTICS) + record.has_sinks)
    rows += record.n_layer * record.n_head * (record.q_len + record.k_len) * 4 * record.has_value_norms
    size = rows + record.n_layer * record.q_len + record.n_layer * record.n_head * 4 * len(record.statistics.columns)
    held = held_weakly(record)
    return TensorExport(lambda: statistics_tensors(held()), size, record_metadata(record))


def walkthrough_export(walk, head: int) -> TensorExport:
    """Every step's tensors of a walkthrough, named ``<step>.<name>`` (batch axis kept), and its mask."""
    tensors = {f"{step.key}.{name}": t for step in walk.steps for name, t in step.tensors.items()}
    if walk.mask is not None:
        tensors["mask"] = walk.mask  # bool (T, T)
    meta = {
        "layer": walk.layer,
        "head_shown": head,
        "tokens": [tok.text for tok in walk.tokens],
        "n_head": walk.n_head,
        "n_kv_head": walk.n_kv_head,
        "head_dim": walk.head_dim,
        "scale": walk.scale,
    }
    return TensorExport.of(tensors, meta)


__all__ = [
    "TENSOR_EXPORT_MAX_BYTES",
    "ExportTooLargeError",
    "TensorExport",
    "chart_config",
    "figure_html",
    "file_stem",
    "head_export",
    "image_options",
    "record_metadata",
    "statistics_export",
    "statistics_tensors",
    "table_csv",
    "tensor_file",
    "walkthrough_export",
]
