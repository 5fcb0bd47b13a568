"""The Rollout page's map: its values, greyed cells, escaped labels and words, in both languages."""

import numpy as np
import pytest
import torch

from attnviz.core.tokenizer import Token
from attnviz.figures.rollout import make_rollout_figure
from attnviz.i18n.translate import set_language
from tests.plotly_json import decode, spec_of

TOKENS = [Token("<b>x</b>", 0, 1), Token("%{z}", 1, 2), Token("c" * 40, 2, 3)]
VALUES = torch.tensor([[1.0, 0.0, 0.0], [0.35, 0.65, 0.0], [0.2, 0.3, 0.5]])
CAUSAL = torch.ones(3, 3, dtype=torch.bool).tril()


@pytest.mark.parametrize("kind", ["rollout", "flow", "layer_mean"])
def test_the_map_draws_the_values_and_greys_what_no_path_reaches(kind):
    spec = spec_of(make_rollout_figure(VALUES, TOKENS, kind=kind, layer=4, mask=CAUSAL))
    main = spec["data"][0]
    assert main["type"] == "heatmap"
    z = decode(main["z"])
    assert z.shape == (3, 3) and z[1, 0] == pytest.approx(0.35) and np.isnan(z[0, 2])
    assert main["zmin"] == 0 and main["zmax"] == 1
    assert "L4" in spec["layout"]["title"]["text"]
    assert ("output" in spec["layout"]["yaxis"]["title"]["text"]) == (kind != "layer_mean")
    assert spec["layout"]["xaxis"]["title"]["text"] == "input token"
    assert "%{z:.5f}" in main["hovertemplate"] and "{what}" not in main["hovertemplate"]
    # user text is escaped in labels; the 40-character token is cut and gets its own hover rows
    assert "&lt;b&gt;" in main["y"][0] and "<b>" not in main["y"][0]
    assert len(spec["data"]) > 1


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="kind"):
        make_rollout_figure(VALUES, TOKENS, kind="sideways", layer=0)
    with pytest.raises(ValueError, match="3 tokens"):
        make_rollout_figure(torch.zeros(2, 2), TOKENS, kind="rollout", layer=0)


def test_the_words_follow_the_language():
    set_language("zh")
    try:
        spec = spec_of(make_rollout_figure(VALUES, TOKENS, kind="flow", layer=1))
    finally:
        set_language("en")
    assert spec["layout"]["xaxis"]["title"]["text"] == "输入词元"
    assert "流" in spec["data"][0]["hovertemplate"]
