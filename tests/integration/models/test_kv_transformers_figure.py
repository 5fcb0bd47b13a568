"""transformers' figure (the KV page's and ``kv-cache``'s last engine): the same bytes as a prefill of the whole
length through every layer, which is what attnviz measured before, now from a 7-token probe in which layers built
alike run once and each cache layer is continued to the length by its own ``update``."""

from __future__ import annotations

import copy

import pytest

from attnviz.labs.kv.config import config_from_dict
from attnviz.labs.kv.engines import engine_estimates
from attnviz.labs.kv.presets import PRESETS
from attnviz.models.hf import cache_layout
from tests.unit.labs.kv.real_configs import JAMBA_V01

# bf16 bytes of transformers' cache, {(batch, seq_len): bytes}, as the full prefill through every layer measured them
# (attnviz before the probe, transformers 5.24); (1, 4096) is kv-cache's default length (GPT-2: its 1,024 positions)
EXPECTED = {
    "deepseek-v2-lite": {(1, 1): 31_104, (1, 4096): 127_401_984, (3, 777): 72_503_424, (1, 20000): 622_080_000, (2, 9000): 559_872_000},
    "deepseek-v3": {(1, 1): 70_272, (1, 4096): 287_834_112, (3, 777): 163_804_032, (1, 20000): 1_405_440_000, (2, 9000): 1_264_896_000},
    "falcon-40b": {(1, 1): 1_966_080, (1, 4096): 8_053_063_680, (3, 777): 4_582_932_480, (1, 20000): 39_321_600_000, (2, 9000): 35_389_440_000},
    "falcon-7b": {(1, 1): 8_192, (1, 4096): 33_554_432, (3, 777): 19_095_552, (1, 20000): 163_840_000, (2, 9000): 147_456_000},
    "gemma-2-27b": {(1, 1): 376_832, (1, 4096): 1_543_315_456, (3, 777): 878_395_392, (1, 20000): 4_539_883_520, (2, 9000): 4_934_615_040},
    "gemma-2-9b": {(1, 1): 344_064, (1, 4096): 1_409_114_112, (3, 777): 802_013_184, (1, 20000): 4_145_111_040, (2, 9000): 4_505_518_080},
    "gemma-3-27b": {(1, 1): 507_904, (1, 4096): 771_325_952, (3, 777): 1_183_924_224, (1, 20000): 2_074_181_632, (2, 9000): 2_346_123_264},
    "gpt2": {(1, 1): 36_864, (1, 1024): 37_748_736, (3, 777): 85_929_984, (1, 20000): 737_280_000, (2, 9000): 663_552_000},
    "llama-3-70b": {(1, 1): 327_680, (1, 4096): 1_342_177_280, (3, 777): 763_822_080, (1, 20000): 6_553_600_000, (2, 9000): 5_898_240_000},
    "llama-3-8b": {(1, 1): 131_072, (1, 4096): 536_870_912, (3, 777): 305_528_832, (1, 20000): 2_621_440_000, (2, 9000): 2_359_296_000},
    "llama-3.1-405b": {(1, 1): 516_096, (1, 4096): 2_113_929_216, (3, 777): 1_203_019_776, (1, 20000): 10_321_920_000, (2, 9000): 9_289_728_000},
    "mistral-7b-v0.1": {(1, 1): 131_072, (1, 4096): 536_739_840, (3, 777): 305_528_832, (1, 20000): 536_739_840, (2, 9000): 1_073_479_680},
    "mixtral-8x7b": {(1, 1): 131_072, (1, 4096): 536_870_912, (3, 777): 305_528_832, (1, 20000): 2_621_440_000, (2, 9000): 2_359_296_000},
    "phi-3-mini-4k": {(1, 1): 393_216, (1, 4096): 804_519_936, (3, 777): 916_586_496, (1, 20000): 804_519_936, (2, 9000): 1_609_039_872},
    "qwen2.5-72b": {(1, 1): 327_680, (1, 4096): 1_342_177_280, (3, 777): 763_822_080, (1, 20000): 6_553_600_000, (2, 9000): 5_898_240_000},
    "qwen2.5-7b": {(1, 1): 57_344, (1, 4096): 234_881_024, (3, 777): 133_668_864, (1, 20000): 1_146_880_000, (2, 9000): 1_032_192_000},
    "qwen3-32b": {(1, 1): 262_144, (1, 4096): 1_073_741_824, (3, 777): 611_057_664, (1, 20000): 5_242_880_000, (2, 9000): 4_718_592_000},
    "qwen3-next-80b-a3b": {(1, 1): 24_576, (1, 4096): 100_663_296, (3, 777): 57_286_656, (1, 20000): 491_520_000, (2, 9000): 442_368_000},
    "smollm2-1.7b": {(1, 1): 196_608, (1, 4096): 805_306_368, (3, 777): 458_293_248, (1, 20000): 3_932_160_000, (2, 9000): 3_538_944_000},
    "jamba-v0.1": {(1, 1): 16_384, (1, 4096): 67_108_864, (3, 777): 38_191_104},
}  # fmt: skip


