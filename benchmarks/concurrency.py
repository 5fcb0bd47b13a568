"""Several people at once on one server, measured: ``python -m benchmarks.concurrency [--json] [--rounds N]``.

For 1, 4 and 8 browser sessions (one Chromium, one context each, driven
concurrently through Playwright's async API) against one ``streamlit run app.py``:
each round, every session submits a text no session typed before, at the same
moment, and the time is taken from its submission until its Heads page has drawn
that text (the large view's axis shows the text's own tokens), every chart on
the page is drawn and its script is idle. p50 and p95 are over every session of
every round (the first round of each series, which loads the model, is left
out). Two series: the embedded default model, and SmolLM2 (30 layers x 9 heads).

There is no target: the figures say how the page degrades when a 2-core server is shared.

The async session driver here (:class:`Session`) is also what
``tests/integration/deploy/test_concurrency.py`` drives its sessions with: sync
Playwright objects must stay on the thread that made them, and eight browsers
would not fit a small machine, so every session is a context of one browser.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field

ROOT_TIMEOUT_MS = 600_000  # eight fresh sessions at once on 2 busy cores: 100-odd s quiet; one CI run took over 360 s
# the large view's axis labels are "index token": a word of the text is one token in every model here
WORDS = tuple(
    [
        "apple",
        "river",
        "guitar",
        "mountain",
        "coffee",
        "window",
        "garden",
        "yellow",
        "pencil",
        "rabbit",
        "silver",
        "ocean",
        "castle",
        "forest",
        "jacket",
        "candle",
        "bridge",
        "violin",
        "orange",
        "planet",
        "rocket",
        "saddle",
        "tunnel",
        "wallet",
        "meadow",
        "button",
        "carpet",
        "dragon",
        "engine",
        "falcon",
        "harbor",
        "island",
        "kettle",
        "ladder",
        "marble",
        "needle",
        "parrot",
        "pepper",
        "quilt",
        "shadow",
        "spider",
        "thunder",
        "turtle",
        "valley",
        "lemon",
    ]
)
IDLE = "document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state')"
# drawn: the script is idle, every chart has its SVG layer (the Heads page's two: the large view and the statistics;
# its grid is the page's own canvas), and some axis label reads the awaited word
DRAWN = """word => {
    if (IDLE !== 'notRunning') return false;
    const plots = [...document.querySelectorAll('.js-plotly-plot')];
    if (plots.length < 2 || !plots.every(p => p.querySelector('.main-svg'))) return false;
    return [...document.querySelectorAll('.js-plotly-plot .xtick text')].some(e => e.textContent.endsWith(' ' + word));
}""".replace("IDLE", IDLE)


@dataclass
class Session:
    """One person: a browser context of its own, on the app's Heads page."""

    context: object
    page: object
    errors: list[str] = field(default_factory=list)

    @classmethod
    async def open(cls, browser, url: str, path: str = "/heads") -> Session:
        context = await browser.new_context(viewport={"width": 1400, "height": 1600})
        page = await context.new_page()
        session = cls(context, page)
        page.on("pageerror", lambda err: session.errors.append(str(err)))
        await page.goto(f"{url}{path}", timeout=ROOT_TIMEOUT_MS)
        await page.wait_for_selector(".js-plotly-plot .main-svg", timeout=ROOT_TIMEOUT_MS)
        await session.idle()
        return session

    async def close(self) -> None:
        await self.context.close()

    async def idle(self, timeout_ms: int = ROOT_TIMEOUT_MS) -> None:
        """Wait for the script run an interaction started (if any) to finish."""
        await self.page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
        with contextlib.suppress(Exception):  # the run was quicker than the poll, or nothing changed
            await self.page.wait_for_function(f"() => {IDLE} === 'running'", timeout=1_500)
        await self.page.wait_for_function(f"() => {IDLE} === 'notRunning'", timeout=timeout_ms)
        await self.page.wait_for_timeout(200)

    def sidebar(self):
        return self.page.locator('[data-testid="stSidebar"]')

    async def submit(self, label: str, value: str) -> None:
        """Type into a sidebar input found by its label and commit it as a user does (no wait)."""
        box = self.sidebar().get_by_label(label, exact=True)
        await box.fill(value)
        await box.press("Control+Enter" if await box.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")

    async def type_in(self, label: str, value: str) -> None:
        await self.submit(label, value)
        await self.idle()

    async def choose(self, label: str, option: str) -> None:
        """Open a sidebar selectbox by its label, type the option and pick it, as a user does."""
        box = self.sidebar().locator('[data-testid="stSelectbox"]').filter(has_text=label).first
        await box.click()
        await self.page.keyboard.type(option)
        await self.page.get_by_role("option", name=option, exact=True).click()
        await self.page.evaluate("document.activeElement?.blur()")
        await self.idle()

    async def tick(self, label: str) -> None:
        await self.sidebar().get_by_text(label, exact=True).click()
        await self.idle()

    async def drawn(self, word: str, timeout_ms: int = ROOT_TIMEOUT_MS) -> None:
        """Wait until the page shows a text with ``word`` in it, all charts drawn and the script idle."""
        try:
            await self.page.wait_for_function(DRAWN, arg=word, timeout=timeout_ms)
        except Exception as err:  # say what the page shows instead of a bare timeout
            shown = await self.page.locator('[data-testid="stMain"]').inner_text()
            raise AssertionError(f"{word!r} not drawn: {err}\nthe page shows:\n{shown[:1500]}") from None

    async def large_view_ticks(self) -> list[str]:
        """The large view's key-axis labels, as drawn ("0 The", "1 cat", …)."""
        return await self.page.locator(".js-plotly-plot").first.locator(".xtick text").all_text_contents()


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between the closest ranks."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def texts_for(round_: int, n_sessions: int) -> list[tuple[str, str]]:
    """(text, its awaited word) per session: distinct across sessions and rounds, so every round captures anew."""
    out = []
    for s in range(n_sessions):
        word = WORDS[(round_ * n_sessions + s) % len(WORDS)]
        out.append((f"Round {round_} session {s}: the {word} sat near the door because it was tired.", word))
    return out


async def series(url: str, model_title: str | None, n_sessions: int, rounds: int) -> dict:
    """One series: ``n_sessions`` at once, ``rounds`` rounds; the times of every round after the first."""
    from playwright.async_api import async_playwright

    from tools.browser import CHROMIUM_FLAGS, chromium_path

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        sessions = await asyncio.gather(*(Session.open(browser, url) for _ in range(n_sessions)))
        if model_title:
            await asyncio.gather(*(s.choose("Model", model_title) for s in sessions))
        times: list[float] = []
        for round_ in range(rounds + 1):  # round 0 warms up: models loaded, first figures cached
            texts = texts_for(round_ + 100 * n_sessions, n_sessions)

            async def one(session: Session, text: str, word: str) -> float:
                start = time.monotonic()
                await session.submit("Text to analyse", text)
                await session.drawn(word)
                return time.monotonic() - start

            taken = await asyncio.gather(*(one(s, text, word) for s, (text, word) in zip(sessions, texts, strict=True)))
            if round_:
                times.extend(taken)
        errors = [err for s in sessions for err in s.errors]
        await asyncio.gather(*(s.close() for s in sessions))
        await browser.close()
    return {
        "model": model_title or "embedded default",
        "sessions": n_sessions,
        "rounds": rounds,
        "samples": len(times),
        "p50_s": round(percentile(times, 0.5), 2),
        "p95_s": round(percentile(times, 0.95), 2),
        "max_s": round(max(times), 2),
        "page_errors": errors,
    }


def main() -> None:
    from attnviz.models.hf.bundled import BUNDLED
    from tools.browser import streamlit_server

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per series (default 5)")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--models", nargs="+", default=["default", "smollm2"], choices=["default", "smollm2", "minilm"])
    args = parser.parse_args()
    rows = []
    with streamlit_server() as url:
        for model in args.models:
            title = None if model == "default" else BUNDLED[model].title
            for n in args.sessions:
                row = asyncio.run(series(url, title, n, args.rounds))
                rows.append(row)
                if not args.json:
                    print(json.dumps(row), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
