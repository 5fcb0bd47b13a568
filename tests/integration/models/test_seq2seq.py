"""Encoder-decoders: every kind of attention in attnviz's record against the layers recomputed by hand.

The record comes from the weights the model's own eager attention returns; here each layer is recomputed from
what entered it (a forward pre-hook on each attention module), with the module's own projection weights, this
file's softmax and, for T5, this file's relative position buckets: BART's scaled dot product and T5's unscaled one
with its learned bias (bidirectional in the encoder, causal in the decoder, none across), within 1e-5.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F

from attnviz.models.registry import SourceSpec, open_source
from tests.integration.tiny_models import tiny_seq2seq
from tests.tolerances import bound

SOURCE = "The cat sat on the mat because it was warm."
TARGET = "Die Katze sass auf der Matte, weil sie warm war."
TOLERANCE = bound("attention")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq2seq")
    return {name: tiny_seq2seq(root / name, name) for name in ("bart", "t5")}


def _modules(model, family: str) -> dict[str, list[torch.nn.Module]]:
    if family == "bart":
        base = model.model
        return {
            "encoder": [layer.self_attn for layer in base.encoder.layers],
            "decoder": [layer.self_attn for layer in base.decoder.layers],
            "cross": [layer.encoder_attn for layer in base.decoder.layers],
        }
    return {
        "encoder": [block.layer[0].SelfAttention for block in model.encoder.block],
        "decoder": [block.layer[0].SelfAttention for block in model.decoder.block],
        "cross": [block.layer[1].EncDecAttention for block in model.decoder.block],
    }


def _inputs(model, modules, run):
    """What entered each attention module in the last pass of ``run()`` (generation passes come first):
    {module: (hidden_states, key_value_states or None)}."""
    seen, owner = {}, threading.get_ident()

    def grab(module, args, kwargs):
        if threading.get_ident() == owner:
            hidden = args[0] if args else kwargs["hidden_states"]
            seen[module] = (hidden.detach(), kwargs.get("key_value_states"))

    hooks = [m.register_forward_pre_hook(grab, with_kwargs=True) for ms in modules.values() for m in ms]
    try:
        result = run()
    finally:
        for hook in hooks:
            hook.remove()
    return result, seen


def _split(x, n_head):  # (1, L, n_head * hd) -> (n_head, L, hd)
    return x[0].view(x.shape[1], n_head, -1).transpose(0, 1)


def _t5_bucket(relative, bidirectional: bool, n_buckets: int, max_distance: int):
    """T5's relative position bucket, written from the paper's description (Raffel et al. 2020, section 2.1)."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        bucket += (relative > 0).long() * n_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp_min(0)
    exact = n_buckets // 2
    far = (
        exact
        + (
            torch.log(distance.float().clamp_min(1) / exact) / math.log(max_distance / exact) * (n_buckets - exact)
        ).long()
    )
    return bucket + torch.where(distance < exact, distance, far.clamp(max=n_buckets - 1))


def _by_hand(family, kind, layer, module, hidden, memory, config, bias_module):
    """One layer's weights (n_head, T, S), recomputed."""
    n_head = config.encoder_attention_heads if family == "bart" else config.num_heads
    keys_in = hidden if memory is None else memory
    if family == "bart":
        q = _split(F.linear(hidden, module.q_proj.weight, module.q_proj.bias), n_head)
        k = _split(F.linear(keys_in, module.k_proj.weight, module.k_proj.bias), n_head)
        scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5)
    else:
        q, k = _split(F.linear(hidden, module.q.weight), n_head), _split(F.linear(keys_in, module.k.weight), n_head)
        scores = q @ k.transpose(-1, -2)  # T5 folds the scale into its initialisation: none here
        if kind != "cross":
            T = scores.shape[-1]
            relative = torch.arange(T)[None, :] - torch.arange(T)[:, None]  # key - query
            bucket = _t5_bucket(
                relative,
                kind == "encoder",
                config.relative_attention_num_buckets,
                config.relative_attention_max_distance,
            )
            scores = scores + bias_module.relative_attention_bias.weight[bucket].permute(2, 0, 1)
    if kind == "decoder":
        T = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(scores.double(), dim=-1).float()


