"""What a 1,400 x 1,000 screen shows (issue 25): the sidebar opens on the text and the model, the menu reaches every
page in both languages, and a short text's heat map fills the page with every token labelled."""

import pytest

from attnviz.app.navigation import SECTIONS
from attnviz.i18n.catalogue import catalogue
from tests.integration.chromium import assert_no_exception
from tools.browser import choose_page, set_sidebar_value, streamlit_server, wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser

SCREEN = {"width": 1400, "height": 1000}
THIRTEEN = "The trophy did not fit in the suitcase because it was big."  # 13 tokens on the embedded model


@pytest.fixture(scope="module")
def app_url():
    with streamlit_server() as url:
        yield url


@pytest.fixture
def screen(browser):
    context = browser.new_context(viewport=SCREEN)
    yield context.new_page()
    context.close()


def open_page(page, url: str, path: str, lang: str = "en") -> None:
    page.goto(f"{url}/{path}?lang={lang}")
    page.locator("h1").first.wait_for(state="visible", timeout=120_000)
    wait_until_idle(page)
    assert_no_exception(page)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sidebar_opens_on_the_text_and_the_model_and_the_menu_holds_every_page(app_url, screen, lang):
    """The model and text boxes sat under 16 menu entries, below a 1,000-px screen."""
    words = catalogue(lang)
    open_page(screen, app_url, "heads", lang)
    sidebar = screen.locator('[data-testid="stSidebar"]')
    for label in ("sidebar.text", "sidebar.model", "sidebar.example", "sidebar.max_tokens"):
        box = sidebar.get_by_label(words[label], exact=True).bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= SCREEN["height"], (label, box)
    # every page in the header's menu: the home link, then each section's drop-down
    menu = screen.locator('[data-testid="stTopNav"]')
    titles = [text.split("\n")[-1] for text in menu.locator('[data-testid="stTopNavLink"]').all_inner_texts()]
    sections = menu.locator('[data-testid="stTopNavSection"]')
    assert sections.all_inner_texts() == [words[f"nav_sections.{section}"] for section in SECTIONS]
    for i in range(sections.count()):
        sections.nth(i).click()
        links = screen.locator('[data-testid="stTopNavDropdownLink"]')
        links.first.wait_for()
        titles += [text.split("\n")[-1] for text in links.all_inner_texts()]
        screen.keyboard.press("Escape")
        links.first.wait_for(state="detached")
    assert titles == [words[f"nav.{name}"] for section in SECTIONS.values() for name in section]
    choose_page(screen, words["nav.masks"])  # and a page opens from it
    assert "/masks" in screen.url and screen.locator("h1").first.inner_text() == words["masks.title"]


def test_a_13_token_heat_map_fills_the_page_and_labels_every_token(app_url, screen):
    """At 13 tokens the large head took half the page's width and labelled every other key."""
    open_page(screen, app_url, "heads")
    set_sidebar_value(screen, "Text to analyse", THIRTEEN)
    wait_for_charts(screen, 2)  # the large view and the statistics (the grid above is the page's own canvas)
    large = screen.locator(".js-plotly-plot").first
    large.scroll_into_view_if_needed()
    page_width = screen.locator('[data-testid="stMainBlockContainer"]').evaluate(
        "e => e.clientWidth - parseFloat(getComputedStyle(e).paddingLeft) - parseFloat(getComputedStyle(e).paddingRight)"
    )
    drawn = large.locator(".main-svg").first.bounding_box()["width"]
    assert 0.85 * page_width <= drawn <= page_width + 1, (drawn, page_width)
    keys = large.locator(".xtick text").all_text_contents()
    queries = large.locator(".ytick text").all_text_contents()
    assert len(keys) == len(queries) == 13 and keys[1] == "1 trophy", (keys, queries)
    plot = large.locator(".nsewdrag").first.bounding_box()  # the cells are square: the plot is too
    assert abs(plot["width"] - plot["height"]) <= 2, plot
