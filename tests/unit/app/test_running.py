"""A rerun that takes a while says that work is running and what; the previous run's results are never left
looking current (issue 37: the Mask lab and the lines view ran for 23-47 s under stale, faded content, a red error
among it, with no sign of work)."""

import time

import pytest
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext
from streamlit.testing.v1 import AppTest

from attnviz.app.running import BANNER_CLASS, SHOW_AFTER_S, banner_markdown
from attnviz.core.token_display import markdown_text

SLOW_S = SHOW_AFTER_S + 0.2  # the fake computation: longer than a run may take unannounced
SENT: list = []  # every message the script sent to the browser, in order, and a mark where the computation began


@pytest.fixture
def sent(monkeypatch):
    """Record what each run sends the browser, as it sends it."""
    real = ScriptRunContext.enqueue

    def record(self, msg: ForwardMsg) -> None:
        SENT.append(msg)
        real(self, msg)

    SENT.clear()
    monkeypatch.setattr(ScriptRunContext, "enqueue", record)
    return SENT


def script():
    import time

    import streamlit as st

    from attnviz.app.loading import cached
    from attnviz.app.widgets import run_page, show_error
    from tests.unit.app import test_running as here

    class Page:
        def run(self):
            n = st.number_input("n", 1, 9, 1, key="n")
            if n == 1:
                show_error("the old result failed")
                return

            def compute():
                here.SENT.append("compute started")
                time.sleep(here.SLOW_S)
                return n * 10

            st.text(f"result {cached('test_running_slow', (n, time.time()), compute, 'Adding up the fake numbers…')}")

    run_page(Page())


def before_the_computation(messages) -> list[ForwardMsg]:
    assert "compute started" in messages, "the fake computation never ran"
    return messages[: messages.index("compute started")]


def markdown_of(messages) -> list[str]:
    return [m.delta.new_element.markdown.body for m in messages if m.delta.new_element.WhichOneof("type") == "markdown"]


def styles_of(messages) -> list[str]:
    return [m.delta.new_element.html.body for m in messages if m.delta.new_element.WhichOneof("type") == "html"]


@pytest.mark.slow  # the computation outlasts the banner's first second
def test_a_slow_computation_is_named_in_a_banner_before_it_runs_and_the_old_error_is_hidden(sent):
    at = AppTest.from_function(script, default_timeout=30).run()
    assert [e.value for e in at.error] == ["the old result failed"]

    sent.clear()
    start = time.monotonic()
    at.number_input(key="n").set_value(2).run()
    assert not at.exception
    assert [t.value for t in at.text] == ["result 20"]
    assert not at.error  # the previous run's error is gone once the run ends
    before = before_the_computation(sent)
    banners = [body for body in markdown_of(before) if BANNER_CLASS in body]
    # the banner says the page is updating from the start, and names the computation before it starts
    assert banners and "Working" in banners[0] and "updating the page" in banners[0]
    assert "Adding up the fake numbers…" in banners[-1]
    delay = float(banners[-1].split("animation-delay: ")[1].split("s")[0])
    assert delay <= SHOW_AFTER_S < time.monotonic() - start  # shown in the browser once the run passes a second
    # while it computes, the previous run's elements still on the screen (the red error) are hidden, not faded
    rules = " ".join(styles_of(before))
    assert '[data-stale="true"]' in rules and "visibility: hidden" in rules
    assert f"transition: visibility 0s linear {SHOW_AFTER_S:g}s" in rules
    # and the banner goes when the run ends: nothing says "working" on the finished page
    assert not [m.value for m in at.markdown if BANNER_CLASS in m.value]


def test_the_banner_waits_out_the_first_second_and_speaks_the_readers_language():
    from attnviz.i18n.translate import set_language

    assert "animation-delay: 1.00s" in banner_markdown("x", 1.0)
    assert "<script>" not in banner_markdown("Loading <script>alert(1)</script>…", 0.0)  # the banner allows HTML
    assert "Loading \\<b\\>" in banner_markdown(markdown_text("Loading <b>"), 0.0)  # escaped data stays as it is
    set_language("zh")
    try:
        assert "正在运行" in banner_markdown("正在捕获注意力…", 0.0)
    finally:
        set_language("en")
