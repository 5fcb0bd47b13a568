"""attnviz's attention as transformers calls it: the same output as the model's own eager attention in every mode.

The layer is a real ``LlamaAttention`` module (built from a tiny config, no weights read): transformers hands our
function its q, k (after RoPE) and v, and the reference is the eager code of the module's own modeling file.
"""

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, eager_attention_forward

from attnviz.core.capture import CaptureSession, weights_window
from attnviz.errors import ModelUnavailableError
from attnviz.models.hf.attention import attention_forward, capturing, layer_keys, reference
from tests.tolerances import bound

TOL = bound("attention")
B, N_HEAD, N_KV_HEAD, T, HEAD_DIM = 2, 4, 2, 7, 8


@pytest.fixture(scope="module")
def layer():
    config = LlamaConfig(hidden_size=N_HEAD * HEAD_DIM, num_attention_heads=N_HEAD, num_key_value_heads=N_KV_HEAD)
    return LlamaAttention(config, layer_idx=0).eval()


def qkv(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N_HEAD, T, HEAD_DIM, generator=g)  # (B, n_head, T, hd)
    k = torch.randn(B, N_KV_HEAD, T, HEAD_DIM, generator=g)  # (B, n_kv_head, T, hd)
    v = torch.randn(B, N_KV_HEAD, T, HEAD_DIM, generator=g)
    return q, k, v


def causal_additive() -> torch.Tensor:
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(B, 1, T, T).masked_fill(~keep, torch.finfo(torch.float32).min)  # (B, 1, T, T)


def eager(layer, q, k, v):
    return eager_attention_forward(layer, q, k, v, causal_additive(), scaling=HEAD_DIM**-0.5)


def test_the_fast_path_equals_eager_attention(layer):
    q, k, v = qkv()
    ours, weights = attention_forward(layer, q, k, v, causal_additive(), scaling=HEAD_DIM**-0.5)
    theirs, _ = eager(layer, q, k, v)
    assert weights is None and ours.shape == theirs.shape == (B, T, N_HEAD, HEAD_DIM)
    assert (ours - theirs).abs().max().item() <= TOL


def test_the_capture_returns_the_same_output_and_keeps_every_weight(layer):
    q, k, v = qkv(1)
    session = CaptureSession(B, T, N_HEAD)
    with capturing(session):
        ours, _ = attention_forward(layer, q, k, v, causal_additive(), scaling=HEAD_DIM**-0.5)
    theirs, their_weights = eager(layer, q, k, v)
    assert (ours - theirs).abs().max().item() <= TOL
    for b in range(B):
        captured = weights_window(session.layers[b][0], None, (0, T), (0, T))  # (n_head, T, T)
        assert (captured - their_weights[b]).abs().max().item() <= TOL


def test_the_reference_runs_the_modules_own_eager_code_and_records_the_mask(layer):
    q, k, v = qkv(2)
    with reference() as run:
        ours, weights = attention_forward(layer, q, k, v, causal_additive(), scaling=HEAD_DIM**-0.5)
    theirs, their_weights = eager(layer, q, k, v)
    assert torch.equal(ours, theirs) and torch.equal(weights, their_weights)
    assert len(run.keys) == 1 and all(keys.is_causal() for keys in run.keys[0])


def test_a_transformers_mask_is_read_as_key_ranges():
    keys = layer_keys(causal_additive(), B, T, T, causal=True)
    assert len(keys) == B and all(torch.equal(k.dense(), torch.ones(T, T, dtype=torch.bool).tril()) for k in keys)
    assert all(k.is_causal() for k in layer_keys(None, B, T, T, causal=True))
    assert not any(k.is_causal() for k in layer_keys(None, B, T, T, causal=False))


def test_attention_it_cannot_honour_is_refused_not_computed_wrongly(layer):
    q, k, v = qkv()
    with pytest.raises(ModelUnavailableError, match="position_bias"):
        attention_forward(layer, q, k, v, None, position_bias=torch.zeros(1, N_HEAD, T, T))


@pytest.fixture(scope="module")
def sink_layer():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    config = GptOssConfig(
        hidden_size=N_HEAD * HEAD_DIM, num_attention_heads=N_HEAD, num_key_value_heads=N_KV_HEAD, head_dim=HEAD_DIM
    )
    layer = GptOssAttention(config, layer_idx=1).eval().requires_grad_(False)
    with torch.no_grad():
        layer.sinks.copy_(torch.tensor([-1.0, 0.0, 1.5, 3.0]))  # from a small share to most of a row
    return layer


def test_learned_sinks_are_honoured_in_every_mode_as_gpt_oss_eager_computes_them(sink_layer):
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as sink_eager

    q, k, v = qkv(3)
    scale, mask = HEAD_DIM**-0.5, causal_additive()
    theirs, their_weights = sink_eager(sink_layer, q, k, v, mask, scaling=scale)  # weights (B, n_head, T, T)
    fast, _ = attention_forward(sink_layer, q, k, v, mask, scaling=scale, s_aux=sink_layer.sinks)
    assert (fast - theirs).abs().max().item() <= TOL
    session = CaptureSession(B, T, N_HEAD)
    with capturing(session):
        captured_out, _ = attention_forward(sink_layer, q, k, v, mask, scaling=scale, s_aux=sink_layer.sinks)
    assert (captured_out - theirs).abs().max().item() <= TOL
    for b in range(B):
        capture = session.layers[b][0]
        captured = weights_window(capture, None, (0, T), (0, T))  # (n_head, T, T)
        assert (captured - their_weights[b]).abs().max().item() <= TOL
        share = 1 - their_weights[b].sum(dim=-1)  # (n_head, T): what the sink took
        assert (capture.rows["sink_weight"] - share).abs().max().item() <= TOL
        assert float(share[3].min()) > float(share[0].max())  # the larger the sink logit, the larger its share
    with reference():
        ref_out, ref_weights = attention_forward(sink_layer, q, k, v, mask, scaling=scale, s_aux=sink_layer.sinks)
    assert torch.equal(ref_out, theirs) and torch.equal(ref_weights, their_weights)
