"""Take the README's screenshots in headless Chromium: ``python -m tools.screenshots``.

Each shot opens the app as a new user would (a fresh browser context), sets
the sidebar, waits for every chart to be drawn and saves a PNG under assets/.
"""

from __future__ import annotations

import argparse

from attnviz.bundled import BUNDLED
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
# name -> (page path, sidebar choices (selectbox label, option) or (input label, value), charts to wait for)
SHOTS = {
    "overview": ("", [], 0),
    "heads": ("heads", [], 3),
    "heads-minilm": ("heads", MINILM, 3),
    "heads-smollm2": ("heads", SMOLLM2, 3),
    "parity-smollm2": ("parity", SMOLLM2, 3),
    "generation-smollm2": ("generation", [*SMOLLM2, ("Text to analyse", "The capital of France is")], 2),
    "padding": ("padding", [], 4),
}


def take(browser, url: str, name: str, height: int = 2300) -> None:
    path, values, charts = SHOTS[name]
    context = browser.new_context(viewport={"width": 1400, "height": height})
    page = context.new_page()
    page.goto(f"{url}/{path}")
    wait_until_idle(page)
    for label, value in values:
        if label == "Model":
            choose_sidebar_option(page, label, value)
        else:
            set_sidebar_value(page, label, value)
    if charts:
        wait_for_charts(page, charts)
    wait_until_idle(page)
    page.wait_for_timeout(800)
    out = ROOT / "assets" / f"{name}.png"
    page.screenshot(path=str(out))
    context.close()
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help=f"which shots (default: all of {', '.join(SHOTS)})")
    args = parser.parse_args()
    unknown = set(args.names) - set(SHOTS)
    if unknown:
        parser.error(f"unknown shot(s): {', '.join(sorted(unknown))}")
    with streamlit_server() as url, chromium_browser() as browser:
        for name in args.names or SHOTS:
            take(browser, url, name)


if __name__ == "__main__":
    main()
