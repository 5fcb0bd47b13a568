"""A decoder's KV cache read whatever the transformers version calls it, and the prefill's ids built from a text."""

from types import SimpleNamespace

import pytest
import torch

from attnviz.models.hf.kv import batch_of_ids, dynamic_cache_tensors, output_cache

K, V = torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4)


def test_every_cache_layout_gives_keys_and_values_per_layer():
    layers = SimpleNamespace(layers=[SimpleNamespace(keys=K, values=V)] * 2)  # transformers >= 4.56
    lists = SimpleNamespace(key_cache=[K, K], value_cache=[V, V])  # older releases
    tuples = [(K, V, "sliding"), (K, V, "full")]  # the oldest: tuples
    for cache in (layers, lists, tuples):
        assert [(k is K, v is V) for k, v in dynamic_cache_tensors(cache)] == [(True, True)] * 2
    assert output_cache(SimpleNamespace(cache="new")) == "new"
    assert output_cache(SimpleNamespace(past_key_values="old")) == "old"


def test_a_texts_ids_are_repeated_to_the_length_and_the_batch():
    source = SimpleNamespace(device="cpu", encode=lambda text, n: SimpleNamespace(ids=[7, 8, 9][:n]))
    ids = batch_of_ids(source, "three tokens", 5, batch=2)
    assert ids.tolist() == [[7, 8, 9, 7, 8]] * 2 and ids.dtype == torch.long
    given = torch.arange(12).view(2, 6)
    assert batch_of_ids(source, given, 4, batch=1).tolist() == [[0, 1, 2, 3], [6, 7, 8, 9]]
    with pytest.raises(ValueError, match="fewer than n_tokens"):
        batch_of_ids(source, given, 7, batch=1)
