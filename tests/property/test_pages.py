"""Every page through AppTest with every widget it shows set to its extremes: a number input or slider at its
minimum and maximum, a text box empty, hostile (``**bold** [link](…) :red[x] $$\\x$$ <b>x</b>``) or 100,000
characters long, a choice at its first and last option, a switch on and off; and the sidebar at its extremes
(empty text, one token, hostile text, the largest embedded model). The widgets are found on the page as it is
drawn, so a widget a page adds is fuzzed without a change here; a second round sets the widgets the first one
revealed. The rule: no exception, and no hostile piece of typed text un-escaped in a Markdown element.

Each case runs under the folder's time limit and memory cap (``guard.py``) and each AppTest run under its own
timeout. One AppTest for the module: a fresh one per case costs seconds.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import SelectSlider

from attnviz import settings as limits
from tests.property import ran
from tests.property.strategies import HOSTILE

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p.name for p in (ROOT / "pages").glob("*.py"))
RUN_TIMEOUT_S = 60  # one AppTest run of one page; a quiet machine needs a second or two
HOSTILE_TEXT = "**bold** [link](http://x) :red[x] $$\\x$$ <b>x</b>"
MARKUP = ["**bold**", "[link](http://x)", ":red[x]", "$$\\x$$", "<b>x</b>"] + [
    h for h in HOSTILE if re.search(r"[<>*_`\[\]$~|:]", h)
]
LONG_TEXT = HOSTILE_TEXT + " a" * 50_000  # 100,000 characters and more
TEXTS = ["", " ", HOSTILE_TEXT, LONG_TEXT, "\x00\x1b[31m\n", "猫"]
SIDEBAR_KEYS = {"lang", "example", "text", "max_tokens", "model", "model_path", "device"}
SIDEBAR_KEYS |= {"d_model", "n_head", "n_kv_head", "n_layer", "seed", "causal"}
# actions that run for tens of seconds or minutes by design (a training, a measurement, a sweep over lengths,
# a run past the budget): never pressed here; their pages are fuzzed up to the button
EXPENSIVE = {
    "training_train",
    "cost_measure",
    "roles_sink_run",
    "roles_stability",
    "budget_run_anyway",
    "kv_measure",
    "kv_decode",
}
_app: dict[str, AppTest] = {}


def app() -> AppTest:
    """One AppTest for the module (the embedded default model)."""
    if "at" not in _app:
        _app["at"] = AppTest.from_file(str(ROOT / "app.py"), default_timeout=RUN_TIMEOUT_S).run()
    return _app["at"]


def markdown_bodies(at: AppTest) -> list[str]:
    """Every element Streamlit renders as Markdown, with code spans (shown literally) removed."""
    elements = [*at.markdown, *at.caption, *at.info, *at.warning, *at.error, *at.success]
    elements += [*at.title, *at.header, *at.subheader]
    return [re.sub(r"`[^`]*`", "", str(e.value)) for e in elements]


def _pick(widget, index: int) -> None:
    """Choose option ``index`` of a radio or select slider by its shown label (AppTest sets these by value, and
    the raw values behind a format_func are not on the page)."""
    option = widget.options[index]

    def state(self) -> WidgetState:
        ws = WidgetState()
        ws.id = self.id
        if isinstance(self, SelectSlider):
            ws.string_array_value.data[:] = [option]
        else:
            ws.string_value = option
        return ws

    base = type(widget)
    widget.__class__ = type(base.__name__, (base,), {"_widget_state": property(state)})


def page_widgets(at: AppTest) -> list:
    """The page's widgets (not the sidebar's) that a visitor can set, in the order drawn."""
    main = at.main
    found = [
        *main.number_input,
        *main.slider,
        *main.text_input,
        *main.text_area,
        *main.selectbox,
        *main.radio,
        *main.select_slider,
        *main.checkbox,
        *main.toggle,
        *main.button,
        *main.multiselect,
    ]
    return [w for w in found if w.key not in SIDEBAR_KEYS and w.key not in EXPENSIVE and not w.disabled]


def extremes(widget) -> list:
    """What each kind of widget can be set to: its ends, and for text the hostile and the huge."""
    kind = widget.type
    if kind in ("number_input", "slider"):
        low, high = widget.min, widget.max
        low = -(10**9) if low is None else low
        high = 10**9 if high is None else high
        return [("value", low), ("value", high)]
    if kind in ("text_input", "text_area"):
        return [("value", text) for text in TEXTS]
    if kind in ("selectbox", "radio", "select_slider"):
        n = len(widget.options)
        return [("index", 0), ("index", n - 1)] if n else []
    if kind in ("checkbox", "toggle"):
        return [("value", True), ("value", False)]
    if kind == "button":
        return [("click", None)]
    if kind == "multiselect":
        return [("multi", 0), ("multi", len(widget.options))]
    return []


def set_widget(widget, how: str, value) -> None:
    if how == "value":
        widget.set_value(value)
    elif how == "click":
        widget.click()
    elif how == "multi":
        widget.set_value([] if value == 0 else list(widget.value or []))
    else:  # AppTest's select_index stores the label as the value, which a format_func then reads wrongly
        _pick(widget, value)


SIDEBAR = {
    "empty text": {"text": ""},
    "one token": {"text": "a", "max_tokens": limits.MAX_TOKENS.low},
    "hostile text": {"text": HOSTILE_TEXT},
    "long text, max tokens": {"text": LONG_TEXT, "max_tokens": limits.MAX_TOKENS.high},
    "smallest model": {"text": "hi there", "d_model": limits.D_MODEL.low, "n_head": 1, "n_layer": 1},
    "largest heads": {
        "text": "the cat sat",
        "d_model": limits.D_MODEL.high,
        "n_head": limits.N_HEAD.high,
        "n_kv_head": limits.N_KV_HEAD.high,
        "n_layer": limits.N_LAYER.high,
        "seed": limits.SEED.high,
        "causal": True,
    },
    "default": {},
}


def set_sidebar(at: AppTest, values: dict) -> None:
    """The sidebar at ``values``, every other setting at its default (the embedded model)."""
    at.text_area(key="text").input(values.get("text", limits.EXAMPLES[next(iter(limits.EXAMPLES))]))
    for key in ("max_tokens", "d_model", "n_head", "n_kv_head", "n_layer", "seed"):
        at.number_input(key=key).set_value(values.get(key, getattr(limits, key.upper()).default))
    at.checkbox(key="causal").set_value(values.get("causal", False))
    at.selectbox(key="model").set_value("default")


def check(at: AppTest, context, typed: list[str]) -> None:
    assert not at.exception, (context, [e.value for e in at.exception][:1], [e.stack_trace for e in at.exception][:1])
    bodies = markdown_bodies(at)
    for piece in MARKUP:
        if any(piece in text for text in typed):
            shown = [b for b in bodies if piece in b]
            assert not shown, (context, piece, [b[:300] for b in shown[:1]])


def choices(rng: random.Random, widgets: list) -> list[tuple]:
    """For each widget of ``widgets``: leave it, or one of its extremes. Drawn from a seeded generator, not by
    hypothesis: the widgets on the page depend on the shared AppTest's state, which hypothesis cannot replay."""
    chosen = []
    for widget in widgets:
        options = extremes(widget)
        index = rng.randrange(-1, len(options)) if options else -1
        if index >= 0:
            chosen.append((widget, *options[index]))
    return chosen


