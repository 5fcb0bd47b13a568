"""A new visitor's landing run does no forward pass: the server's warm-up (attnviz.app.warm) captured the default
text with the default model into the shared cache, under the key the visitor's sidebar asks for."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from attnviz.app import loading, warm
from tests.integration.pages.passes import count_passes

ROOT = Path(__file__).resolve().parents[3]


def test_the_landing_run_reads_the_warm_ups_capture_and_a_new_text_computes(monkeypatch):
    loading.result_cache.clear()  # as on a fresh server: nothing captured yet
    spec = warm.default_spec()
    source = loading.load_source(spec)
    record = warm.default_record(source, spec)
    assert record.tokens and record.model_name == source.name
    passes = count_passes(
        monkeypatch, source, ("run", "run_hooked", "run_batch")
    )  # every way the source runs its model
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    assert passes == []  # the sidebar, the grid, the large view and the statistics: all from the warm-up's record
    assert f"{len(record.tokens)} tokens" in at.caption[0].value
    at.text_area(key="text").set_value("A text nobody has captured yet.").run()
    assert not at.exception
    assert passes == ["run", "run_hooked"]  # a changed text computes as before: one capture (its one hooked pass)
