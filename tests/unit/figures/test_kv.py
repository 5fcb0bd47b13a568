"""The KV cache page's figures: cache against length with a plateau where a window stops it, engines, heads."""

import pandas as pd
import pytest

from attnviz.figures.kv import (
    _tokens_label,
    make_decode_figure,
    make_engine_figure,
    make_head_grouping_figure,
    make_kv_length_figure,
    make_whatif_figure,
)
from attnviz.i18n.message import msg
from tests.plotly_json import spec_of

GIB = 2**30


def test_memory_against_length_is_one_log_log_line_per_variant_and_the_gpu_left():
    curves = {"mha (32 KV heads)": ([1024, 2048], [GIB, 2 * GIB]), "as configured": ([1024, 2048], [GIB, GIB])}
    fig = spec_of(make_kv_length_figure(curves, gpu_bytes=4 * GIB))
    lines = fig["data"]
    assert [t["name"] for t in lines[:2]] == ["mha (32 KV heads)", "as configured"]
    assert lines[0]["y"] == [1.0, 2.0] and lines[1]["line"]["width"] == 4  # the model as configured, on top
    assert lines[2]["y"] == [4.0, 4.0] and "(4 GiB)" in lines[2]["name"]
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"
    assert fig["layout"]["xaxis"]["ticktext"] == ["1K", "2K"]


@pytest.mark.parametrize(("n", "label"), [(8192, "8K"), (2**20, "1M"), (300, "300"), (1536, "1,536")])
def test_token_counts_read_as_people_say_them(n, label):
    assert _tokens_label(n) == label


def test_engines_are_bars_beside_the_minimum_with_their_ratio():
    bars = spec_of(make_engine_figure(GIB, [("vLLM", GIB + GIB // 4), ("llama.cpp", 2 * GIB)]))["data"][0]
    assert bars["x"][1:] == ["vLLM", "llama.cpp"] and bars["y"] == [1.0, 1.25, 2.0]
    assert bars["text"][0] == "1 GiB" and bars["text"][1].endswith("(1.25×)") and bars["text"][2].endswith("(2.00×)")


def test_decoding_is_one_line_per_mode_in_milliseconds_per_token():
    decode = spec_of(make_decode_figure({"with the cache": [0.01, 0.02], "recomputing": [0.1, 0.2]}))
    assert [t["name"] for t in decode["data"]] == ["with the cache", "recomputing"]
    assert decode["data"][1]["x"] == [1, 2] and decode["data"][1]["y"] == pytest.approx([100.0, 200.0])


def test_query_heads_are_drawn_over_the_kv_head_they_share():
    links, queries, kv = spec_of(make_head_grouping_figure(9, 3))["data"]
    assert len(queries["text"]) == 9 and len(kv["text"]) == 3
    assert links["x"].count(None) == 9 and len(links["x"]) == 27  # one line a query head, to the KV head it reads
    assert links["x"][1] == links["x"][4] == links["x"][7] != links["x"][10]  # heads 0-2 read KV head 0, head 3 not
    with pytest.raises(ValueError, match="multiple"):
        make_head_grouping_figure(9, 2)


def test_the_what_if_labels_are_said_in_the_readers_words():
    table = pd.DataFrame(
        {
            "label": [msg("kv_report.whatif_label", n_kv=2, group=2)],
            "kv_share": [0.5],
            "js_mean": [0.1],
            "output_change": [0.5],
        }
    )
    fig = spec_of(make_whatif_figure(table))
    assert fig["data"][0]["text"] == [str(msg("kv_report.whatif_label", n_kv=2, group=2))]
