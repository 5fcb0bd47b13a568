"""A local folder model in the link, and the dtype its checkpoint is stored in (issue 37).

A refresh opens a new session from the link alone: the folder must come back from ``?model=path&path=``, on a
server on the reader's own machine, and never on a hosted one (which opens no path a link hands it). A bfloat16
checkpoint that "auto" runs in float32 on a CPU is said to be bfloat16, with why.
"""

from pathlib import Path

import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from tests.integration.tiny_models import tiny

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def folder(smollm2, tmp_path_factory) -> Path:
    """A tiny random Llama stored in bfloat16, as a local folder."""
    where = tiny(
        tmp_path_factory.mktemp("bf16") / "llama", smollm2, transformers.LlamaConfig, transformers.LlamaForCausalLM
    )
    transformers.LlamaForCausalLM.from_pretrained(where).to(torch.bfloat16).save_pretrained(where)
    return where


def open_link(**query) -> AppTest:
    """A new session (a refresh) opening the Heads page's link."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page("pages/heads.py")
    return at.run()


def sidebar_captions(at: AppTest) -> str:
    return "\n".join(caption.value for caption in at.sidebar.caption)


def test_a_refresh_keeps_a_local_folder(folder, monkeypatch):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    assert (at.query_params["model"], at.query_params["path"]) == ("path", str(folder))  # the link holds it
    again = open_link(**{name: at.query_params[name] for name in at.query_params})
    assert not again.exception, again.exception
    assert (again.selectbox(key="model").value, again.text_input(key="model_path").value) == ("path", str(folder))
    assert any(c.value.startswith("**llama**:") for c in again.caption)  # the folder's record, not the embedded one


def test_a_hosted_server_opens_no_folder_from_a_link_and_says_only_that_the_model_was_ignored(folder, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_HOSTED", "1")
    at = open_link(model="path", path=str(folder))
    assert not at.exception, at.exception
    assert at.selectbox(key="model").value == "default"
    # the words of any model it does not offer (tests/integration/deploy/test_hosted.py): nothing about the path
    assert "The link's model could not be used here and was ignored." in sidebar_captions(at)
    assert str(folder) not in sidebar_captions(at)
    assert "path" not in at.query_params


def test_a_link_to_a_missing_folder_says_why_it_shows_the_embedded_model(monkeypatch):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = open_link(model="path", path="/no/such/folder_<b>")
    assert not at.exception, at.exception
    assert at.selectbox(key="model").value == "default"
    assert r"/no/such/folder\_\<b\> is not a folder on this machine" in sidebar_captions(at)


def test_auto_on_a_cpu_says_the_checkpoint_is_bfloat16_and_why_it_runs_in_float32(folder, monkeypatch):
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder))
    at.selectbox(key="device").set_value("cpu").run()
    said = sidebar_captions(at)
    assert "The model runs in **float32**, its inputs on **cpu**." in said
    assert "The checkpoint is stored in **bfloat16**; *auto* runs it in **float32** on the CPU" in said, said
    at.selectbox(key="dtype").set_value("bfloat16").run()
    assert "stored in" not in sidebar_captions(at)  # run as stored: nothing to explain
