"""The app in a real headless Chromium: deep links, drawn charts, hover and the payload size."""

import time

import pytest

from attnviz import settings
from tests.integration.chromium import assert_no_exception
from tools.browser import (
    choose_page,
    choose_sidebar_option,
    set_sidebar_value,
    streamlit_server,
    wait_for_charts,
    wait_for_grid,
    wait_until_idle,
)

pytestmark = pytest.mark.browser


def assert_sidebar_kept_its_defaults(page):
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_label("Text to analyse", exact=True).input_value().startswith("The cat")
    assert sidebar.get_by_label("Max tokens", exact=True).input_value() == str(settings.MAX_TOKENS.default)
    assert sidebar.get_by_label("d_model", exact=True).input_value() == str(settings.D_MODEL.default)
    assert sidebar.get_by_label("n_layer", exact=True).input_value() == str(settings.N_LAYER.default)


@pytest.mark.parametrize("how", ["deep link", "in-page link", "menu"])
def test_first_session_of_a_fresh_server_reaches_heads_with_its_sidebar(browser, how):
    """The first visitor of a new server once met a sidebar reset to the widgets' minimums."""
    with streamlit_server() as url:
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        page = context.new_page()
        if how == "deep link":
            page.goto(f"{url}/heads")  # a shared link, before any other session ran
        else:
            page.goto(url)
            # the Overview's own links come last in its run: the page is drawn, not mid-start
            page.get_by_role("link", name="Heads: every head's pattern", exact=False).wait_for()
            wait_until_idle(page)
            assert_no_exception(page)
            if how == "in-page link":
                page.get_by_role("link", name="Heads: every head's pattern", exact=False).click()
            else:
                choose_page(page, "Heads")  # the header's menu
        wait_for_charts(page, 2)  # the large view and the statistics (the grid is the page's own canvas)
        wait_until_idle(page)
        assert "/heads" in page.url
        assert_no_exception(page)
        assert_sidebar_kept_its_defaults(page)
        assert page.locator(".js-plotly-plot").count() == 2
        assert int(wait_for_grid(page).get_attribute("data-draws")) >= 1  # and the grid, drawn by its canvas
        assert page.get_by_text("The embedded model's weights are random").count() == 1
        context.close()


def test_hover_on_the_large_head_shows_the_weight(server, page):
    page.goto(f"{server}/heads")
    wait_for_charts(page, 2)
    wait_until_idle(page)
    large = page.locator(".js-plotly-plot").first
    large.scroll_into_view_if_needed()
    box = large.locator(".nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.3)
    hover = page.locator(".hoverlayer .hovertext").first
    hover.wait_for(timeout=10_000)
    text = hover.text_content()
    assert "query" in text and "key" in text and "weight 0." in text


def test_a_long_token_is_cut_on_the_axis_and_whole_on_hover(server, page):
    page.goto(f"{server}/heads")
    wait_for_charts(page, 2)
    set_sidebar_value(page, "Text to analyse", "short <b>" + "y" * 3000 + " end")  # tokens: short < b > yyy… end
    wait_for_charts(page, 2)
    assert_no_exception(page)
    large = page.locator(".js-plotly-plot").first
    large.scroll_into_view_if_needed()
    ticks = large.locator(".xtick text").all_text_contents()
    assert ticks == ["0 short", "1 <", "2 b", "3 >", "4 " + "y" * 15 + "…", "5 end"]  # escaped text reads as typed
    box = large.locator(".nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 2.5 / 6, box["y"] + box["height"] * 4.5 / 6)  # query 4, key 2
    hover = page.locator(".hoverlayer .hovertext").first
    hover.wait_for(timeout=10_000)
    text = hover.text_content()
    assert text.startswith("query 4 " + "y" * 58 + "y" * 60 * 9) and "2,402 more characters" in text
    assert "key 2 b" in text and "weight 0." in text


def test_overview_links_to_heads(server, page):
    page.goto(server)
    wait_until_idle(page)
    assert_no_exception(page)
    page.get_by_role("link", name="Heads: every head's pattern", exact=False).click()
    wait_for_charts(page, 2)
    assert "/heads" in page.url


def test_12_heads_of_512_tokens_stay_under_1_5mb_and_zoom_to_full_resolution(server, page):
    received = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: received.append(len(payload))))
    page.goto(f"{server}/heads")
    wait_for_charts(page, 2)
    wait_until_idle(page)
    for label, value in [("Max tokens", "512"), ("n_layer", "1"), ("n_head", "12"), ("d_model", "768")]:
        set_sidebar_value(page, label, value)
    assert_no_exception(page)
    received.clear()
    started = time.monotonic()
    set_sidebar_value(page, "Text to analyse", " ".join(f"word{i % 97}" for i in range(600)))
    wait_for_charts(page, 4)  # pooled head, full-resolution window, one row, statistics (the grid: a canvas)
    drawn_s = time.monotonic() - started
    payload = sum(received)
    assert_no_exception(page)
    assert page.get_by_text("The text has 600 tokens; only the first 512").count() == 1
    assert page.get_by_text("1 layers × 12 heads", exact=False).count() == 1
    assert page.get_by_text("512 tokens are drawn as 256 × 256 cells", exact=False).count() == 1
    assert payload < 1_500_000, f"{payload} bytes"
    print(f"12 heads x 512 tokens: {payload / 1e6:.2f} MB over the websocket, drawn in {drawn_s:.1f} s")
    # box-select a region of the pooled head: the full-resolution window moves there
    queries = page.get_by_label("Queries from", exact=True)
    assert queries.input_value() == "0"
    pooled = page.locator(".js-plotly-plot").first
    pooled.scroll_into_view_if_needed()
    box = pooled.locator(".nsewdrag").first.bounding_box()
    x0, y0 = box["x"] + box["width"] * 0.55, box["y"] + box["height"] * 0.6
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x0 + 40, y0 + 40, steps=8)
    page.mouse.up()
    page.wait_for_function(
        "() => document.querySelector('input[aria-label=\"Queries from\"]').value !== '0'", timeout=30_000
    )
    wait_until_idle(page)
    wait_for_charts(page, 4)
    assert_no_exception(page)
    q0 = int(queries.input_value())
    k0 = int(page.get_by_label("Keys from", exact=True).input_value())
    assert 250 < q0 < 360 and 230 < k0 < 330, (q0, k0)  # 60% down, 55% across 512 tokens
    assert page.get_by_text(f"queries {q0}–", exact=False).count() >= 1


