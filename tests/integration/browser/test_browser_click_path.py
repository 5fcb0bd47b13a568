"""A new user's click path through every page with every bundled model, in a real Chromium.

On every page: no Streamlit exception box, no console error, and HTML/JS typed into every text field leaves
``window`` untouched (the payload would set ``window.__pwned`` if any of it ran).
"""

import pytest

from attnviz.models.registry import CHOICES
from tests.integration.chromium import assert_no_exception
from tools.browser import choose_page, choose_sidebar_option, set_sidebar_value, wait_until_idle

pytestmark = pytest.mark.browser

# every way text could run or mark itself up: raw tags, an event handler, Markdown, Plotly markup, bidi, specials
PAYLOAD = (
    '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    "<b>bold</b> **md** __init__ [x](javascript:window.__pwned=3) %{z} \u202e(1/2) [UNK] <|endoftext|>"
)
NAV = [
    "Overview",
    "Heads",
    "Token view",
    "Head roles",
    "Parity",
    "Generation",
    "Padding",
    "Patching",
    "Mask lab",
    "KV cache",
    "Scaling",
    "Training",
    "Walkthrough",
    "Cost",
]
MODELS = list(map(str, CHOICES.values()))  # the embedded default, MiniLM, SmolLM2: as the sidebar names them


def watch_console(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    return errors


def fill_every_text_field(page) -> int:
    """Type the payload into every text box of the main area, as a user does (Enter / Ctrl+Enter commits)."""
    boxes = page.locator('[data-testid="stMain"] textarea, [data-testid="stMain"] input[type="text"]')
    filled = 0
    for i in range(boxes.count()):
        box = boxes.nth(i)
        if not box.is_visible() or not box.is_editable():
            continue
        box.fill(PAYLOAD)
        box.press("Control+Enter" if box.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
        wait_until_idle(page)
        filled += 1
    return filled


def assert_untouched(page, where: str) -> None:
    assert page.evaluate("() => window.__pwned") is None, f"{where}: the typed HTML/JS ran"
    assert page.locator('[data-testid="stMain"] b:text-is("bold")').count() == 0, f"{where}: typed <b> drawn as bold"


@pytest.mark.parametrize("model", MODELS)
def test_every_page_with_every_model(server, browser, model):
    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    page = context.new_page()
    console = watch_console(page)
    page_errors: list[str] = []
    page.on("pageerror", lambda err: page_errors.append(str(err)))
    page.goto(server)
    wait_until_idle(page)
    if model != MODELS[0]:
        choose_sidebar_option(page, "Model", model)
    set_sidebar_value(page, "Text to analyse", PAYLOAD)
    filled = 0
    for name in NAV:
        choose_page(page, name)  # the header's menu: its link, or its section's drop-down and the link there
        assert_no_exception(page)
        assert_untouched(page, name)
        if model == MODELS[0]:  # the embedded model is quick: type into every field of every page too
            filled += fill_every_text_field(page)
            assert_no_exception(page)
            assert_untouched(page, f"{name}, after typing into its fields")
    assert not page_errors, page_errors
    assert not console, console
    if model == MODELS[0]:
        assert filled >= 3  # the sidebar's text plus the pages' own boxes (Head roles' prompts, Mask lab, KV cache)
    context.close()
