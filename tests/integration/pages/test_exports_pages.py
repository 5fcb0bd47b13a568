"""The Export menus on the pages: every chart's camera config, lazy downloads, and the tensor exports offered."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]


def page(path: str, text: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    if text is not None:
        at.text_area(key="text").set_value(text).run()
    at.switch_page(path)
    return at.run()


def downloads(at: AppTest) -> dict[str, str]:
    """Each download button's label by its key; none carries bytes (their data is built on the click)."""
    buttons = at.get("download_button")
    assert all(not b.proto.url for b in buttons)
    return {b.proto.id.split("-", 2)[-1]: b.proto.label for b in buttons}


def test_every_heads_chart_saves_svg_and_the_head_and_statistics_export():
    at = page("pages/heads.py")
    assert not at.exception
    configs = [json.loads(c.proto.config)["toImageButtonOptions"] for c in at.get("plotly_chart")]
    assert [c["filename"] for c in configs] == [  # the grid is the page's own canvas: its Export menu saves HTML
        "attnviz-heads_large",
        "attnviz-heads_stats_chart",
    ]
    assert {c["format"] for c in configs} == {"svg"}
    files = downloads(at)
    assert {"heads_grid_html", "heads_large_html", "heads_stats_export_csv"} <= set(files)
    assert files["heads_head_export_safetensors"] == "Tensors (.safetensors)"
    assert "heads_stats_export_npz" in files
    at.get("button_group")[0].set_value("png").run()  # the large view's camera, switched to PNG
    configs = [json.loads(c.proto.config)["toImageButtonOptions"] for c in at.get("plotly_chart")]
    assert [c["format"] for c in configs] == ["png", "svg"] and configs[0]["scale"] == 2


def test_a_pooled_head_exports_and_the_token_view_and_walkthrough_offer_their_tensors():
    at = page("pages/heads.py", " ".join(f"w{i}" for i in range(240)))  # 240 tokens: pooled, with a window
    assert not at.exception
    assert "heads_head_export_npz" in downloads(at)
    at = page("pages/tokens.py")
    assert not at.exception
    files = downloads(at)
    assert {"tokens_text_safetensors", "tokens_layers_npz", "tokens_lines_npz"} <= set(files)
    at = page("pages/walkthrough.py")
    assert not at.exception
    assert {"walk_export_safetensors", "walk_export_npz"} <= set(downloads(at))
