"""benchmarks/notebook.py's own arithmetic and pages, without a model or a browser: the bytes it reports for
``output_attentions`` are n_layer x n_head x T^2 x 4, BertViz's CDN URLs all become local files (a page that still
named one would fetch it, or fail offline, and its time would not be BertViz's), and the notebook it sizes is one
Jupyter reads."""

from types import SimpleNamespace

import nbformat
import pytest

from benchmarks.notebook import CDN_FILES, attention_bytes, local_bertviz, saved_notebook


def test_output_attentions_bytes_are_every_weight_in_float32():
    smollm2 = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=30, num_attention_heads=9))
    assert attention_bytes(smollm2, 8192) == 30 * 9 * 8192 * 8192 * 4 == 72_477_573_120
    assert attention_bytes(smollm2, 20) == 432_000


def test_every_cdn_url_of_bertviz_becomes_a_local_file(tmp_path):
    page = "\n".join(f'<script src="{url}"></script>' for url in CDN_FILES)
    local = local_bertviz(page, tmp_path)
    assert "https://" not in local
    for name in CDN_FILES.values():
        assert f'src="{(tmp_path / name).as_uri()}' in local


def test_a_bertviz_output_without_one_of_its_urls_is_an_error(tmp_path):
    page = "\n".join(list(CDN_FILES)[1:])  # require.js's URL missing: BertViz changed how it loads its scripts
    with pytest.raises(ValueError, match="require"):
        local_bertviz(page, tmp_path)


def test_the_saved_notebook_is_valid_nbformat_4_and_holds_the_output_whole():
    html = '<div id="x">a\nb</div>\n<script>let s = "</b>";</script>'
    source = "outputs = model(ids, output_attentions=True)\nhead_view(outputs.attentions, tokens)"
    notebook = nbformat.reads(saved_notebook(source, html), as_version=4)
    nbformat.validate(notebook)
    (cell,) = notebook.cells
    assert cell.source == source
    assert cell.outputs[0]["data"]["text/html"] == html
