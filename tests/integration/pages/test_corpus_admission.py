"""A corpus run started on the Corpus page is one request of the server's admission, as a page's capture is: it
waits for its turn, a Stop while it waits takes it out of the queue with nothing run, and it frees its place when it
ends."""

from __future__ import annotations

from pathlib import Path

from attnviz.app import corpus_jobs
from attnviz.core.admission import Admission, Need
from attnviz.labs.corpus import CorpusRun
from attnviz.models.registry import embedded_spec, open_source

SAMPLE = Path(__file__).resolve().parents[3] / "attnviz" / "labs" / "corpus" / "samples" / "classics_en.txt"
MB = 2**20


def start(tmp_path: Path, gate: Admission, name: str) -> corpus_jobs.CorpusJob:
    source = open_source(embedded_spec("cpu"))
    return corpus_jobs.start_run(
        source, SAMPLE, tmp_path / name, max_tokens=16, limit=3, model=source.name, need=Need(10 * MB, 1.0), gate=gate
    )


def test_a_run_waits_for_its_turn_and_a_stop_while_it_waits_runs_nothing(tmp_path):
    gate = Admission(16 * MB, max_running=1)
    busy = gate.enter(Need(1 * MB, 60.0))  # another visitor's capture holds the one place
    assert busy.state == "running"
    job = start(tmp_path, gate, "waits")
    job.thread.join(timeout=1.0)
    assert job.running and gate.n_waiting == 1 and not (tmp_path / "waits").exists()  # queued, nothing written
    job.stop.set()
    job.thread.join(timeout=30)
    assert not job.running and job.report is None and job.error is None
    assert gate.n_waiting == 0 and gate.n_running == 1  # out of the queue; the other request still runs
    assert not (tmp_path / "waits").exists()
    gate.release(busy)


def test_a_run_admitted_runs_to_its_end_and_frees_its_place(tmp_path):
    gate = Admission(16 * MB, max_running=1)
    busy = gate.enter(Need(1 * MB, 60.0))
    job = start(tmp_path, gate, "runs")
    job.thread.join(timeout=1.0)
    assert gate.n_waiting == 1
    gate.release(busy)  # its turn
    job.thread.join(timeout=120)
    assert not job.running and job.error is None and job.report.texts_done == 3
    assert CorpusRun.open(tmp_path / "runs").summary["texts_done"] == 3
    assert gate.n_running == 0 and gate.n_waiting == 0
