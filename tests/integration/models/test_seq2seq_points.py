"""An encoder-decoder's one pass (Seq2SeqSource.run_pair_hooked) and its hook points: ``attn.z`` at the heads of the
kind the caller names (encoder, decoder or cross), each kind's weights and the logits, held against the model called
directly and against this file's own pre-hook on an output projection.

The tiny models have a decoder of 3 layers over an encoder of 2, so a hook called once per layer of the wrong kind
is seen.
"""

from __future__ import annotations

import pytest
import torch

from attnviz.models.record import KINDS
from attnviz.models.registry import SourceSpec, open_source
from tests.integration.tiny_models import tiny_seq2seq

SOURCES = ["The cat sat on the mat because it was warm.", "A dog slept by the door all day long."]
TARGET = "Die Katze sass."
N_LAYER = {"encoder": 2, "decoder": 3, "cross": 3}
N_HEAD, HEAD_DIM = 4, 8


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq2seq_points")
    folders = {
        "bart": tiny_seq2seq(root / "bart", "bart", decoder_layers=3),
        "t5": tiny_seq2seq(root / "t5", "t5", num_decoder_layers=3),
    }
    return {family: open_source(SourceSpec(str(folder), "cpu")) for family, folder in folders.items()}


def _inputs(source):
    """Two sources of the same length (B=2, S) and a shorter decoder input (B=2, T), T != S."""
    rows = [source.encode(text, 64).ids for text in SOURCES]
    n = min(map(len, rows))
    input_ids = torch.tensor([ids[:n] for ids in rows])
    decoder_ids = torch.tensor([[source.start_id, *source.encode_target(TARGET, 64).ids]] * 2)
    assert input_ids.shape[1] != decoder_ids.shape[1]
    return input_ids, decoder_ids


def _projection(source, family: str, kind: str, layer: int) -> torch.nn.Linear:
    """The output projection of ``kind``'s layer ``layer``, found here by the family's own module names."""
    whole = source.whole
    if family == "bart":
        stack = whole.model.encoder if kind == "encoder" else whole.model.decoder
        attention = stack.layers[layer].encoder_attn if kind == "cross" else stack.layers[layer].self_attn
        return attention.out_proj
    block = (whole.encoder if kind == "encoder" else whole.decoder).block[layer]
    return block.layer[1].EncDecAttention.o if kind == "cross" else block.layer[0].SelfAttention.o


def _plain(source, input_ids, decoder_ids):
    with torch.no_grad():
        return source.whole(input_ids=input_ids, decoder_input_ids=decoder_ids, use_cache=False, return_dict=True)


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_the_pass_refuses_a_point_it_does_not_have(sources, family):
    source = sources[family]
    input_ids, decoder_ids = _inputs(source)
    assert source.pair_points == {"attn.z", "attn.weights", "logits"}
    with pytest.raises(ValueError, match=r"no hook point 'resid\.pre'"):
        source.run_pair_hooked(input_ids, decoder_ids, {"resid.pre": lambda layer, x: None})
    with pytest.raises(ValueError, match="kind="):  # whose heads: never guessed
        source.run_pair_hooked(input_ids, decoder_ids, {"attn.z": lambda layer, z: z})
    with pytest.raises(ValueError, match="kind must be one of"):
        source.run_pair_hooked(input_ids, decoder_ids, {"attn.z": lambda layer, z: z}, kind="self")
    with pytest.raises(ValueError, match=r"no hook point 'attn\.weights'"):  # generate's steps return no weights
        source.run_pair_hooked(input_ids, hooks={"attn.weights": print}, generate=True, max_new_tokens=2)


