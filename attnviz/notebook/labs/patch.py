"""Which heads carry a difference, and which write a logit: activation patching between a clean and a corrupted
text, and direct logit attribution, on a model in a notebook's memory.

Each runs what ``attnviz patch`` and ``attnviz logits`` run (:mod:`attnviz.labs.heads_matter`), with the same
limits and the same time budget, and draws the Patching page's figures.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnviz.i18n.message import msg
from attnviz.notebook.labs.ablate import ALL, _heads_spec
from attnviz.notebook.labs.result import (
    LabResult,
    borrowed,
    checked_max_tokens,
    checked_text,
    in_language,
    over_budget,
    require,
)

CLI_METRICS = ("logit-diff", "loss", "kl", "hidden")  # the command line's, and an encoder's (as the page has it)


def _metric(spec: Any):
    """The metric as given (a Metric, or "logit-diff:A,B", "loss", "kl", "hidden"), read before any model runs;
    None: the page's default, chosen once the model is known."""
    from attnviz.labs.heads_matter.patching import Metric, parse_metric

    if spec is None or isinstance(spec, Metric):
        return spec
    metric = parse_metric(spec)
    if metric.kind not in CLI_METRICS:
        raise ValueError(msg("notebook_labs.bad_metric", spec=spec))
    return metric


def _positions_head(spec: str | tuple[int, int] | None) -> str | None:
    """``positions`` as "LAYER.HEAD" (one head), read before any model runs."""
    from attnviz.labs.heads_matter.head_specs import read_heads

    if spec is None:
        return None
    if not isinstance(spec, str):
        layer, head = spec
        spec = f"{int(layer)}.{int(head)}"
    read = read_heads(spec)
    if len(read) != 1 or read[0][1] is None:
        raise ValueError(msg("notebook_labs.positions_head", spec=spec[:80]))
    return spec


def _default_metric(source: Any, clean: str, corrupt: str, n_tokens: int):
    """The Patching page's metric before the reader picks one: the logit difference of each text's top next token
    (an LM), the change of the last hidden states (an encoder)."""
    from attnviz.labs.heads_matter.patching import Metric, default_tokens
    from attnviz.models.source import Capability

    if Capability.GENERATE not in source.capabilities:
        return Metric("hidden")
    found = default_tokens(source, clean, corrupt, n_tokens)
    return Metric("loss") if found is None else Metric("logit-diff", (found.a, found.b))


