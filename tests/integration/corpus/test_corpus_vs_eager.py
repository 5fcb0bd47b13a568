"""The corpus statistics (``source.run_statistics``: every text of a batch in one padded pass, fused where it can)
against statistics computed here, in float64 numpy, from transformers' own eager attention weights
(``attn_implementation="eager"``, ``output_attentions=True``) on each text alone, for every text of a small corpus
on three architectures: a tiny Llama (causal, grouped-query, RoPE), GPT-2 (causal, learned positions) and BERT
(bidirectional).

Each statistic is written out from its definition (attnviz.core.head_stats, attnviz.core.value_norms), not called:
per query row that sees at least two keys, the entropy in nats, that entropy over ln(keys seen), the largest weight,
the weights on the first key, on the previous and on the same position, the weighted mean |i - j|, and the weight
on keys whose value norm ‖v_j W_O^h‖ is below a quarter of the head's median over the text's keys (torch's median:
the lower middle value); each averaged over those rows, NaN where there are none (a one-token text).

The tolerance (derived, tests/tolerances.py): the two routes are float32 computations of the same weights, each
within ``bound("attention")`` of the other; a row statistic that is a share or an entropy sums weight errors that
cancel to the row's sum (``bound("row_statistics")``); the normalised entropy divides that by ln(keys) >= ln 2; the
mean distance weights each error by a distance below T; and the corpus frame rounds to 6 places (half of 1e-6).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnviz.core.head_stats import STAT_COLUMNS, head_flags
from attnviz.core.value_norms import LOW_NORM_FRACTION
from attnviz.models.hf.loading import load_hf_source
from tests.integration.tiny_models import tiny
from tests.tolerances import bound

MAX_TOKENS = 48
CORPUS = [
    "Hi",  # one token (SmolLM2's tokenizer; BERT's adds [CLS] and [SEP])
    "The cat sat on the mat.",
    "Attention heads differ: some look back one token, some find the first token, some spread out evenly.",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 — and then the numbers stop.",
    "Ça va? Très bien, merci. 你好，世界。",
    " ".join(["A much longer text whose tokens go past the limit, so that it is cut where the corpus cuts it."] * 4),
]
ROUNDING = 0.5e-6  # the corpus frame's 6 places
INIT = 0.12  # heads far from uniform (normalised entropies down to 0.8), scores within the bound's |q·k| <= 8
SCORE_LIMIT = 8.0  # the attention bound's premise (tests/tolerances.py): every score |q·k·scale| at most this


def _value_hook(family: str, layer) -> tuple[torch.nn.Module, callable]:
    """The module whose output holds a layer's values, and how to take them from it: (B, T, n_kv_head * head_dim)."""
    if family == "llama":
        return layer.self_attn.v_proj, lambda out: out
    if family == "gpt2":
        return layer.attn.c_attn, lambda out: out[..., 2 * out.shape[-1] // 3 :]
    return layer.attention.self.value, lambda out: out


def _output_blocks(family: str, layer, n_head: int) -> np.ndarray:
    """W_O^h of a layer, (n_head, head_dim, d_model) float64: the rows of the output projection's input it meets."""
    if family == "llama":
        weight = layer.self_attn.o_proj.weight.T  # Linear: (d_model, n_head * head_dim) -> its transpose
    elif family == "gpt2":
        weight = layer.attn.c_proj.weight  # Conv1D: (n_head * head_dim, d_model)
    else:
        weight = layer.attention.output.dense.weight.T
    weight = weight.detach().double().numpy()
    return weight.reshape(n_head, weight.shape[0] // n_head, weight.shape[1])


def _layers(family: str, model):
    return {"llama": lambda: model.model.layers, "gpt2": lambda: model.transformer.h}.get(
        family, lambda: model.encoder.layer
    )()


def eager_statistics(family: str, model, ids: list[int], causal: bool) -> list[dict[str, float]]:
    """Every head's statistics on ``ids`` alone, by hand from the eager weights: one dict per (layer, head)."""
    layers, values = _layers(family, model), {}
    handles = []
    for index, layer in enumerate(layers):
        module, take = _value_hook(family, layer)
        handles.append(module.register_forward_hook(lambda m, a, out, i=index, t=take: values.update({i: t(out)})))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    T = len(ids)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    seen = (j <= i) if causal else np.ones((T, T), dtype=bool)
    n_seen = seen.sum(axis=1)  # (T,)
    live = n_seen >= 2
    rows = []
    for index, (layer, attention) in enumerate(zip(layers, out.attentions, strict=True)):
        w = attention[0].double().numpy()  # (n_head, T, T)
        n_head = w.shape[0]
        blocks = _output_blocks(family, layer, n_head)
        head_dim = blocks.shape[1]
        v = values[index][0].double().numpy().reshape(T, -1, head_dim)  # (T, n_kv_head, head_dim)
        n_rep = n_head // v.shape[1]
        for h in range(n_head):
            p = w[h]
            norms = np.linalg.norm(v[:, h // n_rep] @ blocks[h], axis=-1)  # (T,): ‖v_j W_O^h‖
            median = np.sort(norms)[(T - 1) // 2]
            small = norms < LOW_NORM_FRACTION * median
            margin = np.abs(norms - LOW_NORM_FRACTION * median).min() / max(median, 1e-30)
            assert margin > 1e-4, "a key's norm sits on the small-key threshold: the two routes may read it apart"
            with np.errstate(divide="ignore", invalid="ignore"):
                entropy = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)
                per_row = {
                    "entropy": entropy,
                    "entropy_norm": entropy / np.log(n_seen),
                    "max_weight": p.max(axis=-1),
                    "first_token_weight": p[:, 0],
                    "prev_token_weight": np.concatenate([[np.nan], p[np.arange(1, T), np.arange(T - 1)]]),
                    "self_weight": np.diagonal(p).copy(),
                    "mean_distance": (p * np.abs(i - j)).sum(axis=-1),
                    "low_norm_weight": p[:, small].sum(axis=-1),
                }
            stats = {}
            for name, value in per_row.items():
                kept = value[live & ~np.isnan(value)]
                stats[name] = float(kept.mean()) if kept.size else math.nan
            rows.append({"layer": index, "head": h, **stats})
    return rows


def max_score(source, text: str) -> float:
    """The largest |q·k·scale| of any head on ``text``, from the q and k the capture keeps: the premise of the
    attention bound (entropy from a fused route is lse - E[s], whose rounding grows with the scores: measured 1.2e-5,
    over the bound, for a model of scores near 90)."""
    worst = 0.0
    for layer in source.run(text, MAX_TOKENS).layers:
        k = layer.k.repeat_interleave(layer.q.shape[0] // layer.k.shape[0], dim=0)  # (n_head, T, head_dim)
        worst = max(worst, float((layer.q @ k.transpose(-2, -1)).abs().max()) * layer.scale)
    return worst


def tolerance(name: str, n_tokens: int) -> float:
    base = bound("row_statistics")
    scale = {"entropy_norm": 1 / math.log(2), "mean_distance": max(n_tokens - 1, 1)}.get(name, 1.0)
    return base * scale + ROUNDING


@pytest.fixture(scope="module")
def folders(tmp_path_factory, smollm2):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("corpus_eager")
    sizes = {"max_position_embeddings": 64, "initializer_range": INIT}
    return {
        "llama": tiny(root / "llama", smollm2, LlamaConfig, LlamaForCausalLM, **sizes),
        "gpt2": tiny(root / "gpt2", smollm2, GPT2Config, GPT2LMHeadModel, n_embd=64, n_head=4, n_layer=2, **sizes),
        "bert": tiny(root / "bert", smollm2, BertConfig, BertModel, **sizes),
    }


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
def test_corpus_statistics_equal_eager_weights(folders, family):
    from transformers import AutoModel, AutoModelForCausalLM

    source = load_hf_source(str(folders[family]))
    auto = AutoModel if family == "bert" else AutoModelForCausalLM
    model = auto.from_pretrained(folders[family], attn_implementation="eager", dtype=torch.float32).eval()
    results = source.run_statistics(CORPUS, MAX_TOKENS)
    assert len(results) == len(CORPUS)
    lengths = set()
    for text, result in zip(CORPUS, results, strict=True):
        encoding = source.encode(text, MAX_TOKENS)  # the cut to MAX_TOKENS is the source's (not what is tested)
        ids = encoding.ids
        assert result.n_tokens == len(ids) and result.n_input_tokens == encoding.n_input
        lengths.add(len(ids))
        assert max_score(source, text) <= SCORE_LIMIT
        expected = eager_statistics(family, model, ids, causal=family != "bert")
        frame = result.frame
        assert list(frame.columns) == ["layer", "head", *STAT_COLUMNS, "low_norm_weight", "flags"]
        assert len(frame) == len(expected)
        for row, want in zip(frame.to_dict("records"), expected, strict=True):
            assert (row["layer"], row["head"]) == (want["layer"], want["head"])
            for name in (*STAT_COLUMNS, "low_norm_weight"):
                if math.isnan(want[name]):
                    assert math.isnan(row[name]), (family, text[:12], row["layer"], row["head"], name)
                else:
                    assert row[name] == pytest.approx(want[name], abs=tolerance(name, len(ids))), (
                        family, text[:12], row["layer"], row["head"], name,
                    )  # fmt: skip
            assert row["flags"] == ", ".join(head_flags(want)), (family, text[:12], row["layer"], row["head"])
    assert min(lengths) <= 3 and max(lengths) == MAX_TOKENS and len(lengths) == len(CORPUS)  # lengths all differ
