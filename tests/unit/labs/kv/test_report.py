"""The KV cache page's sentences carry the numbers they describe, and the measured table meets the estimate."""

import pandas as pd

from attnviz.labs.kv.config import config_from_dict, kv_config_of
from attnviz.labs.kv.engines import engine_estimates
from attnviz.labs.kv.memory import estimate, max_fit
from attnviz.labs.kv.report import (
    MEASURED_HEADERS,
    describe_engines,
    describe_fit,
    measured_vs_estimated,
    whatif_summary,
)
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.registry import EMBEDDED, SourceSpec, open_source
from tests.unit.labs.kv.real_configs import GEMMA2_9B


def test_the_engines_are_each_said_with_their_ratio_to_the_minimum_and_their_source():
    cfg = config_from_dict(GEMMA2_9B, "gemma-2-9b")
    minimum = estimate(cfg, 1, 8192, "bf16").total_bytes
    engines = engine_estimates(cfg, 1, 8192, "bf16")
    said = str(describe_engines(minimum, engines))
    assert said.count("\n") == len(engines)  # the minimum, then one line per engine
    for engine in engines:
        assert engine.engine in said and engine.source in said
        assert f"{engine.total_bytes / minimum:.2f}" in said  # its ratio to the minimum, with its own numbers
    assert describe_engines(minimum, engines).render("zh") != said


def test_what_fits_says_the_batch_and_the_longest_sequence():
    cfg = config_from_dict(GEMMA2_9B, "gemma-2-9b")
    fit = max_fit(cfg, 80 * 10**9, seq_len=4096)
    said = str(describe_fit(fit, 80.0))
    assert f"{fit['max_batch']:,}" in said and f"{fit['max_seq_len']:,}" in said
    no_room = str(describe_fit(max_fit(cfg, 10**9, seq_len=4096), 1.0))  # the weights alone are over 1 GB
    assert "17.2 GiB" in no_room and "1 GB" in no_room and "no room" in no_room


def test_the_embedded_models_real_cache_meets_the_estimate_at_every_length():
    source = open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, causal=True)))
    table = measured_vs_estimated(source, "the cat sat on the mat", lengths=(1, 9))
    assert set(table.columns) <= set(MEASURED_HEADERS) and len(table) == 4  # two lengths, batch 1 and 2
    assert (table["error (bytes)"] == 0).all() and (table["measured (bytes)"] > 0).all()
    assert table["estimated (bytes)"].tolist() == [
        estimate(kv_config_of(source), batch, n, "fp32").total_bytes for batch in (1, 2) for n in (1, 9)
    ]


def test_the_what_if_summary_has_one_row_per_conversion():
    rows = pd.DataFrame(
        {
            "n_kv_head": [4, 4, 2, 2],
            "group": [1, 1, 2, 2],
            "kv_saving": [1.0, 1.0, 2.0, 2.0],
            "js_nats": [0.0, 0.0, 0.1, 0.3],
            "output_rel_change": [0.0, 0.0, 0.5, 0.5],
        }
    )
    summary = whatif_summary(rows)
    assert summary["n_kv_head"].tolist() == [4, 2] and summary["kv_share"].tolist() == [1.0, 0.5]
    assert summary["js_mean"].tolist() == [0.0, 0.2] and summary["js_worst_head"].tolist() == [0.0, 0.3]
    assert "2" in str(summary["label"][1])
