"""Models and records load once per process; a language switch changes the words on the page, never reruns a model."""

import math
import re

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app.loading import result_cache
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import Capability


def script():
    import streamlit as st

    from attnviz.app.loading import current_record
    from attnviz.app.sidebar import sidebar

    record = current_record(sidebar())
    if record is not None:
        st.text(f"{len(record.tokens)} tokens")


@pytest.fixture
def runs(monkeypatch):
    calls = []
    real = EmbeddedModel.run

    def counted(self, text, max_tokens, **kwargs):
        calls.append(text)
        return real(self, text, max_tokens, **kwargs)

    monkeypatch.setattr(EmbeddedModel, "run", counted)
    result_cache().clear()
    return calls


def test_the_record_is_captured_once_and_a_language_switch_reuses_it(runs):
    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["n_layer"] = 1
    at.run()
    assert not at.exception and at.text[0].value == "11 tokens" and len(runs) == 1
    english = at.sidebar.selectbox(key="model").label
    at.sidebar.selectbox(key="lang").set_value("zh").run()
    assert not at.exception and at.sidebar.selectbox(key="model").label != english  # the words changed
    assert len(runs) == 1  # the capture did not
    at.sidebar.selectbox(key="lang").set_value("en").run()
    assert len(runs) == 1


def test_bad_embedded_settings_are_said_once_and_nothing_runs(runs):
    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["d_model"], at.session_state["n_head"] = 30, 4
    at.run()
    assert not at.exception and not at.text and not runs
    assert len(at.error) == 2 and all("30" in e.value and "4" in e.value for e in at.error)  # sidebar, then the page


# ---- admission: a result not cached waits for memory; a cached one never asks ----------------------------------

MB = 2**20


@pytest.fixture
def gate(monkeypatch):
    """A test admission of 1,024 MB in place of the server's, and what the waiting visitor was told."""
    from attnviz.app import queue_view
    from attnviz.core.admission import Admission

    gate = Admission(1024 * MB)
    told = []
    real = queue_view.waiting_text
    monkeypatch.setattr(queue_view, "admission", lambda: gate)
    monkeypatch.setattr(queue_view, "waiting_text", lambda place: told.append(place) or real(place))
    gate.told = told
    result_cache().clear()
    return gate


def test_a_cached_record_needs_no_admission(runs, gate):
    from attnviz.core.admission import Need

    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["n_layer"] = 1
    at.run()
    assert len(runs) == 1 and gate.n_running == 0  # admitted, run, released
    blocker = gate.enter(Need(1024 * MB, 60))  # the whole budget taken by someone else
    at.run()  # the same settings: a cache hit, so nothing waits
    assert not at.exception and at.text[0].value == "11 tokens" and len(runs) == 1 and not gate.told
    gate.release(blocker)


@pytest.mark.slow
def test_a_record_waits_while_the_budget_is_taken_and_runs_once_it_frees(runs, gate):
    import threading

    from attnviz.core.admission import Need

    blocker = gate.enter(Need(1024 * MB, 3))
    threading.Timer(2.5, gate.release, args=(blocker,)).start()  # the other request ends 2.5 s from now
    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["n_layer"] = 1
    at.run()
    assert not at.exception and at.text[0].value == "11 tokens" and len(runs) == 1
    assert gate.told and gate.told[0].place == 1 and gate.told[0].of == 1  # it was told it is next
    assert gate.n_running == 0 and gate.n_waiting == 0 and not at.info  # released; the waiting box is gone


def test_a_cancelled_request_says_so_and_runs_again_on_the_button(runs, gate):
    from attnviz.app.queue_view import CANCELLED, request_id

    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["n_layer"] = 1
    at.run()  # once, to learn the record's key
    key = next(k for kind, k in result_cache()._items if kind == "record")
    result_cache().clear()
    at.session_state[CANCELLED] = {request_id("record", key)}
    at.run()
    assert not at.exception and not at.text and len(runs) == 1  # nothing ran
    assert [i.value for i in at.info] == ["Cancelled: this request left the queue and nothing ran."]
    at.button(key=f"admission_again_{request_id('record', key)}").click().run()
    assert not at.exception and at.text[0].value == "11 tokens" and len(runs) == 2