def patching(
    model: Any,
    tokenizer: Any,
    text: str,
    corrupt: str,
    *,
    metric: Any = None,
    heads: Any = ALL,
    estimate: bool = False,
    positions: str | tuple[int, int] | None = None,
    max_tokens: int | None = None,
    over_budget: bool = False,
    name: str | None = None,
    lang: str = "en",
) -> LabResult:
    """Patch each head's output from the clean run (``text``) into the corrupted one, as ``attnviz patch`` does: the
    fraction of the metric's gap each head restores, exactly, on at most PATCH_TOKENS tokens.

    ``metric``: "logit-diff:TOKEN_A,TOKEN_B" (spaces kept), "loss", "kl" or, for an encoder, "hidden"; None: the
    page's default (the logit difference of each text's top next token; the loss where it finds none). ``heads``: "all" or "LAYER.HEAD,..." / (layer, head) pairs.
    ``estimate``: also attribution patching's estimate, its top heads confirmed exactly. ``positions``: also this
    one head patched at one position at a time. The time is measured on the first pass; over the command line's
    budget it raises :class:`~attnviz.notebook.labs.result.OverBudgetError` unless ``over_budget``.

    Returns a :class:`LabResult`: ``frame`` a row a head (layer, head, effect: the fraction restored, NaN where
    not run, and the estimate when asked); figures the page's exact map, then the estimate's (on one scale) and the
    positions' bars when asked; ``json`` ``attnviz patch --json``'s object; ``found`` the
    :class:`~attnviz.labs.heads_matter.patching.PatchResult`, ``extra["positions"]`` the positions' result."""
    from attnviz.cli.ablate import SWEEP_BUDGET_S
    from attnviz.core.token_display import read_texts
    from attnviz.labs.heads_matter import patching as lab
    from attnviz.labs.heads_matter.common import token_limit
    from attnviz.labs.heads_matter.head_specs import check_heads, parse_heads
    from attnviz.labs.heads_matter.patch_run import finish_patching, patch_json, start_patching
    from attnviz.models.source import Capability
    from attnviz.settings import PATCH_TOKENS

    checked_text(text)
    checked_text(corrupt, "the corrupted text")
    n_tokens = token_limit(checked_max_tokens(max_tokens), PATCH_TOKENS)
    chosen_metric = _metric(metric)
    spec = _heads_spec(heads)
    positions = _positions_head(positions)
    with borrowed(model, tokenizer, name) as source:
        require(source, Capability.EDIT_HEADS, "patching_lib.unsupported")
        if chosen_metric is None:
            chosen_metric = _default_metric(source, text, corrupt, n_tokens)
        pair = lab.run_pair(source, text, corrupt, n_tokens, chosen_metric)
        if pair.gap == 0:
            raise ValueError(msg("notebook_labs.no_gap", value=pair.clean))
        every = [(layer, head) for layer in range(pair.n_layer) for head in range(pair.n_head)]
        if spec == ALL:
            chosen = every
        elif isinstance(spec, str):
            chosen = parse_heads(spec, pair.n_layer, pair.n_head)
        else:
            chosen = check_heads(spec, pair.n_layer, pair.n_head)
        positions_head, more = None, ""
        if positions is not None:
            (positions_head,) = parse_heads(positions, pair.n_layer, pair.n_head)
            more = msg("notebook_labs.patch_positions_more", head=positions)
        estimate_texts = (text, corrupt) if estimate else None
        started = start_patching(source, pair, chosen, estimate_texts=estimate_texts, positions_head=positions_head)
        if started.seconds > SWEEP_BUDGET_S and not over_budget:
            raise over_budget_error(len(started.heads), pair.n_tokens, started.seconds, more)
        result, by_position = finish_patching(source, pair, started)
    tokens = read_texts(text, pair.clean_encoding.tokens)  # " Mary", its leading space kept
    value = patch_json(result, tokens, started.confirmed, by_position)
    return in_language(lang, lambda: _patching_result(result, pair, by_position, value))


def over_budget_error(heads: int, tokens: int, seconds: float, more: Any = ""):
    return over_budget("notebook_labs.patch_over_budget", heads=heads, tokens=tokens, seconds=seconds, more=more)


def patching_frame(result: Any) -> pd.DataFrame:
    """A row a head: the fraction of the gap it restores patched alone (None: not run), and the estimate's."""
    rows = []
    for layer, row in enumerate(result.effects):
        for head, v in enumerate(row):
            entry = {"layer": layer, "head": head, "effect": v}
            if result.estimate is not None:
                entry["estimate"] = result.estimate.values[layer][head]
            rows.append(entry)
    return pd.DataFrame(rows)


def _patching_result(result: Any, pair: Any, by_position: Any, value: dict) -> LabResult:
    from attnviz.figures.heads_matter import make_head_effect_figure
    from attnviz.figures.position_patching import make_position_patch_figure
    from attnviz.i18n.translate import t

    measure = t("patching.fraction")
    maps = [result.effects] + ([result.estimate.values] if result.estimate is not None else [])
    shown = [abs(v) for values in maps for row in values for v in row if v is not None and math.isfinite(v)]
    limit = max(shown, default=1.0)  # one scale for both maps: the same head is the same colour in each
    figures = [make_head_effect_figure(result.effects, title=t("patching.exact_title"), measure=measure, limit=limit)]
    if result.estimate is not None:
        title = t("patching.estimate_title")
        figures.append(make_head_effect_figure(result.estimate.values, title=title, measure=measure, limit=limit))
    if by_position is not None:
        layer, head = by_position.head
        title = t("patch_positions.figure_title", layer=layer, head=head)
        figures.append(
            make_position_patch_figure(by_position.fractions, pair.clean_tokens, title=title, measure=measure)
        )
    extra = {"positions": by_position}
    return LabResult("patching", patching_frame(result), tuple(figures), value, result, extra)


