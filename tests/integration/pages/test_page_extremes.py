"""Issue 19: every page at every sidebar extreme, and its own widgets at theirs, through AppTest.

Deterministic, as a reader would set them: empty, whitespace-only, one-token, hostile and the longest text at Max
tokens = its maximum; every sidebar number (:mod:`attnviz.settings` bounds) at its minimum and its maximum; then
each number input and slider the page draws at its minimum and maximum, and each text box empty and hostile. Each
case must end without an exception, say something where it has nothing to draw (a chart, or an info, warning or
error box), and show the hostile text as text, never as Markdown. One AppTest per page, reused across its cases
(the embedded model: the cases test the pages, not the models); SmolLM2 gets one pass at one token and empty.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz import settings
from attnviz.app.navigation import SECTIONS

ROOT = Path(__file__).resolve().parents[3]
PAGES = [name for section in SECTIONS.values() for name in section]
HOSTILE = "**bold** [link](http://x) :red[x] $$\\x$$ <b>x</b>"
# what the hostile text shows where it reached Markdown unescaped (escaped, each of these has a backslash in it)
RENDERED = ("**bold**", "[link](http://x)", ":red[x]", "<b>x</b>", "$$\\x$$")
LONGEST = " ".join(f"w{i % 97}" for i in range(settings.MAX_TOKENS.high + 500))  # more tokens than Max tokens allows
SIDEBAR_NUMBERS = {  # the widget's key is the bound's name
    bound.name: bound
    for bound in (
        settings.MAX_TOKENS,
        settings.D_MODEL,
        settings.N_HEAD,
        settings.N_KV_HEAD,
        settings.N_LAYER,
        settings.SEED,
    )
}
SIDEBAR_KEYS = {"text", "example", "lang", "model", "model_path", "device", "causal", *SIDEBAR_NUMBERS}
SIDEBAR_DEFAULTS = {key: bound.default for key, bound in SIDEBAR_NUMBERS.items()}
PAGE_SECONDS = 150  # one page's whole sweep; quiet, the slowest takes about a third of it

_apps: dict[str, AppTest] = {}


def app_on(page: str) -> AppTest:
    """The page's AppTest, opened once and reused: each case first puts the sidebar back as it was."""
    if page not in _apps:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
        at.switch_page(f"pages/{page}.py").run()
        _apps[page] = at
    return _apps[page]


def reset(at: AppTest) -> None:
    """The sidebar's defaults: the default text, the embedded model, every number at its default."""
    at.selectbox(key="model").set_value("default")
    at.text_area(key="text").input(settings.DEFAULT_TEXT)
    for key, value in SIDEBAR_DEFAULTS.items():
        at.number_input(key=key).set_value(value)
    at.checkbox(key="causal").uncheck()
    at.run()


def boxes(at: AppTest) -> list[str]:
    return [el.value for kind in ("info", "warning", "error") for el in getattr(at, kind)]


def problems(at: AppTest, page: str, case: str) -> list[str]:
    """What is wrong with the page as ``case`` left it: an exception, nothing shown, or Markdown from user text.

    The Overview page draws no chart: its tokens caption is what it shows of the text."""
    if at.exception:
        return [f"{case}: {at.exception[0].value}"]
    found = []
    drawn = at.get("plotly_chart") or at.dataframe or at.metric or (page == "overview" and at.caption)
    if not drawn and not boxes(at):
        found.append(f"{case}: no chart, table or message")
    shown = [el.value for kind in ("markdown", "caption", "info", "warning", "error", "success") for el in at.get(kind)]
    for value in shown:
        if isinstance(value, str) and any(piece in value for piece in RENDERED):
            found.append(f"{case}: user text rendered as Markdown in {value[:120]!r}")
        if isinstance(value, str) and re.search(r"\bnan\b", value):  # Python's own spelling of a float NaN
            found.append(f"{case}: a number that is not one, shown as text: {value[:120]!r}")
    return found


def set_sidebar(at: AppTest, **values) -> None:
    for key, value in values.items():
        if key == "text":
            at.text_area(key="text").input(value)
        elif key == "causal":
            at.checkbox(key="causal").check() if value else at.checkbox(key="causal").uncheck()
        elif key == "model":
            at.selectbox(key="model").set_value(value)
        else:
            at.number_input(key=key).set_value(value)
    at.run()