@pytest.mark.parametrize("family", ["bart", "t5"])
@pytest.mark.parametrize("generate", [0, 6])
def test_every_kind_equals_the_layers_recomputed(folders, family, generate):
    source = open_source(SourceSpec(str(folders[family]), "cpu"))
    model = source.whole
    modules = _modules(model, family)
    pair, seen = _inputs(model, modules, lambda: source.run_pair(SOURCE, TARGET, 64, n_generate=generate))
    assert pair.generated == bool(generate)
    n_source, n_target = len(pair.source_tokens), len(pair.target_tokens)
    assert pair.encoder.q_len == pair.encoder.k_len == n_source
    assert (pair.decoder.q_len, pair.cross.q_len, pair.cross.k_len) == (n_target, n_target, n_source)
    assert pair.cross.keys_tokens == pair.source_tokens and pair.cross.kind == "cross"
    assert pair.decoder.causal and not pair.encoder.causal
    worst = 0.0
    for kind, layers in modules.items():
        record = pair.part(kind)
        assert record.n_layer == len(layers)
        for index, module in enumerate(layers):
            hidden, memory = seen[module]
            assert (memory is not None) == (kind == "cross")
            bias = layers[0] if family == "t5" else None
            expected = _by_hand(family, kind, index, module, hidden, memory, model.config, bias)
            got = record.weights(index, None)
            assert got.shape == expected.shape
            worst = max(worst, float((got - expected).abs().max()))
    assert worst <= TOLERANCE
    assert pair.losses.shape == (n_target - 1,) and torch.isfinite(pair.losses).all()


def test_statistics_per_kind(folders):
    source = open_source(SourceSpec(str(folders["bart"]), "cpu"))
    pair = source.run_pair(SOURCE, TARGET, 64)
    cross = pair.cross.statistics
    assert list(cross.columns) == ["layer", "head", *pair.cross.stat_columns, "flags"]
    assert "prev_token_weight" not in cross.columns and "self_weight" not in cross.columns
    assert cross["monotonicity"].between(-1, 1).all() and cross["coverage"].between(0, 1).all()
    # row statistics read from the same weights: entropy and max of each cross row, by hand
    w = pair.cross.weights(1, 2)
    assert torch.allclose(pair.cross.layers[1].rows["max_weight"][2], w.amax(dim=-1))
    assert "prev_token_weight" in pair.decoder.statistics.columns


def test_a_too_long_pair_is_one_line(folders, monkeypatch):
    from attnviz import settings
    from attnviz.errors import ModelUnavailableError

    source = open_source(SourceSpec(str(folders["t5"]), "cpu"))
    monkeypatch.setattr(settings, "cache_bytes", lambda: source.pair_nbytes(8, 8))
    with pytest.raises(ModelUnavailableError, match="at most 8 tokens each fit"):
        source.run_pair(SOURCE, TARGET, 64)
    assert source.pair_max_tokens() == 8


@pytest.mark.parametrize("family", ["bart", "t5"])
@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_ablating_heads_of_each_kind_equals_plain_hooks(folders, family, kind):
    """The Ablation page's measure (the target's teacher-forced loss) with one head of a kind zeroed, against this
    file's own pre-hook on that layer's output projection and transformers' loss from ``labels``."""
    from attnviz.labs.heads_matter.effect import ablation_effect

    source = open_source(SourceSpec(str(folders[family]), "cpu"))
    view = source.ablation_view(kind, TARGET)
    layer, head = 1, 2
    result = ablation_effect(view, SOURCE, 64, [(layer, head)], "zero")
    nothing = ablation_effect(view, SOURCE, 64, [], "zero")
    assert nothing.loss_before == nothing.loss_after and nothing.kl_mean == 0.0

    model = source.whole
    module = _modules(model, family)[kind][layer]
    out = module.out_proj if family == "bart" else module.o
    head_dim = out.in_features // 4

    def zero_head(_, args):
        x = args[0].clone()
        x[..., head * head_dim : (head + 1) * head_dim] = 0.0
        return (x, *args[1:])

    ids = torch.tensor([source.encode(SOURCE, 64).ids])
    labels = torch.tensor([source.encode_target(TARGET, 64).ids])
    with torch.no_grad():
        plain = model(input_ids=ids, labels=labels).loss
        hook = out.register_forward_pre_hook(zero_head)
        try:
            ablated = model(input_ids=ids, labels=labels).loss
        finally:
            hook.remove()
    assert result.loss_before == pytest.approx(float(plain), abs=1e-5)
    assert result.loss_after == pytest.approx(float(ablated), abs=1e-5)
    assert abs(float(ablated) - float(plain)) > 1e-4  # the head matters here: the comparison can fail
    assert [t.text for t in result.tokens][1:] == [t.text for t in source.encode_target(TARGET, 64).tokens]


