"""The tour's frame: everything around a step's live demonstration (:func:`tour_page`).

The frame draws the title, the model and the text the tour runs on, where the reader is (step i of N, the
tutorial's section), the step's words, its view (:data:`attnviz.app.tour.views.VIEWS`), the "I see it" check with
its question and answer, back and next, and a link to the full page the step comes from. The step is the query
parameter ``step``: a teacher's link opens that step, and the address follows the reader.
"""

from __future__ import annotations

import logging

import streamlit as st

from attnviz import settings as limits
from attnviz.app.loading import source_for
from attnviz.app.navigation import SECTIONS, frame_settings
from attnviz.app.sidebar import example_name
from attnviz.app.state import Settings
from attnviz.app.tour.cache import tour_settings, tour_spec
from attnviz.app.tour.context import TourContext
from attnviz.app.tour.views import VIEWS
from attnviz.app.widgets import show_bug, show_error
from attnviz.core.memory_errors import is_out_of_memory
from attnviz.core.token_display import markdown_text
from attnviz.errors import AttnvizBugError
from attnviz.i18n.catalogue import catalogue
from attnviz.i18n.translate import language, t, tr
from attnviz.labs.tour.steps import SECTIONS as N_SECTIONS
from attnviz.labs.tour.steps import STEPS, TourStep, step_index
from attnviz.models.registry import SourceSpec

log = logging.getLogger(__name__)

OWN = "own"  # the text chooser's entry for the sidebar's text (the others are settings.EXAMPLES' names)
STEP_PARAM = "step"  # the query parameter that holds the step
ICONS = {name: icon for section in SECTIONS.values() for name, icon in section.items()}


def _go(index: int) -> None:
    """Back / next / start again: the step moves, and the address with it (a callback, before the run)."""
    st.query_params[STEP_PARAM] = STEPS[index].key
    st.session_state.pop("_tour_finished", None)


def _finish() -> None:
    st.session_state["_tour_finished"] = True


def _seen(key: str) -> None:
    st.session_state[f"_tour_seen_{key}"] = True


def current_step() -> TourStep:
    """The step in the address; the first (with a one-line note) for none or one no step has (a stale link)."""
    asked = st.query_params.get(STEP_PARAM)
    try:
        step = STEPS[step_index(asked)] if asked is not None else STEPS[0]
    except KeyError:
        st.caption(t("tour.unknown_step", step=markdown_text(str(asked))))
        step = STEPS[0]
    if asked != step.key:
        st.query_params[STEP_PARAM] = step.key
    return step


def _spec(settings_: Settings) -> SourceSpec:
    """The tour model on the sidebar's device and dtype (its defaults where the sidebar's model settings fail)."""
    if settings_.spec is None:
        return tour_spec()
    return tour_spec(settings_.spec.device, settings_.spec.placement.dtype)


def choose_text(settings_: Settings) -> tuple[str, bool]:
    """The text chooser: an example (the language's by default) or the sidebar's own text; (text, own)."""
    options = [*limits.EXAMPLES, OWN]
    if st.session_state.get("tour_text") not in options:
        st.session_state["tour_text"] = limits.TOUR_EXAMPLES[language()]
    names = {name: example_name(name) for name in limits.EXAMPLES} | {OWN: t("tour.own_text")}
    chosen = st.selectbox(t("tour.text"), options, key="tour_text", format_func=names.get)
    if chosen == OWN:
        return settings_.text, True
    return limits.EXAMPLES[chosen], False


def own_text_note(source, text: str) -> None:
    """Under the chooser, for the reader's own text: that the tour reads its first TOUR_TOKENS tokens, when cut."""
    n_input = source.encode(text, limits.TOUR_TOKENS).n_input
    if n_input > limits.TOUR_TOKENS:
        st.caption(t("tour.own_cut", n=n_input, kept=limits.TOUR_TOKENS))


def _jump() -> None:
    """A step's dot clicked: that step."""
    chosen = st.session_state.get("tour_dots")
    if chosen is not None:
        _go(int(chosen))


def progress(index: int, step: TourStep) -> None:
    """Step i of N, section s of 8, and a dot a step (done, here, ahead), each a way to that step."""
    n = len(STEPS)
    st.progress((index + 1) / n, text=t("tour.progress", i=index + 1, n=n, section=step.section, sections=N_SECTIONS))
    st.session_state["tour_dots"] = index  # the dots show where the reader is, however they got there
    st.pills(
        t("tour.steps"),
        range(n),
        key="tour_dots",
        required=True,
        on_change=_jump,
        format_func=lambda i: f"✓ {i + 1}" if i < index else str(i + 1),
        label_visibility="collapsed",
    )


