"""One head drawn large returns what it drew: the whole head when it fits, else the window under the pooled map."""

import pytest
from streamlit.testing.v1 import AppTest


def script():
    import streamlit as st

    from attnviz.app.head_view import head_view
    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.registry import EMBEDDED, SourceSpec, open_source

    source = open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=16, n_head=2, n_layer=1, causal=True)))
    record = source.run(" ".join(f"w{i}" for i in range(st.session_state.get("n", 8))), 2048)
    drawn = head_view(record, 0, 1, key="v")
    st.text(f"{drawn.rows} {drawn.cols} {None if drawn.pooled is None else tuple(drawn.pooled.shape)} {drawn.pool}")


def test_a_short_text_is_drawn_whole():
    at = AppTest.from_function(script, default_timeout=60).run()
    assert not at.exception and at.text[0].value == "(0, 8) (0, 8) None None"


@pytest.mark.slow
def test_a_long_text_is_pooled_and_the_window_it_draws_is_returned():
    at = AppTest.from_function(script, default_timeout=60)
    at.session_state["n"] = 1000
    at.run()
    assert not at.exception and at.text[0].value.startswith("(0, 256) (0, 256) (") and at.text[0].value.endswith("max")
    at.number_input(key="v_q0").set_value(500).run()
    at.radio(key="v_pool").set_value("mean").run()
    assert at.text[0].value.startswith("(500, 756) (0, 256)") and at.text[0].value.endswith("mean")


def test_the_one_row_view_starts_at_the_windows_last_row():
    from attnviz.app.head_view import default_row

    assert default_row((0, 256)) == 255  # a decoder's row 255 sees 256 keys; row 0 would see only itself
    assert default_row((1900, 2000)) == 1999
    assert default_row((5, 5)) == 5
