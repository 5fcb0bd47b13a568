"""The Corpus page driven through AppTest, in English and 中文: a run folder made by a tiny run opened, its heads
placed on two metrics, the filters, a head's top texts and its map on one, a run started on the bundled sample,
and a folder that holds no run."""

import re
import threading
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app import corpus_jobs
from attnviz.core.token_display import markdown_text
from attnviz.i18n.translate import set_language, t
from attnviz.labs.corpus import CorpusRun, run_corpus
from attnviz.models.registry import SourceSpec, embedded_spec, open_source
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
PAGE = "pages/corpus.py"
SAMPLE = ROOT / "attnviz" / "labs" / "corpus" / "samples" / "classics_en.txt"
N_TEXTS = 6  # the sidebar's default model (the embedded one: 2 layers x 4 heads) over the sample's first texts


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "run"
    run_corpus(open_source(embedded_spec("cpu")), SAMPLE, out, max_tokens=48, limit=N_TEXTS)
    return out


@pytest.fixture(autouse=True)
def no_started_runs():
    """Each test sees only the runs it started (the registry is the server's, shared by its sessions)."""
    corpus_jobs.started_runs().clear()
    yield
    corpus_jobs.started_runs().clear()


def app(lang: str) -> AppTest:
    set_language(lang)  # AppTest formats widget options in the test's thread
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="lang").set_value(lang).run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def ok(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_run_opened_places_its_heads_and_ranks_a_heads_texts(run_dir, lang):
    at = app(lang)
    assert any(t("corpus.type_dir") == i.value for i in at.info)
    at.text_input(key="corpus_dir").input(str(run_dir)).run()
    ok(at)
    run = CorpusRun.open(run_dir)
    heads = run.summary["heads"]
    # the route note: how each layer was captured (the embedded model's two layers, by the reference capture)
    assert run.summary["routes"] == ["reference", "reference"]
    said = t("corpus.routes", runs=t("corpus.route_run", layers="L0–L1", route=t("corpus.route_reference")))
    assert said in [c.value for c in at.caption], [c.value for c in at.caption]
    scatter = spec_of(at.get("plotly_chart")[0])["data"][0]
    # every head a point at its mean over the texts, its bars the summary's std: prev-token across, induction up
    assert at.selectbox(key="corpus_x").value == "prev_token_weight"
    assert at.selectbox(key="corpus_y").value == "induction"
    assert len(decode(scatter["x"])) == len(heads) == 8
    np.testing.assert_allclose(decode(scatter["x"]), [h["prev_token_weight"]["mean"] for h in heads])
    np.testing.assert_allclose(decode(scatter["error_x"]["array"]), [h["prev_token_weight"]["std"] for h in heads])
    probe = run.probe().set_index(["layer", "head"])["induction"]
    np.testing.assert_allclose(decode(scatter["y"]), [probe[(h["layer"], h["head"])] for h in heads])
    assert "L1 H2" in scatter["text"][6] and t("corpus_fig.n_texts", n=N_TEXTS) in scatter["text"][6]

    at.selectbox(key="corpus_y").set_value("entropy").run()
    scatter = spec_of(at.get("plotly_chart")[0])["data"][0]
    np.testing.assert_allclose(decode(scatter["error_y"]["array"]), [h["entropy"]["std"] for h in heads])

    at.slider(key="corpus_layers").set_value((1, 1)).run()  # the filters: layer 1 only
    ok(at)
    scatter = spec_of(at.get("plotly_chart")[0])["data"][0]
    assert len(decode(scatter["x"])) == 4 and all(text.startswith("<b>L1 ") for text in scatter["text"])
    at.number_input(key="corpus_min_texts").set_value(N_TEXTS).run()
    assert len(decode(spec_of(at.get("plotly_chart")[0])["data"][0]["x"])) == 4  # every head read every text

    # a head's top texts by a statistic: the run's own ranking, and the head drawn on the first of them
    at.selectbox(key="corpus_head").set_value("L1 H2").run()
    at.selectbox(key="corpus_stat").set_value("first_token_weight").run()
    at.selectbox(key="corpus_k").set_value(5).run()
    ok(at)
    top = run.top_texts(1, 2, "first_token_weight", k=5)
    shown = at.dataframe[0].value
    assert list(shown.iloc[:, 0]) == list(top["text_id"]) and len(shown) == 5
    np.testing.assert_allclose(shown.iloc[:, 1], top["value"].round(4))
    assert at.selectbox(key="corpus_text").value == top["text_id"][0]
    assert len(at.get("plotly_chart")) == 2  # the scatter and the head on that text
    title = spec_of(at.get("plotly_chart")[1])["layout"]["title"]["text"]
    assert title == f"L1 H2 · #{top['text_id'][0]}", title


def test_a_folder_with_no_run_says_so_with_its_path_escaped(tmp_path):
    at = app("en")
    folder = tmp_path / "**not** a run"
    at.text_input(key="corpus_dir").input(str(folder)).run()
    assert not at.exception and len(at.error) == 1
    assert "\\*\\*not\\*\\* a run" in at.error[0].value and "holds no corpus run" in at.error[0].value
    assert not at.get("plotly_chart")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_run_started_on_the_sample_is_listed_and_opened(lang, tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_jobs, "RUNS_FOLDER", tmp_path)
    at = app(lang)
    at.radio(key="corpus_from").set_value("start").run()
    ok(at)
    at.number_input(key="corpus_limit").set_value(3).run()
    at.number_input(key="corpus_max_tokens").set_value(32).run()
    # the price before the start, in the reader's words: the template with its numbers filled in
    template = (
        re.escape(t("corpus.price", time="@T", n=3, tokens=32, model="@M")).replace("@T", ".+").replace("@M", ".+")
    )
    assert any(re.fullmatch(template + ".*", c.value, re.DOTALL) for c in at.caption), [c.value for c in at.caption]
    at.button(key="corpus_start").click().run()
    job = corpus_jobs.started_runs()[at.selectbox(key="corpus_started").value]
    job.thread.join(timeout=120)
    assert not job.running and job.error is None and job.done_texts() == 3
    assert job.out_dir.parent == tmp_path
    at.run()
    ok(at)
    assert len(at.success) == 1 and markdown_text(str(job.out_dir)) in at.success[0].value
    assert len(decode(spec_of(at.get("plotly_chart")[0])["data"][0]["x"])) == 8


def test_open_in_heads_puts_the_text_in_the_sidebar_and_opens_that_head(run_dir):
    at = app("en")
    at.text_input(key="corpus_dir").input(str(run_dir)).run()
    at.selectbox(key="corpus_head").set_value("L1 H3").run()
    text_id = at.selectbox(key="corpus_text").value
    at.button(key="corpus_open_heads").click().run()
    ok(at)
    assert at.session_state["text"] == CorpusRun.open(run_dir).text(text_id)
    assert (at.session_state["heads_layer"], at.session_state["heads_head"]) == (1, 3)
    assert at.title[0].value == t("heads.title")


def test_a_running_run_shows_its_progress_and_stops_when_asked(tmp_path, monkeypatch):
    """The run held before its first batch (a gate), so the page sees it running: its bar and Stop; Stop asked, the
    run ends before any batch, and the page says it stopped, with no heads to place."""
    import attnviz.labs.corpus as corpus

    gate, real = threading.Event(), corpus.run_corpus

    def held(*args, **kwargs):
        gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(corpus, "run_corpus", held, raising=False)
    monkeypatch.setattr(corpus_jobs, "RUNS_FOLDER", tmp_path)
    at = app("en")
    at.radio(key="corpus_from").set_value("start").run()
    at.number_input(key="corpus_limit").set_value(5).run()
    at.button(key="corpus_start").click().run()
    ok(at)
    job = corpus_jobs.started_runs()[at.selectbox(key="corpus_started").value]
    assert job.running
    assert t("corpus.left_estimating") in at.get("progress")[0].proto.text
    at.button(key=f"corpus_stop_{job.out_dir.name}").click().run()
    assert job.stop.is_set() and any(c.value == t("corpus.stopping") for c in at.caption)
    gate.set()
    job.thread.join(timeout=120)
    at.run()
    ok(at)
    assert job.report.stopped and job.done_texts() == 0
    assert at.success[0].value.startswith(t("corpus.stopped_run", done=0, time="@", path="").split("@")[0])
    assert any(i.value == t("corpus.no_heads") for i in at.info) and not at.get("plotly_chart")


def test_an_encoder_decoders_run_is_placed_by_stack_and_kind(tmp_path):
    """A tiny T5's run: each head named with its stack and kind, one kind at a time, its top texts by kind."""
    from tests.integration.tiny_models import tiny_seq2seq

    folder = tiny_seq2seq(tmp_path / "t5", "t5")
    out = tmp_path / "run"
    run_corpus(open_source(SourceSpec(str(folder), "cpu")), SAMPLE, out, max_tokens=24, limit=3, probe=False)
    heads = CorpusRun.open(out).summary["heads"]
    kinds = sorted({f"{h['stack']} {h['kind']}" for h in heads})
    at = app("en")
    at.session_state.model, at.session_state.model_path = "path", str(folder)  # the sidebar on the run's model
    at.text_input(key="corpus_dir").input(str(out)).run()
    ok(at)
    assert at.selectbox(key="corpus_kind").options == kinds
    for kind in kinds:
        at.selectbox(key="corpus_kind").set_value(kind).run()
        ok(at)
        scatter = spec_of(at.get("plotly_chart")[0])["data"][0]
        names = [text.split("</b>")[0].removeprefix("<b>") for text in scatter["text"]]
        assert names == [f"{kind} L{h['layer']} H{h['head']}" for h in heads if f"{h['stack']} {h['kind']}" == kind]
    stack, kind = kinds[-1].split(" ")
    expected = CorpusRun.open(out).top_texts(0, 0, "entropy", k=10, stack=stack, kind=kind)
    at.selectbox(key="corpus_head").set_value(f"{kinds[-1]} L0 H0").run()
    at.selectbox(key="corpus_stat").set_value("entropy").run()
    ok(at)
    assert list(at.dataframe[0].value.iloc[:, 0]) == list(expected["text_id"])
    assert any(i.value == t("corpus.pair_map") for i in at.info)  # its map: on the Heads page
