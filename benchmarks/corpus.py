"""A corpus run against a plain batched forward over the same batches: ``python -m benchmarks.corpus [--texts N]``.

SmolLM2-135M over ``--texts`` texts (1,000 by default) of 128 to 512 tokens, cut deterministically from the bundled
sample corpus (attnviz/labs/corpus/samples/classics_en.txt, tokenized as one stream; text i is a window of
128 + (193 i mod 385) tokens at offset 1009 i, decoded). Two cases in one run, each in a fresh Python so that its
peak RSS (VmHWM, model load included) is its own:

- ``corpus``: :func:`attnviz.labs.corpus.run.run_corpus` (what ``attnviz corpus`` does: the texts sorted into
  batches of similar length within ``--batch-tokens`` padded tokens, each batch through ``source.run_statistics``,
  every head's statistics written as Parquet parts, the summary streamed); its batches are recorded, and the
  seconds inside ``run_statistics`` ("in passes") told apart from the driver's (reading, sorting, writing);
- ``sdpa``: the model loaded with ``attn_implementation="sdpa"``, one forward a batch over exactly those batches
  (right-padded, with their attention mask; no logits but the last position's): the yardstick.

The issue's target: the corpus run <= 1.5x the plain batched forward. Timing (model load excluded) uses
``--threads`` intra-op threads (1 by default, as the other benchmarks' targets were set); the load average is
printed, since other work on the machine slows every case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from attnviz.labs.cost.peak_memory import run_child, status_bytes

SAMPLE = Path(__file__).resolve().parents[1] / "attnviz" / "labs" / "corpus" / "samples" / "classics_en.txt"
MIN_TOKENS, MAX_TOKENS = 128, 512
TARGET_TIME_RATIO = 1.5  # the corpus run / the plain batched forward (issue 41)


def write_texts(n_texts: int, path: Path) -> int:
    """``n_texts`` texts of 128-512 tokens cut from the sample corpus, one JSON object a line; their tokens in all."""
    from transformers import AutoTokenizer

    from attnviz.models.registry import bundled_folder, largest_bundled

    tokenizer = AutoTokenizer.from_pretrained(bundled_folder(largest_bundled()))
    stream = tokenizer(SAMPLE.read_text(encoding="utf-8"))["input_ids"]  # the whole sample as one stream of ids
    total = 0
    with open(path, "w", encoding="utf-8") as file:
        for i in range(n_texts):
            length = MIN_TOKENS + (193 * i) % (MAX_TOKENS - MIN_TOKENS + 1)
            start = (1009 * i) % (len(stream) - length)
            file.write(json.dumps({"text": tokenizer.decode(stream[start : start + length])}) + "\n")
            total += length
    return total


def run_case_here(case: str, texts: Path, batches: Path, batch_tokens: int, threads: int) -> dict:
    """One case in this process: seconds (model load excluded), tokens run, batches, routes and peak RSS in MB."""
    import torch

    torch.set_num_threads(threads)
    from attnviz.models.registry import SourceSpec, bundled_folder, largest_bundled, open_source

    routes = passes = None
    if case == "corpus":
        from attnviz.labs.corpus.run import LocalExecutor, run_corpus

        source = open_source(SourceSpec(largest_bundled(), "cpu"))
        seen: list[list[int]] = []
        in_passes = [0.0]  # seconds inside run_statistics: the rest is the driver's (reading, sorting, writing)

        class Recording(LocalExecutor):
            def run(self, feed):
                for batch in feed:
                    start = time.perf_counter()
                    statistics = self.source.run_statistics([text for _, text in batch], self.max_tokens)
                    in_passes[0] += time.perf_counter() - start
                    seen.append([text_id for text_id, _ in batch])
                    yield batch, statistics

        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            report = run_corpus(
                source,
                texts,
                Path(out) / "run",
                max_tokens=MAX_TOKENS,
                batch_tokens=batch_tokens,
                executor=Recording(source, MAX_TOKENS),
                probe=False,
            )
            seconds = time.perf_counter() - start
        batches.write_text(json.dumps(seen))
        tokens, routes, passes = report.tokens_done, sorted(set(report.routes)), in_passes[0]
    elif case == "sdpa":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = bundled_folder(largest_bundled())
        tokenizer = AutoTokenizer.from_pretrained(folder)
        lines = [json.loads(line)["text"] for line in texts.read_text(encoding="utf-8").splitlines()]
        ids = [tokenizer(text)["input_ids"][:MAX_TOKENS] for text in lines]
        plan = json.loads(batches.read_text())
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", dtype=torch.float32).eval()
        padded = []
        for batch in plan:
            longest = max(len(ids[i]) for i in batch)
            inputs = torch.zeros(len(batch), longest, dtype=torch.long)
            mask = torch.zeros(len(batch), longest, dtype=torch.long)
            for row, i in enumerate(batch):
                inputs[row, : len(ids[i])] = torch.tensor(ids[i])
                mask[row, : len(ids[i])] = 1
            padded.append((inputs, mask))
        start = time.perf_counter()
        with torch.no_grad():
            for inputs, mask in padded:
                model(input_ids=inputs, attention_mask=mask, logits_to_keep=1)
        seconds = passes = time.perf_counter() - start
        tokens = sum(len(ids[i]) for batch in plan for i in batch)
    else:
        raise ValueError(f"case must be corpus or sdpa, not {case!r}")
    n_batches = len(json.loads(batches.read_text()))
    peak = status_bytes("VmHWM") / 2**20
    return {
        "case": case,
        "seconds": seconds,
        "pass_seconds": passes,
        "tokens": tokens,
        "batches": n_batches,
        "routes": routes,
        "peak_rss_mb": peak,
    }


def run_case(case: str, texts: Path, batches: Path, batch_tokens: int, threads: int) -> dict:
    args = ["-m", "benchmarks.corpus", "--child", case, str(texts), str(batches)]
    proc = run_child([*args, "--batch-tokens", str(batch_tokens), "--threads", str(threads)], 7200, fixed_malloc=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"case": case, "failed": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "TEXTS", "BATCHES"), help="run one case here (internal)")
    args = parser.parse_args()
    if args.child:
        case, texts, batches = args.child
        print(json.dumps(run_case_here(case, Path(texts), Path(batches), args.batch_tokens, args.threads)))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        texts, batches = Path(folder) / "texts.jsonl", Path(folder) / "batches.json"
        write_texts(args.texts, texts)
        rows = [run_case(case, texts, batches, args.batch_tokens, args.threads) for case in ("corpus", "sdpa")]
    corpus, sdpa = rows
    ok = "failed" not in corpus and "failed" not in sdpa
    result = {
        "texts": args.texts,
        "batch_tokens": args.batch_tokens,
        "threads": args.threads,
        "load_average": os.getloadavg()[0],
        "cases": rows,
        "time_vs_sdpa": corpus["seconds"] / sdpa["seconds"] if ok else None,
        "rss_vs_sdpa": corpus["peak_rss_mb"] / sdpa["peak_rss_mb"] if ok else None,
        "target": f"corpus run <= {TARGET_TIME_RATIO}x the plain batched sdpa forward",
    }
    result["met"] = bool(ok and result["time_vs_sdpa"] <= TARGET_TIME_RATIO)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"SmolLM2-135M, {args.texts} texts of {MIN_TOKENS}-{MAX_TOKENS} tokens, batches of <= {args.batch_tokens:,}")
    print(f"padded tokens, {args.threads} thread(s), load average {result['load_average']:.1f}; each case fresh")
    print(
        f"{'case':<7} {'seconds':>8} {'in passes':>9} {'tokens':>8} {'batches':>8} {'tokens/s':>9} {'peak RSS MB':>12}  routes"
    )
    for r in rows:
        if "failed" in r:
            print(f"{r['case']:<7} failed: {r['failed']}")
            continue
        rate = r["tokens"] / r["seconds"]
        routes = ",".join(r["routes"] or []) or "-"
        print(
            f"{r['case']:<7} {r['seconds']:>8.1f} {r['pass_seconds']:>9.1f} {r['tokens']:>8,} {r['batches']:>8} {rate:>9,.0f} "
            f"{r['peak_rss_mb']:>12,.0f}  {routes}"
        )
    if ok:
        verdict = "met" if result["met"] else "NOT met"
        print(f"corpus / sdpa: time {result['time_vs_sdpa']:.2f}x, peak RSS {result['rss_vs_sdpa']:.2f}x ({verdict}: ")
        print(f"  {result['target']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
