"""The example notebooks of docs/notebooks/ (BertViz's call, an encoder-decoder, a bfloat16 model with a device map)
run as a reader runs them: top to bottom on a fresh kernel of this venv (nbclient), no cell failing, each view in
its cell's output; then saved as HTML with nbconvert and opened in Chromium as a file with the network refused:
every view drawn, its large map's hover working, the viewer's script once in the page and no request made.
test_notebook_long_text.py does the same for the 2,000-token notebook (its own module: its own xdist group)."""

import re

import nbformat
import pytest
from nbconvert import HTMLExporter

from tests.integration.notebook.executed import (
    Runs,
    hover_large_maps,
    opened_offline,
    outputs_html,
    screenshot,
    script_copies,
    sizes,
    views,
)
from tools import notebooks

NAMES = ("bertviz_call", "encoder_decoder", "bfloat16_device_map")


@pytest.fixture(scope="module")
def runs():
    done = Runs()
    yield done
    done.close()


def all_html(run) -> str:
    return "".join(html for cell in run.notebook.cells if cell.cell_type == "code" for html in outputs_html(cell))


def plain(run, code: str) -> str:
    """The text result of the code cell whose source holds ``code``."""
    cell = next(c for c in run.notebook.cells if c.cell_type == "code" and code in c.source)
    return next(out["data"]["text/plain"] for out in cell.outputs if out.get("output_type") == "execute_result")


def test_the_notebooks_are_kept_without_outputs_and_each_is_tested():
    """In git without outputs (tools/notebooks.py says why; `python -m tools.notebooks --strip` empties them), valid,
    on the venv's own kernel; each one executed by this module or test_notebook_long_text.py."""
    found = notebooks.notebooks()
    assert sorted(path.stem for path in found) == sorted([*NAMES, "long_text"])
    for path in found:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        assert notebook.metadata.kernelspec.name == notebooks.KERNEL
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert [(cell.outputs, cell.execution_count) for cell in code] == [([], None)] * len(code), path.name


@pytest.mark.parametrize("name", NAMES)
def test_runs_with_each_view_in_its_cells_output_and_the_script_once(runs, name, record_property):
    run = runs[name]
    assert views(run)  # as many in each cell as its code shows
    assert script_copies(all_html(run)) == 1  # the first view a kernel shows carries it, no other
    record_property("seconds", round(run.seconds, 1))


def test_bertviz_calls_views_are_of_the_weights_handed_over(runs):
    run = runs["bertviz_call"]
    assert plain(run, "len(outputs.attentions)") == "(6, (1, 12, 17, 17))"
    shown = [payload for _, payload in views(run)]
    assert [p["view"] for p in shown] == ["head", "head", "model"]
    tokens = shown[0]["kinds"][0]["queries"]
    assert len(tokens) == 17 and tokens[0].endswith("[CLS]") and tokens[-1].endswith("[SEP]")
    assert [p["kinds"][0]["sentence_b"] for p in shown] == [9, None, 9]  # token_type_ids' first 1: "the" of B
    assert tokens[9].endswith("the")
    assert shown[1]["kinds"][0]["selected"] == [4, 3]  # layer=4, heads=[3, 7]: the first of heads drawn large
    alone = run.workdir / "head_view.html"  # html_action="return", saved by the notebook: it carries the script
    assert script_copies(alone.read_text(encoding="utf-8")) == 1


def test_the_encoder_decoders_three_kinds_over_their_own_tokens(runs):
    run = runs["encoder_decoder"]
    given, captured = (payload for _, payload in views(run))
    for payload in (given, captured):
        kinds = {kind["id"]: kind for kind in payload["kinds"]}
        assert list(kinds) == ["encoder", "decoder", "cross"]
        assert kinds["cross"]["queries"] == kinds["decoder"]["queries"]
        assert kinds["cross"]["keys"] == kinds["encoder"]["queries"]
        assert kinds["decoder"]["causal"] and not kinds["encoder"]["causal"]
    assert len(given["kinds"][0]["queries"]) == len(captured["kinds"][0]["queries"])  # the same source text


def test_the_bfloat16_model_is_captured_where_it_lies(runs):
    run = runs["bfloat16_device_map"]
    dtype, devices = re.fullmatch(r"\((torch\.\w+), \[(.*)\]\)", plain(run, "model.hf_device_map")).groups()
    assert dtype == "torch.bfloat16" and "'disk'" in devices  # the last layers offloaded to disk by accelerate
    shown = [payload for _, payload in views(run)]
    assert [p["view"] for p in shown] == ["head", "model"]
    assert all("bfloat16" in p["note"] for p in shown)  # the note says what the model ran in


@pytest.mark.browser
@pytest.mark.parametrize("name", NAMES)
def test_the_saved_page_draws_every_view_offline_and_hovers(runs, name, page, record_property):
    run = runs[name]
    path = run.page()
    assert script_copies(path.read_text(encoding="utf-8")) == 1
    refused = opened_offline(page, path, len(views(run)))
    assert hover_large_maps(page, views(run)) >= 1
    assert refused == []
    screenshot(page, name)
    saved = sizes(run)
    record_property("sizes", saved)
    print(saved)


@pytest.mark.browser
def test_nbconverts_default_page_draws_offline_too(runs, page):
    """The page as `jupyter nbconvert --to html` writes it asks a CDN for the template's own require.js and MathJax:
    refused, the views draw all the same, and nothing else is asked for."""
    run = runs["bertviz_call"]
    refused = opened_offline(page, run.page(offline=False), len(views(run)))
    assert hover_large_maps(page, views(run)) >= 1
    exporter = HTMLExporter()
    assert sorted(refused) == sorted([exporter.mathjax_url, exporter.require_js_url])


@pytest.mark.browser
def test_the_view_returned_and_saved_alone_draws_offline(runs, page):
    run = runs["bertviz_call"]
    refused = opened_offline(page, run.workdir / "head_view.html", 1)
    assert hover_large_maps(page, [(page.locator(".attnviz-nb").get_attribute("id"), views(run)[0][1])]) == 1
    assert refused == []
