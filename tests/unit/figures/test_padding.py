"""The Padding page's figure: a batch's real tokens and pads, each token written in its cell."""

import torch

from attnviz.figures.padding import make_padding_mask_figure
from tests.plotly_json import decode, spec_of


def test_real_tokens_and_pads_are_two_colours_with_the_tokens_written_in():
    key_mask = torch.tensor([[True, True, True], [True, False, False]])  # right-padded: the second has one token
    fig = spec_of(make_padding_mask_figure(key_mask, [["The", "cat", "sat"], ["Hi", "[PAD]", "[PAD]"]]))
    cells = fig["data"][0]
    assert decode(cells["z"]).tolist() == [[1, 1, 1], [1, 0, 0]] and cells["text"][1] == ["Hi", "[PAD]", "[PAD]"]
    assert cells["zmin"] == 0 and cells["zmax"] == 1 and fig["layout"]["yaxis"]["autorange"] == "reversed"
