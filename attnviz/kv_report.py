"""The KV cache page's sentences: the gap between the minimum and each engine, and what fits on a GPU."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from attnviz.kv_measure import measured_cache_bytes
from attnviz.kv_memory import EngineFigure, estimate, human_bytes, kv_config_of

# prefills the page measures: one token, a few, and a few hundred, each for batch 1 and 2
KV_MEASURE_LENGTHS = (1, 7, 64, 200)
TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def describe_engines(minimum: int, engines: Sequence[EngineFigure]) -> str:
    """Markdown: for each engine its figure, its ratio to the minimum, its rule and where the rule comes from."""
    lines = [
        f"**Theoretical minimum: {human_bytes(minimum)}.** What the cached tensors must hold: K and V (or MLA's "
        "latent) for every token each layer keeps, quantisation scales included. Engines allocate more:"
    ]
    for e in engines:
        if e.total_bytes is None:
            lines.append(f"- **{e.engine}**: not possible. {e.rule} ([source]({e.source}))")
            continue
        ratio = f"{e.total_bytes / minimum:.3f}× the minimum" if minimum else "no minimum to compare"
        lines.append(f"- **{e.engine}: {human_bytes(e.total_bytes)}** ({ratio}). {e.rule} ([source]({e.source}))")
    return "\n".join(lines)


def describe_fit(fit: dict, gpu_gb: float) -> str:
    """One paragraph: the weights, what is left for the cache, the largest batch and the longest sequence."""
    weights = fit["weight_bytes"]
    if fit["free_bytes"] <= 0:
        return f"The weights alone ({human_bytes(weights)} in bf16) do not fit in {gpu_gb:g} GB: no room for a cache."
    held = f"weights {human_bytes(weights)} (bf16)" if weights else "weights unknown (the config lacks sizes)"
    longest = f"{fit['max_seq_len']:,} tokens" + (" (the model's limit)" if fit["seq_len_capped"] else "")
    return (
        f"On a {gpu_gb:g} GB GPU: {held}, leaving {human_bytes(fit['free_bytes'])} for the cache, so at most "
        f"**{fit['max_batch']:,} sequences of {fit['seq_len']:,} tokens**, or one sequence of **{longest}**. "
        "Activations, the CUDA context and allocator slack are not subtracted: real limits are lower. The dotted "
        "line is the memory left. Sliding-window layers stop growing at their window: a bend in the line, or a "
        "plateau when every layer slides."
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
                raise ValueError(f"the cache holds {measured.dtype}, which the estimator does not size")
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
                "label": f"{n_kv} KV heads (groups of {int(part['group'].iloc[0])})",
                "n_kv_head": int(n_kv),
                "kv_share": 1.0 / float(part["kv_saving"].iloc[0]),
                "js_mean": float(part["js_nats"].mean()),
                "js_worst_head": float(part["js_nats"].max()),
                "output_change": float(part["output_rel_change"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)
