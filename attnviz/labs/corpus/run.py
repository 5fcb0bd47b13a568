"""A corpus run: every head's statistics for every text of a file, written to a run folder as it goes.

The file is read a window of :data:`WINDOW_TEXTS` texts at a time; a window's texts are sorted by length and cut
into batches of similar length whose padded size (texts x longest) stays within ``batch_tokens``, so a batch
wastes little on padding and its memory is bounded whatever the corpus. Each batch goes to an executor (the local
one calls ``source.run_statistics``; :mod:`attnviz.labs.corpus.ray_run` spreads them over a Ray cluster), and
each result is written as one part (:mod:`attnviz.labs.corpus.store`) before the next is asked for. A run stops
between batches when ``should_stop`` says so, and ``resume`` goes on where the parts end: texts already in a part
are skipped, so an interrupted and resumed run holds exactly the rows of an unbroken one.

The time left is the tokens to go over the tokens a second measured so far: the tokens of the texts read but not
yet run, plus the unread rest of the file priced at the tokens per byte (per row, for Parquet) read so far.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

import pandas as pd

from attnviz.labs.corpus import DEFAULT_BATCH_TOKENS
from attnviz.labs.corpus.readers import TextReader, read_texts
from attnviz.labs.corpus.store import RunStore, part_name

WINDOW_TEXTS = 256  # texts read ahead and sorted by length; bounds the memory the sort takes
SUMMARY_EVERY_S = 5.0  # the summary rewritten at most this often while a run goes on (and always at its end)
CHARS_PER_TOKEN = 4  # a text's tokens guessed from its length where no tokenizer is at hand (a Ray driver)

Batch = list[tuple[int, str]]


@dataclass(frozen=True)
class CorpusProgress:
    """Where a run is: texts and tokens done (earlier sessions included), this session's tokens a second, and
    the seconds left (None until a batch has run and the file's size or the --limit says how much is left)."""

    texts_done: int
    tokens_done: int
    seconds: float
    tokens_per_s: float
    seconds_left: float | None
    texts_total: int | None


@dataclass(frozen=True)
class CorpusReport:
    """What a run did: its folder, the model, texts and tokens done in all, the texts of the run (None when the
    run stopped before the file's end), seconds in all, whether it stopped early, and each layer's route."""

    out_dir: Path
    model: str
    texts_done: int
    texts_total: int | None
    tokens_done: int
    seconds: float
    stopped: bool
    routes: list[str]


class LocalExecutor:
    """Batches run one after another in this process, by ``source.run_statistics``."""

    def __init__(self, source, max_tokens: int) -> None:
        self.source, self.max_tokens = source, max_tokens

    def run(self, batches: Iterator[Batch]) -> Iterator[tuple[Batch, list]]:
        for batch in batches:
            yield batch, self.source.run_statistics([text for _, text in batch], self.max_tokens)

    def probe(self) -> pd.DataFrame | None:
        """The induction probe's rows on this process's model (an executor's ``probe``: where the model is)."""
        return induction_scores(self.source)


def plan_batches(window: list[tuple[int, str, int]], batch_tokens: int) -> list[list[tuple[int, str, int]]]:
    """``(text_id, text, n_tokens)`` sorted by length and cut into batches whose texts x longest stays within
    ``batch_tokens`` (a text longer than that alone in its batch)."""
    batches: list[list[tuple[int, str, int]]] = []
    current: list[tuple[int, str, int]] = []
    for item in sorted(window, key=lambda t: (t[2], t[0])):
        if current and (len(current) + 1) * max(item[2], 1) > batch_tokens:
            batches.append(current)
            current = []
        current.append(item)
    if current:
        batches.append(current)
    return batches


def token_counter(source, max_tokens: int) -> Callable[[str], int]:
    """A text's tokens as ``source`` reads them (cut to ``max_tokens``), or a guess from its length."""
    if source is not None and hasattr(source, "encode"):
        return lambda text: len(source.encode(text, max_tokens).tokens)
    return lambda text: min(max_tokens, max(1, math.ceil(len(text) / CHARS_PER_TOKEN)))


@dataclass
class _Feed:
    """The batches of a run, read from the file a window at a time, with what the time left is priced from."""

    reader: TextReader
    store: RunStore
    count: Callable[[str], int]
    batch_tokens: int
    limit: int | None
    should_stop: Callable[[], bool]
    n_read: int = 0  # texts read, done ones included (what --limit counts)
    tokens_read: int = 0  # tokens of the texts read that were not done yet (as counted before their pass)
    tokens_counted_done: int = 0  # the same count, of the texts whose results came back
    counts: dict = field(default_factory=dict)  # text id -> its counted tokens, while it is queued or running
    n_skipped: int = 0  # texts read that an earlier session had done
    units_skipped: int = 0  # bytes (rows) of texts already done, left out of the tokens-per-byte price
    exhausted: bool = False  # the file (or the --limit) is read to its end
    stopped: bool = False
    pending: list = field(default_factory=list)  # batches planned, not yet handed out

    def _window(self) -> None:
        window = []
        while len(window) < WINDOW_TEXTS:
            if self.limit is not None and self.n_read >= self.limit:
                self.exhausted = True
                break
            before = self.reader.position
            item = next(self.reader, None)
            if item is None:
                self.exhausted = True
                break
            self.n_read += 1
            text_id, text = item
            if self.store.is_done(text_id):
                self.n_skipped += 1
                self.units_skipped += self.reader.position - before
                continue
            n_tokens = self.count(text)
            self.tokens_read += n_tokens
            self.counts[text_id] = n_tokens
            window.append((text_id, text, n_tokens))
        self.pending = plan_batches(window, self.batch_tokens)

    def batches(self) -> Iterator[Batch]:
        while True:
            if not self.pending and not self.exhausted:
                self._window()
            if not self.pending:
                return
            if self.should_stop():
                self.stopped = True
                return
            yield [(text_id, text) for text_id, text, _ in self.pending.pop(0)]

    def done(self, batch: Batch) -> None:
        self.tokens_counted_done += sum(self.counts.pop(text_id, 0) for text_id, _ in batch)

    def tokens_to_go(self, tokens_run: int) -> float | None:
        """Tokens not yet run: those read, and the unread rest priced as what was read (None: not yet known), in
        the passes' tokens (a count that was a guess from the length is scaled by how the guesses turned out)."""
        if self.tokens_counted_done == 0:
            return None
        scale = tokens_run / self.tokens_counted_done
        queued = (self.tokens_read - self.tokens_counted_done) * scale
        if self.exhausted:
            return float(queued)
        counted = self.reader.position - self.units_skipped
        if self.reader.size is None or counted <= 0 or self.tokens_read == 0:
            return None
        rest = (self.reader.size - self.reader.position) * self.tokens_read / counted
        if self.limit is not None:
            texts_counted = max(1, self.n_read - self.n_skipped)
            rest = min(rest, (self.limit - self.n_read) * self.tokens_read / texts_counted)
        return queued + max(rest, 0.0) * scale


def describe(source, executor, model_info: dict | None) -> dict:
    """The model's name, dtype, device and implementation: the source's, else the executor's, then ``model_info``."""
    info: dict = {}
    if source is not None:
        dtype = getattr(source, "dtype", None)
        info = {
            "model": source.name,
            "dtype": None if dtype is None else str(dtype).removeprefix("torch."),
            "device": str(source.device),
            "implementation": getattr(source, "implementation", None),
        }
    elif executor is not None and hasattr(executor, "model_info"):
        info = dict(executor.model_info())
    info.update(model_info or {})
    if "model" not in info:
        raise ValueError("a corpus run without a source needs model_info naming the model")
    return info


def run_corpus(
    source,
    path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    max_tokens: int,
    limit: int | None = None,
    resume: bool = False,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: Callable[[CorpusProgress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    executor=None,
    model_info: dict | None = None,
    fmt: str | None = None,
    probe: bool = True,
) -> CorpusReport:
    """Every head's statistics for every text of the corpus file ``path`` (its first ``limit`` texts), written
    to the run folder ``out_dir`` (:mod:`attnviz.labs.corpus.store`), a batch at a time; with ``resume``, an
    interrupted run of the same parameters goes on. ``progress`` is called after each batch; ``should_stop`` is
    asked before each. ``probe``: the induction probe once per run, run where the model is (``executor.probe()``:
    this process, or one of a cluster's actors).
    ValueError (one line) for bad input: the file, the folder, the numbers."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")
    if batch_tokens < 1 or max_tokens < 1:
        raise ValueError(f"max_tokens ({max_tokens}) and batch_tokens ({batch_tokens}) must be 1 or more")
    if source is None and executor is None:
        raise ValueError("a corpus run needs a source or an executor")
    next(read_texts(path, fmt), None)  # a missing column or a bad first line refused before the folder is made
    reader = read_texts(path, fmt)
    info = describe(source, executor, model_info)
    stat = reader.path.stat()
    params = {
        "model": info["model"],
        "dtype": info.get("dtype"),
        "device": info.get("device"),
        "max_tokens": max_tokens,
        "file": str(reader.path.resolve()),
        "file_size": stat.st_size,
        "file_mtime": stat.st_mtime,
        "format": reader.format,
        "batch_tokens": batch_tokens,
        "limit": limit,
    }
    store = RunStore.open(out_dir, params, resume)
    executor = executor or LocalExecutor(source, max_tokens)
    if probe and not store.has_probe():
        frame = executor.probe()
        if frame is not None:
            store.write_probe(frame)
    feed = _Feed(reader, store, token_counter(source, max_tokens), batch_tokens, limit, should_stop or (lambda: False))
    routes = [set(route.split("+")) for route in store.routes_before]  # each layer's routes, every session's
    started = written = perf_counter()
    tokens_run = 0

    def summary() -> dict:
        return {
            **info,
            "routes": ["+".join(sorted(r)) for r in routes],
            "file": params["file"],
            "format": reader.format,
            "max_tokens": max_tokens,
            "limit": limit,
            "texts_total": feed.n_read if feed.exhausted and not feed.pending and not feed.stopped else None,
            "texts_done": store.texts_done,
            "tokens_done": store.tokens_done,
            "seconds": store.seconds_before + perf_counter() - started,
            "stopped": feed.stopped,
        }

    for batch, statistics in executor.run(feed.batches()):
        name = part_name(min(i for i, _ in batch), max(i for i, _ in batch))
        if (store.out_dir / "texts.parquet" / name).exists():
            continue  # an executor that handed a batch back twice: written once
        if len(statistics) != len(batch):
            raise RuntimeError(f"run_statistics gave {len(statistics)} results for {len(batch)} texts")
        store.write_batch(*batch_frames(batch, statistics))
        feed.done(batch)
        tokens_run += sum(s.n_tokens for s in statistics)
        _note_routes(routes, statistics)
        if progress is not None:
            seconds = perf_counter() - started
            rate = tokens_run / seconds if seconds > 0 else 0.0
            to_go = feed.tokens_to_go(tokens_run)
            left = to_go / rate if to_go is not None and rate > 0 else None
            progress(CorpusProgress(store.texts_done, store.tokens_done, seconds, rate, left, summary()["texts_total"]))
        if perf_counter() - written >= SUMMARY_EVERY_S:
            store.write_summary(summary())
            written = perf_counter()
    result = summary()
    store.write_summary(result)
    return CorpusReport(
        Path(out_dir),
        info["model"],
        store.texts_done,
        result["texts_total"],
        store.tokens_done,
        result["seconds"],
        feed.stopped,
        result["routes"],
    )


def _note_routes(routes: list[set[str]], statistics: list) -> None:
    for result in statistics:
        for layer, route in enumerate(result.routes):
            if layer == len(routes):
                routes.append(set())
            routes[layer].add(route)


def batch_frames(batch: Batch, statistics: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A batch's rows: heads (text_id, [stack, kind], layer, head, n_tokens, each statistic, flags) and texts."""
    frames = []
    for (text_id, _), result in zip(batch, statistics, strict=True):
        frame = result.frame.copy()
        frame.insert(0, "text_id", text_id)
        frame.insert(frame.columns.get_loc("head") + 1, "n_tokens", result.n_tokens)
        frames.append(frame)
    heads = pd.concat(frames, ignore_index=True)
    heads = heads.astype({"text_id": "int64", "layer": "int32", "head": "int32", "n_tokens": "int32"})
    for column in heads.columns:
        if column not in ("text_id", "stack", "kind", "layer", "head", "n_tokens", "flags"):
            heads[column] = heads[column].astype("float64")
    heads["flags"] = heads["flags"].astype(str)
    texts = pd.DataFrame(
        {
            "text_id": pd.Series([i for i, _ in batch], dtype="int64"),
            "text": pd.Series([t for _, t in batch], dtype="object"),
            "n_tokens": pd.Series([s.n_tokens for s in statistics], dtype="int32"),
            "n_input_tokens": pd.Series([s.n_input_tokens for s in statistics], dtype="int32"),
        }
    )
    return heads, texts


def induction_scores(source) -> pd.DataFrame | None:
    """The induction probe's rows for ``source`` (H3's :func:`attnviz.labs.corpus.probe.induction_probe`),
    imported here so a run that has no use for it never loads it; None while that module is not there."""
    try:
        from attnviz.labs.corpus.probe import induction_probe
    except ModuleNotFoundError as err:
        if err.name != "attnviz.labs.corpus.probe":
            raise
        return None
    return induction_probe(source)


def route_runs(routes: list[str]) -> list[tuple[str, int, int]]:
    """Each layer's route (the summary's "routes") as runs of layers that share one: (route, first, last)."""
    runs: list[tuple[str, int, int]] = []
    for layer, route in enumerate(routes):
        if runs and runs[-1][0] == route and runs[-1][2] == layer - 1:
            runs[-1] = (route, runs[-1][1], layer)
        else:
            runs.append((route, layer, layer))
    return runs
