"""The tour's frame through AppTest: every step in both languages, moving through it by the buttons and by the
address, the "I see it" check, the full page's link, the reader's own text, and a warmed process's tour reading
everything from the warm-up (no forward pass)."""

import pytest

from attnviz import settings as limits
from attnviz.app import loading
from attnviz.app.tour import cache
from attnviz.i18n.catalogue import catalogue
from attnviz.i18n.translate import set_language
from attnviz.labs.tour.steps import SECTIONS, STEPS
from tests.integration.pages.passes import count_passes
from tests.integration.pages.tour.apptest import small_trainings, tour_app


@pytest.fixture(autouse=True)
def _english_after(monkeypatch):
    small_trainings(monkeypatch)  # the frame's tests, not the trainings': those are the pitfall steps' tests
    yield
    set_language("en")


def words(lang: str, key: str) -> str:
    return catalogue(lang).get(key, catalogue("en").get(key, ""))


def progress_text(at) -> str:
    return at.get("progress")[0].proto.text


def link_targets(at) -> list[str]:
    return [link.proto.page for link in at.get("page_link")]


def step_of(at) -> str:
    return at.query_params["step"]


@pytest.mark.parametrize("index", range(len(STEPS)), ids=[step.key for step in STEPS])
def test_every_step_opens_in_both_languages_with_its_words_progress_and_link(index):
    step = STEPS[index]
    for lang in ("en", "zh"):
        # both on the English example: the frame's words change with the language, the demonstration is computed
        # once (each step's own tests draw it on the Chinese example)
        at = tour_app(step.key, lang, tour_text=limits.TOUR_EXAMPLES["en"])
        assert not at.exception, (lang, at.exception)
        assert not at.error, (lang, [e.value for e in at.error])
        assert step_of(at) == step.key and at.title[0].value == words(lang, "tour.title")
        title = words(lang, f"tour_step.{step.key}.title")
        assert [h.value for h in at.subheader][:1] == [title or step.key]
        body = words(lang, f"tour_step.{step.key}.body")
        assert not body or any(m.value == body for m in at.markdown)
        n = len(STEPS)
        expected = words(lang, "tour.progress").format(i=index + 1, n=n, section=step.section, sections=SECTIONS)
        assert progress_text(at).startswith(expected)
        dots = at.button_group(key="tour_dots")
        assert dots.value == index and [o.startswith("✓") for o in dots.options] == [i < index for i in range(n)]
        assert link_targets(at) == [step.page]  # the full page the step comes from
        assert at.get("page_link")[0].proto.label == words(lang, "tour.open_page").format(
            page=words(lang, f"nav.{step.page}")
        )
        assert any(limits.TOUR_MODEL in c.value.lower() or "smollm2" in c.value.lower() for c in at.caption)


def test_next_and_back_move_the_step_and_the_address():
    at = tour_app(STEPS[0].key)
    assert at.button(key="tour_back").disabled  # nothing before the first step
    at.button(key="tour_next").click().run()
    assert not at.exception and step_of(at) == STEPS[1].key
    assert at.subheader[0].value == words("en", f"tour_step.{STEPS[1].key}.title") or STEPS[1].key
    assert progress_text(at).startswith(f"Step 2 of {len(STEPS)}")
    at.button(key="tour_next").click().run()
    assert step_of(at) == STEPS[2].key
    at.button(key="tour_back").click().run()
    assert not at.exception and step_of(at) == STEPS[1].key and not at.button(key="tour_back").disabled


def test_a_steps_dot_opens_that_step():
    at = tour_app(STEPS[1].key)
    at.button_group(key="tour_dots").set_value(len(STEPS) - 2).run()
    assert not at.exception and step_of(at) == STEPS[-2].key
    assert at.button_group(key="tour_dots").value == len(STEPS) - 2


def test_the_last_steps_next_finishes_and_offers_the_start():
    at = tour_app(STEPS[-1].key, "zh")
    assert at.button(key="tour_next").label == words("zh", "tour.finish")
    at.button(key="tour_next").click().run()
    assert not at.exception and [s.value for s in at.success] == [words("zh", "tour.done")]
    at.button(key="tour_restart").click().run()
    assert not at.exception and step_of(at) == STEPS[0].key and not at.success


def test_i_see_it_shows_the_question_then_the_answer_behind_a_fold():
    step = next(s for s in STEPS if f"tour_step.{s.key}.question" in catalogue("en"))  # a step with its words
    at = tour_app(step.key)
    question = words("en", f"tour_step.{step.key}.question")
    assert not any(question in m.value for m in at.markdown)
    at.button(key=f"tour_{step.key}_seen").click().run()
    assert not at.exception and any(question in m.value for m in at.markdown)
    (fold,) = [e for e in at.main.expander if e.label == "Answer"]
    answer = words("en", f"tour_step.{step.key}.answer")
    assert [m.value for m in fold.markdown] == [answer]


def test_an_unknown_step_opens_the_first_with_a_note():
    at = tour_app("<b>nope</b>")
    assert not at.exception and step_of(at) == STEPS[0].key
    assert any("does not have" in c.value and "nope" in c.value for c in at.caption)


def test_the_text_chooser_starts_on_the_languages_example():
    for lang in ("en", "zh"):
        at = tour_app(STEPS[0].key, lang)
        assert at.selectbox(key="tour_text").value == limits.TOUR_EXAMPLES[lang]


@pytest.mark.parametrize(
    ("text", "cut"),
    [("Attention is a weighted average.", False), ("cat", False), (" ".join(["word"] * 200), True)],
    ids=["short", "one_token", "long"],
)
def test_the_readers_own_text(text, cut):
    at = tour_app(STEPS[2].key, tour_text="own", text=text)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    notes = [c.value for c in at.caption if "the tour reads its first" in c.value]
    if cut:
        assert len(notes) == 1 and f"first {limits.TOUR_TOKENS}." in notes[0]
        n_input = int(notes[0].split(" has ")[1].split(" tokens")[0])
        assert n_input > limits.TOUR_TOKENS
    else:
        assert notes == []


def test_an_empty_own_text_is_said():
    at = tour_app(STEPS[0].key, tour_text="own", text="")
    assert not at.exception and any(words("en", "tour.own_empty") == i.value for i in at.info)


def test_a_warmed_process_walks_the_whole_tour_with_no_forward_pass(monkeypatch):
    """What a server's warm-up (attnviz.app.warm) computes: the tour read from it, every step, in English."""
    loading.result_cache.clear()
    cache.warm_tour(examples=[limits.TOUR_EXAMPLES["en"]])
    source = loading.load_source(cache.tour_spec())
    entries = ("run", "run_hooked", "run_batch", "attention_layer", "attention_layers", "states_under_mask")
    entries += ("prefill_kv", "head_pass", "layer_cache", "generate", "greedy_decoder", "check_parity")
    passes = count_passes(monkeypatch, source, entries)  # every way a step's view could run the model
    at = tour_app(STEPS[0].key)
    for step in STEPS[1:]:
        at.button(key="tour_next").click().run()
        assert not at.exception and step_of(at) == step.key
    assert passes == []