def stopped_script():
    import streamlit as st

    from attnviz.app.loading import cached
    from attnviz.core.admission import Need

    def compute():
        st.stop()  # as a visitor's click mid-run makes Streamlit stop the script at its next st call

    cached("stopped", ("k",), compute, "working", need=Need(512 * 2**20, 1))


@pytest.mark.slow
def test_the_budget_is_released_when_streamlit_stops_the_running_job(gate):
    at = AppTest.from_function(stopped_script, default_timeout=60).run()
    assert not at.exception
    assert gate.n_running == 0 and gate.in_flight_bytes == 0  # released in finally, under StopException


def waiting_stopped_script():
    import streamlit as st

    from attnviz.app import queue_view
    from attnviz.app.loading import cached
    from attnviz.core.admission import Need

    real = queue_view.waiting_text

    def stop_on_second_redraw(place):
        queue_view.redraws = getattr(queue_view, "redraws", 0) + 1
        if queue_view.redraws == 2:
            st.stop()  # what a click on Cancel does at the loop's next st call (a RerunException, the same way)
        return real(place)

    queue_view.waiting_text = stop_on_second_redraw
    try:
        need_mb = st.session_state.get("need_mb", 512)
        cached("waiting", ("k",), lambda: "ran", "working", need=Need(need_mb * 2**20, 1))
    finally:
        queue_view.waiting_text = real


@pytest.mark.slow
def test_a_waiting_request_stopped_by_streamlit_leaves_the_queue(gate):
    from attnviz.app import queue_view
    from attnviz.core.admission import Need

    blocker = gate.enter(Need(1024 * MB, 60))
    queue_view.redraws = 0
    at = AppTest.from_function(waiting_stopped_script, default_timeout=60).run()
    assert not at.exception and queue_view.redraws == 2
    assert gate.n_waiting == 0 and gate.n_running == 1  # it left the queue; the other request still runs
    (told,) = [i.value for i in at.info]  # the other request's 60 s, less the second it ran before this one asked
    assert re.fullmatch(r"Waiting in the queue: next in line \(1 waiting\), about (\d+) s\.", told), told
    assert 55 <= int(re.findall(r"\d+", told)[-1]) <= 60
    assert at.caption[0].value.startswith("This server runs requests together only while their memory fits its budget")
    gate.release(blocker)


@pytest.mark.slow
def test_a_request_over_the_whole_budget_is_told_it_will_run_alone(gate):
    from attnviz.app import queue_view
    from attnviz.core.admission import Need

    blocker = gate.enter(Need(100 * MB, 60))  # something small runs: the large one waits for it, then runs alone
    queue_view.redraws = 0
    at = AppTest.from_function(waiting_stopped_script, default_timeout=60)
    at.session_state["need_mb"] = 2048
    at.run()
    assert not at.exception and gate.n_waiting == 0
    assert [c.value for c in at.caption] == [
        "This request needs 2,048 MB, more than this server's whole budget for work in flight (1,024 MB): "
        "it will run alone, once nothing else is running."
    ]
    gate.release(blocker)


class FakeSource:
    """SmolLM2's shape (30 layers, 9 heads, 3 KV heads, head_dim 64); one token per word, cut at max_tokens."""

    n_layer, n_head, n_kv_head, head_dim = 30, 9, 3, 64
    device, capabilities = "cpu", frozenset({Capability.KEEP_QK})

    def encode(self, text, max_tokens):
        from types import SimpleNamespace

        return SimpleNamespace(tokens=text.split()[:max_tokens])


@pytest.fixture
def fake_source(monkeypatch):
    from attnviz.app import loading

    monkeypatch.setattr(loading, "load_source", lambda spec: FakeSource())
    return FakeSource()


