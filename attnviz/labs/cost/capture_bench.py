"""The capture's speed and memory against a plain forward pass, side by side in one run.

Each case runs in a fresh Python (``python -m attnviz.labs.cost.capture_bench --child CASE TOKENS``)
so its peak resident memory (VmHWM, model load included) is its own:

- ``sdpa``: the largest bundled model (:func:`attnviz.models.registry.largest_bundled`:
  SmolLM2) loaded with ``attn_implementation="sdpa"``, one forward pass
  (the yardstick: what the model costs without looking at its attention);
- ``capture``: :meth:`HFSource.run` with every statistic and the pooled maps,
  q and k not kept (what ``python -m attnviz heads`` does);
- ``capture+qk``: the same, keeping q and k for full-resolution heads on demand
  (what the app does);
- ``full-record``: the record as it was before the capture: eager attention with
  ``output_attentions=True``, every weight stacked as float32;
- ``embedded-max``: the embedded model at the sidebar's largest setting (12
  layers x 64 heads, d_model 1,024), the most a visitor can ask of it.

Ratios are taken between cases measured in the same run. Timing uses
``threads`` intra-op threads (1 by default, as the targets were set).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from attnviz.labs.cost.peak_memory import run_child, status_bytes

CASES = ("sdpa", "capture", "capture+qk", "full-record", "embedded-max")
TARGET_RSS_MB = 3 * 1024  # capture at 8,192 tokens
TARGET_TIME_RATIO = 1.3  # capture / sdpa forward, same input (issue 18; it was 3.0)
PARAGRAPH = (
    "Attention lets every token look at every other token and decide how much each one matters. "
    "注意力机制让每个词都能看到句子里的其他词。 The cat sat on the mat because it was tired. "
)


def benchmark_text(tokens: int) -> str:
    """A paragraph repeated until it is longer than ``tokens`` tokens of any bundled model."""
    return PARAGRAPH * (tokens // 20 + 2)


def run_case_here(case: str, tokens: int, threads: int = 1) -> dict:
    """Run one case in this process: seconds for the pass (model load excluded) and the peak RSS in MB."""
    import torch

    torch.set_num_threads(threads)
    text = benchmark_text(tokens)
    if case == "sdpa" or case == "full-record":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from attnviz.models.registry import bundled_folder, largest_bundled

        folder = bundled_folder(largest_bundled())
        ids = torch.tensor([AutoTokenizer.from_pretrained(folder)(text)["input_ids"][:tokens]])  # what run() reads
        implementation = "sdpa" if case == "sdpa" else "eager"
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=implementation, dtype=torch.float32)
        model.eval()
        start = time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=ids, logits_to_keep=1, output_attentions=case == "full-record")
            if case == "full-record":
                record = torch.stack([a[0] for a in out.attentions]).float()  # (n_layer, n_head, T, T)
                del out
        seconds = time.perf_counter() - start
    elif case in ("capture", "capture+qk", "embedded-max"):
        from attnviz.models.registry import SourceSpec, embedded_spec, largest_bundled, open_source

        if case == "embedded-max":
            source = open_source(embedded_spec("cpu", d_model=1024, n_head=64, n_layer=12))
        else:
            source = open_source(SourceSpec(largest_bundled()))
        start = time.perf_counter()
        record = source.run(text, tokens, keep_qk=case != "capture")
        _ = record.statistics
        seconds = time.perf_counter() - start
        ids = torch.zeros(1, record.q_len)
    else:
        raise ValueError(f"case must be one of {', '.join(CASES)}, not {case!r}")
    return {"case": case, "tokens": int(ids.shape[1]), "seconds": seconds, "peak_rss_mb": status_bytes("VmHWM") / 2**20}


def run_case(case: str, tokens: int, threads: int = 1, timeout_s: float = 1800.0) -> dict:
    """:func:`run_case_here` in a fresh Python; a case that runs out of memory or fails says so."""
    args = ["-m", "attnviz.labs.cost.capture_bench", "--child", case, str(tokens), "--threads", str(threads)]
    proc = run_child(args, timeout_s, fixed_malloc=False)  # the whole program's peak, as users run it
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = "killed (out of memory?)" if proc.returncode < 0 else (lines[-1] if lines else f"exit {proc.returncode}")
        return {"case": case, "tokens": tokens, "seconds": None, "peak_rss_mb": None, "failed": why}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def capture_benchmark(
    tokens: Sequence[int] = (2048, 8192), cases: Sequence[str] = CASES, threads: int = 1
) -> list[dict]:
    """Every case at every size, then the capture's ratios to the sdpa forward of the same size.

    The full record is skipped above 2,048 tokens: it needs about 9 GB at 2,048 and
    72 GB at 8,192; the embedded model's largest setting runs at the largest size only.
    """
    rows = []
    for n in tokens:
        for case in cases:
            if (case == "full-record" and n > 2048) or (case == "embedded-max" and n != max(tokens)):
                continue
            rows.append(run_case(case, n, threads))
    for row in rows:
        if row["case"] == "embedded-max":  # a different model: no sdpa yardstick
            row["time_vs_sdpa"] = row["rss_vs_sdpa"] = None
            row["threads"] = threads
            continue
        base = next((r for r in rows if r["case"] == "sdpa" and r["tokens"] == row["tokens"]), None)
        ok = base and base["seconds"] and row["seconds"]
        row["time_vs_sdpa"] = row["seconds"] / base["seconds"] if ok else None
        row["rss_vs_sdpa"] = row["peak_rss_mb"] / base["peak_rss_mb"] if ok else None
        if row["case"].startswith("capture") and row["tokens"] >= 8192:
            row["target"] = f"peak RSS <= {TARGET_RSS_MB} MB, time <= {TARGET_TIME_RATIO}x sdpa"
            row["met"] = bool(
                row["peak_rss_mb"] is not None
                and row["peak_rss_mb"] <= TARGET_RSS_MB
                and row["time_vs_sdpa"] is not None
                and row["time_vs_sdpa"] <= TARGET_TIME_RATIO
            )
        row["threads"] = threads
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnviz.labs.cost.capture_bench", description=__doc__)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "TOKENS"), help="run one case here (internal)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_case_here(args.child[0], int(args.child[1]), args.threads)))
        return 0
    print(json.dumps(capture_benchmark(threads=args.threads), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
