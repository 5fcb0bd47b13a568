"""The KV page's minimum and transformers' figure beside it agree to the byte, or the page says why, in full.

Every config the page can measure (its 19 presets and the bundled models' configs) at every option it offers
that changes either figure: batch 1, 3 and the page's largest 4,096; 1 token, the 7-token probe, both sides of a
sliding window, the page's default length, the model's longest and the page's longest; fp32, bf16 and fp16
(DynamicCache stores no other dtype, and the page prints no figure for them); contiguous or paged in each block
size the page offers. transformers' figure is measured from the modeling code on the meta device (no weights).
The table in docs/kv-cache.md is this module's :func:`docs_rows`.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path

import pytest

from attnviz import settings
from attnviz.labs.kv.agreement import REASONS, transformers_agreement
from attnviz.labs.kv.config import KV_DTYPES, config_from_dict, load_config
from attnviz.labs.kv.engines import HF_DTYPES, engine_estimates
from attnviz.labs.kv.memory import estimate
from attnviz.labs.kv.presets import PRESETS
from attnviz.labs.kv.report import describe_agreement
from attnviz.models.registry import BUNDLED_CHOICES

ROOT = Path(__file__).resolve().parents[3]
BATCHES = (1, 3, 4096)
BLOCKS = (None, 16, 32, 64, 128, 256)  # the page's block menu
CONFIGS = [*PRESETS, *BUNDLED_CHOICES]
# the presets whose figures differ at the page's default options, and why; every other config agrees
DIFFERS = {
    "mistral-7b-v0.1": {"sliding"},
    "gemma-2-9b": {"sliding"},
    "gemma-2-27b": {"sliding"},
    "gemma-3-27b": {"sliding"},
    "phi-3-mini-4k": {"sliding"},
    "falcon-40b": {"broadcast"},
}


def config(key: str):
    if key in PRESETS:
        return config_from_dict(copy.deepcopy(PRESETS[key].config), name=PRESETS[key].title)
    return load_config(key)  # a bundled model: make setup installs its package, so a failure here is a failure


def default_length(cfg) -> int:
    """The page's default tokens: 8,192 capped at the model's longest (4,096 when the config gives none)."""
    return min(8192, cfg.max_positions or settings.KV_DEFAULT_SEQ_LEN)


def lengths(cfg) -> list[int]:
    window = {cfg.window - 1, cfg.window, cfg.window + 1} if cfg.window else set()
    longest = cfg.max_positions or settings.KV_DEFAULT_SEQ_LEN
    return sorted({1, 7, default_length(cfg), longest, settings.KV_MAX_SEQ_LEN} | window)


def grid(key: str):
    """(batch, seq_len, dtype, block, agreement) for every option of config ``key``; agreement None where the
    page prints no transformers figure (a quantised dtype)."""
    cfg = config(key)
    for batch in BATCHES:
        for seq_len in lengths(cfg):
            for dtype in KV_DTYPES:
                for block in BLOCKS if dtype in HF_DTYPES else (None,):
                    yield batch, seq_len, dtype, block, transformers_agreement(cfg, batch, seq_len, dtype, block)


@pytest.mark.parametrize("key", CONFIGS)
def test_every_option_agrees_exactly_or_its_reasons_add_up_to_the_difference(key):
    cfg = config(key)
    seen = set()
    for batch, seq_len, dtype, block, a in grid(key):
        where = (key, batch, seq_len, dtype, block)
        if dtype not in HF_DTYPES:  # no transformers figure is printed: nothing to agree with
            assert a is None, where
            continue
        assert a.transformers == engine_estimates(cfg, batch, seq_len, dtype)[-1].total_bytes, where  # as printed
        assert a.minimum == estimate(cfg, batch, seq_len, dtype, block_size=block).total_bytes, where  # as printed
        kinds = [r.kind for r in a.reasons]
        assert "other" not in kinds, (where, a)  # every byte of difference has a known cause
        assert a.explained == a.difference, (where, a)
        assert set(kinds) <= set(REASONS) and (a.agrees or a.reasons) and all(r.bytes for r in a.reasons), where
        paged = a.minimum != estimate(cfg, batch, seq_len, dtype).total_bytes
        assert ("paged" in kinds) == paged, where
        seen.update(k for k in kinds if k != "paged")
    assert seen == DIFFERS.get(key, set()), key


def test_the_reasons_carry_the_bytes_they_explain():
    gemma = config("gemma-2-9b")  # 21 sliding layers, window 4,096, 8 KV heads of 256
    a = transformers_agreement(gemma, 1, 8192, "bf16")
    assert a.difference == -21 * 2 * 8 * 256 * 2 == -172_032  # one token of each sliding layer
    assert [(r.kind, r.bytes) for r in a.reasons] == [("sliding", -172_032)]
    assert transformers_agreement(gemma, 1, 4095, "bf16").agrees  # under the window both hold every token
    falcon = config("falcon-40b")  # 60 layers, 128 query heads of 64, 8 KV heads, repeated to 128 before caching
    a = transformers_agreement(falcon, 1, 4096, "bf16")
    assert a.minimum == 503_316_480 and a.transformers == 16 * a.minimum
    assert [(r.kind, r.bytes) for r in a.reasons] == [("broadcast", 60 * 2 * 120 * 64 * 2 * 4096)]
    a = transformers_agreement(falcon, 1, 1, "bf16", 16)  # one token padded to 16 against 16 times the heads
    assert a.agrees and [r.kind for r in a.reasons] == ["paged", "broadcast"]
    assert "differences that cancel" in str(describe_agreement(a))  # equal, and still said why
    llama = config("llama-3-8b")  # 1,000 tokens in blocks of 256: 24 tokens of padding a layer
    a = transformers_agreement(llama, 2, 1000, "fp32", 256)
    assert [(r.kind, r.bytes) for r in a.reasons] == [("paged", -2 * 24 * 32 * 2 * 8 * 128 * 4)]
    said = str(describe_agreement(a))
    assert "blocks of 256" in said and f"{a.difference:+,} B" in said
    assert "to the byte" in str(describe_agreement(transformers_agreement(llama, 2, 1000, "fp32")))
    assert describe_agreement(a).render("zh") != said


# ---------------------------------------------------------------- the table in docs/kv-cache.md

TABLE_START = "| Config | Options | Minimum (B) | transformers (B) | Difference (B) | Why |"
OPTION_ROWS = (  # one row for each option that moves a figure: batch, dtype, blocks
    ("llama-3-8b", 4096, 8192, "bf16", None),
    ("gemma-2-9b", 3, 8192, "fp32", None),
    ("llama-3-8b", 1, 1000, "bf16", 256),
    ("gemma-2-9b", 1, 5000, "bf16", 256),
)


def _row(key: str, batch: int, seq_len: int, dtype: str, block: int | None) -> str:
    a = transformers_agreement(config(key), batch, seq_len, dtype, block)
    tokens = "1 token" if seq_len == 1 else f"{seq_len:,} tokens"
    options = f"batch {batch}, {tokens}, {dtype}" + (f", blocks of {block}" if block else "")
    figure = f"{a.transformers:,}" + ("" if a.measured else " (rule)")
    why = "; ".join(f"{r.kind} {r.bytes:+,}" for r in a.reasons) or "agree"
    return f"| {key} | {options} | {a.minimum:,} | {figure} | {a.difference:+,} | {why} |"


def docs_rows() -> list[str]:
    """Every preset and bundled config at batch 1, bf16, contiguous, at 1 token, the page's default length and
    the model's longest; then the option rows."""
    rows = []
    for key in CONFIGS:
        cfg = config(key)
        for seq_len in sorted({1, default_length(cfg), cfg.max_positions or default_length(cfg)}):
            rows.append(_row(key, 1, seq_len, "bf16", None))
    return rows + [_row(*options) for options in OPTION_ROWS]


