"""Corpus runs the app starts: each on a thread of its own, so the page stays usable (and other pages too) while
it reads the texts; its progress, time left and a Stop are shown by the Corpus page.

A corpus run is long (minutes to hours) and writes its results as it goes (:func:`attnviz.labs.corpus.run_corpus`),
so unlike a page's :class:`attnviz.app.jobs.PieceJob` it is not part of a script run: a rerun, another page or a
closed tab leaves it going. The runs live in one process-wide registry (:func:`started_runs`), listed on the page as
"runs started in this app"; Stop asks the run to end after its current batch (``should_stop``), as Ctrl-C does the
CLI's, and the folder is a complete run of the texts done (``--resume`` goes on from there).
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from attnviz import settings
from attnviz.core.admission import Admission, Need

RUNS_FOLDER = Path(tempfile.gettempdir()) / "attnviz-corpus"  # where the app's runs write (their DIR)
MAX_RUNS_KEPT = 16  # finished runs listed at most; the oldest finished is dropped from the list (its folder stays)


@dataclass(eq=False)
class CorpusJob:
    """One corpus run on its thread: where it writes, what it said last, and how it ended."""

    out_dir: Path
    model: str
    total: int | None
    started: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=threading.Event)
    state: object | None = None  # the run's last CorpusProgress (texts and tokens done, seconds left)
    ended: float | None = None
    error: str | None = None
    report: object | None = None
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def done_texts(self) -> int:
        """Texts written so far (the report's count once ended, else the progress's)."""
        done = getattr(self.report, "texts_done", None)
        if done is not None:
            return int(done)
        return self.state.texts_done if self.state is not None else 0

    def remaining_s(self) -> float | None:
        return None if self.state is None else self.state.seconds_left


@st.cache_resource
def started_runs() -> dict[str, CorpusJob]:
    """Every run this server started, by its folder (shared by the sessions: a run is the server's work)."""
    return {}


def new_run_folder(name: str) -> Path:
    """A fresh folder for a run on ``name`` (a sample's or an upload's file name, kept to safe characters)."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in Path(name).stem)[:40] or "texts"
    RUNS_FOLDER.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-", dir=RUNS_FOLDER))


def start_run(
    source, path: Path, out_dir: Path, *, max_tokens: int, limit: int, model: str, need: Need, gate: Admission
) -> CorpusJob:
    """Start :func:`attnviz.labs.corpus.run_corpus` of ``source`` on the texts of ``path`` (the first ``limit``),
    writing to ``out_dir``, on a thread; returns its job, already listed in :func:`started_runs`.

    The run is one request of the server's admission (``gate``, the pages' own queue) for as long as it goes:
    ``need``, one batch's capture and the run's price, waits its turn like a page's capture, and a Stop while it
    waits takes it out of the queue."""
    from attnviz.labs.corpus import run_corpus  # the corpus machinery: only when a run starts

    job = CorpusJob(out_dir=Path(out_dir), model=model, total=limit)

    def keep(state) -> None:
        job.state = state

    def work() -> None:
        ticket = gate.enter(need)
        try:
            while not gate.wait(ticket, timeout=settings.ADMISSION_POLL_S):
                if job.stop.is_set():  # stopped while it waited: nothing ran, the folder stays empty
                    return
            job.report = run_corpus(
                source,
                path,
                out_dir,
                max_tokens=max_tokens,
                limit=limit,
                progress=keep,
                should_stop=job.stop.is_set,
            )
        except Exception as err:  # the page says what stopped the run: the thread must not die silently
            job.error = f"{type(err).__name__}: {err}"
        finally:
            gate.release(ticket)
            job.ended = time.monotonic()

    runs = started_runs()
    finished = [key for key, run in runs.items() if not run.running]
    while len(runs) >= MAX_RUNS_KEPT and finished:
        runs.pop(finished.pop(0))
    job.thread = threading.Thread(target=work, name=f"corpus-{out_dir.name}", daemon=True)
    runs[str(out_dir)] = job
    job.thread.start()
    return job
