"""The Corpus page's sections: which run it reads (a folder typed, a run started here, or a new run), its heads
placed on two metrics with their spread, and a chosen head's top texts with its attention on one of them.

The run's numbers come from :class:`attnviz.labs.corpus.CorpusRun` (its summary, its Parquet parts), the figure
from :mod:`attnviz.figures.corpus`; a run started here goes on its own thread (:mod:`attnviz.app.corpus_jobs`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from attnviz.app import corpus_jobs
from attnviz.app.head_links import open_in_heads_page
from attnviz.app.head_view import head_view
from attnviz.app.hosted import is_hosted
from attnviz.app.loading import cached, cached_job, capture_need, current_source, shape_need
from attnviz.app.progress import duration_text, price_note, probed, quote
from attnviz.app.queue_view import admission
from attnviz.app.state import Settings, valid_choice
from attnviz.app.widgets import plotly, show_error, show_info, table
from attnviz.core.device_speed import device_of
from attnviz.core.token_display import markdown_text
from attnviz.errors import ModelUnavailableError
from attnviz.figures.corpus import (
    filter_heads,
    flag_shares,
    head_metrics,
    head_name,
    make_corpus_scatter_figure,
    metric_columns,
    metric_name,
)
from attnviz.figures.heads import GRID_FLAGS, flag_names
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t
from attnviz.labs.corpus import DEFAULT_BATCH_TOKENS, CorpusRun, read_texts
from attnviz.labs.corpus.run import route_runs
from attnviz.models.record import AttentionRecord
from attnviz.models.source import Capability

SAMPLES = Path(__file__).resolve().parent.parent / "labs" / "corpus" / "samples"
SAMPLE_FILES = {"sample_en": "classics_en.txt", "sample_zh": "classics_zh.txt"}
UPLOAD = "upload"
DEFAULT_LIMIT, MAX_LIMIT = 40, 100_000  # texts a run started here reads: the default, and the most the box takes
HOSTED_LIMIT = 1_000  # ... on a hosted server, where a stranger's run is the server's time
DEFAULT_RUN_TOKENS = 256  # tokens a text, by default (the sidebar's limit when lower)
TEXT_START_CHARS = 160  # a text's start in the top-texts table
TEXT_PICK_CHARS = 80  # ... and in the picker of the text the head is drawn on
TOP_K = (5, 10, 20, 50)
DEFAULT_X, DEFAULT_Y = "prev_token_weight", "first_token_weight"  # previous-token heads right, sink heads up
PROBE_Y = "induction"  # the probe's induction score up, when the run has it


@functools.cache
def sample_size(name: str) -> int:
    """How many texts a bundled sample holds."""
    return sum(1 for _ in read_texts(SAMPLES / name))


def open_run(settings: Settings) -> CorpusRun | None:
    """The run the page reads: a folder typed, a run started here, or one started now; None after saying why."""
    st.caption(t("corpus.intro"))
    left, right = st.columns([1, 3])
    mode = left.radio(
        t("corpus.from"), ["open", "start"], format_func=lambda m: t(f"corpus.from_{m}"), key="corpus_from"
    )
    runs = corpus_jobs.started_runs()
    folder = ""
    with right:
        if mode == "start":
            start_section(settings)
        if runs:
            valid_choice("corpus_started", ["", *runs], next(reversed(runs)))
            folder = st.selectbox(
                t("corpus.started"),
                ["", *runs],
                format_func=lambda d: t("corpus.started_none") if not d else _run_label(runs[d]),
                key="corpus_started",
            )
        if mode == "open":
            if is_hosted():
                st.caption(t("corpus.dir_hosted"))
            else:
                folder = st.text_input(t("corpus.dir"), key="corpus_dir").strip() or folder
    if folder in runs:
        job_panel(runs[folder])
    if not folder:
        st.info(t("corpus.type_dir"))
        return None
    try:
        return CorpusRun.open(os.path.expanduser(folder))
    except (OSError, ValueError) as err:
        if folder in runs and runs[folder].running:
            return None  # its first batch is not written yet: the panel above says how it goes
        show_error(msg("corpus.bad_dir", path=folder, reason=str(err)))
        return None


def _run_label(job: corpus_jobs.CorpusJob) -> str:
    return f"{job.out_dir.name} · {job.model}"  # no count: a label that changes loses the browser's choice


def start_section(settings: Settings) -> None:
    """The texts (a bundled sample or an upload), the bounds, the price, and the Start button."""
    source = current_source(settings)
    if source is None:
        return
    options = [*SAMPLE_FILES, UPLOAD]
    which = st.selectbox(
        t("corpus.sample"),
        options,
        format_func=lambda o: t("corpus.upload") if o == UPLOAD else t(f"corpus.{o}", n=sample_size(SAMPLE_FILES[o])),
        key="corpus_sample",
    )
    path, name = None, None
    if which == UPLOAD:
        upload = st.file_uploader(
            t("corpus.upload_label"), type=["txt", "jsonl", "csv", "parquet"], key="corpus_upload"
        )
        if upload is None:
            st.info(t("corpus.upload_first"))
            return
        name = upload.name
    else:
        path, name = SAMPLES / SAMPLE_FILES[which], SAMPLE_FILES[which]
    cols = st.columns(2)
    most = HOSTED_LIMIT if is_hosted() else MAX_LIMIT
    limit = int(cols[0].number_input(t("corpus.limit"), 1, most, DEFAULT_LIMIT, key="corpus_limit"))
    top = min(settings.max_tokens, source.max_positions)
    max_tokens = int(
        cols[1].number_input(t("corpus.max_tokens"), 1, top, min(DEFAULT_RUN_TOKENS, top), key="corpus_max_tokens")
    )
    if which != UPLOAD:
        limit = min(limit, sample_size(SAMPLE_FILES[which]))
    price = run_price(source, settings, max_tokens, limit)
    st.caption(
        t(
            "corpus.price",
            time=duration_text(price.seconds),
            n=limit,
            tokens=max_tokens,
            model=markdown_text(source.name),
        )
        + " "
        + price_note(price)
    )
    # the label holds no number: a label that changes (the price, re-quoted each run) would lose the click
    if st.button(t("corpus.start"), key="corpus_start", type="primary"):
        out_dir = corpus_jobs.new_run_folder(name)
        if path is None:  # an upload: written beside the run's folder (a run starts in an empty one), read from there
            path = out_dir.with_name(f"{out_dir.name}-input{Path(name).suffix.lower()}")
            path.write_bytes(upload.getvalue())
        shape = (source.n_layer, source.n_head, source.n_kv_head, source.head_dim, DEFAULT_BATCH_TOKENS)
        eager = Capability.KEEP_QK not in source.capabilities
        need = shape_need(*shape, device=device_of(source), all_weights=eager)  # a batch's capture at most
        need = dataclasses.replace(need, seconds=price.seconds)  # for as long as the run was priced
        corpus_jobs.start_run(
            source, path, out_dir, max_tokens=max_tokens, limit=limit, model=source.name, need=need, gate=admission()
        )
        st.session_state["corpus_started"] = str(out_dir)
        st.session_state["corpus_dir"] = ""


def run_price(source, settings: Settings, max_tokens: int, limit: int):
    """What a run of ``limit`` texts of at most ``max_tokens`` costs: one capture of a text that long (the
    English sample's texts joined), timed on this machine, times the texts; an upper bound, as most texts are
    shorter (and a run batches them)."""
    key = (settings.spec, max_tokens)
    texts = read_texts(SAMPLES / SAMPLE_FILES["sample_en"])
    text = " ".join(text for _, (_, text) in zip(range(60), texts, strict=False))

    def timed() -> float:
        began = time.perf_counter()
        source.run(text, max_tokens)
        return time.perf_counter() - began

    seconds = cached("corpus_price", key, probed(("corpus", *key), timed, source.device), t("corpus.capturing"))
    return quote(("corpus", *key), seconds * limit, device=source.device)


@st.fragment(run_every=1.0)
def job_panel(job: corpus_jobs.CorpusJob) -> None:
    """A run started here: its progress and time left with a Stop while it runs (redrawn each second), how it
    ended once it has (the whole page drawn again then, with the run's results)."""
    if job.running:
        state = job.state
        total = job.total if state is None or state.texts_total is None else state.texts_total
        left = job.remaining_s()
        when = t("corpus.left", time=duration_text(left)) if left is not None else t("corpus.left_estimating")
        done = job.done_texts()
        st.progress(
            min(1.0, done / total) if total else 0.0,
            text=t(
                "corpus.running",
                model=markdown_text(job.model),
                done=done,
                total=f"{total:,}" if total else t("corpus.total_unknown"),
                elapsed=duration_text(job.seconds),
                left=when,
            ),
        )
        if job.stop.is_set():
            st.caption(t("corpus.stopping"))
        elif st.button(t("corpus.stop"), key=f"corpus_stop_{job.out_dir.name}"):
            job.stop.set()
            st.caption(t("corpus.stopping"))
        st.session_state[f"corpus_seen_{job.out_dir.name}"] = "running"
        return
    if job.error is not None:
        show_error(msg("corpus.failed", error=job.error))
    else:
        ended = "stopped_run" if getattr(job.report, "stopped", False) else "finished"
        st.success(
            t(
                f"corpus.{ended}",
                done=job.done_texts(),
                time=duration_text(job.seconds),
                path=markdown_text(str(job.out_dir)),
            )
        )
    if st.session_state.pop(f"corpus_seen_{job.out_dir.name}", None) == "running":
        st.rerun()  # the run ended while this panel watched it: the page draws its results


def run_caption(run: CorpusRun, n_heads: int) -> None:
    summary = run.summary
    st.caption(
        t(
            "corpus.run_caption",
            model=markdown_text(str(summary.get("model"))),
            dtype=markdown_text(str(summary.get("dtype"))),
            device=markdown_text(str(summary.get("device"))),
            texts=int(summary.get("texts_done") or 0),
            tokens=int(summary.get("tokens_done") or 0),
            heads=n_heads,
            max_tokens=int(summary.get("max_tokens") or 0),
            stopped=t("corpus.run_stopped") if summary.get("stopped") else "",
        )
    )
    runs = route_runs(list(summary.get("routes") or []))
    if runs:  # how each layer was captured: the route note of a corpus run
        parts = [
            t(
                "corpus.route_run",
                layers=f"L{first}" if first == last else f"L{first}–L{last}",
                route=_route_name(route),
            )
            for route, first, last in runs
        ]
        st.caption(t("corpus.routes", runs="; ".join(parts)))


def _route_name(route: str) -> str:
    """A route as the catalogue names it ("reference", "fused", "eager", or several joined by "+" on a resumed run)."""
    known = ("reference", "fused", "eager")
    return " + ".join(t(f"corpus.route_{part}") if part in known else markdown_text(part) for part in route.split("+"))


def run_metrics(run: CorpusRun) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Each head's metrics (the summary's spread and the probe's scores) and the share of its texts each flag was
    on (the summary's counts: the rows are never read), cached while the run's summary does not change."""
    key = (str(run.out_dir), run.summary.get("texts_done"), run.summary.get("seconds"))

    def compute():
        metrics = head_metrics(run.summary.get("heads", []), run.probe())
        return metrics, flag_shares(metrics, GRID_FLAGS)

    return cached("corpus_metrics", key, compute, t("corpus.place"))


def place_heads(run: CorpusRun, metrics: pd.DataFrame, shares: dict[str, np.ndarray]) -> dict | None:
    """The filters, the scatter, and the head chosen (a click on a point, or the pickers): its keys, or None."""
    columns = metric_columns(metrics)
    pick = st.columns([2, 2, 1], vertical_alignment="bottom")
    valid_choice("corpus_x", columns, DEFAULT_X if DEFAULT_X in columns else columns[0])
    y_default = PROBE_Y if PROBE_Y in columns else DEFAULT_Y
    valid_choice("corpus_y", columns, y_default if y_default in columns else columns[-1])
    x = pick[0].selectbox(t("corpus.x"), columns, format_func=metric_name, key="corpus_x")
    y = pick[1].selectbox(t("corpus.y"), columns, format_func=metric_name, key="corpus_y")
    n_layer = int(metrics["layer"].max()) + 1
    stack_kind, layers = None, (0, n_layer - 1)
    with pick[2].popover(t("corpus.filters"), icon=":material/filter_list:", width="stretch"):
        if n_layer > 1:
            layers = st.slider(t("corpus.layers"), 0, n_layer - 1, layers, key="corpus_layers")
        most = int(metrics["n_texts"].max())
        min_texts = int(st.number_input(t("corpus.min_texts"), 0, max(most, 0), 0, key="corpus_min_texts"))
        flags = st.multiselect(t("corpus.flags"), list(GRID_FLAGS), format_func=flag_names, key="corpus_flags")
        if "kind" in metrics.columns:
            kinds = sorted({f"{s} {k}" for s, k in zip(metrics["stack"], metrics["kind"], strict=True)})
            valid_choice("corpus_kind", kinds, kinds[0])
            stack_kind = st.selectbox(t("corpus.kind"), kinds, key="corpus_kind")
    stack, kind = stack_kind.split(" ", 1) if stack_kind else (None, None)
    shown = filter_heads(
        metrics,
        layers=layers,
        min_texts=min_texts,
        stack=stack,
        kind=kind,
        flags=flags,
        flag_share=shares,
    )
    if shown.empty:
        st.info(t("corpus.no_heads_left"))
        return None
    names = [head_name(row) for row in shown.to_dict("records")]
    chosen = st.session_state.get("corpus_head")
    selected = shown.iloc[names.index(chosen)].to_dict() if chosen in names else None
    plotly(
        make_corpus_scatter_figure(shown, x, y, selected=selected),
        key="corpus_scatter",
        on_select=functools.partial(_pick_clicked, names),
        selection_mode=("points",),
    )
    st.caption(t("corpus.scatter_caption"))
    valid_choice("corpus_head", names, names[0])
    name = st.selectbox(t("corpus.head"), names, key="corpus_head")
    return shown.iloc[names.index(name)].to_dict()


def _pick_clicked(names: list[str]) -> None:
    """A click on a point chooses its head (a callback: it runs before the Head picker is drawn again)."""
    row = _clicked_row(st.session_state.get("corpus_scatter"))
    if row is not None and row < len(names):
        st.session_state["corpus_head"] = names[row]


def _clicked_row(event) -> int | None:
    """The row of the point a click selected (its customdata), or None."""
    try:
        selection = event["selection"] if isinstance(event, dict) else event.selection
        return int(selection["points"][0]["customdata"][0])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def top_texts(run: CorpusRun, head: dict, metrics: pd.DataFrame, settings: Settings) -> None:
    """The texts where ``head`` does most by a chosen statistic, and its attention on one of them."""
    st.subheader(t("corpus.chosen"))
    stats = [c for c in metric_columns(metrics) if f"{c}_std" in metrics.columns]
    cols = st.columns([3, 1, 1])
    across = st.session_state.get("corpus_x")  # ranked first by what the scatter puts across
    valid_choice("corpus_stat", stats, across if across in stats else DEFAULT_X if DEFAULT_X in stats else stats[0])
    stat = cols[0].selectbox(t("corpus.stat"), stats, format_func=metric_name, key="corpus_stat")
    k = cols[1].selectbox(t("corpus.k"), TOP_K, index=1, key="corpus_k")
    largest = cols[2].toggle(t("corpus.largest"), value=True, key="corpus_largest")
    where = {key: head[key] for key in ("stack", "kind") if isinstance(head.get(key), str)}
    layer, index = int(head["layer"]), int(head["head"])
    top = cached(
        "corpus_top",
        (str(run.out_dir), run.summary.get("texts_done"), layer, index, stat, k, largest, tuple(where.items())),
        lambda: run.top_texts(layer, index, stat, k=k, largest=largest, **where),
        t("corpus.chosen"),
    )
    name = head_name(head)
    st.caption(
        t(
            "corpus.top_caption",
            k=len(top),
            head=name,
            stat=metric_name(stat),
            which=t("corpus.which_largest" if largest else "corpus.which_smallest"),
            n=int(head["n_texts"]),
        )
    )
    shown = pd.DataFrame(
        {
            "id": top["text_id"],
            "value": top["value"].round(4),
            "tokens": top["n_tokens"],
            "text": [_start(text) for text in top["text"]],
        }
    )
    headers = {
        "id": "corpus.col_id",
        "value": "corpus.col_value",
        "tokens": "corpus.col_tokens",
        "text": "corpus.col_text",
    }
    table(shown, key="corpus_top", headers=headers, hide_index=True, width="stretch")
    if top.empty:
        return
    ids = [int(i) for i in top["text_id"]]
    valid_choice("corpus_text", ids, ids[0])
    starts = dict(zip(ids, top["text"], strict=True))
    text_id = st.selectbox(
        t("corpus.show_text", head=name),
        ids,
        format_func=lambda i: f"#{i} · {_start(starts[i])[:TEXT_PICK_CHARS]}",
        key="corpus_text",
    )
    head_on_text(run, head, run.text(text_id), text_id, settings)


def _start(text: str) -> str:
    """A text's start for the table: one line, cut (the table shows data as text, never as Markdown)."""
    line = " ".join(str(text).split())
    return line if len(line) <= TEXT_START_CHARS else line[: TEXT_START_CHARS - 1] + "…"


def head_on_text(run: CorpusRun, head: dict, text: str, text_id: int, settings: Settings) -> None:
    """The head's map on one text (the sidebar's model run on it, the record cached as the Heads page caches the
    sidebar's text), and a button that opens the Heads page on that text with that head chosen."""
    layer, index = int(head["layer"]), int(head["head"])
    st.button(
        t("corpus.open_heads"),
        key="corpus_open_heads",
        on_click=_ask_heads_page,
        args=(text, layer, index),
        icon=":material/open_in_new:",
    )
    source = current_source(settings)
    if source is None:
        return
    if source.name != run.summary.get("model"):
        show_info(msg("corpus.other_model", model=source.name, run_model=str(run.summary.get("model"))))
        return
    max_tokens = settings.max_tokens
    try:
        record = cached_job(
            "record",
            (settings.spec, text, max_tokens),  # the Heads page's key for the same text: opened there, it is ready
            lambda progress: source.run(text, max_tokens, progress=progress),
            t("corpus.capturing"),
            need=capture_need(source, text, max_tokens),
        )
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)
        return
    if not isinstance(record, AttentionRecord) or "kind" in head:
        st.info(t("corpus.pair_map"))
        return
    name = head_name(head)
    head_view(record, layer, index, key="corpus_map", title=f"{name} · #{text_id}")
    st.caption(t("corpus.map_caption", head=name, id=text_id, model=markdown_text(source.name), max_tokens=max_tokens))


def _ask_heads_page(text: str, layer: int, head: int) -> None:
    """The button's callback: the text goes in the sidebar's box (only a callback may set a drawn widget's value),
    and the page switches on its next run (:func:`follow_heads_link`)."""
    st.session_state["text"] = text
    st.session_state["corpus_open"] = (layer, head)


def follow_heads_link() -> None:
    """Open the Heads page when the last click asked for it (the switch cannot happen inside a callback)."""
    asked = st.session_state.pop("corpus_open", None)
    if asked is not None:
        open_in_heads_page(*asked)