def grid_counts() -> str:
    """The sentence of docs/kv-cache.md that counts the grid: pairs, agreeing, cancelling, differing, reasons."""
    pairs, same, cancel, kinds = 0, 0, 0, Counter()
    for key in CONFIGS:
        for *_, a in grid(key):
            if a is None:
                continue
            pairs += 1
            same += not a.reasons
            cancel += bool(a.reasons) and a.agrees
            kinds.update(r.kind for r in a.reasons)
    return (
        f"{pairs:,} pairs. {same:,} are the same bytes with nothing to say, {cancel} are equal because two "
        f"differences cancel (Falcon-40B's one-token prefill in blocks of 16: both reasons are shown), and "
        f"{pairs - same - cancel:,} differ, each with reasons that account for every byte (paged "
        f"{kinds['paged']:,} times, sliding {kinds['sliding']:,}, broadcast {kinds['broadcast']:,}); none has a "
        f"remainder."
    )


def test_the_docs_table_is_the_agreement_over_every_config():
    text = (ROOT / "docs" / "kv-cache.md").read_text(encoding="utf-8")
    start = text.index(TABLE_START)
    table = re.findall(r"^\|.*\|$", text[start:].split("\n\n")[0], re.MULTILINE)[2:]
    assert table == docs_rows()
    assert grid_counts() in " ".join(text.split())  # the counts, as the paragraph wraps them


if __name__ == "__main__":  # print the docs table: python -m tests.integration.models.test_kv_agreement
    print(TABLE_START)
    print("|---|---|---:|---:|---:|---|")
    print("\n".join(docs_rows()))
