"""Why a head attends there, drawn: every dimension's part of the logit, and the parts summed in frequency bands."""

import pytest

from attnviz.figures.logit_parts import make_band_parts_figure, make_dimension_parts_figure
from attnviz.labs.logit_parts import band_summary, logit_parts
from tests.plotly_json import decode, spec_of
from tests.unit.labs.rope_records import rope_record


def test_figures_draw_every_part_and_mark_the_logit():
    record, inv_freq = rope_record(head_dim=16, softcap=2.0)
    parts = logit_parts(record, 0, 0, 30, 10, inv_freq)
    dims = spec_of(make_dimension_parts_figure(parts, sort=True))
    bars = dims["data"][0]
    assert len(bars["x"]) == 16 and abs(decode(bars["y"]).astype(float).sum() - parts.logit) < 1e-4
    heights = abs(decode(bars["y"]))
    assert (heights[:-1] >= heights[1:]).all()  # sorted, largest first
    assert dims["layout"]["shapes"][0]["y0"] == pytest.approx(parts.logit)
    assert "before the cap" in dims["data"][1]["name"]
    bands = spec_of(make_band_parts_figure(band_summary(parts), parts))
    assert len(bands["data"][0]["x"]) == 8 and "high → low" in bands["layout"]["xaxis"]["title"]["text"]
    plain = logit_parts(record, 0, 0, 30, 10)
    pairs = spec_of(make_band_parts_figure(band_summary(plain), plain))
    assert "dimension pairs" in pairs["layout"]["xaxis"]["title"]["text"]
