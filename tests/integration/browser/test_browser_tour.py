"""The tour in a real browser, on a fresh ``serve.py`` (what ``make run`` serves), as a visitor's first page: every
step's chart drawn and visible, Next through every step, both languages, on a desktop and on a phone (nothing wider
than the phone's screen). Screenshots of every step go to ``$ATTNVIZ_TOUR_SHOTS`` when set (else the test's own
temporary folder)."""

import os
from pathlib import Path

import pytest

from attnviz.i18n.catalogue import catalogue
from attnviz.labs.tour.steps import STEPS
from tests.integration.chromium import assert_no_exception
from tools.browser import streamlit_server, wait_until_idle

SIZES = {"desktop": (1400, 1000), "phone": (390, 844)}
STEP_TIMEOUT_MS = 240_000  # a step still warming on the server's background warm-up (its trainings) is waited for
# what a step draws: its Plotly charts, or the pitfalls' table, or the code step's code
DRAWN = ", ".join(
    f"[data-testid='stMain'] {part}"
    for part in (".js-plotly-plot .main-svg", "[data-testid='stTable']", "[data-testid='stCode']")
)
MAIN = "[data-testid='stMain']"
IN_VIEW = "sel => { const r = document.querySelector(sel).getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight; }"
CHART_TIMEOUT_MS = 60_000  # after the run: Plotly's chunk (the first chart of a visit) and the drawing


@pytest.fixture(scope="module")
def served():
    """A fresh serve.py for this module: every visit below is a first visitor's (a new browser context)."""
    with streamlit_server(timeout=300.0, script="serve.py") as url:
        yield url


def step_in_address(page, key: str) -> None:
    # as long as a step still warming may take: the run that puts the step in the address waits on the warm-up's
    # computation, which yields the CPU to the visitors' runs (niceness 10) and crawls when both cores are busy
    page.wait_for_function(
        "k => new URL(location.href).searchParams.get('step') === k", arg=key, timeout=STEP_TIMEOUT_MS
    )


def drawn(page, key: str, not_ready: str) -> None:
    """The step's demonstration drawn and on the screen (a chart, or the table), no exception, no error box."""
    wait_until_idle(page, STEP_TIMEOUT_MS)  # the server's run: a step still warming is waited for there
    assert_no_exception(page)
    errors = page.locator(f"{MAIN} [data-testid='stAlertContentError']")
    assert errors.count() == 0, (key, errors.first.inner_text())
    assert page.locator(MAIN).get_by_text(not_ready).count() == 0, key
    page.locator(DRAWN).first.wait_for(state="visible", timeout=CHART_TIMEOUT_MS)
    # the step opens at its top (Next was clicked at the bottom of the previous one): its title on the screen
    page.wait_for_function(IN_VIEW, arg=f"{MAIN} h1", timeout=10_000)


def shots_folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ATTNVIZ_TOUR_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# both sizes and both languages, in two walks (a walk is 25 s warmed, the first 95 s with the server's warm-up:
# the suite's time is a budget); `ATTNVIZ_TOUR_SHOTS=DIR pytest ... -k "desktop or phone"` for all four, with
# every step's screenshot, is the report's run
WALKS = [("desktop", "en"), ("phone", "zh")]


@pytest.mark.parametrize(("size", "lang"), WALKS, ids=[f"{size}-{lang}" for size, lang in WALKS])
def test_the_whole_tour_as_a_first_visit(served, browser, lang, size, tmp_path):
    width, height = SIZES[size]
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    folder = shots_folder(tmp_path)
    words = catalogue(lang)
    try:
        page.goto(f"{served}/tour?lang={lang}")
        step_in_address(page, STEPS[0].key)
        for i, step in enumerate(STEPS):
            if i:
                page.locator(".st-key-tour_next button").click()
                step_in_address(page, step.key)
            drawn(page, step.key, words["tour.not_ready"])
            title = words.get(f"tour_step.{step.key}.title")
            if title:
                assert page.locator(MAIN).get_by_text(title, exact=True).first.is_visible(), (step.key, title)
            link = page.locator(f"{MAIN} [data-testid='stPageLink'] a").last
            assert link.get_attribute("href").rstrip("/").split("/")[-1] == step.page, step.key
            if size == "phone":  # nothing drawn wider than the phone's screen
                overflow = page.evaluate(
                    "() => [document.documentElement.scrollWidth, window.innerWidth,"
                    " document.querySelector('[data-testid=\"stMain\"]').scrollWidth]"
                )
                assert max(overflow[0], overflow[2]) <= overflow[1] + 1, (step.key, overflow)
            name = f"{lang}_{size}_{i + 1:02d}_{step.key}"
            page.screenshot(path=str(folder / f"{name}.png"))  # the step's first screen
            page.locator(DRAWN).first.scroll_into_view_if_needed()
            page.screenshot(path=str(folder / f"{name}_chart.png"))  # and its demonstration
        page.locator(".st-key-tour_next button").click()  # the last step's Next finishes the tour
        page.get_by_text(words["tour.done"]).wait_for(timeout=60_000)
    finally:
        context.close()
    assert not errors, errors
