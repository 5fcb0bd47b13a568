"""The eager route's own code: the mask read back from a model's weights, the bound on what it holds, the capture
of its weights, and head ablation by a hook that touches only its own thread's passes."""

import pytest
import torch

from attnviz.core.masks import KeyRanges
from attnviz.core.progress import or_none
from attnviz.errors import ModelUnavailableError
from attnviz.models.hf import eager


def causal_weights(n_head: int, n_tokens: int, start: int = 0) -> torch.Tensor:
    """(n_head, n_tokens, n_tokens) softmax rows over the keys a causal layer lets each query see (keys before ``start`` pad; a
    pad query's row is all zero)."""
    scores = torch.randn(n_head, n_tokens, n_tokens, generator=torch.Generator().manual_seed(0))
    seen = KeyRanges.causal(n_tokens, start=start).dense()
    return scores.masked_fill(~seen, float("-inf")).softmax(-1).nan_to_num(0.0)


def test_the_mask_is_read_back_from_the_weights_the_widest_one_when_they_break_it():
    w = causal_weights(2, 5)
    assert torch.equal(eager.eager_keys(w, True, 0, 5).dense(), KeyRanges.causal(5).dense())
    assert torch.equal(eager.eager_keys(w, False, 0, 5).dense(), KeyRanges.full(5).dense())  # an encoder: no causal
    padded = w.clone()
    padded[..., 3:] = 0.0  # keys 3 and 4 pad: an encoder row padded on the right
    assert torch.equal(eager.eager_keys(padded, False, 0, 3).dense(), KeyRanges.span(5, 0, 3).dense())
    leak = w.clone()
    leak[0, 0, 4] = 0.5  # query 0 weighs a future key: not the causal mask the model claims
    assert torch.equal(eager.eager_keys(leak, True, 0, 5).dense(), KeyRanges.full(5).dense())


def test_the_bound_is_every_weight_in_float32_and_says_what_fits(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE_MB", "1")  # 1 MiB: 2 layers x 4 heads x T² x 4 B fits T = 181, not 182
    assert eager.eager_bytes(2, 4, 100, batch=3) == 3 * 2 * 4 * 100 * 100 * 4
    assert eager.eager_max_tokens(2, 4) == 181 and eager.eager_max_tokens(2, 4, batch=4) == 90
    eager.check_bound("tiny", 2, 4, 181)
    with pytest.raises(ModelUnavailableError) as err:
        eager.check_bound("tiny", 2, 4, 182)
    assert "tiny" in str(err.value) and "181" in str(err.value)


def test_a_capture_of_the_weights_keeps_them_and_the_padding():
    T = 4
    layer = torch.stack([causal_weights(2, T), causal_weights(2, T, start=1)])  # (B=2, n_head=2, T, T)
    steps = []
    progress = or_none(None)
    progress.step = lambda *args: steps.append(1)
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])  # the second row padded on the left
    session = eager.session_from_weights(
        torch.zeros(2, T, dtype=torch.long), [layer, layer], attention_mask, True, 8, progress
    )
    assert len(steps) == 2 and [len(rows) for rows in session.layers] == [2, 2]
    first, padded = session.layers[0][0], session.layers[1][0]
    assert first.q is None and first.k is None  # the eager route never sees q and k
    assert torch.equal(first.keys.dense(), KeyRanges.causal(T).dense())
    assert torch.equal(padded.keys.dense(), KeyRanges.causal(T, start=1).dense())
