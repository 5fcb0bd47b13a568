"""MHA -> GQA/MQA on a pretrained MiniLM layer: exact at g = 1, far off before uptraining, memory as promised."""

from attnviz.labs.kv.gqa import JS_MAX, gqa_whatif

TEXT = "The quick brown fox jumps over the lazy dog. It was not amused, and went home to sleep."


def test_minilm_layer_pooled_into_groups(minilm):
    layer = minilm.attention_layer(TEXT, 64, 3)
    frame = gqa_whatif(layer)
    assert sorted(frame["n_kv_head"].unique()) == [1, 2, 3, 4, 6, 12]
    assert len(frame) == 6 * 12
    assert frame["js_nats"].between(0, JS_MAX).all()
    exact = frame[frame["group"] == 1]
    assert (exact["js_nats"] == 0).all() and (exact["output_rel_change"] == 0).all()
    per_kv = frame.groupby("n_kv_head")
    # fewer K/V heads never saves less, and MQA saves n_head = 12 times: 2 * 12 * 32 * 4 bytes -> 2 * 32 * 4
    assert per_kv["kv_bytes_per_token"].first().to_dict() == {k: 2 * k * 32 * 4 for k in (1, 2, 3, 4, 6, 12)}
    assert per_kv["kv_saving"].first()[1] == 12
    # pooling alone (no uptraining) moves the rows and the output: that is why GQA uptrains
    assert per_kv["js_nats"].mean()[1] > 0.01 and per_kv["output_rel_change"].first()[1] > 0.1
