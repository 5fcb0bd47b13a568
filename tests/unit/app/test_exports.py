"""Exports: the camera's SVG/PNG config, offline HTML, CSV, safetensors / npz round-trips and the size bound."""

import gc
import io
import json
import re
import weakref

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
from safetensors.torch import load as load_safetensors

from attnviz.app import exports
from attnviz.errors import ExportTooLargeError
from attnviz.labs.walkthrough import steps as walkthrough
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source

TEXT = "The cat sat on the mat because it was tired."


@pytest.fixture(scope="module")
def source():
    return open_source(SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(causal=True)))


@pytest.fixture(scope="module")
def record(source):
    return source.run(TEXT, 64)


def test_the_camera_saves_an_svg_at_the_figures_size_named_after_the_key():
    fig = go.Figure(go.Heatmap(z=[[1, 2]]), layout={"height": 420})
    config = exports.chart_config(fig, "heads_large")
    assert config["displaylogo"] is False
    assert config["toImageButtonOptions"] == {
        "format": "svg",
        "filename": "attnviz-heads_large",
        "scale": 1,
        "height": 420,
    }  # no width: the figure is as wide as the page, and plotly takes the drawn width
    png = exports.image_options(go.Figure(layout={"width": 300, "height": 200}), "a b/../c", "png")
    assert png == {"format": "png", "filename": "attnviz-a-b-c", "scale": 2, "width": 300, "height": 200}
    with pytest.raises(ValueError, match="jpeg"):
        exports.image_options(fig, "k", "jpeg")


