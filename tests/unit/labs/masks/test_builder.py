"""The masks the Mask lab builds: each kind by hand on a small case, the doctor's name for it, and bad settings."""

import pytest
import torch

from attnviz.i18n.message import Message
from attnviz.labs.masks.builder import KINDS, built_mask, custom_mask, kind_label
from attnviz.labs.masks.doctor import expected_keep, parse_expect

T, F_ = True, False


def test_causal_sliding_and_prefix_masks_by_hand():
    assert built_mask("causal", 3).keep.tolist() == [[T, F_, F_], [T, T, F_], [T, T, T]]
    sliding = built_mask("sliding", 4, window=2)
    assert sliding.keep.tolist() == [[T, F_, F_, F_], [T, T, F_, F_], [F_, T, T, F_], [F_, F_, T, T]]
    assert sliding.expect == "sliding:2" and built_mask("prefix", 4, prefix=2).expect == "prefix:2"
    assert built_mask("prefix", 3, prefix=2).keep.tolist() == [[T, T, F_], [T, T, F_], [T, T, T]]


def test_padding_keeps_no_pad_key_and_says_the_real_length():
    lab = built_mask("causal+padding", 4, pads=1, side="right")
    assert lab.lengths == [3] and lab.side == "right" and lab.expect == "causal+padding"
    assert not lab.keep[:3, 3].any() and lab.keep[:3, :3].tolist() == built_mask("causal", 3).keep.tolist()
    left = built_mask("padding", 4, pads=2, side="left")
    assert not left.keep[2:, :2].any() and left.keep[2:, 2:].all()


def test_packed_documents_see_only_their_own_tokens():
    lab = built_mask("document", 4, documents=[2, 2], causal=False)
    assert lab.keep.tolist() == [[T, T, F_, F_], [T, T, F_, F_], [F_, F_, T, T], [F_, F_, T, T]]
    assert lab.expect == "bidirectional-documents:2,2"  # an encoder's packed documents, which the doctor checks
    expect = parse_expect(lab.expect)
    assert not expect.causal and torch.equal(expected_keep(expect, 4), lab.keep)
    assert str(expect) == lab.expect and "bidirectional" in str(expect.describe())


@pytest.mark.parametrize(
    ("kind", "options", "said"),
    [("padding", {"pads": 4}, "4"), ("document", {"documents": [1, 2]}, "3"), ("circular", {}, "unknown mask kind")],
)
def test_settings_that_do_not_fit_the_text_are_refused_with_the_numbers(kind, options, said):
    with pytest.raises(ValueError, match=said):
        built_mask(kind, 4, **options)


def test_a_users_own_mask_is_read_with_its_convention():
    keep = torch.tensor([[T, F_], [T, T]])
    assert torch.equal(custom_mask(keep, "keep").keep, keep) and torch.equal(custom_mask(~keep, "block").keep, keep)
    additive = torch.tensor([[0.0, float("-inf")], [0.0, 0.0]])
    assert custom_mask(additive, "keep").convention == "additive" and torch.equal(custom_mask(additive, "x").keep, keep)
    with pytest.raises(ValueError, match="keep or block"):
        custom_mask(keep, "maybe")
    with pytest.raises(TypeError, match="int64"):
        custom_mask(torch.ones(2, 2, dtype=torch.int64), "keep")


def test_every_kind_has_a_name_to_show():
    for kind in KINDS:
        assert isinstance(kind_label(kind), Message) and str(kind_label(kind)) != kind_label(kind).render("zh")
