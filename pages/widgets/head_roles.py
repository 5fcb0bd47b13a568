"""The Head roles page's own widgets: which prompts the stability check reads."""

from __future__ import annotations

import streamlit as st

from attnviz import settings
from attnviz.i18n.translate import t
from attnviz.labs import head_roles

EXAMPLES, MINE = "the app's examples", "my prompts"  # option values: the radio shows t("head_roles.prompts_...")


def stability_prompts(n_prompt_tokens: int) -> list[str]:
    """The prompts the stability check labels: the app's examples, or up to STABILITY_MAX_PROMPTS of the user's."""
    which = st.radio(
        t("head_roles.prompts"),
        (EXAMPLES, MINE),
        key="roles_prompt_source",
        horizontal=True,
        format_func={EXAMPLES: t("head_roles.prompts_examples"), MINE: t("head_roles.prompts_mine")}.get,
    )
    if which != MINE:
        return list(settings.EXAMPLES.values())
    if "roles_prompts" not in st.session_state:
        st.session_state.roles_prompts = ""
    st.text_area(
        t("head_roles.my_prompts"),
        key="roles_prompts",
        height=140,
        max_chars=head_roles.STABILITY_PROMPT_CHARS,
        placeholder=t("head_roles.my_prompts_placeholder"),
    )
    texts, ignored = head_roles.parse_prompts(st.session_state.roles_prompts)
    st.caption(
        t(
            "head_roles.prompts_caption",
            max_prompts=head_roles.STABILITY_MAX_PROMPTS,
            n_tokens=n_prompt_tokens,
            max_tokens=head_roles.STABILITY_TOKENS,
        )
    )
    if ignored:
        st.warning(t("head_roles.prompts_ignored", ignored=ignored, max_prompts=head_roles.STABILITY_MAX_PROMPTS))
    return texts