SIDEBAR_CASES = {
    "empty text": {"text": ""},
    "whitespace text": {"text": " \n\t  \n"},
    "one token": {"text": "a"},
    "max tokens 1": {"max_tokens": 1},
    "hostile text": {"text": HOSTILE},
    "hostile text causal": {"text": HOSTILE, "causal": True},
    **{  # a bound whose low end is its default (seed 0, n_kv_head 0) is the "default" case already
        f"{key} {which}": {key: getattr(bound, which)}
        for key, bound in SIDEBAR_NUMBERS.items()
        for which in ("low", "high")
        if getattr(bound, which) != bound.default and (key, which) != ("max_tokens", "low")  # "max tokens 1"
    },
    "n_head 64 of d_model 1024": {"d_model": 1024, "n_head": 64},
    "n_kv_head 1 causal": {"n_kv_head": 1, "causal": True},
}


def page_widgets(at: AppTest) -> list[tuple[str, str, list]]:
    """(kind, key, values) for each widget of the page's own: numbers at both ends, text boxes empty and hostile."""
    found = []
    for kind in ("number_input", "slider", "text_area", "text_input"):
        for widget in getattr(at, kind):
            key = widget.key
            if not key or key in SIDEBAR_KEYS or key.startswith("$$") or key.endswith("_query"):
                continue
            if kind in ("number_input", "slider"):
                values = [widget.min, widget.max]
                if isinstance(widget.value, int):  # the proto keeps an int input's bounds as floats
                    values = [None if value is None else int(value) for value in values]
            else:
                values = ["", " ", HOSTILE]
            found.append((kind, key, [value for value in values if value is not None]))
    return found


def set_widget(at: AppTest, kind: str, key: str, value) -> None:
    widget = getattr(at, kind)(key=key)
    (widget.input(value) if kind in ("text_area", "text_input") else widget.set_value(value)).run()


@pytest.mark.parametrize("page", PAGES)
def test_every_page_at_every_sidebar_extreme(page):
    at = app_on(page)
    start, found = time.monotonic(), problems(at, page, "default")
    for case, values in SIDEBAR_CASES.items():
        reset(at)
        set_sidebar(at, **values)
        found += problems(at, page, case)
    reset(at)
    set_sidebar(at, text=LONGEST, max_tokens=settings.MAX_TOKENS.high)
    found += problems(at, page, f"longest text at {settings.MAX_TOKENS.high} tokens")
    reset(at)
    assert not found, "\n".join(found)
    assert time.monotonic() - start < PAGE_SECONDS


@pytest.mark.parametrize("page", PAGES)
def test_every_page_widget_at_its_extremes(page):
    at = app_on(page)
    reset(at)
    start, found = time.monotonic(), []
    for text in (settings.DEFAULT_TEXT, "a"):  # widgets whose range follows the text's length, at its shortest too
        set_sidebar(at, text=text)
        for kind, key, values in page_widgets(at):
            first = getattr(at, kind)(key=key).value
            for value in values:
                if not any(w.key == key for w in getattr(at, kind)):  # an earlier value hid it
                    break
                set_widget(at, kind, key, value)
                found += problems(at, page, f"text {text[:10]!r}, {key} = {value!r}")
            if any(w.key == key for w in getattr(at, kind)):
                set_widget(at, kind, key, first)
    reset(at)
    assert not found, "\n".join(found)
    assert time.monotonic() - start < PAGE_SECONDS


@pytest.mark.parametrize("page", PAGES)
def test_every_page_on_smollm2_at_one_token_and_empty(page):
    at = app_on(page)
    reset(at)
    found = []
    for case, text in (("smollm2 one token", "a"), ("smollm2 empty", "")):
        set_sidebar(at, model="smollm2", text=text)
        found += problems(at, page, case)
    reset(at)
    assert not found, "\n".join(found)


CHOICES_PER_WIDGET = 10  # options tried per selectbox or radio: every kind of mask, every source of a KV config
LONG_PATH = "a" * 100_000  # the KV page's folder box once raised OSError: File name too long


def page_choices(at: AppTest) -> list[tuple[str, str, int]]:
    """(kind, key, number of options tried) for each selectbox and radio of the page's own."""
    found = []
    for kind in ("selectbox", "radio"):
        for widget in getattr(at, kind):
            if widget.key and widget.key not in SIDEBAR_KEYS and not widget.key.startswith("$$"):
                found.append((kind, widget.key, min(len(widget.options), CHOICES_PER_WIDGET)))
    return found