def test_choosing_smollm2_in_the_sidebar_generates(server, page):
    from attnviz.models.hf.bundled import BUNDLED
    from tools.browser import choose_sidebar_option

    page.goto(f"{server}/generation")
    wait_until_idle(page)
    choose_sidebar_option(page, "Model", BUNDLED["smollm2"].title)
    set_sidebar_value(page, "Text to analyse", "The capital of France is")
    wait_for_charts(page, 1)
    assert_no_exception(page)
    assert page.get_by_text("Paris", exact=False).count() >= 1
    rows = page.locator(".js-plotly-plot").first.locator(".ytick text").all_text_contents()
    assert rows and all("✦" in r for r in rows)


def test_8192_tokens_draw_pooled_in_the_browser(server, page):
    received = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: received.append(len(payload))))
    page.goto(f"{server}/heads")
    wait_for_charts(page, 2)
    wait_until_idle(page)
    set_sidebar_value(page, "Max tokens", "8192")
    received.clear()
    set_sidebar_value(page, "Text to analyse", " ".join(f"w{i % 500}" for i in range(8300)))
    wait_for_charts(page, 4)
    wait_until_idle(page)
    assert_no_exception(page)
    assert page.get_by_text("The text has 8,300 tokens; only the first 8,192").count() == 1
    assert page.get_by_text("8,192 tokens are drawn as 256 × 256 cells", exact=False).count() == 1
    assert sum(received) < 1_500_000, f"{sum(received)} bytes"
    # hover on the full-resolution window gives an exact weight
    window = page.locator(".js-plotly-plot").nth(1)
    window.scroll_into_view_if_needed()
    box = window.locator(".nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.8)
    hover = page.locator(".hoverlayer .hovertext").first
    hover.wait_for(timeout=10_000)
    assert "weight 0." in hover.text_content()


def test_uploading_a_mask_gets_a_diagnosis_and_a_pickle_is_refused(server, page, tmp_path):
    import numpy as np

    page.goto(f"{server}/masks")
    page.locator("h1").first.wait_for(state="visible")
    wait_until_idle(page)
    set_sidebar_value(page, "Text to analyse", "one two three four five six")
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Mask").first.click()
    page.keyboard.type("Custom")
    page.get_by_role("option", name="Custom: upload or edit", exact=True).click()
    wait_until_idle(page)
    T = 6  # the embedded model reads one token a word
    leaky = tmp_path / "leaky.npy"
    np.save(leaky, np.triu(np.ones((T, T), dtype=bool)))  # the upper triangle: every query sees the future
    uploader = page.locator('[data-testid="stFileUploaderDropzoneInput"]')
    uploader.wait_for(state="attached", timeout=120_000)  # the page's rerun on a busy machine: past 30 s at times
    uploader.set_input_files(str(leaky))
    wait_until_idle(page)
    page.get_by_text("another expectation…", exact=True).click()
    wait_until_idle(page)
    page.get_by_text("future_leak", exact=False).first.wait_for(state="visible")
    assert_no_exception(page)
    assert page.get_by_text("query rows moved", exact=False).count() == 1  # the leak test on the model

    pickled = tmp_path / "evil.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(pickled))
    wait_until_idle(page)
    alert = page.locator('[data-testid="stAlert"]').filter(has_text="pickled data is not accepted")
    alert.first.wait_for(state="visible")
    assert_no_exception(page)


def test_switching_the_language_keeps_a_translated_choice(server, page):
    """The browser sends a choice back as the label it showed: after a switch to 中文 no English label matches, so
    Streamlit would reset the choice and the browser would go on showing the English label. The language switch
    decodes every choice first and sends it back in Chinese (pin_choices)."""
    page.goto(f"{server}/heads")
    wait_for_charts(page, 2)
    wait_until_idle(page)
    show = page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').filter(has_text="Show").first
    show.click()
    page.get_by_role("option", name="only heads flagged sink", exact=True).click()
    wait_until_idle(page)
    text = page.locator('[data-testid="stSidebar"]').get_by_label("Text to analyse", exact=True)
    text.fill("A text the language switch must keep.")
    text.press("Control+Enter")
    wait_until_idle(page)
    choose_sidebar_option(page, "Language / 语言", "中文")
    wait_for_charts(page, 2)
    assert_no_exception(page)
    shown = page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').filter(has_text="显示").first
    shown_value = shown.evaluate(
        "e => e.innerText + ' ' + [...e.querySelectorAll('input')].map(i => i.value).join(' ')"
    )
    assert "只看标记为 汇点 的头" in shown_value, shown_value  # the same choice, shown in Chinese (the flag too)
    assert page.get_by_text("8 个注意力头中有 0 个被标记为 汇点", exact=False).count() == 1  # and applied
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_label("要分析的文本", exact=True).input_value() == "A text the language switch must keep."
    assert "lang=zh" in page.url