def direct_logits(
    model: Any,
    tokenizer: Any,
    text: str,
    *,
    token: str | None = None,
    position: int | None = None,
    max_tokens: int | None = None,
    name: str | None = None,
    lang: str = "en",
) -> LabResult:
    """Each head's direct contribution to one token's logit at one position, as ``attnviz logits`` does: through
    W_O, the final norm with its scale frozen and the unembedding, on at most PATCH_TOKENS tokens. ``token``: one
    token's text, spaces kept (" Mary"; default the model's top prediction); ``position``: default the last,
    negative from the end. ValueError where the heads' parts do not add up to the model's logit.

    Returns a :class:`LabResult`: ``frame`` a row a head (layer, head, contribution at the position: the JSON's
    ``heads``), figures the page's layer × head map and the top head's contribution at every position, ``json``
    ``attnviz logits --json``'s object, ``found`` the :class:`~attnviz.labs.heads_matter.direct_logits.DirectLogits`."""
    from attnviz.cli.logits import logits_json
    from attnviz.core.token_display import read_texts
    from attnviz.labs.heads_matter.common import token_limit
    from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution
    from attnviz.models.source import Capability
    from attnviz.settings import PATCH_TOKENS

    checked_text(text)
    if token is not None and not token:
        raise ValueError(msg("notebook_labs.empty_token"))
    n_tokens = token_limit(checked_max_tokens(max_tokens), PATCH_TOKENS)
    with borrowed(model, tokenizer, name) as source:
        require(source, Capability.EDIT_HEADS, "patching_lib.unsupported")
        require(source, Capability.GENERATE, "direct_logits_lib.no_lm")
        found = direct_logit_attribution(source, text, n_tokens, token, position)
        tokens = read_texts(text, source.encode(text, n_tokens).tokens)  # " Mary", as read
    at = len(found.tokens) - 1 if position is None else position % len(found.tokens)
    if not found.checked:
        raise ValueError(msg("notebook_labs.not_attributed", error=found.check_error))
    value = logits_json(found, at)
    value["tokens"] = tokens
    return in_language(lang, lambda: _logits_result(found, at, value))


def logits_frame(found: Any, position: int) -> pd.DataFrame:
    """A row a head: its direct contribution to the logit at ``position``."""
    per_head = found.at(position).tolist()
    rows = [
        {"layer": layer, "head": head, "contribution": v}
        for layer, row in enumerate(per_head)
        for head, v in enumerate(row)
    ]
    return pd.DataFrame(rows)


def _logits_result(found: Any, at: int, value: dict) -> LabResult:
    from attnviz.core.token_display import visible_text
    from attnviz.figures.base import hover_text
    from attnviz.figures.heads_matter import make_head_effect_figure, make_positions_figure
    from attnviz.i18n.translate import t

    token_shown = hover_text(visible_text(found.token))  # the reader's token: data, not Plotly markup
    measure = t("patching.logit_measure", token=token_shown)
    title = t("patching.logits_title", token=token_shown, position=at)
    figures = [make_head_effect_figure(found.at(at).tolist(), title=title, measure=measure)]
    ranked = found.ranked(at, 1)
    if ranked:
        layer, head, _ = ranked[0]
        figures.append(
            make_positions_figure(
                found.head_positions((layer, head)).tolist(),
                found.tokens,
                title=t("patching.positions_title", layer=layer, head=head, token=token_shown),
                measure=measure,
            )
        )
    return LabResult("direct_logits", logits_frame(found, at), tuple(figures), value, found)