def pick(at: AppTest, kind: str, key: str, index: int) -> None:
    """Choose a selectbox's or radio's option by its place, as a click sends it: AppTest's ``set_value`` wants the
    option's value, which the element tree holds only as shown (``format_func`` applied)."""
    widget = getattr(at, kind)(key=key)
    widget.__class__ = type(f"Picked{type(widget).__name__}", (type(widget),), {"index": property(lambda _: index)})
    widget._value = index  # no longer "unchanged": the run sends options[index]
    at.run()


@pytest.mark.parametrize("page", PAGES)
def test_every_page_choice_and_the_widgets_it_reveals_at_their_extremes(page):
    """Each option of each selectbox and radio; the number inputs and text boxes an option brings (a mask's
    document lengths, an expectation, a folder) at their extremes, a text box also with a 100,000-character text."""
    at = app_on(page)
    reset(at)
    start, found = time.monotonic(), []
    seen = {key for _, key, _ in page_widgets(at)}
    for kind, key, n_options in page_choices(at):
        first = getattr(at, kind)(key=key).index
        for option in range(n_options):
            if not any(w.key == key for w in getattr(at, kind)):
                break
            pick(at, kind, key, option)
            found += problems(at, page, f"{key} = option {option}")
            for w_kind, w_key, values in page_widgets(at):
                if w_key in seen:
                    continue
                if w_kind in ("text_area", "text_input"):
                    values = [*values, LONG_PATH]
                for value in values:
                    if not any(w.key == w_key for w in getattr(at, w_kind)):
                        break
                    set_widget(at, w_kind, w_key, value)
                    found += problems(at, page, f"{key} = option {option}, {w_key} = {str(value)[:40]!r}")
        if first is not None and any(w.key == key for w in getattr(at, kind)):
            pick(at, kind, key, first)
    reset(at)
    assert not found, "\n".join(found)
    assert time.monotonic() - start < PAGE_SECONDS


def error_with(at: AppTest, page: str, where: str) -> str:
    """The one error box that quotes the hostile text, which must come escaped (issue 19 K)."""
    assert not at.exception, (where, at.exception)
    quoting = [e.value for e in at.error if "bold" in e.value]
    assert len(quoting) == 1, (where, [e.value for e in at.error])
    assert not problems(at, page, where), problems(at, page, where)
    assert "\\*\\*bold\\*\\* \\[link\\]\\(http\\://x\\) \\:red\\[x\\]" in quoting[0], quoting[0]
    return quoting[0]


def test_the_three_error_boxes_of_finding_k_show_the_typed_text_escaped():
    at = app_on("masks")
    reset(at)
    kinds = at.selectbox(key="mask_kind").options
    pick(at, "selectbox", "mask_kind", next(i for i, o in enumerate(kinds) if o.startswith("Packed documents")))
    docs = next(w.key for w in at.text_input if w.key.startswith("mask_docs_"))
    at.text_input(key=docs).input(HOSTILE).run()
    assert error_with(at, "masks", "document lengths").startswith("Invalid mask: document lengths '")
    pick(at, "selectbox", "mask_kind", 0)  # causal
    meant = at.radio(key="mask_meant").options
    pick(at, "radio", "mask_meant", meant.index(next(o for o in meant if o.startswith("another expectation"))))
    at.text_input(key="mask_expect_text").input(HOSTILE).run()
    assert error_with(at, "masks", "custom expectation").startswith("Invalid expectation: ")
    pick(at, "radio", "mask_meant", 0)
    reset(at)

    at = app_on("kv_cache")
    reset(at)
    sources = at.radio(key="kv_source").options
    pick(at, "radio", "kv_source", sources.index(next(o for o in sources if "folder" in o.lower())))
    at.text_input(key="kv_folder").input(HOSTILE).run()
    assert error_with(at, "kv_cache", "folder box").startswith("This config cannot be used: ")
    at.text_input(key="kv_folder").input(LONG_PATH).run()
    assert not at.exception and len(at.error) == 1 and "too long" in at.error[0].value, [e.value for e in at.error]
    pick(at, "radio", "kv_source", 0)
    reset(at)
