"""Widgets whose options follow the text or the model stay valid when the sidebar changes under them.

After a user picks a late token, the last layer or the last step and then shortens the text or picks a
smaller model, Streamlit hands back the old choice: the old label as a string ("10 ."), or an index past
the new end. Each test picks the far end of every such widget, changes the sidebar, reruns, and checks
that the page draws without an exception and that every widget holds one of its options.
"""

import re
from pathlib import Path

import pytest
import transformers
from streamlit.testing.v1 import AppTest

from tests.integration.tiny_models import tiny

ROOT = Path(__file__).resolve().parents[3]
LONG = "The cat sat on the mat because it was tired, and then the dog came in and barked at the cat loudly."
SHORT = "Hi there."
SIDEBAR = {"example", "model", "device", "max_tokens", "d_model", "n_head", "n_kv_head", "n_layer", "seed"}


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()


def embedded(at: AppTest, n_layer: int, n_head: int, text: str) -> AppTest:
    """The embedded model at its largest grid (12 layers x 12 heads) or a small one, on ``text``."""
    at.number_input(key="d_model").set_value(96)
    at.number_input(key="n_head").set_value(n_head)
    at.number_input(key="n_layer").set_value(n_layer)
    at.text_area(key="text").input(text)
    return at.run()


def raw_value(box, label: str):
    """The option behind a selectbox label: the label itself, or the index it starts with ("L11", "H3", "23 cat")."""
    try:
        if box.format_func(label) == label:
            return label
    except Exception:  # a format_func that indexes a list takes no label
        pass
    found = re.match(r"^[LH]?(\d+)", label)
    return int(found.group(1)) if found else None


def pick_far_end(at: AppTest) -> AppTest:
    """Every page widget at its last numbered option, its maximum, or (a multiselect) its last two options."""
    for box in at.selectbox:
        if box.key in SIDEBAR or not box.options:
            continue
        value = next((v for v in map(lambda o: raw_value(box, o), reversed(box.options)) if v is not None), None)
        if value is not None:
            box.set_value(value)
    for many in at.multiselect:
        many.set_value([raw_value(many, o) for o in many.options[-2:]])
    for slider in at.slider:
        slider.set_value(slider.max)
    for number in at.number_input:
        if number.key not in SIDEBAR and number.max is not None and number.max < 10_000:
            number.set_value(number.max)
    return at.run()


