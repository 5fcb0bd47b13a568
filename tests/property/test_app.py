"""The app through AppTest on generated sidebar input: hostile text, max_tokens and embedded-model settings at and
within the widgets' bounds, on the Overview, Heads and Token view pages. The rule: no exception, and no hostile
piece of the typed text shows un-escaped in a Markdown element."""

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from attnviz import settings as limits
from tests.property import ran
from tests.property.strategies import HOSTILE

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["pages/overview.py", "pages/heads.py", "pages/tokens.py"]
MARKUP = [h for h in HOSTILE if re.search(r"[<>*_`\[\]$~|:]", h)]  # the pieces Markdown would read as markup
_app: dict[str, AppTest] = {}


def app() -> AppTest:
    """One AppTest for the module: a fresh one per example costs about 5 s."""
    if "at" not in _app:
        _app["at"] = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    return _app["at"]


def markdown_bodies(at: AppTest) -> list[str]:
    """Every element Streamlit renders as Markdown, with code spans (shown literally) removed."""
    elements = [*at.markdown, *at.caption, *at.info, *at.warning, *at.error, *at.success]
    elements += [*at.title, *at.header, *at.subheader]
    return [re.sub(r"`[^`]*`", "", str(e.value)) for e in elements]


def bounded(bound: limits.Bound) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([bound.low, bound.high, bound.default]), st.integers(bound.low, bound.high))


sidebar = st.fixed_dictionaries(
    {
        "text": st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12)), min_size=1, max_size=5).map(
            " ".join
        ),
        "page": st.sampled_from(PAGES),
    },
    optional={
        "max_tokens": bounded(limits.MAX_TOKENS),
        "d_model": st.sampled_from([2, 4, 8, 64, 128]),
        "n_head": st.sampled_from([1, 2, 4, 8]),
        "n_kv_head": st.sampled_from([0, 1, 2, 3, 64]),
        "n_layer": st.sampled_from([1, 2, 12]),
        "seed": bounded(limits.SEED),
        "causal": st.booleans(),
    },
)


@settings(max_examples=80)
@given(sidebar)
def test_sidebar_input_never_breaks_a_page(values):
    ran("apptest sidebar")
    at = app()
    at.text_area(key="text").input(values["text"])
    for key in ("max_tokens", "d_model", "n_head", "n_kv_head", "n_layer", "seed"):
        at.number_input(key=key).set_value(values.get(key, getattr(limits, key.upper()).default))
    at.checkbox(key="causal").set_value(values.get("causal", False))
    at.switch_page(values["page"]).run()
    assert not at.exception, (values, [e.value for e in at.exception])
    bodies = markdown_bodies(at)
    for piece in MARKUP:
        if piece in values["text"]:
            shown = [b for b in bodies if piece in b]
            assert not shown, (values, piece, shown[:1])