def test_the_expected_figures_are_what_each_layer_keeps():
    """Hand checks: layers x (K and V) x cached heads x head_dim x 2 bytes x the tokens each layer keeps."""
    assert EXPECTED["llama-3-8b"][(1, 4096)] == 32 * 2 * 8 * 128 * 2 * 4096
    assert EXPECTED["mistral-7b-v0.1"][(1, 4096)] == 32 * 2 * 8 * 128 * 2 * 4095  # sliding_window 4096 keeps 4,095
    assert EXPECTED["mistral-7b-v0.1"][(1, 20000)] == EXPECTED["mistral-7b-v0.1"][(1, 4096)]
    assert EXPECTED["phi-3-mini-4k"][(2, 9000)] == 2 * 32 * 2 * 32 * 96 * 2 * 2046  # sliding_window 2047
    assert EXPECTED["gemma-2-9b"][(1, 4096)] == 2 * 8 * 256 * 2 * (21 * 4096 + 21 * 4095)  # alternating
    assert EXPECTED["gemma-3-27b"][(1, 4096)] == 2 * 16 * 128 * 2 * (52 * 1023 + 10 * 4096)  # 5 local : 1 global
    assert EXPECTED["falcon-40b"][(1, 1)] == 60 * 2 * 128 * 64 * 2  # K and V broadcast to all 128 query heads
    assert EXPECTED["deepseek-v3"][(1, 1)] == 61 * (512 + 64) * 2  # one latent and one RoPE key a layer
    assert EXPECTED["qwen3-next-80b-a3b"][(1, 4096)] == 12 * 2 * 2 * 256 * 2 * 4096  # 12 of 48 layers attend
    assert EXPECTED["jamba-v0.1"][(3, 777)] == 3 * 4 * 2 * 8 * 128 * 2 * 777  # 4 of 32 layers attend, 28 Mamba


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_every_preset_and_jamba_keep_the_bytes_of_a_full_prefill(key):
    raw = JAMBA_V01 if key == "jamba-v0.1" else PRESETS[key].config
    cfg = config_from_dict(copy.deepcopy(raw), name=key)
    for (batch, seq_len), expected in EXPECTED[key].items():
        assert engine_estimates(cfg, batch, seq_len, "bf16")[-1].total_bytes == expected, (batch, seq_len)


PROBE = 7  # the tokens the meta prefill runs, whatever the length asked

LLAMA = {"model_type": "llama", "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
         "hidden_size": 32, "intermediate_size": 64, "vocab_size": 100}  # fmt: skip
TINY_JAMBA = {"model_type": "jamba", "num_hidden_layers": 8, "attn_layer_period": 4, "attn_layer_offset": 2,
              "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 2, "num_experts_per_tok": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32, "intermediate_size": 64,
              "vocab_size": 100, "mamba_d_state": 4, "mamba_dt_rank": 4, "use_mamba_kernels": False}  # fmt: skip


@pytest.fixture
def fresh_measurements():
    """No measurement kept from another test: each test sees the prefills its own call runs."""

    def clear() -> None:
        for name in ("_prefill_layers", "_measure"):
            cached = getattr(cache_layout, name, None)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()

    clear()
    yield
    clear()


def _calls(monkeypatch, cls) -> list[int]:
    """The sequence length of every call of ``cls.forward`` from now on."""
    seen: list[int] = []
    forward = cls.forward

    def counted(self, hidden_states, *args, **kwargs):
        seen.append(hidden_states.shape[1])
        return forward(self, hidden_states, *args, **kwargs)

    monkeypatch.setattr(cls, "forward", counted)
    return seen


