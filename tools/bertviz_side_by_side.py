"""BertViz's ``head_view`` beside attnviz, on one encoder-decoder, for docs/pages.md's side by side.

``python -m tools.bertviz_side_by_side MODEL_FOLDER OUT_DIR --bertviz DIR --js DIR`` runs the model once through
attnviz (``run_pair`` on the source and target below), hands the very same weights to BertViz's ``head_view``
(``encoder_attention``, ``decoder_attention``, ``cross_attention``, with its drop-down between them), writes the page
BertViz returns with its scripts read from local files (BertViz loads require.js, d3 and jQuery from a CDN; this
machine has no network), and screenshots it in Debian's Chromium with the Cross view picked. attnviz does not
depend on BertViz: ``--bertviz`` is a folder holding the ``bertviz`` package (``pip install --no-deps --target DIR
bertviz``) and ``--js`` one holding ``require.js``, ``d3.min.js`` and ``jquery.min.js`` (``npm pack requirejs@2.3.6
d3@5.7.0 jquery@2.2.4``). IPython, which BertViz imports only to display, is stood in for by three classes.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

SOURCE = "cat dog bird sun tree hill door"
N_GENERATE = 8  # the target: the model's own greedy output, as the alignment view's screenshot reads it
LAYER, HEADS = 1, [1]  # the head the alignment view ranks first for this model and text


def _ipython_stand_in() -> None:
    """``IPython.display``'s HTML, Javascript and display, as BertViz's ``html_action="return"`` uses them."""

    class Data:
        def __init__(self, data: str) -> None:
            self.data = data

    display = types.ModuleType("IPython.display")
    display.HTML, display.Javascript, display.display = Data, Data, lambda *args, **kwargs: None
    package = types.ModuleType("IPython")
    package.display = display
    sys.modules.setdefault("IPython", package)
    sys.modules.setdefault("IPython.display", display)


def bertviz_page(folder: str, bertviz: str, js: Path) -> str:
    import torch

    from attnviz.models.registry import SourceSpec, open_source

    sys.path.insert(0, bertviz)
    _ipython_stand_in()
    from bertviz import head_view

    source = open_source(SourceSpec(folder, "cpu"))
    pair = source.run_pair(SOURCE, "", 64, n_generate=N_GENERATE)

    def layers(kind: str) -> tuple:
        record = pair.part(kind)
        return tuple(torch.stack([capture.weights for capture in record.layers])[:, None].unbind(0))

    html = head_view(
        encoder_attention=layers("encoder"),
        decoder_attention=layers("decoder"),
        cross_attention=layers("cross"),
        encoder_tokens=[t.text for t in pair.source_tokens],
        decoder_tokens=[t.text for t in pair.target_tokens],
        layer=LAYER,
        heads=HEADS,
        html_action="return",
    ).data
    cdn = "https://cdnjs.cloudflare.com/ajax/libs/"
    html = html.replace(f"{cdn}require.js/2.3.6/require.min.js", (js / "require.js").as_uri())
    html = html.replace(f"{cdn}d3/5.7.0/d3.min", (js / "d3.min").as_uri())
    html = html.replace(f"{cdn}jquery/2.0.0/jquery.min", (js / "jquery.min").as_uri())
    return f"<!doctype html><html><body style='background:white'>{html}</body></html>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--bertviz", required=True)
    parser.add_argument("--js", type=Path, required=True)
    args = parser.parse_args()
    from tools.browser import chromium_browser

    args.out.mkdir(parents=True, exist_ok=True)
    page_file = args.out / "bertviz-head-view.html"
    page_file.write_text(bertviz_page(args.model, args.bertviz, args.js.resolve()), encoding="utf-8")
    with chromium_browser() as browser:
        page = browser.new_page(viewport={"width": 700, "height": 700})
        page.goto(page_file.resolve().as_uri())
        page.wait_for_selector("#vis svg text", timeout=30_000)
        page.select_option("#filter", "2")  # Encoder, Decoder, Cross: the cross-attention
        page.wait_for_timeout(800)
        page.screenshot(path=str(args.out / "bertviz-cross.png"), full_page=True)


if __name__ == "__main__":
    main()
