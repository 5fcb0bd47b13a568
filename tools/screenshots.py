"""Take the screenshots of the README and docs/pages.md in headless Chromium: ``python -m tools.screenshots [--lang zh] [NAME ...]``.

Each shot opens the app as a new user would (a fresh browser context), sets
the sidebar, waits for every chart to be drawn and saves a PNG under assets/
(English) or assets/zh/ (中文: one shot of every page, labels found through
the catalogues).
"""

from __future__ import annotations

import argparse
import re

from attnviz.i18n.catalogue import catalogue
from attnviz.models.hf.bundled import BUNDLED
from tools.browser import (
    ROOT,
    choose_sidebar_option,
    chromium_browser,
    set_sidebar_value,
    streamlit_server,
    wait_for_charts,
    wait_until_idle,
)

MINILM = [("Model", BUNDLED["minilm"].title)]
SMOLLM2 = [("Model", BUNDLED["smollm2"].title)]
LONG_TEXT = (
    "Attention lets every token look at every other token and decide how much each one matters. "
    "注意力机制让每个词都能看到句子里的其他词。 The cat sat on the mat because it was tired. "
) * 260  # over 8,192 SmolLM2 tokens
SHORT_TEXT = "When Mary and John went to the store, John gave a drink to Mary because she was thirsty."
# name -> (page path, sidebar choices (selectbox label, option) or (input label, value), charts to wait for,
#          a button, toggle or radio option to press first, ("search", query) to find a token first,
#          [("pick", multiselect label, option), ...] to choose options first, or None,
#          where to scroll for the shot or None)
# (the Heads page's grid of heat maps is its own canvas, not a chart: its charts are the large view and the
# statistics, and on a long text the pooled map, its window, one row and the statistics)
SHOTS = {
    "overview": ("", [], 0, None, None),
    "heads": ("heads", [], 2, None, None),
    "heads-minilm": ("heads", MINILM, 2, None, None),
    "heads-smollm2": ("heads", SMOLLM2, 2, None, None),
    "heads-smollm2-8192": (
        "heads",
        [*SMOLLM2, ("Max tokens", "8192"), ("Text to analyse", LONG_TEXT)],
        4,
        None,  # √weight is on by itself at this length
        "One head, large",
    ),
    "parity-smollm2": ("parity", SMOLLM2, 3, None, None),
    "generation-smollm2": ("generation", [*SMOLLM2, ("Text to analyse", "The capital of France is")], 2, None, None),
    "padding": ("padding", [], 4, None, None),
    "cost": ("cost", [], 3, "Measure on this machine (a progress bar shows the time left)", None),
    "masks-smollm2": ("masks", SMOLLM2, 8, None, None),
    "kv-cache": ("kv_cache", [], 3, None, None),  # its checks run only the open tab
    "tokens": ("tokens", [], 4, None, None),
    # the same long text and settings as heads-smollm2-8192: the server's cached record, no second capture
    "heads-search-smollm2-8192": (
        "heads",
        [*SMOLLM2, ("Max tokens", "8192"), ("Text to analyse", LONG_TEXT)],
        4,
        ("search", "tired"),
        "Find a token",
    ),
    "tokens-smollm2-8192": (
        "tokens",
        [*SMOLLM2, ("Max tokens", "8192"), ("Text to analyse", LONG_TEXT)],
        4,
        ("search", "tired"),
        None,
    ),
    "head-roles-smollm2": ("head_roles", SMOLLM2, 2, None, None),
    "scaling-smollm2": ("scaling", SMOLLM2, 8, None, None),
    "walkthrough-smollm2": ("walkthrough", SMOLLM2, 0, None, None),  # 11 tokens: tables of numbers, no charts
    "training": ("training", [], 1, "Train", None),
    "ablation-smollm2": (
        "ablation",
        SMOLLM2,
        2,
        [("pick", "Heads (layer.head)", "5.1"), ("pick", "Heads (layer.head)", "5.2")],
        None,
    ),
    "rollout-smollm2": ("rollout", SMOLLM2, 1, None, None),
    "compare": ("compare", [], 3, None, None),
    "heads-values-smollm2": ("heads", SMOLLM2, 2, "value-weighted", "One head, large"),
    "heads-lines-smollm2": ("heads", [*SMOLLM2, ("Text to analyse", SHORT_TEXT)], 1, "lines between the tokens", None),
    # the long text on the new pages: each reads its own bound of it (1,024 / 512 tokens), Side by side all of it
    "ablation-smollm2-8192": (
        "ablation",
        [*SMOLLM2, ("Max tokens", "8192"), ("Text to analyse", LONG_TEXT)],
        2,
        [("pick", "Heads (layer.head)", "5.1")],
        None,
    ),
    "rollout-smollm2-8192": (
        "rollout",
        [*SMOLLM2, ("Max tokens", "8192"), ("Text to analyse", LONG_TEXT)],
        1,
        None,
        None,
    ),
    "compare-smollm2-8192": (
        "compare",
        [*SMOLLM2, ("Max tokens", "8192"), ("Text to analyse", LONG_TEXT)],
        3,
        "Compare (about…",  # over 5 s predicted: it waits for the click
        None,
    ),
}