def assert_valid(at: AppTest) -> None:
    """No exception, no error, and every widget's value one of its options (of the option's type) or in range."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    for box in at.selectbox:
        value = box.value
        assert box.format_func(value) in box.options, (box.key, value)
        if box.key and box.key.endswith(("_token", "_layer", "_key", "_bug")):
            assert type(value) is int, (box.key, value)
    for many in at.multiselect:
        assert all(many.format_func(v) in many.options for v in many.value), (many.key, many.value)
    for widget in [*at.slider, *at.number_input]:
        if widget.min is not None and widget.max is not None and not isinstance(widget.value, tuple | list):
            assert widget.min <= widget.value <= widget.max, (widget.key, widget.value, widget.min, widget.max)


def toggle_on(at: AppTest, *keys: str) -> AppTest:
    for key in keys:
        at.toggle(key=key).set_value(True)
    return at.run()


@pytest.mark.parametrize(
    ("page", "toggles"),
    [
        ("pages/tokens.py", ("tokens_why",)),
        ("pages/heads.py", ()),
        ("pages/head_roles.py", ()),
        ("pages/padding.py", ()),
        ("pages/masks.py", ()),
        ("pages/walkthrough.py", ()),
        ("pages/scaling.py", ()),
        ("pages/overview.py", ()),
    ],
)
def test_a_shorter_text_and_a_smaller_model_leave_every_widget_valid(page, toggles):
    at = embedded(app(), 12, 12, LONG)
    at.switch_page(page).run()
    toggle_on(at, *toggles)
    pick_far_end(at)
    assert_valid(at)
    embedded(at, 1, 2, SHORT)
    assert_valid(at)
    assert at.get("plotly_chart") or at.dataframe or page == "pages/overview.py"  # a short walkthrough: tables
    at.run()  # and the rerun after it, once the widgets have reset
    assert_valid(at)


def test_the_token_view_keeps_its_chosen_tokens_in_range_as_indices():
    at = embedded(app(), 12, 12, LONG)
    at.switch_page("pages/tokens.py").run()
    toggle_on(at, "tokens_why")
    n_tok = len(at.selectbox(key="tokens_token").options)
    at.selectbox(key="tokens_token").set_value(n_tok - 1)
    at.multiselect(key="tokens_several").set_value([2, n_tok - 1])
    at.selectbox(key="tokens_layer").set_value(11).run()
    at.selectbox(key="tokens_why_key").set_value(n_tok - 1).run()
    assert_valid(at)
    embedded(at, 1, 2, SHORT)
    assert_valid(at)
    short = len(at.selectbox(key="tokens_token").options)
    assert short < n_tok
    assert at.session_state["tokens_token"] == short - 1  # stale: back to the last token
    assert at.session_state["tokens_several"] == [2]  # the token still in the text stays chosen
    assert at.session_state["tokens_layer"] == 0
    assert at.session_state["tokens_why_key"] in range(short)


def test_the_pooled_views_row_and_window_inputs_follow_a_shorter_text():
    at = app()
    at.number_input(key="max_tokens").set_value(1024)
    at.text_area(key="text").input(" ".join(f"word{i % 97}" for i in range(900))).run()
    at.switch_page("pages/heads.py").run()
    for key in ("heads_q0", "heads_k0", "heads_row"):
        at.number_input(key=key).set_value(at.number_input(key=key).max)
    at.run()
    assert_valid(at)
    at.text_area(key="text").input(" ".join(f"word{i % 97}" for i in range(450))).run()  # still pooled
    assert_valid(at)
    assert at.number_input(key="heads_row").max < 899


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory, smollm2):
    """A causal LM of 2 layers x 4 heads, as a user's local folder: fewer layers than SmolLM2's 30."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    return tiny(folder, smollm2, transformers.LlamaConfig, transformers.LlamaForCausalLM)


def test_generation_step_layer_and_head_follow_fewer_tokens_and_a_smaller_model(tiny_llama):
    at = app()
    at.selectbox(key="model").set_value("smollm2").run()
    at.text_area(key="text").input("The capital of France is a city that").run()
    at.switch_page("pages/generation.py").run()
    at.slider(key="gen_new").set_value(8).run()
    at.slider(key="gen_step").set_value(8)
    at.selectbox(key="gen_layer").set_value(29)
    at.selectbox(key="gen_head").set_value(8).run()
    assert at.slider(key="gen_step").value == 8 and at.selectbox(key="gen_layer").value == 29
    assert_valid(at)
    at.slider(key="gen_new").set_value(3).run()
    assert_valid(at)
    assert at.slider(key="gen_step").value == 3
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(tiny_llama))
    at.text_area(key="text").input("Hi").run()
    assert_valid(at)
    assert at.session_state["gen_layer"] in range(2) and at.session_state["gen_head"] in [*range(4), "mean"]


@pytest.mark.parametrize("page", ["pages/parity.py", "pages/walkthrough.py", "pages/kv_cache.py"])
def test_smollm2s_last_layer_and_head_fall_back_on_minilm(page):
    at = app()
    at.selectbox(key="model").set_value("smollm2").run()
    at.text_area(key="text").input(LONG).run()
    at.switch_page(page).run()
    if page == "pages/kv_cache.py":
        at.radio(key="kv_source").set_value("sidebar").run()
        at.radio(key="kv_tab").set_value("kv_ui.tab_whatif").run()  # the tab with a layer to pick
    pick_far_end(at)
    assert_valid(at)
    at.selectbox(key="model").set_value("minilm").run()
    at.text_area(key="text").input(SHORT).run()
    assert_valid(at)
    layers = [b for b in at.selectbox if b.key and b.key.endswith("layer")]
    assert layers and all(b.value in range(6) for b in layers)
