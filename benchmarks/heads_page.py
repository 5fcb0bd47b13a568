"""The Heads page, measured: ``python -m benchmarks.heads_page [--json]``.

1. Picking another head, SmolLM2 at 512 tokens, Python side (AppTest reruns the
   whole script, as the server does): today's rerun, and side by side in the same
   run what the old page did on every rerun with a full record (deserialise the
   283 MB record that ``st.cache_data`` held, ``head_statistics`` over every
   weight, the grid pooled from every weight). Target: <= 0.3 s.
2. The same pick in Chromium: time from choosing the head until the new head is drawn.
3. MiniLM at 512 tokens in Chromium, once its record exists: the bytes of the
   page update and the time until every chart is drawn. Targets: <= 1.5 MB, <= 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = "The cat sat on the mat because it was tired. 注意力机制让每个词都能看到句子里的其他词。 " * 40
HEADS = [1, 2, 3, 4, 5, 6]


def python_side() -> dict:
    import torch
    from streamlit.testing.v1 import AppTest

    from attnviz.core.head_stats import head_statistics
    from attnviz.figures.heads import make_head_grid_figure
    from attnviz.models.hf.loading import load_hf_source

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    at.selectbox(key="model").set_value("smollm2")
    at.number_input(key="max_tokens").set_value(512)
    at.text_area(key="text").input(TEXT).run()
    at.switch_page("pages/heads.py").run()
    at.selectbox(key="heads_head").set_value(0).run()  # warm: the record and figures are cached now
    picks = []
    for head in HEADS:
        start = time.perf_counter()
        at.selectbox(key="heads_head").set_value(head).run()
        picks.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    # what every rerun cost with the full record, measured now on the same machine
    source = load_hf_source("smollm2")
    full = source.reference_weights(TEXT, 512)  # (30, 9, 512, 512) float32: the old record's attention
    old = {}
    start = time.perf_counter()
    pickle.loads(pickle.dumps(full, protocol=pickle.HIGHEST_PROTOCOL))
    old["copy_s"] = time.perf_counter() - start
    mask = torch.ones(512, 512, dtype=torch.bool).tril()
    start = time.perf_counter()
    head_statistics(full, mask)
    old["stats_s"] = time.perf_counter() - start
    start = time.perf_counter()
    make_head_grid_figure(full).to_json()
    old["grid_s"] = time.perf_counter() - start
    old_total = sum(old.values())
    return {
        "case": "pick another head, SmolLM2, 512 tokens (Python side)",
        "median_s": statistics.median(picks),
        "max_s": max(picks),
        "old_full_record_s": old_total,
        "old_parts_s": old,
        "ratio_to_old": statistics.median(picks) / old_total,
        "target_s": 0.3,
        "met": statistics.median(picks) <= 0.3,
    }


def browser_side() -> list[dict]:
    from attnviz.models.hf.bundled import BUNDLED
    from tools.browser import (
        choose_sidebar_option,
        chromium_browser,
        set_sidebar_value,
        streamlit_server,
        wait_for_charts,
        wait_until_idle,
    )

    def open_page(browser, url, model_title):
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        page = context.new_page()
        received = []
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: received.append(len(payload))))
        page.goto(f"{url}/heads")
        wait_for_charts(page, 3)
        wait_until_idle(page)
        choose_sidebar_option(page, "Model", model_title)
        set_sidebar_value(page, "Max tokens", "512")
        return context, page, received

    rows = []
    with streamlit_server() as url, chromium_browser() as browser:
        # MiniLM: a first session computes the record, a second is measured
        warm, page, _ = open_page(browser, url, BUNDLED["minilm"].title)
        set_sidebar_value(page, "Text to analyse", TEXT)
        wait_for_charts(page, 3)
        warm.close()
        context, page, received = open_page(browser, url, BUNDLED["minilm"].title)
        received.clear()
        start = time.monotonic()
        box = page.locator('[data-testid="stSidebar"]').get_by_label("Text to analyse", exact=True)
        box.fill(TEXT)
        box.press("Control+Enter")
        page.wait_for_function("() => document.body.innerText.includes('only the first 512')", timeout=120_000)
        wait_until_idle(page)
        wait_for_charts(page, 5)
        drawn = time.monotonic() - start
        rows.append(
            {
                "case": "Heads, MiniLM, 512 tokens, record cached (Chromium)",
                "payload_mb": sum(received) / 1e6,
                "drawn_s": drawn,
                "target": "payload <= 1.5 MB, drawn <= 1.5 s",
                "met": sum(received) <= 1.5e6 and drawn <= 1.5,
            }
        )
        context.close()
        # SmolLM2: pick another head, time until the new head is drawn
        context, page, received = open_page(browser, url, BUNDLED["smollm2"].title)
        set_sidebar_value(page, "Text to analyse", TEXT)
        wait_for_charts(page, 3)
        times = []
        for head in HEADS[:3]:
            received.clear()
            box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Head", exact=True)).first
            box.scroll_into_view_if_needed()
            start = time.monotonic()
            box.click()  # a selectbox filters as one types: the option is then the only one left
            page.keyboard.type(f"H{head}")
            page.keyboard.press("Enter")
            page.wait_for_function(  # the pooled view's title names the head: "L0 H3, max-pooled"
                "t => [...document.querySelectorAll('.js-plotly-plot .gtitle')].some(e => e.textContent.startsWith(t))",
                arg=f"L0 H{head},",
                timeout=60_000,
            )
            times.append(time.monotonic() - start)
            wait_until_idle(page)
        rows.append(
            {
                "case": "pick another head, SmolLM2, 512 tokens (Chromium, until drawn)",
                "median_s": statistics.median(times),
                "payload_mb": sum(received) / 1e6,
            }
        )
        context.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [python_side(), *browser_side()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
