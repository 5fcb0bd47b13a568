"""The mask doctor on a mask tensor a notebook already holds: what ``attnviz mask-doctor`` says of a mask file, and
the Mask lab's picture of it with the findings marked. No model is needed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from attnviz.i18n.message import msg
from attnviz.notebook.labs.result import LabResult, in_language

MASK_NAME = "the mask"  # how a message names the tensor (a file is named by its file name)


def mask_tensor(mask: Any):
    """``mask`` (a torch tensor, a numpy array or nested lists) as the command line reads a mask file: integer
    0/1 as bool, (B, 1, T, T) as (B, T, T), within the size limits; MaskFileError (one line) for any other. Returns
    the tensor and the notes on what reading it changed."""
    import numpy as np
    import torch

    from attnviz.labs.masks.reading import _from_numpy, check_mask

    if not isinstance(mask, torch.Tensor):
        array = np.asarray(mask)
        mask, _ = _from_numpy(array, MASK_NAME)
    return check_mask(mask, MASK_NAME)


def mask_doctor(
    mask: Any,
    *,
    expect: str | None = None,
    lengths: str | Sequence[int] | None = None,
    side: str = "right",
    q_len: int | None = None,
    offset: int | None = None,
    convention: str | None = None,
    labels: Sequence[str] | None = None,
    sequence: int = 0,
    lang: str = "en",
) -> LabResult:
    """Say what is wrong with an attention mask, as ``attnviz mask-doctor`` does with a file.

    ``mask``: bool (``convention`` "keep", the default: True = may attend; or "block") or float (additive),
    (q_len, k_len), (B, q_len, k_len) or (B, 1, T, T), or (..., 1, T) broadcast over the queries. ``expect``: what
    it should be ("causal", "padding", "causal+padding", "sliding:W", "prefix:P", "documents:L1,L2,..."), ``lengths``
    each sequence's real length and ``side`` where the pads go; ``q_len`` and ``offset`` read a rectangular mask as
    a decode step (as the command line's flags). ``labels``: the key tokens' names on the picture (default their
    positions); ``sequence``: which of a batch's masks is drawn.

    Returns a :class:`LabResult`: ``frame`` a row a problem found (kind, count, examples, and the JSON's other
    fields, then its sentence in ``lang``), ``figure`` the Mask lab's picture (kept cells blue, each problem's
    cells marked), ``json`` ``attnviz mask-doctor --json``'s object, ``found`` the
    :class:`~attnviz.labs.masks.findings.Diagnosis`, ``extra["notes"]`` what reading it changed and the doctor's
    notes, in ``lang``."""
    from attnviz.labs.masks.doctor import diagnose, parse_expect, parse_lengths

    expected = parse_expect(expect) if isinstance(expect, str) else expect
    if isinstance(lengths, str):
        lengths = parse_lengths(lengths, "lengths")
    elif lengths is not None:
        lengths = [int(n) for n in lengths]
    tensor, read_notes = mask_tensor(mask)
    floating = tensor.dtype.is_floating_point
    if floating and convention is not None:
        raise ValueError(msg("notebook_labs.convention_float"))
    diagnosis = diagnose(
        tensor,
        convention=None if floating else (convention or "keep"),
        expect=expected,
        lengths=lengths,
        side=side,
        q_len=q_len,
        offset=offset,
    )
    notes = [*read_notes, *diagnosis.notes]
    return in_language(lang, lambda: _mask_result(diagnosis, notes, labels, sequence))


def _drawn(cells: Any, diagnosis: Any, sequence: int):
    """One sequence's cells (q_len, k_len) as a square (k_len, k_len): a decode step's rows at their positions
    (offset + row), the rows before them blank (not in the mask)."""
    import torch

    if cells.ndim == 3:
        cells = cells[sequence]
    q, k = cells.shape
    if q == k:
        return cells
    full = torch.zeros(k, k, dtype=torch.bool)
    start = diagnosis.offset if diagnosis.offset is not None else k - q
    full[start : start + q] = cells
    return full


def _mask_result(diagnosis: Any, notes: list, labels: Sequence[str] | None, sequence: int) -> LabResult:
    from attnviz.figures.masks import make_mask_figure
    from attnviz.i18n.translate import t, tr

    value = diagnosis.to_json()
    rows = [
        {**entry, "message": tr(problem.message)}
        for entry, problem in zip(value["problems"], diagnosis.problems, strict=True)
    ]
    frame = pd.DataFrame(rows, columns=["kind", "count", "examples", "message"] if not rows else None)
    figures = ()
    if diagnosis.keep is not None:
        keep = _drawn(diagnosis.keep, diagnosis, sequence)
        names = [str(k) for k in range(keep.shape[-1])] if labels is None else [str(label) for label in labels]
        problems = {p.kind: _drawn(p.cells, diagnosis, sequence) for p in diagnosis.problems}
        figures = (make_mask_figure(keep, names, problems=problems, title=t("masks.fig_mask")),)
    return LabResult("mask_doctor", frame, figures, value, diagnosis, {"notes": [tr(note) for note in notes]})