def test_html_inlines_plotly_js_and_the_figures_data_and_keeps_a_hostile_token_as_data():
    token = "</script><script>alert(1)</script>"
    fig = go.Figure(go.Heatmap(z=[[0.125, 0.875]], x=[token, "mat"], y=["cat"]))
    html = exports.figure_html(fig, "tokens_text").decode()
    assert not re.search(r"<script[^>]*\bsrc=", html)  # nothing fetched: no CDN, no file beside it
    assert re.search(r"plotly\.js v\d+\.\d+", html) and len(html) > 3_000_000  # plotly.js itself (~4.6 MB)
    data = json.loads(re.search(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", html, re.S).group(1))
    assert data[0]["type"] == "heatmap" and data[0]["x"][1] == "mat"
    assert data[0]["x"][0] == token  # the label survives as text …
    assert "alert(1)</script>" not in html  # … but never as markup that closes the script
    assert '"format": "png"' in html  # the offline page's camera saves a PNG


def test_head_export_round_trips_the_records_weights_and_mask(record):
    export = exports.head_export(record, 1, 2)
    loaded = load_safetensors(exports.tensor_file(export, "safetensors"))
    torch.testing.assert_close(loaded["weights"], record.weights(1, 2), rtol=0, atol=0)
    assert torch.equal(loaded["mask"], record.mask(1)) and loaded["mask"].dtype == torch.bool
    assert not loaded["mask"][0, 1]  # causal: the first token cannot see the second
    assert export.nbytes == exports.tensors_nbytes(loaded)
    npz = np.load(io.BytesIO(exports.tensor_file(export, "npz")))  # no allow_pickle needed
    np.testing.assert_array_equal(npz["weights"], record.weights(1, 2).numpy())
    meta = json.loads(str(npz["__metadata__"]))
    assert meta["layer"] == "1" and meta["head"] == "2"
    assert json.loads(meta["tokens"]) == [tok.text for tok in record.tokens]


def test_a_window_and_a_pooled_map_export_as_drawn(record):
    pooled = record.pooled(0, "mean", "max")
    export = exports.head_export(record, 0, "mean", (2, 5), (0, 4), pooled=pooled)
    loaded = load_safetensors(exports.tensor_file(export, "safetensors"))
    assert loaded["weights"].shape == (3, 4)
    torch.testing.assert_close(loaded["weights"], record.weights(0, "mean", (2, 5), (0, 4)), rtol=0, atol=0)
    torch.testing.assert_close(loaded["weights"], record.weights(0, "mean")[2:5, :4])  # the same cells
    torch.testing.assert_close(loaded["pooled"], pooled, rtol=0, atol=0, equal_nan=True)


def test_statistics_export_holds_the_table_and_the_rows_it_averages(record):
    blob = exports.tensor_file(exports.statistics_export(record), "safetensors")
    loaded = load_safetensors(blob)
    table = record.statistics
    assert loaded["heads.entropy"].shape == (record.n_layer, record.n_head)
    for row in table.itertuples():
        assert loaded["heads.entropy"][row.layer, row.head].item() == pytest.approx(row.entropy, rel=1e-6)
        assert loaded["heads.self_weight"][row.layer, row.head].item() == pytest.approx(row.self_weight, rel=1e-6)
    torch.testing.assert_close(loaded["rows.entropy"], record.row_stat("entropy"), equal_nan=True)
    assert torch.equal(loaded["live_rows"], record.live_rows())
    n_header = int.from_bytes(blob[:8], "little")  # safetensors: an 8-byte length, then a JSON header
    meta = json.loads(blob[8 : 8 + n_header])["__metadata__"]
    assert json.loads(meta["tokens"])[1] == "cat" and meta["model"] == record.model_name


def test_csv_equals_the_table_and_defuses_spreadsheet_formulas(record):
    table = record.statistics
    back = pd.read_csv(io.StringIO(exports.table_csv(table).decode()), keep_default_na=False)
    assert back.columns.tolist() == table.columns.tolist()
    for column in ("entropy", "max_weight", "mean_distance"):
        np.testing.assert_allclose(back[column].to_numpy(), table[column].to_numpy(), rtol=1e-6)
    assert back["flags"].tolist() == table["flags"].fillna("").tolist()
    hostile = pd.DataFrame({"token": ['=HYPERLINK("x")', "+1", "cat"], "weight": [-0.5, 0.25, 1.0]})
    back = pd.read_csv(io.StringIO(exports.table_csv(hostile).decode()))
    assert back["token"].tolist() == ['\'=HYPERLINK("x")', "'+1", "cat"]
    assert back["weight"].tolist() == [-0.5, 0.25, 1.0]  # numbers stay numbers, negative ones too


def test_an_export_over_the_bound_is_refused_before_it_is_built():
    built = []
    big = exports.TensorExport(lambda: built.append(1) or {}, 65 * 2**20)
    assert big.too_large and not exports.TensorExport.of({"x": torch.zeros(4)}).too_large
    with pytest.raises(ExportTooLargeError, match=r"65\.0 MB .* 64 MB"):
        exports.tensor_file(big, "npz")
    assert built == []  # refused from the shapes, nothing computed
    with pytest.raises(ValueError, match="pickle"):
        exports.tensor_file(exports.TensorExport.of({"x": torch.zeros(1)}), "pickle")


def test_walkthrough_export_holds_every_steps_tensors(source):
    walk = walkthrough.walk(source.attention_layer(TEXT, 32, 1))
    loaded = load_safetensors(exports.tensor_file(exports.walkthrough_export(walk, 0), "safetensors"))
    expected = {f"{step.key}.{name}": t for step in walk.steps for name, t in step.tensors.items()}
    assert set(loaded) == set(expected) | {"mask"}
    for name, tensor in expected.items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(loaded["mask"], walk.mask)


def test_an_export_on_screen_does_not_keep_its_record_alive(source):
    """Streamlit keeps a download button's callable until its session's next run or end: an export that held its
    record kept every idle session's last record in memory after the result cache dropped it. The export reads
    the record while something else holds it, and says it has gone once nothing does."""
    record = source.run(TEXT, 64)
    head, stats = exports.head_export(record, 1, 2), exports.statistics_export(record)
    assert load_safetensors(exports.tensor_file(head, "safetensors"))["weights"].shape == (record.q_len,) * 2
    assert "rows.entropy" in load_safetensors(exports.tensor_file(stats, "safetensors"))
    gone = weakref.ref(record)
    del record
    gc.collect()
    assert gone() is None  # only the exports referred to it: they let it go
    for export in (head, stats):
        with pytest.raises(LookupError, match="left the server's result cache"):
            exports.tensor_file(export, "safetensors")