def test_one_layer_of_six_alike_runs_seven_tokens_and_the_cache_is_continued(monkeypatch, fresh_measurements):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    calls = _calls(monkeypatch, LlamaDecoderLayer)
    # 6 layers x (K and V) x batch 2 x 2 KV heads x 300 tokens x head_dim 8
    assert cache_layout.transformers_cache_elements(LLAMA, 2, 300, (None,) * 6) == 6 * 2 * 2 * 2 * 300 * 8
    assert calls == [PROBE]
    calls.clear()
    assert cache_layout.transformers_cache_elements(LLAMA, 2, 300, (None,) * 6, probe=False) == 6 * 2 * 2 * 2 * 300 * 8
    assert calls == [300] * 6  # the full prefill through every layer: the same number


def test_a_hybrid_s_mamba_layers_scan_seven_tokens_not_the_length(monkeypatch, fresh_measurements):
    """Jamba v0.1 at 4,096 tokens took minutes: its Mamba layers' reference scan runs token by token."""
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer

    seen: list[int] = []
    forward = JambaMambaMixer.forward

    def counted(self, hidden_states, *args, **kwargs):
        seen.append(hidden_states.shape[1])
        return forward(self, hidden_states, *args, **kwargs)

    monkeypatch.setattr(JambaMambaMixer, "forward", counted)
    fast = cache_layout.transformers_cache_elements(TINY_JAMBA, 1, 600, (None,) * 8)
    assert fast == 2 * 2 * 2 * 600 * 8  # the 2 attention layers of 8 (offset 2, period 4)
    assert seen and max(seen) == PROBE
    assert len(seen) < 6  # the Mamba layers built alike scan once: 2 kinds (with and without experts)
    assert cache_layout.transformers_cache_elements(TINY_JAMBA, 1, 600, (None,) * 8, probe=False) == fast


@pytest.mark.parametrize("window", [1, 2, 3, 7, 8, 100])
def test_sliding_windows_shorter_and_longer_than_the_probe_keep_what_a_full_prefill_keeps(window, fresh_measurements):
    raw = {**LLAMA, "model_type": "mistral", "sliding_window": window}
    for seq_len in (1, 5, 7, 8, 40):
        kept = len(range(seq_len)[-window + 1 :])  # DynamicSlidingWindowLayer keeps [-sliding_window + 1:]
        expected = 6 * 2 * 2 * 2 * kept * 8
        assert cache_layout.transformers_cache_elements(raw, 2, seq_len, (None,) * 6) == expected, seq_len
        assert cache_layout.transformers_cache_elements(raw, 2, seq_len, (None,) * 6, probe=False) == expected


def test_alternating_sliding_and_full_layers_run_once_each(monkeypatch, fresh_measurements):
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer

    raw = {**LLAMA, "model_type": "gemma2", "head_dim": 8, "sliding_window": 5}
    calls = _calls(monkeypatch, Gemma2DecoderLayer)
    assert cache_layout.transformers_cache_elements(raw, 1, 50, (4, None) * 3) == 3 * 2 * 2 * 8 * (4 + 50)
    assert calls == [PROBE] * 2


def test_layers_wrongly_grouped_are_caught_and_every_layer_runs(monkeypatch, fresh_measurements):
    """Grouped as one, Gemma 2's sliding and full layers leave different cache layer classes: not shared."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer

    raw = {**LLAMA, "model_type": "gemma2", "head_dim": 8, "sliding_window": 5}
    monkeypatch.setattr(cache_layout, "_signature", lambda layer, layer_type: ())
    calls = _calls(monkeypatch, Gemma2DecoderLayer)
    assert cache_layout.transformers_cache_elements(raw, 1, 50, (4, None) * 3) == 3 * 2 * 2 * 8 * (4 + 50)
    assert calls == [PROBE] * (1 + 6)  # one layer for all, then every layer


def test_a_cache_layer_class_the_probe_does_not_know_is_measured_at_the_full_length(monkeypatch, fresh_measurements):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    monkeypatch.setattr(cache_layout, "_layer_classes", lambda: ((), ()))
    calls = _calls(monkeypatch, LlamaDecoderLayer)
    assert cache_layout.transformers_cache_elements(LLAMA, 1, 30, (None,) * 6) == 6 * 2 * 2 * 30 * 8
    assert calls == [PROBE, *[30] * 6]


def test_a_config_the_modeling_code_rejects_is_still_not_measured(fresh_measurements):
    assert cache_layout.transformers_cache_elements({**LLAMA, "num_attention_heads": 3}, 1, 40, (None,) * 6) is None
