"""Roles and the sink over many runs: each head's role across several prompts, and its weight on the first token
as the input grows. Each run is a capture of its own, one after another, and a request is bounded
(:data:`STABILITY_MAX_PROMPTS` prompts of :data:`STABILITY_TOKENS` tokens, :data:`SINK_MAX_CELLS` attention cells).
"""

from __future__ import annotations

import pandas as pd

from attnviz.core.device_speed import device_of, speedup
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import msg
from attnviz.labs.head_roles.rules import ROLES, head_output_norms, head_roles
from attnviz.models.source import AttentionSource

# "Across prompts": the user's own prompts, one per line, at most this many, each cut to at most STABILITY_TOKENS
# tokens (and the sidebar's max tokens), so one request is at most 8 captures of 512 tokens
STABILITY_MAX_PROMPTS = 8
STABILITY_TOKENS = 512
STABILITY_PROMPT_CHARS = 20_000  # characters read from the text area before it is split into prompts

SINK_LENGTHS = (64, 256, 512)  # the default lengths of sink_vs_length: seconds on every bundled model
SINK_CHOICES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)  # the lengths the page offers (up to max_positions)
# sink_vs_length's time is dominated by the capture's n_layer x n_head x T² attention cells: SmolLM2-135M
# (30 x 9 heads) at 8,192 tokens: 47.5 s and 1,911 MB above the loaded model on an idle 2-core CPU
# (benchmarks/head_roles.py), about SINK_SECONDS_PER_CELL s a cell, plus about a second a length
SINK_8192_SECONDS = 48.0
SINK_SECONDS_PER_CELL = SINK_8192_SECONDS / (30 * 9 * 8192**2)
SINK_SECONDS_PER_LENGTH = 1.0
SINK_8192_MB = 1911
SINK_CONFIRM_SECONDS = 20.0  # a selection estimated slower than this runs only once the user confirms it
# one request's bound: every length the page offers on SmolLM2 (64 to 8,192 tokens), about 1.33 captures at 8,192.
# Peak memory is that of the longest capture alone (one capture at a time, each reduced to row statistics)
SINK_MAX_CELLS = 30 * 9 * sum(n * n for n in SINK_CHOICES)


def parse_prompts(text: str, max_prompts: int = STABILITY_MAX_PROMPTS) -> tuple[list[str], int]:
    """The user's prompts, one per line: (the first ``max_prompts`` non-empty lines, stripped; how many more there were).

    Only the first STABILITY_PROMPT_CHARS characters of ``text`` are read.
    """
    lines = [line.strip() for line in text[:STABILITY_PROMPT_CHARS].splitlines()]
    prompts = [line for line in lines if line]
    return prompts[:max_prompts], max(0, len(prompts) - max_prompts)


