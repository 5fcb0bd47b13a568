"""The Heads page's own widgets: the grid and the statistics, their figures cached per record.

A figure holds words, so its cache is keyed by the reader's language as well as by what produced the record;
the record itself (the capture) is cached once for every language.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from attnviz.app.widgets import plotly
from attnviz.core.head_stats import describe_flags
from attnviz.figures.heads import grid_view, make_head_grid_figure, make_head_stats_figure, stat_name, stats_in_words
from attnviz.figures.lines import Lines, line_threshold, make_lines_figure
from attnviz.i18n.translate import language, t
from attnviz.models.record import AttentionRecord, token_labels


def grid_figure(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str = "all heads", compact: bool = False
) -> go.Figure:
    """The layer x head grid of a record (keyed by what produced the record), flags on hover.

    ``show`` is one of :func:`attnviz.figures.heads.grid_show_options` (dim all but one flag, or sort each
    layer's heads by a statistic); ``compact`` fits the grid in about 900 px.
    """
    return _grid_figure(record_key, gamma, _record, show, compact, language())


@st.cache_data(max_entries=32, show_spinner=False)
def _grid_figure(
    record_key: tuple, gamma: float, _record: AttentionRecord, show: str, compact: bool, lang: str
) -> go.Figure:
    view = grid_view(_record.statistics, _record.n_layer, _record.n_head, show)
    return make_head_grid_figure(
        _record.pooled_grid("max"), mean=_record.mean_grid(), gamma=gamma, max_height=900 if compact else None, **view
    )


def lines(record: AttentionRecord) -> Lines:
    """Every head's exact weights on a short text, and which of them the lines view draws."""
    return line_threshold(np.stack([record.weights(layer, None).numpy() for layer in range(record.n_layer)]))


@st.cache_data(max_entries=8, show_spinner=False)
def lines_figure(record_key: tuple, _record: AttentionRecord, _lines: Lines, lang: str) -> go.Figure:
    """The lines view of a short text (keyed by what produced the record, and the language)."""
    labels = token_labels(_record.tokens)
    return make_lines_figure(_lines, labels, labels)


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
