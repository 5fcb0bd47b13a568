"""transformers' figure from the 7-token probe (layers built alike run once, each cache layer continued by its own
``update``) equals a prefill of the whole length through every layer, for a tiny config of every decoder type
transformers has (tests/integration/zoo/build.py's sizes; no model is built on disk)."""

from __future__ import annotations

import json

import pytest

from attnviz.models.hf import cache_layout
from tests.integration.zoo.build import architectures, tiny_kwargs

DECODERS = sorted(t for t, kind in architectures().items() if kind == "causal")


@pytest.mark.parametrize("model_type", DECODERS)
def test_the_probe_keeps_the_bytes_of_a_full_prefill(model_type):
    try:
        raw = {**tiny_kwargs(model_type, n_layer=4), "model_type": model_type}
    except Exception:  # a config class that rejects the generic tiny sizes: nothing to measure
        return
    config_json = json.dumps(raw, sort_keys=True)
    for batch, n_tokens in ((2, 11), (1, 40)):  # 40: past a tiny config's sliding window
        full = cache_layout._measure_every_layer(config_json, batch, n_tokens)
        assert cache_layout._measure(config_json, batch, n_tokens) == full, (batch, n_tokens)


def test_most_decoders_are_measured():
    measured = 0
    for model_type in DECODERS:
        try:
            raw = {**tiny_kwargs(model_type, n_layer=4), "model_type": model_type}
        except Exception:
            continue
        measured += cache_layout._measure(json.dumps(raw, sort_keys=True), 2, 11) is not None
    assert measured >= 100  # 127 of the causal-LM types of transformers 5.24