@pytest.mark.parametrize("page", PAGES)
@settings(max_examples=4)
@given(sidebar=st.sampled_from(sorted(SIDEBAR)), seed=st.integers(0, 2**16))
def test_every_widget_at_its_extremes(page, sidebar, seed):
    ran(f"apptest {page}")
    try:
        widgets_at_extremes(app(), page, sidebar, random.Random(seed))
    except BaseException:
        _app.clear()  # a failed case may leave the AppTest broken: the next case starts a fresh one
        raise


def widgets_at_extremes(at: AppTest, page: str, sidebar: str, rng: random.Random) -> None:
    set_sidebar(at, SIDEBAR[sidebar])
    at.switch_page(f"pages/{page}").run(timeout=RUN_TIMEOUT_S)
    typed = [SIDEBAR[sidebar].get("text", "")]
    check(at, (page, sidebar), typed)
    done = set()
    for _round in range(2):  # the second round sets what the first revealed (a toggle's section, a chosen source)
        widgets = [w for w in page_widgets(at) if (w.key or w.id) not in done]
        if not widgets:
            break
        chosen = choices(rng, widgets)
        for widget, how, value in chosen:
            set_widget(widget, how, value)
            done.add(widget.key or widget.id)
            if isinstance(value, str):
                typed.append(value)
        at.run(timeout=RUN_TIMEOUT_S)
        check(at, (page, sidebar, [(w.key, how, str(v)[:40]) for w, how, v in chosen]), typed)
