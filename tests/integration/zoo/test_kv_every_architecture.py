"""transformers' figure from the 7-token probe (layers built alike run once, each cache layer continued by its own
``update``) equals a prefill of the whole length through every layer, for a tiny config of every decoder type
transformers has (tests/integration/zoo/build.py's sizes; no model is built on disk)."""

from __future__ import annotations

import json

import pytest

from attnviz.models.hf import cache_layout
from tests.integration.zoo.build import architectures, committed_table, tiny_kwargs

DECODERS = sorted(t for t, kind in architectures().items() if kind == "causal")
# decoder types whose config class rejects even its own defaults, so the zoo has no tiny config of them to measure
# (docs/models.md's table refuses them); test_the_decoders_measured_are_the_committed_ones checks the list
NO_TINY_CONFIG = frozenset({"gemma4_assistant"})


@pytest.mark.parametrize("model_type", sorted(set(DECODERS) - NO_TINY_CONFIG))
def test_the_probe_keeps_the_bytes_of_a_full_prefill(model_type):
    raw = {**tiny_kwargs(model_type, n_layer=4), "model_type": model_type}
    config_json = json.dumps(raw, sort_keys=True)
    for batch, n_tokens in ((2, 11), (1, 40)):  # 40: past a tiny config's sliding window
        full = cache_layout._measure_every_layer(config_json, batch, n_tokens)
        assert cache_layout._measure(config_json, batch, n_tokens) == full, (batch, n_tokens)


# The causal-LM types of transformers 5.24 (docs/models.md's table) whose tiny config builds but whose meta prefill
# gives no figure (_measure is None: code that does not run on meta tensors, no cache of layers, or a tiny config
# that builds and does not run); every other decoder with a tiny config is measured. Update it with the table.
# fmt: off
UNMEASURED = frozenset({
    "axk1", "axk2", "bailing_hybrid", "bamba", "beam", "bert", "bert-generation", "big_bird", "blt", "camembert",
    "cohere_compass_text", "data2vec-text", "dbrx", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dory", "dots1",
    "dots3_note_text", "electra", "ernie", "gemma3n", "gemma3n_text", "gemma4", "gemma4_unified",
    "gemma4_unified_assistant", "glm4_moe_lite", "glm_moe_dsa", "gpt_neo", "granitemoehybrid", "hrm_text",
    "hunyuan_v1_dense", "hunyuan_v1_moe", "jamba", "jetmoe", "kimi_linear", "lfm2_moe", "longcat_flash", "mamba2",
    "megatron-bert", "minicpm3", "ministral", "moshi", "musicgen", "musicgen_melody", "nemotron", "nemotron_h",
    "openai-gpt", "prophetnet", "qwen4_exp", "qwen4_exp_text", "recurrent_gemma", "reformer", "rembert", "roberta",
    "roberta-prelayernorm", "roc_bert", "roformer", "rwkv", "sarvam_mla", "xlm", "xlm-roberta", "xlm-roberta-xl",
    "xlnet", "xlstm", "xmod", "youtu", "zamba", "zamba2"
})
# fmt: on


def test_the_decoders_measured_are_the_committed_ones():
    """Every decoder is measured but the committed :data:`UNMEASURED` and those with no tiny config (refused by
    the table for it): one that stops being measured, or starts, fails with its name."""
    table = committed_table()
    unmeasured, no_config = set(), set()
    for model_type in DECODERS:
        try:
            raw = {**tiny_kwargs(model_type, n_layer=4), "model_type": model_type}
        except Exception:
            no_config.add(model_type)
            continue
        if cache_layout._measure(json.dumps(raw, sort_keys=True), 2, 11) is None:
            unmeasured.add(model_type)
    assert no_config == NO_TINY_CONFIG, sorted(no_config ^ NO_TINY_CONFIG)
    assert all(table[t][0] == "refused" and "generic tiny sizes" in table[t][1] for t in no_config), no_config
    assert unmeasured == UNMEASURED, (sorted(unmeasured - UNMEASURED), sorted(UNMEASURED - unmeasured))
    assert len(DECODERS) - len(no_config) - len(unmeasured) == 126  # of the 196 causal-LM types of transformers 5.24
