"""The search widget on its own (AppTest from a function): escaped query and context, a pick sets the focus once."""

from streamlit.testing.v1 import AppTest

from attnviz.app.search import occurrence_label
from attnviz.core.token_search import find_tokens
from attnviz.core.tokenizer import Token, tokenize


def script():
    import streamlit as st

    from attnviz.app.search import focus_token, new_focus, token_search
    from attnviz.core.tokenizer import tokenize

    token_search(tokenize("a <b>bold</b> *star* and :red[x] then <b> again"), key="s")
    st.session_state.setdefault("applied", [])
    if (token := new_focus("page")) is not None:
        st.session_state["applied"].append(token)
    st.write(f"focus={focus_token()}")


def test_an_occurrence_label_escapes_every_token_and_bolds_the_match():
    tokens = [Token("*", 0, 1), Token("<b>", 2, 5), Token("cat", 6, 9), Token("_x_", 10, 13)]
    (occurrence,) = find_tokens(tokens, "cat").occurrences
    assert occurrence_label(occurrence) == r"2: \* \<b\> **cat** \_x\_"
    long = [Token("x" * 3000, 0, 3000), Token("cat", 3001, 3004)]
    label = occurrence_label(find_tokens(long, "cat").occurrences[0])
    assert label == "1: " + "x" * 23 + "… **cat**"  # a 3,000-character token is cut in the list
    many = tokenize("one two three four five six cat seven eight nine ten eleven")
    assert occurrence_label(find_tokens(many, "cat").occurrences[0]) == (
        "6: … three four five six **cat** seven eight nine ten …"
    )


def test_the_widget_lists_escaped_occurrences_and_a_pick_sets_the_focus_once():
    at = AppTest.from_function(script).run()
    assert not at.exception
    assert not [b for b in at.button if b.key.startswith("s_go_")]  # an empty query lists nothing
    at.text_input(key="s_query").input("<b>").run()
    buttons = [b for b in at.button if b.key.startswith("s_go_")]
    assert [b.key for b in buttons] == ["s_go_1_4", "s_go_19_22"]
    assert buttons[0].label == r"1: a **\< b \>** bold \< / b …"  # tokens, each escaped, the match in bold
    assert any(r"2 occurrences of “\<b\>”" in c.value for c in at.caption)
    buttons[1].click().run()
    assert at.session_state["focus_token"] == 19 and at.session_state["focus_token_serial"] == 1
    assert at.session_state["applied"] == [19]
    at.run()  # a rerun does not apply the same pick again
    assert at.session_state["applied"] == [19]
    assert any("Chosen: token 19" in c.value for c in at.caption)
    next(b for b in at.button if b.key == "s_go_19_22").click().run()  # picking it again moves there again
    assert at.session_state["applied"] == [19, 19] and at.session_state["focus_token_serial"] == 2
    at.text_input(key="s_query").input(":red[x]").run()
    assert [b.key for b in at.button if b.key.startswith("s_go_")] == ["s_go_13_18"]
    at.text_input(key="s_query").input("*zebra*").run()
    assert any(r"No token matches “\*zebra\*”" in i.value for i in at.info)
