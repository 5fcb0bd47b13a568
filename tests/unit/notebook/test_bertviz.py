"""BertViz's calls (attnviz.notebook.head_view, model_view): its arguments, in its order, with its defaults; what
each does to the view; weights that are not weights refused in one line."""

import inspect
import math

import pytest
import torch

from attnviz.models.given import GivenWeightsError
from attnviz.notebook import head_view, model_view
from attnviz.notebook.bertviz import prettified
from tests.unit.notebook.test_payload import causal_weights, decode

# bertviz 1.4.1's signatures, as inspect.signature prints them
BERTVIZ_HEAD_VIEW = (
    "attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, layer=None, heads=None, "
    "encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None, decoder_tokens=None, "
    "include_layers=None, html_action='view'"
)
BERTVIZ_MODEL_VIEW = (
    "attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, display_mode='dark', "
    "encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None, decoder_tokens=None, "
    "include_layers=None, include_heads=None, html_action='view'"
)


def payload_of(view) -> dict:
    import json

    text = view.data
    start = text.index('type="application/json"')
    return json.loads(text[text.index(">", start) + 1 : text.index("</script>", start)])


@pytest.mark.parametrize(("ours", "theirs"), [(head_view, BERTVIZ_HEAD_VIEW), (model_view, BERTVIZ_MODEL_VIEW)])
def test_every_bertviz_argument_is_taken_in_its_place_with_its_default(ours, theirs):
    """A BertViz call, positional or by keyword, is an attnviz call: BertViz's parameters come first, in order."""
    signature = str(inspect.signature(ours)).strip("()")
    assert signature.startswith(theirs)


def full_weights(n_layer=2, n_head=3, q=4, k=4, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.softmax(torch.randn(1, n_head, q, k, generator=generator), -1) for _ in range(n_layer))


def test_a_decoders_weights_are_read_as_causal_and_an_encoders_as_full():
    causal = payload_of(head_view(causal_weights(), list("abcde"), html_action="return"))
    full = payload_of(head_view(full_weights(), list("abcd"), html_action="return"))
    assert causal["kinds"][0]["causal"] is True and full["kinds"][0]["causal"] is False
    assert "causal" in causal["note"] and "every key" in full["note"]


def test_layer_heads_and_include_layers_choose_what_is_drawn():
    view = payload_of(
        head_view(
            full_weights(n_layer=4), list("abcd"), layer=2, heads=[1, 2], include_layers=[0, 2], html_action="return"
        )
    )
    kind = view["kinds"][0]
    assert kind["layers"] == [0, 2] and kind["selected"] == [2, 1]
    assert kind["grid"]["dimmed"] == [[True, False, False, False]] * 2  # head 0 dimmed; the mean column never
    model = payload_of(model_view(full_weights(), list("abcd"), include_heads=[0], html_action="return"))
    assert model["view"] == "model" and model["theme"] == "dark"
    assert model["kinds"][0]["grid"]["dimmed"][0] == [False, True, True, False]


def test_sentence_b_start_gives_the_pair_selector():
    view = payload_of(head_view(full_weights(), list("abcd"), sentence_b_start=2, html_action="return"))
    assert view["kinds"][0]["sentence_b"] == 2


def test_an_encoder_decoders_three_kinds_each_over_its_tokens():
    source, target = list("abcd"), list("xyz")
    view = payload_of(
        head_view(
            encoder_attention=full_weights(q=4, k=4),
            decoder_attention=causal_weights(n_layer=2, n_head=3, T=3),
            cross_attention=full_weights(q=3, k=4),
            encoder_tokens=source,
            decoder_tokens=target,
            html_action="return",
        )
    )
    kinds = {kind["id"]: kind for kind in view["kinds"]}
    assert list(kinds) == ["encoder", "decoder", "cross"]
    assert [q.split(" ", 1)[1] for q in kinds["cross"]["queries"]] == target
    assert [k.split(" ", 1)[1] for k in kinds["cross"]["keys"]] == source
    assert kinds["decoder"]["causal"] is True and kinds["cross"]["causal"] is False
    cross = decode(kinds["cross"]["maps"])
    assert cross.shape == (2, 3, 3, 4)


def test_prettify_tokens_is_bertvizs_cleaning():
    assert prettified(["Ġcat", "▁dog", "ing</w>", "##s"]) == [" cat", " dog", "ing", "##s"]
    view = payload_of(head_view(full_weights(), ["Ġa", "b", "c", "d"], prettify_tokens=False, html_action="return"))
    assert view["kinds"][0]["queries"][0] == "0 Ġa"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: head_view(full_weights()[0], list("abcd")), "tuple of tensors"),
        (lambda: head_view(tuple(torch.cat([w, w]) for w in full_weights()), list("abcd")), "holds 2 sequences"),
        (lambda: head_view(full_weights(), list("abc")), "4 queries x 4 keys, but 3 x 3 tokens"),
        (lambda: head_view(full_weights(), "abcd"), "list of token strings"),
        (lambda: head_view(tuple(-w for w in full_weights()), list("abcd")), "not weights"),
        (lambda: head_view(tuple(w * 2 for w in full_weights()), list("abcd")), "summing to 2.0000"),
        (lambda: head_view(tuple(w.masked_fill(w > 0.3, math.nan) for w in full_weights()), list("abcd")), "NaN"),
        (lambda: head_view(full_weights(), list("abcd"), layer=5), "layer 5 is not among"),
        (lambda: head_view(full_weights(), list("abcd"), heads=[3]), "heads must be among 0..2"),
        (lambda: head_view(full_weights(), list("abcd"), include_layers=[2]), "include_layers must be among 0..1"),
        (lambda: head_view(full_weights(), list("abcd"), sentence_b_start=4), "sentence_b_start must be within 1..3"),
        (lambda: head_view(), "no attention given"),
        (lambda: head_view(cross_attention=full_weights(q=3)), "needs encoder_tokens and decoder_tokens"),
        (lambda: head_view(full_weights(), list("abcd"), encoder_attention=full_weights()), "pass either"),
        (lambda: head_view(full_weights(), list("abcd"), html_action="show"), "html_action must be"),
        (lambda: model_view(full_weights(), list("abcd"), display_mode="blue", html_action="return"), "display_mode"),
    ],
)
def test_what_is_not_one_sequences_weights_is_refused_in_one_line(call, says):
    with pytest.raises(ValueError) as caught:
        call()
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert isinstance(caught.value, GivenWeightsError) or "html_action" in says or "display_mode" in says
