"""Random weights are said beside what would read as meaning: a random T5 folder's generation and alignment, a
random decoder folder's head roles and patching; SmolLM2's pages say nothing of the kind; a generation of one
token over and over is named as such (attnviz.app.weights_note)."""

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from transformers import LlamaConfig, LlamaForCausalLM

from tests.integration.tiny_models import tiny, tiny_seq2seq

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat."
RANDOM = "These weights look random"


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    """T5 at its own initialisation (factor 1): greedy decoding writes one token over and over."""
    return str(tiny_seq2seq(tmp_path_factory.mktemp("note") / "t5", "t5", initializer_factor=1.0))


@pytest.fixture(scope="module")
def llama(tmp_path_factory, smollm2):
    return str(tiny(tmp_path_factory.mktemp("note") / "llama", smollm2, LlamaConfig, LlamaForCausalLM))


def app_on(model: str, page: str, folder: str = "") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page(f"pages/{page}.py").run()
    at.session_state.model, at.session_state.text = model, TEXT
    if folder:
        at.session_state.model_path = folder
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning]


def test_a_random_t5_says_so_beside_its_generation_and_its_alignment(t5):
    at = app_on("path", "generation", t5)
    said = warnings(at)
    note = next(w for w in said if RANDOM in w)
    assert re.search(r"loss is \d+\.\d\d nats a token.*\(ln V = 10\.33\)", note), note  # ln 30,528
    assert "normalisation weight is still as initialised" in note
    assert any(re.search(r"The model repeated one token \d+ times", w) for w in said), said
    at.switch_page("pages/heads.py").run()
    at.radio(key="target_from").set_value("typed").run()
    at.text_area(key="target").input("Die Katze sass auf der Matte.").run()
    at.radio(key="heads_kind").set_value("cross").run()
    assert not at.exception and any(RANDOM in w for w in warnings(at))  # beside "most monotonic"


def test_a_random_decoder_folder_says_so_on_head_roles_and_patching(llama):
    at = app_on("path", "head_roles", llama)
    assert any(RANDOM in w and "(ln V = 10.80)" in w for w in warnings(at)), warnings(at)  # ln 49,152
    at.switch_page("pages/patching.py").run()
    assert not at.exception and any(RANDOM in w for w in warnings(at)), warnings(at)


def test_smollm2_says_nothing_of_random_weights():
    at = app_on("smollm2", "generation")
    assert not any(RANDOM in w or "The model repeated" in w for w in warnings(at)), warnings(at)
    at.switch_page("pages/head_roles.py").run()
    assert not at.exception and not any(RANDOM in w for w in warnings(at))
