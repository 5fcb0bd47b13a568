"""attnviz in a notebook (Jupyter, JupyterLab, VS Code, Colab), on the model already in memory, offline.

``from attnviz.notebook import head_view, model_view``: BertViz's calls (its arguments, ``outputs.attentions``),
attnviz's views. ``show(model, tokenizer, text)`` and ``capture(...)``: attnviz's bounded capture of a
transformers model object as the user holds it, left as it was. ``ablation``, ``estimate``, ``patching``,
``direct_logits``, ``mask_doctor``: the other labs, as figures and DataFrames. ``open_in_app(model, tokenizer)``:
the dashboard on that model. docs/notebook.md has them all. Each name is imported when first asked for, so
``import attnviz.notebook`` costs nothing.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "head_view": "attnviz.notebook.bertviz",
    "model_view": "attnviz.notebook.bertviz",
    "show": "attnviz.notebook.model",
    "capture": "attnviz.notebook.model",
    "Captured": "attnviz.notebook.model",
    "NotebookHTML": "attnviz.notebook.html",
    "open_in_app": "attnviz.notebook.app",
    "stop_app": "attnviz.notebook.app",
    "ablation": "attnviz.notebook.labs",
    "estimate": "attnviz.notebook.labs",
    "patching": "attnviz.notebook.labs",
    "direct_logits": "attnviz.notebook.labs",
    "mask_doctor": "attnviz.notebook.labs",
    "LabResult": "attnviz.notebook.labs",
    "OverBudgetError": "attnviz.notebook.labs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'attnviz.notebook' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def reset() -> None:
    """Carry the viewer's script (and the labs' plotly.js) again in the next output shown, as after a restart (for
    a notebook whose output that held them was cleared)."""
    from attnviz.notebook.html import forget_script
    from attnviz.notebook.labs.result import forget_plotly

    forget_script()
    forget_plotly()
