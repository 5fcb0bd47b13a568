"""Hosted mode driven through AppTest: the model allowlist, the request budget and the training cap."""

import re
import shutil
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.app.hosted import TrainingLedger
from attnviz.models.hf.bundled import minilm_dir
from attnviz.models.registry import CHOICES

ROOT = Path(__file__).resolve().parents[3]
REFUSED = "That model is not offered on this server"


@pytest.fixture
def hosted(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_HOSTED", "1")
    monkeypatch.delenv("ATTNVIZ_MODELS", raising=False)


SIDEBAR_SCRIPT = """
import streamlit as st
from attnviz.app.loading import current_record, require_source, within_budget
from attnviz.app.sidebar import sidebar

settings_ = st.session_state["settings"] = sidebar()
record = current_record(settings_)
if record is not None:
    st.text(f"{record.model_name}: {record.n_layer} x {record.n_head} heads")
"""


def app(model_link: str | None = None) -> AppTest:
    """The shared sidebar and the record it asks for, as every page gets them."""
    at = AppTest.from_string(SIDEBAR_SCRIPT, default_timeout=120)
    if model_link is not None:
        at.query_params["model"] = model_link
    return at.run()


def everything_shown(at: AppTest) -> list[str]:
    """Every message and label the run drew, in order: what a visitor could learn from it."""
    shown = [e.value for e in (*at.error, *at.warning, *at.info, *at.caption, *at.markdown)]
    return shown + [repr(w.options) for w in at.selectbox]


LINK_IGNORED = "The link's model could not be used here and was ignored."


@pytest.mark.parametrize("link", ["/etc/shadow", "/etc", "/no/such/folder", "org/name", "path", "../app.py"])
def test_a_hosted_server_refuses_any_link_to_a_path_or_hub_id_with_the_same_words(hosted, link):
    at = app(link)
    assert not at.exception
    baseline = app("/no/such/folder/at/all")
    # the same page whether the path exists (/etc/shadow, /etc, ../app.py) or not: nothing to probe
    assert everything_shown(at) == everything_shown(baseline)
    assert LINK_IGNORED in [c.value for c in at.caption] and not at.error
    assert at.session_state["model"] == "default"
    assert at.text[0].value.startswith("embedded default (d_model=64, n_head=4, n_layer=2")
    # no path box, and no choice that opens one
    assert at.selectbox(key="model").options == list(map(str, CHOICES.values()))
    assert not [w for w in at.text_input if w.key == "model_path"]


def test_a_local_server_offers_the_path_box_but_a_link_never_opens_a_path(monkeypatch):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = app("/etc/shadow")
    assert everything_shown(at) == everything_shown(app("/no/such/thing"))
    assert LINK_IGNORED in [c.value for c in at.caption] and at.session_state["model"] == "default"
    assert at.selectbox(key="model").options[-1] == "Local folder or hub id…"
    at.selectbox(key="model").set_value("path").run()
    assert at.text_input(key="model_path")  # typed by the person at this machine, not by a link


def test_a_stale_session_value_is_refused_on_a_hosted_server(monkeypatch):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = app()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input("/etc/shadow").run()
    monkeypatch.setenv("ATTNVIZ_HOSTED", "1")  # the same session, after the server went hosted
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and REFUSED in at.error[0].value
    assert at.session_state["model"] == "default"
    assert at.text[0].value.startswith("embedded default (")  # the embedded model's record


def test_an_operators_folder_is_offered_and_loads_on_a_hosted_server(hosted, monkeypatch, tmp_path):
    folder = tmp_path / "our-minilm"
    shutil.copytree(minilm_dir(), folder)
    monkeypatch.setenv("ATTNVIZ_MODELS", f"{folder},/models/not-here")
    at = app()
    at.selectbox(key="model").set_value(str(folder)).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["model"] == str(folder)
    assert at.selectbox(key="model").options == [*map(str, CHOICES.values()), "our-minilm", "not-here"]
    assert at.text[0].value.endswith(": 6 x 12 heads")  # MiniLM's record, read from the operator's folder
    assert at.session_state["settings"].spec.source == str(folder)


BUDGET_SCRIPT = """
import streamlit as st
from attnviz.app.loading import require_source, within_budget
from attnviz.app.sidebar import sidebar

settings_ = sidebar()
source = require_source(settings_)
if within_budget(settings_, source):
    st.session_state.captures = st.session_state.get("captures", 0) + 1
    st.text(f"captured {settings_.max_tokens}")
"""


def over_budget_app() -> AppTest:
    """The embedded model at its largest (12 layers x 64 heads) asked to read 4,096 tokens: 3.1 M token-heads."""
    at = AppTest.from_string(BUDGET_SCRIPT, default_timeout=120)
    for key, value in {"d_model": 1024, "n_head": 64, "n_layer": 12, "max_tokens": 4096}.items():
        at.session_state[key] = value
    at.session_state["text"] = " ".join(f"w{i}" for i in range(5000))
    return at.run()


def test_a_hosted_server_refuses_a_request_over_the_budget_before_any_work(hosted):
    at = over_budget_app()
    assert not at.exception
    assert "captures" not in at.session_state and not at.text
    (error,) = at.error
    assert "4,096 tokens × 12 layers × 64 heads = 3,145,728 token-heads" in error.value
    assert "budget of 2,211,840" in error.value
    assert "Lower **Max tokens** to 2,880 or fewer" in error.value and "at most 540" in error.value
    assert not at.button  # nothing to confirm


def test_a_local_server_asks_before_a_request_over_the_budget_then_runs_it(monkeypatch):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = over_budget_app()
    assert not at.exception and not at.error
    assert "captures" not in at.session_state
    (warning,) = at.warning
    assert "3,145,728 token-heads" in warning.value and "2,880 or fewer" in warning.value
    button = at.button(key="budget_run_anyway")
    assert button.label.startswith("Run it anyway (about ") and " GB, " in button.label
    button.click().run()
    assert at.session_state["captures"] == 1 and at.text[0].value == "captured 4096"
    at.run()  # a rerun (another head picked) keeps the confirmation for these settings
    assert at.session_state["captures"] == 2 and not at.warning
    at.number_input(key="max_tokens").set_value(4000).run()  # new settings: asked again
    assert at.session_state["captures"] == 2 and at.button(key="budget_run_anyway")


def test_a_request_within_the_budget_runs_without_a_question(hosted):
    at = AppTest.from_string(BUDGET_SCRIPT, default_timeout=120)
    for key, value in {"d_model": 1024, "n_head": 64, "n_layer": 12, "max_tokens": 2880}.items():
        at.session_state[key] = value
    at.session_state["text"] = " ".join(f"w{i}" for i in range(5000))
    at.run()
    assert not at.exception and not at.error and not at.warning
    assert at.session_state["captures"] == 1


def training_page(seed: int, ledger: TrainingLedger | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("pages/training.py").run()
    if ledger is not None:
        at.session_state["training_ledger"] = ledger
    for key, value in {"training_d_k": 16, "training_steps": 5, "training_seed": seed}.items():
        at.number_input(key=key).set_value(value)
    return at.run()


def test_a_hosted_session_over_its_training_cap_is_refused_and_its_time_is_counted(hosted, count_trainings):
    ledger = TrainingLedger(spent=[(time.time(), 120.0)])  # all 120 s a session may train per 10 minutes
    at = training_page(seed=9101, ledger=ledger)
    at.button(key="training_train").click().run()
    assert not at.exception and count_trainings == []
    (error,) = at.error
    assert "trained for 120 s in the last 10 minutes" in error.value
    wait = int(re.search(r"Try again in (\d+) s", error.value).group(1))
    assert 500 < wait <= 600  # when those 120 s leave the window
    # a fresh session trains, and what it trained is charged to it
    at = training_page(seed=9102)
    at.button(key="training_train").click().run()
    assert not at.exception and not at.error and len(count_trainings) == 1
    assert 0 < at.session_state["training_ledger"].used(time.time()) < 60


def test_a_local_session_has_no_training_cap(monkeypatch, count_trainings):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = training_page(seed=9103, ledger=TrainingLedger(spent=[(time.time(), 120.0)]))
    at.button(key="training_train").click().run()
    assert not at.exception and not at.error and len(count_trainings) == 1
