"""The screenshots of which heads matter, in headless Chromium: ``python -m tools.heads_matter_shots [--lang zh]``.

The Ablation page's estimate on SmolLM2 (its top heads confirmed with a click), the Patching page on the
indirect-object prompt (the estimate, the top heads confirmed, the exact map beside it) and its direct logit tab.
Each opens the app as a new user would and saves a PNG under assets/ (``-zh`` for Chinese).
"""

from __future__ import annotations

import argparse
import urllib.parse

from attnviz.i18n.catalogue import catalogue
from tools.browser import ROOT, chromium_browser, streamlit_server, wait_for_charts, wait_until_idle
from tools.screenshots import TIMEOUT_MS, press


def words(key: str, lang: str, **values) -> str:
    """The catalogue's text for ``key`` in ``lang``, filled in."""
    return catalogue(lang)[key].format(**values)


CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
TEXT = "The cat sat on the mat because it was warm, and the dog slept by the door until the rain stopped."


def opened(browser, url: str, path: str, text: str, lang: str, height: int):
    context = browser.new_context(viewport={"width": 1400, "height": height})
    page = context.new_page()
    query = urllib.parse.urlencode({"lang": lang, "model": "smollm2", "text": text})
    page.goto(f"{url}/{path}?{query}")
    page.locator("h1").first.wait_for(state="visible", timeout=TIMEOUT_MS)
    wait_until_idle(page, TIMEOUT_MS)
    return context, page


def save(page, name: str, lang: str) -> None:
    page.wait_for_timeout(800)
    out = ROOT / "assets" / f"{name}{'' if lang == 'en' else '-' + lang}.png"
    page.screenshot(path=str(out), full_page=False)
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lang", choices=["en", "zh"], default="en")
    args = parser.parse_args()
    lang = args.lang
    with streamlit_server() as url, chromium_browser() as browser:
        context, page = opened(browser, url, "ablation", TEXT, lang, 2600)
        wait_for_charts(page, 1, TIMEOUT_MS)
        press(page, words("heads_matter.confirm", lang, k=10))
        wait_until_idle(page, TIMEOUT_MS)
        page.get_by_text(words("heads_matter.estimate", lang), exact=True).scroll_into_view_if_needed()
        page.mouse.wheel(0, -120)
        save(page, "heads-matter-estimate", lang)
        context.close()

        context, page = opened(browser, url, "patching", CLEAN, lang, 2000)
        box = page.locator("[data-testid=stTextArea] textarea").last
        box.fill(CORRUPT)
        box.press("Control+Enter")
        wait_until_idle(page, TIMEOUT_MS)
        wait_for_charts(page, 1, TIMEOUT_MS)
        press(page, words("heads_matter.confirm", lang, k=10))
        wait_until_idle(page, TIMEOUT_MS)
        wait_for_charts(page, 2, TIMEOUT_MS)
        page.get_by_text(words("patching.metric", lang), exact=True).first.scroll_into_view_if_needed()
        save(page, "patching-smollm2", lang)
        page.get_by_text(words("patching.tab_logits", lang), exact=True).click()  # the tab picker: a radio
        wait_until_idle(page, TIMEOUT_MS)
        save(page, "direct-logits-smollm2", lang)
        context.close()


if __name__ == "__main__":
    main()
