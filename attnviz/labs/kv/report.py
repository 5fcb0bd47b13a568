"""The KV cache page's sentences: the gap between the minimum and each engine, and what fits on a GPU."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from attnviz.i18n.message import Text, concat, join, msg
from attnviz.labs.kv.agreement import KVAgreement
from attnviz.labs.kv.config import kv_config_of
from attnviz.labs.kv.engines import EngineFigure
from attnviz.labs.kv.measure import measured_cache_bytes
from attnviz.labs.kv.memory import estimate, human_bytes

# prefills the page measures: one token, a few, and a few hundred, each for batch 1 and 2
KV_MEASURE_LENGTHS = (1, 7, 64, 200)
TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# measured_vs_estimated's columns (stable English names: the table is cached) -> their headers on the page
MEASURED_HEADERS = {
    "batch": "kv_report.col_batch",
    "tokens": "kv_report.col_tokens",
    "cache": "kv_report.col_cache",
    "dtype": "kv_report.col_dtype",
    "measured (bytes)": "kv_report.col_measured",
    "estimated (bytes)": "kv_report.col_estimated",
    "error (bytes)": "kv_report.col_error",
    "CUDA allocated Δ (bytes)": "kv_report.col_cuda",
}


def describe_engines(minimum: int, engines: Sequence[EngineFigure]) -> Text:
    """Markdown: for each engine its figure, its ratio to the minimum, its rule and where the rule comes from."""
    lines = [msg("kv_report.minimum", size=human_bytes(minimum))]
    for e in engines:
        if e.total_bytes is None:
            lines.append(msg("kv_report.engine_impossible", engine=e.engine, rule=e.rule, source=e.source))
            continue
        ratio = msg("kv_report.ratio", ratio=e.total_bytes / minimum) if minimum else msg("kv_report.no_minimum")
        lines.append(
            msg(
                "kv_report.engine",
                engine=e.engine,
                size=human_bytes(e.total_bytes),
                ratio=ratio,
                rule=e.rule,
                source=e.source,
            )
        )
    return join(lines, "\n")


def describe_agreement(agreement: KVAgreement) -> Text:
    """Markdown: the minimum and transformers' figure agree to the byte, or by how much they differ (or that
    they are equal by reasons that cancel) and, one bullet each, every reason, with the bytes it accounts for."""
    how = msg("kv_agree.measured") if agreement.measured else msg("kv_agree.ruled")
    if not agreement.reasons:
        return msg("kv_agree.exact", bytes=agreement.minimum, how=how)
    head = (
        msg("kv_agree.cancel", bytes=agreement.minimum, how=how)
        if agreement.agrees
        else msg(
            "kv_agree.differ",
            transformers=agreement.transformers,
            minimum=agreement.minimum,
            difference=agreement.difference,
            how=how,
        )
    )
    return join([head, *(concat("- ", reason.text) for reason in agreement.reasons)], "\n")


def describe_fit(fit: dict, gpu_gb: float) -> Text:
    """One paragraph: the weights, what is left for the cache, the largest batch and the longest sequence."""
    weights = fit["weight_bytes"]
    if fit["free_bytes"] <= 0:
        return msg("kv_report.no_room", size=human_bytes(weights), gb=gpu_gb)
    held = msg("kv_report.weights", size=human_bytes(weights)) if weights else msg("kv_report.weights_unknown")
    longest = concat(
        msg("kv_report.longest", n=fit["max_seq_len"]), msg("kv_report.model_limit") if fit["seq_len_capped"] else ""
    )
    return msg(
        "kv_report.fit",
        gb=gpu_gb,
        held=held,
        free=human_bytes(fit["free_bytes"]),
        batch=fit["max_batch"],
        seq_len=fit["seq_len"],
        longest=longest,
    )


def measured_vs_estimated(source, text: str, lengths: Sequence[int] = KV_MEASURE_LENGTHS) -> pd.DataFrame:
    """One row per prefill (length, batch): the bytes the real cache holds, the estimate, and the error."""
    cfg = kv_config_of(source)
    rows = []
    for batch in (1, 2):
        for n in lengths:
            measured = measured_cache_bytes(source, text, n, batch)
            dtype = TORCH_DTYPES.get(measured.dtype)
            if dtype is None:
                raise ValueError(msg("kv_report.unsized_dtype", dtype=measured.dtype))
            estimated = estimate(cfg, batch, measured.seq_len, dtype).total_bytes
            rows.append(
                {
                    "batch": batch,
                    "tokens": measured.seq_len,
                    "cache": measured.implementation,
                    "dtype": measured.dtype,
                    "measured (bytes)": measured.total_bytes,
                    "estimated (bytes)": estimated,
                    "error (bytes)": measured.total_bytes - estimated,
                    "CUDA allocated Δ (bytes)": measured.cuda_allocated_delta,
                }
            )
    table = pd.DataFrame(rows)
    if table["CUDA allocated Δ (bytes)"].isna().all():  # on the CPU there is no allocator counter to show
        table = table.drop(columns="CUDA allocated Δ (bytes)")
    return table


def whatif_summary(table: pd.DataFrame) -> pd.DataFrame:
    """gqa_whatif's rows summed up per conversion: KV heads left, cache kept, mean and worst JS, output change."""
    rows = []
    for n_kv, part in table.groupby("n_kv_head", sort=False):
        rows.append(
            {
                "label": msg("kv_report.whatif_label", n_kv=n_kv, group=int(part["group"].iloc[0])),
                "n_kv_head": int(n_kv),
                "kv_share": 1.0 / float(part["kv_saving"].iloc[0]),
                "js_mean": float(part["js_nats"].mean()),
                "js_worst_head": float(part["js_nats"].max()),
                "output_change": float(part["output_rel_change"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)