def role_stability(
    source: AttentionSource,
    texts: list[str],
    max_tokens: int,
    *,
    with_outputs: bool = False,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Each head's most common role over ``texts``: layer, head, role, share (of prompts), n_prompts.

    Each text is cut to min(max_tokens, STABILITY_TOKENS) tokens. ``with_outputs``
    measures every head's output on each text too (:func:`head_output_norms`), so
    "dead" counts as a role. Texts with fewer than two tokens are skipped;
    ValueError when none is left. Ties go to the role listed first in :data:`ROLES`. ``progress``: a step a prompt.
    """
    n_tokens = min(max_tokens, STABILITY_TOKENS)
    progress = or_none(progress)
    progress.stage("progress.prompt", len(texts))
    frames = []
    for text in texts:
        record = source.run(text, n_tokens)
        if len(record.tokens) >= 2:
            outputs = head_output_norms(source, text, n_tokens) if with_outputs else None
            frames.append(head_roles(record, outputs)[["layer", "head", "role"]])
        progress.step()
    if not frames:
        raise ValueError(msg("head_roles_lib.no_text_two_tokens", n=len(texts)))
    counts = pd.concat(frames).groupby(["layer", "head"])["role"].value_counts().rename("count").reset_index()
    counts["rank"] = counts["role"].map(ROLES.index)
    top = counts.sort_values(["layer", "head", "count", "rank"], ascending=[True, True, False, True])
    top = top.groupby(["layer", "head"]).head(1).reset_index(drop=True)
    return pd.DataFrame(
        {
            "layer": top["layer"],
            "head": top["head"],
            "role": top["role"],
            "share": top["count"] / len(frames),
            "n_prompts": len(frames),
        }
    )


def text_of_length(source: AttentionSource, text: str, n_tokens: int) -> str:
    """``text`` repeated until the source reads at least ``n_tokens`` tokens from it (ValueError when it is empty)."""
    if not source.encode(text, 1).tokens:
        raise ValueError(msg("head_roles_lib.no_tokens_repeat"))
    repeated = text
    while source.encode(repeated, n_tokens).n_input < n_tokens:
        repeated = f"{repeated} {repeated}"
    return repeated


def sink_vs_length(
    source: AttentionSource,
    text: str,
    lengths: tuple[int, ...] = SINK_LENGTHS,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Each head's weight on the first token as the input grows: length, layer, head, first_token_weight.

    ``text`` is repeated to each length (capped at the model's ``max_positions``);
    first_token_weight is the mean over query rows that see two keys. The
    captures keep no q and k, so each holds only row statistics and pooled maps;
    they run one after another, so the peak memory is the longest one's.
    ValueError over SINK_MAX_CELLS (:func:`check_sink_cost`). ``progress``: a step a length, each weighed by its
    attention cells (n²) so the estimate of the longer ones is calibrated on the shorter ones.
    """
    check_sink_cost(source, lengths)
    capped = sink_lengths(source, lengths)
    progress = or_none(progress)
    progress.stage("progress.length", len(capped), weights=[n * n for n in capped])
    frames = []
    for length in capped:
        record = source.run(text_of_length(source, text, length), length, keep_qk=False)
        stats = record.statistics[["layer", "head", "first_token_weight"]].copy()
        stats.insert(0, "length", len(record.tokens))
        frames.append(stats)
        progress.step()
    frame = pd.concat(frames, ignore_index=True)
    return frame.drop_duplicates(["length", "layer", "head"]).reset_index(drop=True)


def sink_lengths(source: AttentionSource, lengths) -> tuple[int, ...]:
    """The distinct lengths :func:`sink_vs_length` will capture: each capped at the model's max_positions, sorted."""
    return tuple(sorted({min(int(n), source.max_positions) for n in lengths}))


def sink_cells(source: AttentionSource, lengths) -> int:
    """The attention cells (n_layer · n_head · T², summed over lengths) the captures compute: the request's cost."""
    return source.n_layer * source.n_head * sum(n * n for n in sink_lengths(source, lengths))


def sink_seconds(source: AttentionSource, lengths) -> float:
    """About how long :func:`sink_vs_length` takes: on a 2-core CPU (see SINK_SECONDS_PER_CELL), divided by the
    source's device's measured speed-up (:func:`attnviz.core.device_speed.speedup`)."""
    n = len(sink_lengths(source, lengths))
    cpu = sink_cells(source, lengths) * SINK_SECONDS_PER_CELL + n * SINK_SECONDS_PER_LENGTH
    return cpu / speedup(device_of(source))


def check_sink_cost(source: AttentionSource, lengths) -> None:
    """ValueError, with the numbers, when the lengths ask for more than SINK_MAX_CELLS attention cells."""
    cells = sink_cells(source, lengths)
    if cells > SINK_MAX_CELLS:
        raise ValueError(
            msg(
                "head_roles_lib.sink_too_costly",
                cells=cells,
                n_layer=source.n_layer,
                n_head=source.n_head,
                max_cells=SINK_MAX_CELLS,
            )
        )
