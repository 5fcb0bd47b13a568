"""An encoder-decoder at the longest source the sidebar allows: ``python -m benchmarks.seq2seq [--json]``.

An encoder-decoder runs on its own eager attention, which returns every weight (encoder S², decoder T², cross T·S
per head), so the run is bounded before it starts (the result cache's bound, ``ATTNVIZ_CACHE_MB``, 2,048 MB by
default) and admitted at ``ADMISSION_RECORD_FACTOR`` x what it holds. For two real sizes, T5-small's (6 + 6
layers, 8 heads, d_model 512) and BART-base's (6 + 6 layers, 12 heads, 768), with random weights (memory does not
depend on them) and MiniLM's tokenizer, each in a fresh Python: the longest source the bound allows beside a
64-token target, the run's peak RSS above the loaded model against what admission prices it at
(``pair_peak_nbytes``: 1.45 x the weights held, one layer's scores, the logits), its time, and the same at a tenth
and a quarter of that length.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SHAPES = {
    "t5-small": ("t5", {"d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8}),
    "bart-base": (
        "bart",
        {
            "d_model": 768,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "encoder_attention_heads": 12,
            "decoder_attention_heads": 12,
            "encoder_ffn_dim": 3072,
            "decoder_ffn_dim": 3072,
            "max_position_embeddings": 8192,
        },
    ),
}
TARGET_TOKENS = 64
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "the",
    "mat",
    "because",
    "it",
    "was",
    "warm",
    "and",
    "the",
    "dog",
    "slept",
    "by",
    "the",
    "door",
]


def build(name: str, folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from attnviz.models.hf.bundled import minilm_dir

    model_type, sizes = SHAPES[name]
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=30528, decoder_start_token_id=0, pad_token_id=0, **sizes)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    for file in minilm_dir().iterdir():
        if file.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(file, folder / file.name)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def longest_source(source, n_target: int) -> int:
    """The most source tokens whose run fits the bound beside ``n_target`` target tokens (and the token limit)."""
    from attnviz import settings

    low, high = 1, settings.MAX_TOKENS.high
    while low < high:
        mid = (low + high + 1) // 2
        fits = source.pair_nbytes(mid, n_target) <= settings.cache_bytes()
        low, high = (mid, high) if fits else (low, mid - 1)
    return low


def child(folder: str, fraction: float) -> dict:
    """One run in this process: the source at ``fraction`` of the longest the bound allows."""
    import torch

    from attnviz import settings
    from attnviz.models.registry import SourceSpec, open_source

    torch.set_num_threads(1)
    source = open_source(SourceSpec(folder, "cpu"))
    target = " ".join(WORDS[i % len(WORDS)] for i in range(TARGET_TOKENS - 2))  # a word a token, [CLS] and [SEP]
    n_target = 1 + len(source.encode_target(target, settings.MAX_TOKENS.high).ids)
    longest = longest_source(source, n_target)
    n_source = max(1, int(longest * fraction))
    text = " ".join(WORDS[i % len(WORDS)] for i in range(n_source * 2))
    n_source = len(source.encode(text, n_source).ids)
    base, peak, running = rss_mb(), [0.0], [True]

    def sample() -> None:
        while running[0]:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    pair = source.run_pair(text, target, max(n_source, n_target))
    seconds = time.perf_counter() - start
    running[0] = False
    sampler.join()
    held = source.pair_nbytes(n_source, n_target)
    predicted = source.pair_peak_nbytes(n_source, n_target) / 2**20
    return {
        "source_tokens": len(pair.source_tokens),
        "target_tokens": len(pair.target_tokens),
        "longest_source": longest,
        "bound_mb": settings.cache_bytes() / 2**20,
        "weights_mb": held / 2**20,
        "record_mb": pair.nbytes / 2**20,
        "peak_above_model_mb": peak[0] - base,
        "admitted_mb": predicted,
        "met": peak[0] - base <= predicted,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], float(args.child[1]))))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shapes:
            folder = Path(tmp) / name
            build(name, folder)
            for fraction in (0.1, 0.25, 1.0):
                proc = subprocess.run(
                    [sys.executable, "-m", "benchmarks.seq2seq", "--child", str(folder), str(fraction)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                row = {"model": name, "fraction": fraction}
                row.update(json.loads(proc.stdout) if proc.returncode == 0 else {"failed": proc.stderr[-400:]})
                rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("random weights of real sizes, MiniLM's tokenizer, a 64-token target; each run in a fresh process")
    print(
        f"{'model':<10} {'source':>6} {'of':>6} {'weights MB':>10} {'peak MB':>8} {'admitted MB':>11} {'s':>6}  bound"
    )
    for r in rows:
        if "failed" in r:
            print(f"{r['model']:<10} failed: {r['failed']}")
            continue
        print(
            f"{r['model']:<10} {r['source_tokens']:>6} {r['longest_source']:>6} {r['weights_mb']:>10,.0f} "
            f"{r['peak_above_model_mb']:>8,.0f} {r['admitted_mb']:>11,.0f} {r['seconds']:>6.1f}  "
            f"{'met' if r['met'] else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