def _words(key: str) -> str | None:
    """A step's words in the reader's language (English where it has no translation yet); None where neither has
    them yet (the step's owner writes them)."""
    if key in catalogue(language()) or key in catalogue("en"):
        return t(key)
    return None


def step_words(step: TourStep) -> None:
    title = _words(f"tour_step.{step.key}.title")
    st.subheader(title or step.key)
    body = _words(f"tour_step.{step.key}.body")
    if body:
        st.markdown(body)


def draw_view(ctx: TourContext) -> None:
    """The step's live demonstration; a step with no view yet, or a failure in it, is one line, never a
    traceback (out of memory goes on to the page's guard, which says so and hands memory back)."""
    view = VIEWS.get(ctx.step.key)
    if view is None:
        st.warning(t("tour.not_ready"))
        return
    try:
        view.draw(ctx)
    except AttnvizBugError as err:
        show_bug(err)
    except Exception as err:  # a step's failure is said in the page, the tour goes on
        if is_out_of_memory(err):
            raise
        log.error("the tour's %s step failed", ctx.step.key, exc_info=err)
        show_error(err)


def check(step: TourStep) -> None:
    """ "I see it": then the step's question, its answer behind an expander."""
    question = _words(f"tour_step.{step.key}.question")
    if question is None:
        return
    if not st.session_state.get(f"_tour_seen_{step.key}"):
        st.button(t("tour.seen"), key=f"tour_{step.key}_seen", on_click=_seen, args=(step.key,))
        return
    st.markdown(f"**{t('tour.question')}** {question}")
    answer = _words(f"tour_step.{step.key}.answer")
    if answer:
        with st.expander(t("tour.answer")):
            st.markdown(answer)


# a new step opens at its top: the reader clicked Next at the bottom of the previous one (the step's key in it makes
# each step's element new, so the browser runs it once a step); again as the step's charts draw below (their heights
# settle after the run, and the browser's scroll anchoring would follow them)
TO_THE_TOP = """<script>
(() => {
  if (window.__attnvizTourStep === "STEP") return;  // this step's reruns (a widget moved) stay where the reader is
  window.__attnvizTourStep = "STEP";
  const toTop = () => {
    for (const el of [document.querySelector('[data-testid="stMain"]'),
                      document.querySelector('[data-testid="stAppViewContainer"]'), document.scrollingElement]) {
      el?.scrollTo({top: 0});
    }
  };
  [0, 150, 500].forEach((ms) => setTimeout(toTop, ms));
})();
</script>"""


def to_the_top(step: TourStep) -> None:
    """Scroll to the page's top when the browser shows a step it did not show before (drawn every run, last: a run
    cut short by a rerun, a step's background work, still leaves the next run's)."""
    st.html(TO_THE_TOP.replace("STEP", step.key), unsafe_allow_javascript=True)


def moves(index: int, step: TourStep) -> None:
    """Back and next (on the last step: done, and the start again), the link to the step's full page."""
    last = index == len(STEPS) - 1
    cols = st.columns(2)
    cols[0].button(t("tour.back"), key="tour_back", disabled=index == 0, on_click=_go, args=(max(index - 1, 0),))
    if last:
        cols[1].button(t("tour.finish"), key="tour_next", type="primary", on_click=_finish)
    else:
        cols[1].button(t("tour.next"), key="tour_next", type="primary", on_click=_go, args=(index + 1,))
    if last and st.session_state.get("_tour_finished"):
        st.success(t("tour.done"))
        st.button(t("tour.restart"), key="tour_restart", on_click=_go, args=(0,))
    st.page_link(
        f"pages/{step.page}.py", label=t("tour.open_page", page=t(f"nav.{step.page}")), icon=ICONS.get(step.page)
    )


def tour_page() -> None:
    """The whole tour page (pages/tour.py)."""
    st.title(t("tour.title"))
    settings_ = frame_settings()
    step = current_step()
    index = step_index(step.key)
    spec = _spec(settings_)
    st.caption(t("tour.model_caption", model=markdown_text(tr(spec.title))))
    text, own = choose_text(settings_)
    progress(index, step)
    step_words(step)
    source = source_for(spec)  # None after saying why it cannot load
    if source is not None and not text.strip():
        st.info(t("tour.own_empty"))
    elif source is not None:
        if own:
            own_text_note(source, text)
        draw_view(TourContext(step, tour_settings(text, own, spec), source, own))
    check(step)
    moves(index, step)
    to_the_top(step)


__all__ = ["OWN", "STEP_PARAM", "current_step", "tour_page"]
