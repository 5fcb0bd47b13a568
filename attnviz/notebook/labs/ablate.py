"""Which heads matter, by knocking them out: one ablation, every head alone (the sweep), and the estimate of every
head's effect from one forward and one backward, on a model in a notebook's memory.

Each runs what ``attnviz ablate`` and the Ablation page run (:mod:`attnviz.labs.heads_matter`), with the same limits
and the same time budget, and draws the page's figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.notebook.labs.result import (
    LabResult,
    borrowed,
    checked_max_tokens,
    checked_text,
    in_language,
    over_budget,
    require,
)

ALL = "all"


def _heads_spec(heads: str | Sequence[tuple[int, int]]) -> str | list[tuple[int, int]]:
    """``heads`` as given ("all", "9.4,3.*" or (layer, head) pairs), its syntax read before any model runs."""
    from attnviz.labs.heads_matter.head_specs import read_heads

    if isinstance(heads, str):
        if heads.strip().lower() == ALL:
            return ALL
        read_heads(heads)
        return heads
    return [(int(layer), int(head)) for layer, head in heads]


def _check_ablates(source: Any, mode: str) -> None:
    """ModelUnavailableError, one line, when ``source`` cannot ablate its heads by ``mode``."""
    if not source.ablation_modes:
        raise ModelUnavailableError(msg("ablation.unsupported", name=source.name, note=source.route_note))
    if mode not in source.ablation_modes:
        raise ModelUnavailableError(msg("ablation_lib.unsupported", name=source.name, mode=mode))


def ablation(
    model: Any,
    tokenizer: Any,
    text: str,
    heads: str | Sequence[tuple[int, int]] = ALL,
    *,
    mode: str = "zero",
    max_tokens: int | None = None,
    over_budget: bool = False,
    name: str | None = None,
    lang: str = "en",
) -> LabResult:
    """Knock heads out and measure what the model's output loses, as ``attnviz ablate`` does.

    ``heads``: "all" (the default: every head ablated alone, the sweep, on at most SWEEP_TOKENS tokens, then every
    head together), "LAYER.HEAD,..." ("9.4,3.*") or (layer, head) pairs, ablated together. ``mode``: "zero", "mean"
    or "first". The sweep's time is measured here first; over the command line's budget it raises
    :class:`~attnviz.notebook.labs.result.OverBudgetError` unless ``over_budget``.

    Returns a :class:`LabResult`: for the sweep, ``frame`` has a row a head (layer, head, the sweep's measure
    ``kl_mean`` or ``hidden_change``, and ``loss_change`` for an LM) and the figures are the page's layer × head
    map, then the change at each position of every head together; for named heads, ``frame`` has a row a position
    (position, token, change: KL(before ‖ after) for an LM, the hidden states' cosine distance for an encoder) and
    the figure is the change at each position. ``json``: ``attnviz ablate --json``'s object; ``found``: the
    :class:`~attnviz.labs.heads_matter.effect.AblationResult`, and ``extra["sweep"]`` the sweep's
    :class:`~attnviz.labs.heads_matter.ablation.AblationSweep` (None for named heads)."""
    from attnviz.core.token_display import read_texts
    from attnviz.labs.heads_matter.ablation import run_pieces, sweep_baseline, sweep_result
    from attnviz.labs.heads_matter.effect import ablation_effect
    from attnviz.labs.heads_matter.head_specs import check_heads, parse_heads
    from attnviz.models.ablation import check_mode

    checked_text(text)
    n_tokens = checked_max_tokens(max_tokens)
    check_mode(mode)
    spec = _heads_spec(heads)
    with borrowed(model, tokenizer, name) as source:
        _check_ablates(source, mode)
        sweep = None
        if spec == ALL:
            from attnviz.cli.ablate import SWEEP_BUDGET_S

            baseline = sweep_baseline(source, text, n_tokens, mode)
            seconds = baseline.seconds(baseline.first)
            if seconds > SWEEP_BUDGET_S and not over_budget:
                raise _over("notebook_labs.sweep_over_budget", len(baseline.heads), baseline.n_tokens, seconds)
            losses: dict = {}
            sweep = sweep_result(baseline, run_pieces(source, text, baseline, {}, None, losses), losses)
            chosen = [(layer, head) for layer in range(len(sweep.values)) for head in range(source.n_head)]
        elif isinstance(spec, str):
            chosen = parse_heads(spec, source.n_layer, source.n_head)
        else:
            chosen = check_heads(spec, source.n_layer, source.n_head)
        result = ablation_effect(source, text, n_tokens, chosen, mode)
        tokens = read_texts(text, result.tokens)  # " Mary", its leading space kept, as the command line prints it
    value = result.to_json()
    value["tokens"] = tokens
    if sweep is not None:
        value.update(sweep=sweep.to_json(), sweep_measure=sweep.measure, sweep_tokens=sweep.n_tokens)
    return in_language(lang, lambda: _ablation_result(result, sweep, value))


def _over(key: str, heads: int, tokens: int, seconds: float, **values: Any):
    return over_budget(key, heads=heads, tokens=tokens, seconds=seconds, **values)


def ablation_frame(result: Any) -> pd.DataFrame:
    """A row a position: its token and how much the output there changed (KL for an LM, else cosine distance)."""
    return pd.DataFrame(
        {
            "position": range(len(result.change)),
            "token": [token.text for token in result.tokens],
            "change": result.change,
        }
    )


def sweep_frame(sweep: Any) -> pd.DataFrame:
    """A row a head: its effect ablated alone (the sweep's measure) and, for an LM, its change of the mean loss."""
    rows = []
    for layer, row in enumerate(sweep.values):
        for head, v in enumerate(row):
            entry = {"layer": layer, "head": head, sweep.measure: v}
            if sweep.loss_change:
                entry["loss_change"] = sweep.loss_change[layer][head]
            rows.append(entry)
    return pd.DataFrame(rows)


def _ablation_result(result: Any, sweep: Any, value: dict) -> LabResult:
    from attnviz.figures.ablation import make_ablation_change_figure, make_ablation_sweep_figure

    change = make_ablation_change_figure(result)
    if sweep is None:
        return LabResult("ablation", ablation_frame(result), (change,), value, result, {"sweep": None})
    figures = (make_ablation_sweep_figure(sweep), change)
    return LabResult("sweep", sweep_frame(sweep), figures, value, result, {"sweep": sweep})


def estimate(
    model: Any,
    tokenizer: Any,
    text: str,
    *,
    mode: str = "zero",
    graddrop: bool = False,
    max_tokens: int | None = None,
    name: str | None = None,
    lang: str = "en",
) -> LabResult:
    """Every head's effect when ablated alone, estimated in one forward and one backward (attribution patching), as
    the Ablation page's estimate: an LM's change of the mean next-token loss, an encoder's change of its last hidden
    states; on at most ESTIMATE_TOKENS tokens. ``mode``: "zero" or "mean"; ``graddrop`` (an LM's): also AtP*'s
    GradDrop score, a backward a layer more.

    Returns a :class:`LabResult`: ``frame`` a row a head (layer, head, estimate, graddrop when it ran, and whether
    the head is flagged saturated or cancelling), ``figure`` the page's layer × head map, ``json`` the estimate's
    JSON (as ``attnviz patch --estimate`` prints one), ``found`` the
    :class:`~attnviz.labs.heads_matter.attribution.Estimate`."""
    from attnviz.labs.heads_matter.attribution import estimate_ablation
    from attnviz.labs.heads_matter.common import token_limit
    from attnviz.models.source import Capability
    from attnviz.settings import ESTIMATE_TOKENS

    checked_text(text)
    n_tokens = token_limit(checked_max_tokens(max_tokens), ESTIMATE_TOKENS)
    with borrowed(model, tokenizer, name) as source:
        require(source, Capability.EDIT_HEADS, "patching_lib.unsupported")
        found = estimate_ablation(source, text, n_tokens, mode, graddrop)
        lm = Capability.GENERATE in source.capabilities
    return in_language(lang, lambda: _estimate_result(found, lm))


def estimate_frame(found: Any) -> pd.DataFrame:
    """A row a head: its estimate, GradDrop's score when it ran, and the flags that say where it may mislead."""
    saturated, cancelling = set(found.saturated), set(found.cancelling)
    rows = []
    for layer, row in enumerate(found.values):
        for head, v in enumerate(row):
            entry = {"layer": layer, "head": head, "estimate": v}
            if found.graddrop is not None:
                entry["graddrop"] = found.graddrop[layer][head]
            entry["saturated"] = (layer, head) in saturated
            entry["cancelling"] = (layer, head) in cancelling
            rows.append(entry)
    return pd.DataFrame(rows)


def _estimate_result(found: Any, lm: bool) -> LabResult:
    from attnviz.figures.heads_matter import make_head_effect_figure
    from attnviz.i18n.translate import t

    measure = t("heads_matter.measure_loss") if lm else t("heads_matter.measure_hidden")
    figure = make_head_effect_figure(
        found.values, title=t("heads_matter.estimate_title", measure=measure), measure=measure, signed=lm
    )
    return LabResult("estimate", estimate_frame(found), (figure,), found.to_json(), found)
