"""attnviz's labs on a model in a notebook's memory: each a function of the model, its tokenizer and a text that
returns a :class:`LabResult` (a DataFrame, the app's figures, the command line's JSON), shown offline in the cell.

- :func:`ablation`: knock heads out (every head alone, the sweep, by default), as ``attnviz ablate``;
- :func:`estimate`: every head's ablation effect estimated in one forward and one backward;
- :func:`patching`: activation patching between a clean and a corrupted text, as ``attnviz patch``;
- :func:`direct_logits`: each head's direct contribution to a token's logit, as ``attnviz logits``;
- :func:`mask_doctor`: what is wrong with a mask tensor, as ``attnviz mask-doctor`` (no model needed).

The model is borrowed for the call (:func:`attnviz.models.registry.borrowed_source`) and left as it was. Each reads
at most ``max_tokens`` tokens (default: the lab's own limit, as the command line's SWEEP_TOKENS, PATCH_TOKENS, ...);
``lang`` ("en", "zh") is the figures' and the messages' language. A lab the model cannot do raises
:class:`~attnviz.errors.ModelUnavailableError` with the command line's one line; one predicted over the command
line's time budget raises :class:`OverBudgetError` unless ``over_budget=True``.
"""

from attnviz.notebook.labs.ablate import ablation, estimate
from attnviz.notebook.labs.mask import mask_doctor
from attnviz.notebook.labs.patch import direct_logits, patching
from attnviz.notebook.labs.result import LabResult, OverBudgetError

__all__ = ["LabResult", "OverBudgetError", "ablation", "direct_logits", "estimate", "mask_doctor", "patching"]
