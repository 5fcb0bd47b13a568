"""A page's ?layer=&head= link: read once, opened only when every value it gives is offered, named when not."""

import pytest
from streamlit.testing.v1 import AppTest


def script():
    import streamlit as st

    from attnviz.app.links import keep_layer_head_in_link, link_layer_head

    link_layer_head("p", range(4), [0, 1, 2, "mean"])
    layer, head = st.session_state.get("p_layer", 0), st.session_state.get("p_head", 0)
    st.text(f"L{layer} H{head}")
    keep_layer_head_in_link(layer, head)


def opened(**query) -> AppTest:
    at = AppTest.from_function(script)
    for name, value in query.items():
        at.query_params[name] = value
    return at.run()


def test_a_link_opens_its_head_and_the_link_follows_the_page():
    at = opened(layer="3", head="mean")
    assert at.text[0].value == "L3 Hmean" and not at.caption
    assert at.query_params["layer"] == "3" and at.query_params["head"] == "mean"


@pytest.mark.parametrize(
    ("layer", "head", "bad"),
    [("9", "1", ["layer"]), ("1", "<b>", ["head"]), ("x", "-1", ["layer", "head"]), ("True", "0", ["layer"])],
)
def test_a_value_the_page_does_not_offer_is_named_and_nothing_is_opened(layer, head, bad):
    at = opened(layer=layer, head=head)
    assert not at.exception and at.text[0].value == "L0 H0"
    assert [c.value for c in at.caption] == [f"The link's {name} is not one this page offers: ignored." for name in bad]


def test_the_link_is_read_once_then_the_widgets_lead():
    at = opened(layer="2")
    assert at.text[0].value == "L2 H0"
    at.session_state["p_layer"] = 1
    at.run()
    assert at.text[0].value == "L1 H0" and at.query_params["layer"] == "1"
