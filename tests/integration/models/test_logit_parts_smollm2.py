"""Logit parts add up to the score the capture computes: embedded model, a soft-capped RoPE record, SmolLM2."""

import math

from attnviz.core.capture import head_scores
from attnviz.labs.logit_parts import (
    band_summary,
    logit_parts,
    position_vs_content,
    rope_frequencies,
)

TEXT = "the cat sat on the mat because it was tired"


def test_smollm2_parts_sum_to_its_real_scores(smollm2):
    record = smollm2.run(TEXT, 64)
    found = rope_frequencies(smollm2, record.layers[0].q.shape[-1])
    assert found.rope and found.inv_freq.shape == (32,)
    for layer, head, query, key in [
        (0, 0, 5, 1),
        (7, 4, 9, 9),
        (record.n_layer - 1, record.n_head - 1, record.q_len - 1, 0),
    ]:
        parts = logit_parts(record, layer, head, query, key, found.inv_freq)
        score = float(head_scores(record.layers[layer], head, (query, query + 1), (key, key + 1))[0, 0])
        tol = 1e-5 * max(1.0, abs(score))
        assert abs(float(parts.per_dim.double().sum()) - score) < tol
        assert abs(float(parts.per_pair.double().sum()) - score) < tol
        assert abs(float(band_summary(parts)["contribution"].sum()) - score) < tol
    share = position_vs_content(record, 0, 0, found.inv_freq)
    assert math.isfinite(share)
