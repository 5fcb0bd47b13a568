"""Eight people at once on one server, in real Chromium: each sees its own result, models load once, nothing leaks.

One Chromium, one context per session, all driven at the same moment through
Playwright's async API (the driver is :class:`benchmarks.concurrency.Session`).
The sessions mix the embedded default (two texts, one of them read in 中文),
the embedded model with other settings, MiniLM twice and SmolLM2 twice, each
opened from a link to its own head.
"""

import asyncio
import re
from dataclasses import dataclass, field

import pytest

from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf.bundled import BUNDLED
from attnviz.models.record import token_labels
from benchmarks.concurrency import Session
from tools.browser import CHROMIUM_FLAGS, ROOT, chromium_path, streamlit_server

pytestmark = pytest.mark.browser

ENGLISH_TEXT_LABEL, CHINESE_TEXT_LABEL = "Text to analyse", "要分析的文本"


@dataclass(frozen=True)
class Person:
    """What one session asks for: a model (and embedded settings), a text with a word no other text has, a head."""

    model: str  # "default", "minilm" or "smollm2"
    text: str
    word: str
    head: tuple[int, int]  # the (layer, head) of the link it opens; valid in its model and in the first one it sees
    embedded: dict = field(default_factory=dict)  # sidebar label -> value; "causal": True ticks the box
    chinese: bool = False


PEOPLE = [
    Person("default", "The apple fell from the tree near the river.", "apple", (1, 3)),
    Person("default", "A guitar played softly in the empty hall.", "guitar", (0, 2), chinese=True),
    Person("default", "Every mountain has a quiet valley below it.", "mountain", (1, 1), {"n_head": "2"}),
    Person("default", "She poured coffee and opened the window.", "coffee", (1, 0), {"n_layer": "3", "causal": True}),
    Person("minilm", "My garden is full of yellow flowers.", "garden", (0, 1)),
    Person("minilm", "The pencil rolled under the old carpet.", "pencil", (1, 2)),
    Person("smollm2", "A rabbit hid behind the silver gate.", "rabbit", (0, 3)),
    Person("smollm2", "Waves from the ocean reached the castle walls.", "castle", (1, 0)),
]


def embedded_config(person: Person) -> EmbeddedConfig:
    return EmbeddedConfig(
        n_head=int(person.embedded.get("n_head", 4)),
        n_layer=int(person.embedded.get("n_layer", 2)),
        causal=bool(person.embedded.get("causal", False)),
    )


@pytest.fixture(scope="module")
def server(smollm2, minilm):
    # smollm2: converted first, so the server (same XDG cache) loads a ready model; a fresh server counts loads from 0
    with streamlit_server() as url:
        yield url, ROOT / ".pytest_cache" / f"streamlit-{url.rsplit(':', 1)[1]}.log"


async def visit(browser, url: str, person: Person) -> dict:
    """One person's visit: open its head's link, set its model and text (and language), wait for its drawing."""
    layer, head = person.head
    session = await Session.open(browser, url, f"/heads?layer={layer}&head={head}")
    try:
        for label, value in person.embedded.items():
            if value is True:
                await session.tick(label)
            else:
                await session.type_in(label, value)
        if person.model != "default":
            await session.choose("Model", BUNDLED[person.model].title)
        await session.type_in(ENGLISH_TEXT_LABEL, person.text)
        if person.chinese:
            await session.choose("Language / 语言", "中文")
        await session.drawn(person.word)
        page, sidebar = session.page, session.sidebar()
        return {
            "captions": await page.locator('[data-testid="stCaptionContainer"]').all_inner_texts(),
            "ticks": await session.large_view_ticks(),
            "title": await page.locator(".js-plotly-plot").first.locator(".gtitle").text_content(),
            "url": page.url,
            "text_label": ENGLISH_TEXT_LABEL if await sidebar.get_by_label(ENGLISH_TEXT_LABEL).count() else "",
            "chinese_label": await sidebar.get_by_label(CHINESE_TEXT_LABEL).count() == 1,
            "text": await sidebar.locator("textarea").first.input_value(),
            "exceptions": await page.locator('[data-testid="stException"]').all_inner_texts(),
            "errors": session.errors,
        }
    finally:
        await session.close()


async def everyone(url: str) -> list[dict]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            return await asyncio.gather(*(visit(browser, url, person) for person in PEOPLE))
        finally:
            await browser.close()


def test_eight_sessions_at_once_each_see_their_own_result_and_models_load_once(server, smollm2, minilm):
    url, log = server
    seen = asyncio.run(everyone(url))

    hf = {"minilm": minilm, "smollm2": smollm2}
    for person, got in zip(PEOPLE, seen, strict=True):
        who = f"{person.model} {person.word}"
        source = hf[person.model] if person.model in hf else EmbeddedModel(embedded_config(person))
        tokens = source.encode(person.text, 256).tokens
        assert not got["exceptions"] and not got["errors"], (who, got["exceptions"], got["errors"])
        # the caption names this session's model and its own text's token count
        caption = next((c for c in got["captions"] if source.name in c), None)
        assert caption is not None, (who, source.name, got["captions"])
        count = rf"\b{len(tokens)}\b" + ("" if person.chinese else " tokens")
        assert re.search(count, caption), (who, len(tokens), caption)
        # the large view draws this session's own tokens, and no one else's
        assert got["ticks"] == token_labels(tokens), (who, got["ticks"])
        others = {p.word for p in PEOPLE} - {person.word}
        assert not others & {tick.split(" ", 1)[1] for tick in got["ticks"]}, (who, got["ticks"])
        # its own head (from its own link), its own text, its own language
        layer, head = person.head
        assert got["title"].startswith(f"L{layer} H{head}"), (who, got["title"])
        assert f"layer={layer}" in got["url"] and f"head={head}" in got["url"], (who, got["url"])
        assert got["text"] == person.text, (who, got["text"])
        if person.chinese:
            assert got["chinese_label"] and not got["text_label"] and "lang=zh" in got["url"], (who, got["url"])
        else:
            assert got["text_label"] and not got["chinese_label"] and "lang=en" in got["url"], (who, got["url"])

    # every model the server loaded, once, though several sessions asked for it at the same moment
    loads = re.findall(r"^attnviz: loaded (.*) in [\d.]+ s$", log.read_text(), flags=re.M)
    for key in ("minilm", "smollm2"):
        assert sum(line.startswith(BUNDLED[key].title) for line in loads) == 1, (key, loads)
    for config in {embedded_config(p) for p in PEOPLE if p.model == "default"}:
        name = EmbeddedModel(config).name
        assert sum(f"[{name}]" in line for line in loads) == 1, (name, loads)
    names = [line.split(" [", 1)[1] for line in loads]
    assert len(names) == len(set(names)), loads  # no model pushed out and loaded again (settings passed through too)