@pytest.mark.parametrize("family", ["bart", "t5"])
@pytest.mark.parametrize("n_generate", [0, 4])
def test_the_cache_estimate_is_what_encoder_decoder_cache_holds(folders, family, n_generate):
    """Self-attention grows with the target, cross-attention is the source's size: the estimate from the shapes and
    the lengths equals the bytes of transformers' EncoderDecoderCache after a prefill, to the byte."""
    from transformers import EncoderDecoderCache

    from attnviz.labs.kv.encoder_decoder import seq2seq_cache_check

    source = open_source(SourceSpec(str(folders[family]), "cpu"))
    checks = seq2seq_cache_check(source, SOURCE, TARGET, 64, n_generate)
    assert checks["error (bytes)"].tolist() == [0, 0, 0]
    n_source = len(source.encode(SOURCE, 64).ids)
    assert checks["tokens"][1] == n_source
    # independently: the cache transformers' forward returns, its two parts' tensors summed here
    ids = torch.tensor([source.encode(SOURCE, 64).ids])
    target = source.target(SOURCE, TARGET, 64, n_generate).ids
    with torch.no_grad():
        out = source.whole(input_ids=ids, decoder_input_ids=torch.tensor([[source.start_id, *target]]), use_cache=True)
    cache = out.past_key_values
    assert isinstance(cache, EncoderDecoderCache)
    self_bytes = sum(x.numel() * 4 for layer in cache.self_attention_cache.layers for x in (layer.keys, layer.values))
    cross = cache.cross_attention_cache.layers
    assert all(layer.keys.shape[-2] == n_source for layer in cross)  # fixed by the source
    assert checks["measured (bytes)"][0] == self_bytes
    assert checks["estimate (bytes)"][0] == 2 * 2 * 4 * 8 * (1 + len(target)) * 4  # 2 layers, K and V, 4 heads x 8


@pytest.mark.parametrize("family", ["bart", "t5"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_on_both_sides_puts_no_weight_on_a_pad(folders, family, side):
    source = open_source(SourceSpec(str(folders[family]), "cpu"))
    texts = ["The cat sat.", "A much longer sentence about the dog that slept by the door."]
    assert source.pad_weights(texts, 64, side) == {"encoder": 0.0, "decoder": 0.0, "cross": 0.0}
    leaking = source.pad_weights(texts, 64, side, masked=False)  # no padding mask: the check sees the leak
    assert leaking["encoder"] > 1e-3 and leaking["cross"] > 1e-3


def test_bfloat16_is_the_models_own_weights(folders):
    """In bfloat16 the record holds what the model's own eager attention returned in that dtype, widened exactly."""
    from attnviz.core.devices import Placement

    source = open_source(SourceSpec(str(folders["bart"]), "cpu", placement=Placement(dtype="bfloat16")))
    assert source.dtype == torch.bfloat16
    pair = source.run_pair(SOURCE, TARGET, 64)
    ids = torch.tensor([source.encode(SOURCE, 64).ids])
    decoder = torch.tensor([[source.start_id, *pair.target_ids]])
    with torch.no_grad():
        out = source.whole(input_ids=ids, decoder_input_ids=decoder, output_attentions=True, use_cache=False)
    for kind, theirs in (("encoder", out.encoder_attentions), ("cross", out.cross_attentions)):
        for layer, weights in enumerate(theirs):
            assert torch.equal(pair.part(kind).weights(layer, None), weights[0].float())
    rows = pair.cross.layers[0].weights.sum(dim=-1)
    assert float((rows - 1).abs().max()) <= 2**-7  # bfloat16 weights, each rounded, sum to 1 within its eps


def test_the_extremes_one_token_and_the_longest_limit(folders):
    source = open_source(SourceSpec(str(folders["t5"]), "cpu"))
    one = source.run_pair(SOURCE, TARGET, 1)  # both texts cut to one token
    assert (len(one.source_tokens), len(one.target_tokens)) == (1, 2) and one.losses.shape == (1,)
    assert one.cross.statistics["coverage"].notna().all()
    from attnviz import settings

    longest = source.run_pair(SOURCE, "", 8192, n_generate=settings.MAX_TARGET_GENERATED)  # the most it may write
    assert len(longest.target_tokens) == 1 + settings.MAX_TARGET_GENERATED  # a random model never ends early
    with pytest.raises(ValueError, match="1 to 64"):
        source.run_pair(SOURCE, "", 64, n_generate=settings.MAX_TARGET_GENERATED + 1)
