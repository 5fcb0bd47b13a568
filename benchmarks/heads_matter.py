"""Which heads matter, measured: ``python -m benchmarks.heads_matter [--threads 2] [--tokens 32]``.

For SmolLM2, MiniLM, the embedded model and three small random models of other families (GPT-2, Qwen2, Gemma;
SmolLM2's tokenizer), on one sentence of at most ``--tokens`` tokens:

- the estimate of every head's zero ablation (attribution patching: one forward, one backward) and its time
  (issue 29's target: SmolLM2's within 10 s here on ≤ 32 tokens), against one plain forward in the same run;
- the exact single-head sweep (each head ablated alone) and the estimate's agreement with it: Spearman's ρ of
  |effect| and the overlap of the top 10 (an LM's loss change; an encoder's hidden-state change);
- the indirect-object prompt on SmolLM2 (" Mary" against " John"): exact activation patching of every head and the
  estimate, their agreement, the heads that restore most, the time of each;
- direct logit attribution's sum check (the frozen-scale reading against the model's logit) per LM;
- where the estimate is wrong (issue 37), on three prompt pairs on SmolLM2 (:data:`PAIRS`: indirect object,
  greater-than, factual recall): every head patched exactly (fraction restored) and zero-ablated alone on the clean
  text (Δ loss), against the estimate before and after AtP*'s GradDrop: Spearman's ρ of |effect|, the top-10
  overlap, the heads wrong in sign or over 2× off (heads under 5% of the largest exact effect on both sides left
  out), and each flag's catches (and the right heads it named). ``--pairs-only`` runs this part alone.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

TEXT = "The cat sat on the mat because it was warm, and the dog slept by the door until the rain stopped."
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
PAIRS = {  # name: (clean, corrupt, metric); each pair of texts the same length in SmolLM2's tokens
    "indirect_object": (CLEAN, CORRUPT, "logit-diff: Mary, John"),
    "greater_than": (  # digits are tokens of their own: the next one is the decade; 3 fits 1732, 0 fits 1701
        "The war lasted from the year 1732 to the year 17",
        "The war lasted from the year 1701 to the year 17",
        "logit-diff:3,0",
    ),
    "factual_recall": (
        "The Eiffel Tower is in the city of",
        "The Colosseum is in the city of",
        "logit-diff: Paris, Rome",
    ),
}


def tiny_models(folder: Path, smollm2) -> dict[str, Path]:
    """Small random GPT-2 (2 layers; the shared ``num_hidden_layers`` wins over GPT-2's own ``n_layer``), Qwen2 and
    Gemma (4 layers) models of 4 heads, saved with SmolLM2's tokenizer (weights at std 0.2: heads that differ)."""
    from transformers import (
        GemmaConfig,
        GemmaForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    from tests.integration.tiny_models import tiny

    common = {"initializer_range": 0.2}
    return {
        "gpt2": tiny(
            folder / "gpt2",
            smollm2,
            GPT2Config,
            GPT2LMHeadModel,
            n_embd=64,
            n_head=4,
            n_positions=256,
            **common,
        ),
        "qwen2": tiny(folder / "qwen2", smollm2, Qwen2Config, Qwen2ForCausalLM, num_hidden_layers=4, **common),
        "gemma": tiny(
            folder / "gemma", smollm2, GemmaConfig, GemmaForCausalLM, num_hidden_layers=4, head_dim=16, **common
        ),
    }


def one_model(source, tokens: int) -> dict:
    from attnviz.labs.heads_matter import ablation, attribution
    from attnviz.labs.heads_matter.agreement import agreement as rank_agreement
    from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution
    from attnviz.models.source import Capability

    lm = Capability.GENERATE in source.capabilities
    encoding = source.encode(TEXT, tokens)
    attribution.estimate_ablation(source, TEXT, 4, "zero")  # warm-up: a model's first pass pays for lazy set-up
    start = time.perf_counter()
    source.head_pass(encoding, 1, lambda layer, z: z)
    forward = time.perf_counter() - start
    start = time.perf_counter()
    estimate = attribution.estimate_ablation(source, TEXT, tokens, "zero")
    estimate_seconds = time.perf_counter() - start
    start = time.perf_counter()
    sweep = ablation.ablation_sweep(source, TEXT, tokens, "zero")
    sweep_seconds = time.perf_counter() - start
    exact = sweep.loss_change if lm else sweep.values
    agreement = rank_agreement(estimate.values, exact)
    value = {
        "model": source.name,
        "tokens": len(encoding.tokens),
        "heads": source.n_layer * source.n_head,
        "measure": "loss change" if lm else "hidden change",
        "forward_seconds": round(forward, 3),
        "estimate_seconds": round(estimate_seconds, 3),
        "estimate_over_forward": round(estimate_seconds / forward, 1),
        "sweep_seconds": round(sweep_seconds, 2),
        "spearman": round(agreement.spearman, 3),
        "top10_overlap": agreement.overlap,
        "saturated_heads": len(estimate.saturated),
        "cancelling_heads": len(estimate.cancelling),
        "resumed": sweep.resumed is None,
    }
    if lm:
        found = direct_logit_attribution(source, TEXT, tokens)
        value["logit_check_error"] = float(f"{found.check_error:.3g}")
        value["final_norm"] = f"{found.norm} ({found.gain})"
    return value


def ioi(source) -> dict:
    from attnviz.labs.heads_matter import attribution, patching

    metric = patching.parse_metric("logit-diff: Mary, John")
    start = time.perf_counter()
    pair = patching.run_pair(source, CLEAN, CORRUPT, 64, metric)
    estimate = attribution.estimate_patching(source, pair, CLEAN, CORRUPT)
    estimate_seconds = time.perf_counter() - start
    start = time.perf_counter()
    heads = [(layer, head) for layer in range(pair.n_layer) for head in range(pair.n_head)]
    values = patching.patch_heads(source, pair, heads)
    exact_seconds = time.perf_counter() - start
    result = patching.patch_result(pair, values, exact_seconds, estimate)
    agreement = result.agreement()
    return {
        "clean": round(pair.clean, 4),
        "corrupt": round(pair.corrupt, 4),
        "tokens": pair.n_tokens,
        "estimate_seconds": round(estimate_seconds, 2),
        "exact_seconds": round(exact_seconds, 1),
        "spearman": round(agreement.spearman, 3),
        "top10_overlap": agreement.overlap,
        "exact_top": [[layer, head, round(v, 3)] for layer, head, v in result.ranked(10)],
        "estimate_top": [[layer, head, round(v, 3)] for layer, head, v in estimate.ranked(10)],
        "saturated_heads": len(estimate.saturated),
        "cancelling_heads": [f"{layer}.{head}" for layer, head in estimate.cancelling[:10]],
    }


def against_exact(estimate, exact) -> dict:
    """The estimate against exact values of the same measure: its ranking by size (|value|, or GradDrop's score when
    it ran) by Spearman's ρ and the top-10 overlap, and the heads whose size is over 2× off |exact|; its signed values
    head by head (wrong in sign or over 2× off, heads under 5% of the largest exact effect on both sides left out)
    and what each flag caught."""
    from attnviz.labs.heads_matter.agreement import SIZE_FACTOR, SIZE_FLOOR, flag_report
    from attnviz.labs.heads_matter.agreement import agreement as rank_agreement

    sizes = estimate.values if estimate.graddrop is None else estimate.graddrop
    ranking = rank_agreement(sizes, exact)
    report = flag_report(estimate.values, exact, estimate.flags())
    largest = max(abs(v) for row in exact for v in row if v is not None)
    size_off = sum(
        1
        for e_row, x_row in zip(sizes, exact, strict=True)
        for e, x in zip(e_row, x_row, strict=True)
        if x is not None
        and max(abs(e), abs(x)) >= SIZE_FLOOR * largest
        and max(abs(e), abs(x)) > SIZE_FACTOR * min(abs(e), abs(x))
    )
    return {
        "seconds": round(estimate.seconds, 2),
        "ranked_by": "|estimate|" if estimate.graddrop is None else "GradDrop score",
        "spearman": round(ranking.spearman, 3),
        "top10_overlap": ranking.overlap,
        "size_off_2x": size_off,
        "compared": report.n_compared,
        "wrong": report.n_wrong,
        "sign": report.n_sign,
        "size": report.n_size,
        "flags": {h.flag: {"caught": h.caught, "right": h.right} for h in report.hits},
        "missed": report.missed,
    }


def prompt_pairs(source) -> dict:
    """Each of :data:`PAIRS` on ``source``: exact patching and the zero-ablation sweep of every head, each against
    the estimate before and after GradDrop."""
    from attnviz.labs.heads_matter import ablation, attribution, patching
    from attnviz.labs.heads_matter.agreement import by_size

    report = {}
    for name, (clean, corrupt, spec) in PAIRS.items():
        pair = patching.run_pair(source, clean, corrupt, 64, patching.parse_metric(spec))
        heads = [(layer, head) for layer in range(pair.n_layer) for head in range(pair.n_head)]
        start = time.perf_counter()
        fractions = patching.patch_result(pair, patching.patch_heads(source, pair, heads), 0.0, None).effects
        patch_seconds = time.perf_counter() - start
        start = time.perf_counter()
        loss_change = ablation.ablation_sweep(source, clean, 64, "zero").loss_change
        sweep_seconds = time.perf_counter() - start
        entry = {"tokens": pair.n_tokens, "clean": round(pair.clean, 3), "corrupt": round(pair.corrupt, 3)}
        for measure, exact, seconds, estimates in (
            (
                "patch_fraction_restored",
                fractions,
                patch_seconds,
                [attribution.estimate_patching(source, pair, clean, corrupt, graddrop=g) for g in (False, True)],
            ),
            (
                "zero_ablation_loss_change",
                loss_change,
                sweep_seconds,
                [attribution.estimate_ablation(source, clean, 64, "zero", graddrop=g) for g in (False, True)],
            ),
        ):
            plain, dropped = estimates
            entry[measure] = {
                "exact_seconds": round(seconds, 1),
                "exact_top": [f"{layer}.{head} {v:+.3f}" for layer, head, v in by_size(exact, 10)],
                "estimate": against_exact(plain, exact),
                "with_graddrop": against_exact(dropped, exact),
            }
        report[name] = entry
        print(json.dumps({name: entry}), file=sys.stderr, flush=True)  # each pair as it ends: a long run shows progress
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--pairs-only", action="store_true", help="only the three prompt pairs (issue 37)")
    args = parser.parse_args()

    import torch

    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.embedded.model import EmbeddedModel
    from attnviz.models.hf.loading import load_hf_source

    torch.set_num_threads(args.threads)
    smollm2 = load_hf_source("smollm2")
    if args.pairs_only:
        print(json.dumps({"threads": args.threads, "pairs_smollm2": prompt_pairs(smollm2)}, indent=2))
        return
    report = {"threads": args.threads, "models": []}
    folder = Path(tempfile.mkdtemp(prefix="attnviz-heads-matter-"))
    sources = [smollm2, load_hf_source("minilm"), EmbeddedModel(EmbeddedConfig())]
    sources += [load_hf_source(str(path)) for path in tiny_models(folder, smollm2).values()]
    for source in sources:
        report["models"].append(one_model(source, args.tokens))
    report["ioi_smollm2"] = ioi(smollm2)
    report["pairs_smollm2"] = prompt_pairs(smollm2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