# one shot of every page, for the Chinese set
EVERY_PAGE = (
    "overview",
    "heads-smollm2",
    "tokens",
    "head-roles-smollm2",
    "parity-smollm2",
    "generation-smollm2",
    "padding",
    "masks-smollm2",
    "kv-cache",
    "scaling-smollm2",
    "training",
    "walkthrough-smollm2",
    "cost",
    "ablation-smollm2",
    "rollout-smollm2",
    "compare",
)


def localised(label: str, lang: str) -> str:
    """The label the app shows in ``lang`` for its English ``label`` (a model's name is the same in both)."""
    if lang == "en":
        return label
    english, other = catalogue("en"), catalogue(lang)
    return next((other[key] for key, text in english.items() if text == label), label)


TIMEOUT_MS = 600_000  # SmolLM2 captures 8,192 tokens in one to two minutes on a 2-core CPU


def press(page, label: str) -> None:
    """Click the button, the toggle or the radio option with this label, once it is drawn.

    Controls, not text: a page's Markdown may name a button (and be drawn before it).
    """
    if label.endswith("…"):  # a label that goes on with a figure ("Compare (about 20 s)"): its start
        label = label.removesuffix("…")
        button = page.get_by_role("button", name=re.compile("^" + re.escape(label)))
    else:
        button = page.get_by_role("button", name=label, exact=True)
    toggle = page.locator("[data-testid=stCheckbox] label").filter(has_text=label)
    option = page.locator("[data-testid=stRadio] label").filter(has_text=label)
    target = button.or_(toggle).or_(option).first
    target.wait_for(state="visible")
    target.click()


def pick(page, label: str, option: str) -> None:
    """Add ``option`` to the multiselect labelled ``label``, as a user does: open it, type, choose."""
    box = page.locator("[data-testid=stMultiSelect]").filter(has_text=label).first
    box.click()
    page.keyboard.type(option)
    page.get_by_role("option", name=option, exact=True).first.click()
    page.keyboard.press("Escape")
    wait_until_idle(page, TIMEOUT_MS)


def search(page, query: str, lang: str) -> None:
    """Type ``query`` into the page's token search and pick its first occurrence, as a user does."""
    box = page.get_by_label(localised("Find a token", lang), exact=True)
    box.fill(query)
    box.press("Enter")
    wait_until_idle(page, TIMEOUT_MS)
    page.get_by_role("button", name=re.compile(r"^\d+: ")).first.click()
    wait_until_idle(page, TIMEOUT_MS)


def take(browser, url: str, name: str, height: int = 2300, lang: str = "en") -> None:
    path, values, charts, button, scroll_to = SHOTS[name]
    context = browser.new_context(viewport={"width": 1400, "height": height})
    page = context.new_page()
    page.goto(f"{url}/{path}?lang={lang}")
    page.locator("h1").first.wait_for(state="visible", timeout=TIMEOUT_MS)  # the page's first run has drawn
    wait_until_idle(page)
    for label, value in values:
        if label == "Model":
            choose_sidebar_option(page, localised(label, lang), value)
        else:
            set_sidebar_value(page, localised(label, lang), value, timeout_ms=TIMEOUT_MS)
    if isinstance(button, tuple):  # ("search", query): find a token and go there
        if charts:
            wait_for_charts(page, charts, TIMEOUT_MS)
        search(page, button[1], lang)
    elif isinstance(button, list):  # [("pick", multiselect label, option), ...]
        for _, label, option in button:
            pick(page, localised(label, lang), option)
    elif button:
        press(page, localised(button, lang))
        wait_until_idle(page, TIMEOUT_MS)
    if charts:
        wait_for_charts(page, charts, TIMEOUT_MS)
    wait_until_idle(page, TIMEOUT_MS)
    if scroll_to:
        page.get_by_text(localised(scroll_to, lang), exact=True).scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    out = ROOT / "assets" / ("" if lang == "en" else lang) / f"{name}.png"
    out.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(out))
    context.close()
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help=f"which shots (default: all of {', '.join(SHOTS)})")
    parser.add_argument("--lang", choices=["en", "zh"], default="en", help="zh: every page in Chinese, to assets/zh/")
    args = parser.parse_args()
    unknown = set(args.names) - set(SHOTS)
    if unknown:
        parser.error(f"unknown shot(s): {', '.join(sorted(unknown))}")
    with streamlit_server() as url, chromium_browser() as browser:
        for name in args.names or (SHOTS if args.lang == "en" else EVERY_PAGE):
            take(browser, url, name, lang=args.lang)


if __name__ == "__main__":
    main()
