"""The KV cache lab asks a source for its cache and its decoder, and counts and times what it gets: any source.

A stand-in source (no model) proves the lab knows no family: the embedded model and a Hugging Face decoder are
measured the same way (tests/integration/models/test_kv_measured.py runs both against real caches).
"""

import pytest
import torch

from attnviz.labs.kv.measure import decode_timing, measured_cache_bytes, recompute_seconds_at, tensor_bytes
from attnviz.models.source import CachedKV


class Decoder:
    """Counts up from the prompt's length: step i after a prompt of P tokens yields P + i."""

    def __init__(self, n_prompt: int, use_cache: bool) -> None:
        self.n_prompt, self.length, self.use_cache, self.seeks = n_prompt, n_prompt, use_cache, []

    def step(self) -> int:
        self.length += 1
        return self.length - 1

    def seek(self, tokens) -> None:
        self.seeks.append(list(tokens))
        self.length = self.n_prompt + len(tokens)


class StandIn:
    device = "cpu"

    def __init__(self) -> None:
        self.asked = []

    def prefill_kv(self, text_or_ids, n_tokens, batch=1, implementation="transformers", dtype=None):
        self.asked.append((text_or_ids, n_tokens, batch, implementation, dtype))
        dtype = dtype or torch.float32
        full = torch.zeros(batch, 2, n_tokens, 8, dtype=dtype)  # (B, n_kv_head, k_len, head_dim)
        window = torch.zeros(batch, 2, min(n_tokens, 3), 8, dtype=dtype)  # a sliding layer keeps 3
        return CachedKV([(full, full.clone()), (window, window.clone())], implementation)

    def greedy_decoder(self, prompt, use_cache=True):
        self.decoder = Decoder(len(prompt.split()), use_cache)
        return self.decoder


def test_the_cache_is_counted_to_the_byte_layer_by_layer():
    source = StandIn()
    measured = measured_cache_bytes(source, "a b c", 10, batch=2, implementation="attnviz", dtype=torch.bfloat16)
    assert source.asked == [("a b c", 10, 2, "attnviz", torch.bfloat16)]
    assert measured.per_layer == [2 * (2 * 2 * 10 * 8) * 2, 2 * (2 * 2 * 3 * 8) * 2]  # K and V, 2 bytes each
    assert measured.tokens_per_layer == [10, 3] and measured.dtype == "bfloat16" and measured.batch == 2
    assert measured.bytes_per_token == measured.total_bytes // 20 and measured.implementation == "attnviz"
    assert measured.cuda_allocated_delta is None and tensor_bytes(None) == 0


def test_decoding_is_timed_token_by_token_with_or_without_the_cache():
    source = StandIn()
    timing = decode_timing(source, "one two three", 4, mode="recompute")
    assert timing.tokens == [3, 4, 5, 6] and timing.positions == [3, 4, 5, 6] and len(timing.seconds_per_token) == 4
    assert not source.decoder.use_cache and timing.total == sum(timing.seconds_per_token) >= 0
    assert decode_timing(source, "one", 2, mode="cache").tokens == [1, 2] and source.decoder.use_cache


def test_a_sampled_recompute_step_reads_exactly_its_prefix():
    source = StandIn()
    seconds = recompute_seconds_at(source, "p q", [10, 11, 12, 13], [0, 3])
    assert len(seconds) == 2 and source.decoder.seeks == [[], [10, 11, 12]]
    with pytest.raises(ValueError, match="step 4"):
        recompute_seconds_at(source, "p q", [10, 11, 12, 13], [4])


@pytest.mark.parametrize(("n_new", "mode", "said"), [(0, "cache", "at least 1"), (3, "sample", "mode 'sample'")])
def test_bad_decoding_arguments_are_refused_before_any_work(n_new, mode, said):
    source = StandIn()
    with pytest.raises(ValueError, match=said):
        decode_timing(source, "a", n_new, mode=mode)
    assert not hasattr(source, "decoder")
    with pytest.raises(ValueError, match="implementation"):
        measured_cache_bytes(source, "a", 3, implementation="vllm")
