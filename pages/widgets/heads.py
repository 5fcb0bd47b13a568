"""The Heads page's own widgets: the grid and the statistics, their figures cached per record.

A figure holds words, so its cache is keyed by the reader's language as well as by what produced the record;
the record itself (the capture) is cached once for every language.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from attnviz.app.state import valid_choice
from attnviz.app.widgets import plotly
from attnviz.core.head_stats import describe_flags
from attnviz.figures.alignment import make_alignment_figure
from attnviz.figures.heads import (
    HeadGrid,
    grid_view,
    head_grid,
    head_grid_figure,
    make_head_stats_figure,
    stat_name,
    stats_in_words,
)
from attnviz.figures.lines import Lines, line_threshold, make_lines_figure
from attnviz.i18n.translate import language, t
from attnviz.labs.alignment import RANKED_HEADS, alignment, alignment_table, ranked_heads
from attnviz.models.record import AttentionRecord, token_labels


def grid_of(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str = "all heads", compact: bool = False
) -> HeadGrid:
    """The layer x head grid of a record (keyed by what produced the record), flags on hover.

    ``show`` is one of :func:`attnviz.figures.heads.grid_show_options` (dim all but one flag, or sort each
    layer's heads by a statistic); ``compact`` fits the grid in about 900 px.
    """
    return _grid_of(record_key, gamma, _record, show, compact, language())


def grid_figure(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str = "all heads", compact: bool = False
) -> go.Figure:
    """:func:`grid_of` as the Plotly figure its Export menu saves."""
    return head_grid_figure(grid_of(record_key, gamma, _record, show, compact))


@st.cache_resource(max_entries=32, show_spinner=False)  # read-only: shared, not copied on every rerun
def _grid_of(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str, compact: bool, lang: str
) -> HeadGrid:
    view = grid_view(_record.statistics, _record.n_layer, _record.n_head, show)
    return head_grid(
        _record.pooled_grid("max"), mean=_record.mean_grid(), gamma=gamma, max_height=900 if compact else None, **view
    )


def lines(record: AttentionRecord) -> Lines:
    """Every head's exact weights on a short text, and which of them the lines view draws."""
    return line_threshold(np.stack([record.weights(layer, None).numpy() for layer in range(record.n_layer)]))


@st.cache_data(max_entries=8, show_spinner=False)
def lines_figure(record_key: tuple, _record: AttentionRecord, _lines: Lines, lang: str) -> go.Figure:
    """The lines view of a short text (keyed by what produced the record, and the language)."""
    return make_lines_figure(_lines, token_labels(_record.tokens), token_labels(_record.keys_tokens))


@st.cache_data(max_entries=32, show_spinner=False)
def _stats_figure(record_key: tuple, metric: str, _record: AttentionRecord, lang: str) -> go.Figure:
    return make_head_stats_figure(_record.statistics, metric)


def stats_section(record: AttentionRecord, record_key: tuple, key: str) -> None:
    """The per-head statistics: a chart of one statistic and the whole table."""
    metric = st.selectbox(t("views.statistic"), record.stat_columns, key=f"{key}_metric", format_func=stat_name)
    plotly(_stats_figure(record_key, metric, record, language()), key=f"{key}_stats_chart")
    flags = stat_name("flags")
    st.dataframe(
        stats_in_words(record.statistics),  # headers and flags in the reader's language, the numbers as they are
        key=f"{key}_stats_table",
        hide_index=True,
        width="stretch",
        column_config={flags: st.column_config.TextColumn(flags, width="large")},
    )
    st.caption(t("views.stats_caption", flags=describe_flags()))
    if record.has_value_norms:
        st.caption(t("value_weighted.statistic"))


def alignment_section(record: AttentionRecord, record_key: tuple) -> None:
    """The alignment view of a cross-attention record: its heads ranked by monotonicity, the mean map of the ones
    picked with each target token's most-attended source token marked, and that hard alignment listed."""
    st.subheader(t("alignment.title"))
    st.caption(t("alignment.caption"))
    ranking = ranked_heads(record)
    names = [f"L{int(r.layer)} H{int(r.head)}" for r in ranking.itertuples()]
    pairs = {name: (int(r.layer), int(r.head)) for name, r in zip(names, ranking.itertuples(), strict=True)}
    shown = ranking.head(RANKED_HEADS).rename(columns=stat_name)
    shown.insert(0, t("alignment.rank"), range(1, len(shown) + 1))
    st.dataframe(shown, key="alignment_ranking", hide_index=True, width="stretch")
    valid_choice("alignment_heads", names, names[:1])
    chosen = st.multiselect(t("alignment.heads"), names, key="alignment_heads", help=t("alignment.heads_help"))
    if not chosen:
        st.info(t("alignment.pick"))
        return
    found = alignment(record, [pairs[name] for name in chosen])
    title = t("alignment.map_title", heads=", ".join(chosen))
    fig = make_alignment_figure(found, record.labels(), record.key_labels()[: found.weights.shape[1]], title=title)
    plotly(fig, key="alignment_map")
    st.caption(t("alignment.hard_caption"))
    table = alignment_table(record, found)
    table.columns = [t("alignment.target"), t("alignment.source"), t("alignment.weight")]
    st.dataframe(table, key="alignment_table", hide_index=True, width="stretch")