@pytest.mark.parametrize("family", ["bart", "t5"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_kinds_attn_z_is_called_once_per_layer_of_that_kind(sources, family, kind):
    """Each layer of the kind once, in order, z (B, q_len, n_head, head_dim): cross-attention's queries are the
    target's (T), not the source's; an identity edit leaves the logits bit-identical to the model called directly."""
    source = sources[family]
    input_ids, decoder_ids = _inputs(source)
    seen = []

    def identity(layer, z):
        seen.append((layer, tuple(z.shape)))
        return z

    logits = []
    result = source.run_pair_hooked(input_ids, decoder_ids, {"attn.z": identity, "logits": logits.append}, kind=kind)
    q_len = input_ids.shape[1] if kind == "encoder" else decoder_ids.shape[1]
    assert seen == [(layer, (2, q_len, N_HEAD, HEAD_DIM)) for layer in range(N_LAYER[kind])]
    assert result.output.logits is logits[0]
    assert torch.equal(logits[0], _plain(source, input_ids, decoder_ids).logits)


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_an_edit_of_cross_attention_heads_is_the_edit_at_its_projection(sources, family):
    """Zeroing head 2 of cross-attention's layer 1 through the pass equals this file's pre-hook zeroing that head's
    slice of the layer's output projection input, bit for bit; it changes the logits, and differs from the same
    head zeroed in the decoder's self-attention (the kind picks the module)."""
    source = sources[family]
    input_ids, decoder_ids = _inputs(source)
    layer, head = 1, 2

    def zero(at, z):  # z (B, T, n_head, head_dim)
        if at != layer:
            return z
        z = z.clone()
        z[:, :, head] = 0.0
        return z

    edited = source.run_pair_hooked(input_ids, decoder_ids, {"attn.z": zero}, kind="cross").output.logits
    self_edited = source.run_pair_hooked(input_ids, decoder_ids, {"attn.z": zero}, kind="decoder").output.logits

    def zero_slice(_, args):
        x = args[0].clone()
        x[..., head * HEAD_DIM : (head + 1) * HEAD_DIM] = 0.0
        return (x, *args[1:])

    handle = _projection(source, family, "cross", layer).register_forward_pre_hook(zero_slice)
    try:
        by_hand = _plain(source, input_ids, decoder_ids).logits
    finally:
        handle.remove()
    plain = _plain(source, input_ids, decoder_ids).logits
    assert torch.equal(edited, by_hand)
    assert not torch.equal(edited, plain)
    assert float((edited - plain).abs().max()) > 1e-4  # the head matters: the comparison can fail
    assert not torch.equal(edited, self_edited)


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_the_weights_and_logits_read_are_the_models_own(sources, family):
    """``attn.weights`` reads each kind's weights, encoder, decoder then cross, layer by layer, the very tensors the
    model returns with output_attentions; a pass that reads none does not ask for them."""
    source = sources[family]
    input_ids, decoder_ids = _inputs(source)
    read = []
    source.run_pair_hooked(
        input_ids, decoder_ids, {"attn.weights": lambda kind, layer, w: read.append((kind, layer, w))}
    )
    with torch.no_grad():
        theirs = source.whole(
            input_ids=input_ids, decoder_input_ids=decoder_ids, output_attentions=True, use_cache=False
        )
    expected = [
        (kind, layer, w)
        for kind, weights in (
            ("encoder", theirs.encoder_attentions),
            ("decoder", theirs.decoder_attentions),
            ("cross", theirs.cross_attentions),
        )
        for layer, w in enumerate(weights)
    ]
    assert [(k, layer) for k, layer, _ in read] == [(k, layer) for k, layer, _ in expected]
    assert all(torch.equal(ours, w) for (_, _, ours), (_, _, w) in zip(read, expected, strict=True))
    S, T = input_ids.shape[1], decoder_ids.shape[1]
    shapes = {"encoder": (2, N_HEAD, S, S), "decoder": (2, N_HEAD, T, T), "cross": (2, N_HEAD, T, S)}
    assert all(tuple(w.shape) == shapes[kind] for kind, _, w in read)
    assert source.run_pair_hooked(input_ids, decoder_ids).output.cross_attentions is None


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_generation_and_a_graph_are_the_same_pass(sources, family):
    """``generate=True`` is the model's own generate (an identity edit of cross-attention at every step leaves its
    ids as they are); ``grad=True`` keeps a graph through the edited heads, and without it there is none."""
    source = sources[family]
    input_ids, decoder_ids = _inputs(source)
    asked = {"max_new_tokens": 5, "min_new_tokens": 1, "do_sample": False, "num_beams": 1}
    asked["decoder_start_token_id"] = source.start_id
    with torch.no_grad():
        plain = source.whole.generate(input_ids=input_ids[:1], **asked, **source._generation_cache())
    calls = []
    hooked = source.run_pair_hooked(
        input_ids[:1],
        hooks={"attn.z": lambda layer, z: calls.append(layer) or z},
        kind="cross",
        generate=True,
        **asked,
        **source._generation_cache(),
    ).output
    assert torch.equal(hooked, plain)
    n_steps = plain.shape[1] - 1  # a forward for each token written
    assert n_steps >= 1 and calls == list(range(N_LAYER["cross"])) * n_steps  # each step, each cross layer once
    assert source.greedy_target(input_ids[0].tolist(), 5) == plain[0, 1:].tolist()

    kept = []

    def leaf(layer, z):  # the heads' output as a leaf of the graph, as attribution patching reads it
        kept.append(z.detach().requires_grad_())
        return kept[-1]

    graph = source.run_pair_hooked(input_ids, decoder_ids, {"attn.z": leaf}, kind="cross", grad=True)
    graph.output.logits[:, -1].sum().backward()
    assert len(kept) == N_LAYER["cross"] and all(float(z.grad.abs().sum()) > 0 for z in kept)
    assert source.run_pair_hooked(input_ids, decoder_ids).output.logits.requires_grad is False