def test_jobs_are_priced_from_their_keys(fake_source):
    from attnviz.app.loading import capture_need, job_need, largest_need
    from attnviz.core.budget import request_cost
    from attnviz.core.capture import predicted_nbytes
    from attnviz.models.registry import SourceSpec

    spec = SourceSpec("smollm2")
    text = " ".join(["word"] * 3000)
    one = capture_need(fake_source, text, 2048)
    record = predicted_nbytes(30, 9, 3, 64, 2048)  # 342 MB, 4.4 of them value norms and their row statistic
    assert one.nbytes == math.ceil(1.45 * record) and one.nbytes // MB == 496  # 474 MB measured before value norms
    assert one.seconds == request_cost(30, 9, 3, 64, 2048).seconds
    assert job_need("record", (spec, text, 2048)) == one
    assert job_need("walkthrough", (spec, text, 2048, 3)) == one  # more in the key after the tokens: the same
    batch = job_need("batch", (spec, (text, text), 2048, "right"))  # a batch holds both at once
    assert batch.nbytes == 2 * one.nbytes and batch.seconds == 2 * one.seconds
    stability = job_need("role_stability", (spec, (text, text), 2048, True))  # one after another
    assert stability.nbytes == one.nbytes and stability.seconds == 2 * one.seconds
    lengths = job_need("sink_vs_length", (spec, text, (64, 2048)))
    assert lengths.nbytes == one.nbytes and lengths.seconds == capture_need(fake_source, text, 64).seconds + one.seconds
    assert job_need("head_roles", (spec, text, 2048)) is None  # light: derived from a record held
    assert job_need("cost", ("cpu", (64, 128))) == largest_need()  # a key that says nothing of the size
    assert largest_need().nbytes // MB == 1366  # SmolLM2 at 8,192 tokens (1,317 MB measured before value norms)


@pytest.mark.slow
def test_a_second_session_asking_for_a_result_being_computed_waits_for_it_and_never_queues(gate):
    import threading
    import time

    from attnviz.app.loading import cached
    from attnviz.core.admission import Need

    calls, waiting_seen = [], []

    def compute():
        calls.append(1)
        time.sleep(1.0)
        waiting_seen.append(gate.n_waiting)  # the second session is blocked on the result, not in the queue
        return "result"

    results = []
    ask = lambda: results.append(cached("same", ("key",), compute, "working", need=Need(1024 * MB, 1)))  # noqa: E731
    first, second = threading.Thread(target=ask), threading.Thread(target=ask)
    first.start()
    time.sleep(0.3)
    second.start()
    first.join(timeout=30)
    second.join(timeout=30)
    assert results == ["result", "result"] and calls == [1] and waiting_seen == [0]
    assert gate.n_running == 0 and gate.n_waiting == 0


def test_the_waiting_line_in_both_languages():
    from attnviz.app.queue_view import waiting_text
    from attnviz.core.admission import Place
    from attnviz.i18n.translate import set_language

    assert waiting_text(Place(3, 5, 125.0)) == "Waiting in the queue: place 3 of 5, about 2 min 05 s."
    assert waiting_text(Place(1, 5, 12.4)) == "Waiting in the queue: next in line (5 waiting), about 12 s."
    set_language("zh")
    try:
        assert waiting_text(Place(3, 5, 125.0)) == "正在排队：排在第 3 位，共 5 位，约需 2 分 05 秒。"
    finally:
        set_language("en")


def test_the_waiting_caption_gives_small_needs_in_tenths_of_a_megabyte():
    from attnviz.app.queue_view import megabytes

    assert [megabytes(n) for n in (0, 300 * 2**10, 9 * 2**20, 489 * 2**20, 5367 * 2**20)] == [
        "0 MB",
        "0.3 MB",
        "9.0 MB",
        "489 MB",
        "5,367 MB",
    ]
