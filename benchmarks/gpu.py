"""attnviz on a GPU: ``python -m benchmarks.gpu [--device cuda] [--tokens 8192] [--json]`` (about 5 min on one GPU).

SmolLM2-135M in float32 and in bfloat16, each step timed after one warm-up (on a GPU the clock is read after
``torch.cuda.synchronize``), with the peak memory of every device reset before it and read after
(``torch.cuda.max_memory_allocated`` per GPU; the host's peak RSS, VmHWM, beside it):

- ``sdpa``: a plain transformers forward (``attn_implementation="sdpa"``) of ``--tokens`` tokens, the yardstick;
- ``capture``: :meth:`HFSource.run` on the same tokens: every statistic and the pooled maps (``heads``' path);
- ``eager``: the model's own eager attention (``output_attentions=True``) at ``--eager-tokens`` (every weight of
  every layer: what the GPU holds bounds it), and the capture's statistics against ``head_statistics`` of those
  weights: the largest difference per statistic (mean distance relative to its value, as the tests take it);
- ``first chart``: the Heads page's first chart (the layer x head grid) built from the capture's record and turned
  into its JSON, as the page sends it;
- ``decode cache`` / ``decode recompute``: greedy decoding of ``--new`` tokens with the model's KV cache and
  recomputing the prefix at every step (the KV page's measurement), and whether both chose the same tokens;
- ``sweep``: the single-head ablation sweep (every one of the 270 heads alone) at ``--sweep-tokens``.

A step that runs out of memory is a row that says so; the others still run. Without a CUDA device it prints
"no CUDA device" and exits 0; ``--device cpu --tokens 256`` runs the same steps small on the CPU, to show that the
script works.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

DTYPES = ("float32", "bfloat16")
STEPS = ("sdpa", "capture", "eager", "first chart", "decode cache", "decode recompute", "sweep")
MODEL = "smollm2"
PROMPT = "Once upon a time, in a small village,"


# --- devices, clocks and memory -----------------------------------------------------------------------------------


def gpus() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # every GPU: a device map may spread the work


def reset_peaks() -> None:
    from attnviz.labs.cost.peak_memory import reset_peak_rss

    for index in gpus():
        torch.cuda.reset_peak_memory_stats(index)
    reset_peak_rss()


def read_peaks() -> dict[str, float]:
    """The peak memory of every device since :func:`reset_peaks`, MB: each GPU's allocated, and the host's RSS."""
    from attnviz.labs.cost.peak_memory import status_bytes

    peaks = {f"cuda:{i}": torch.cuda.max_memory_allocated(i) / 2**20 for i in gpus()}
    host = status_bytes("VmHWM")
    if host is not None:
        peaks["host RSS"] = host / 2**20
    return peaks


def step(name: str, dtype: str, device: str, run: Callable[[], dict], warm_up: Callable[[], object] | None) -> dict:
    """One timed step: warm up once, reset every device's peak, run between two synchronisations. Out of memory
    (or any other failure) becomes the row's ``error``, and the device's cached blocks are handed back."""
    from attnviz.core.devices import free_device_memory
    from attnviz.core.memory_errors import is_out_of_memory  # the app's and the CLI's one test of out of memory

    row: dict = {"step": name, "dtype": dtype}
    try:
        if warm_up is not None:
            warm_up()
        synchronize(device)
        reset_peaks()
        start = time.perf_counter()
        found = run()
        synchronize(device)
        row["seconds"] = time.perf_counter() - start
        row["peak_mb"] = read_peaks()
        row.update(found or {})
    except Exception as err:
        row["error"] = ("out of memory: " if is_out_of_memory(err) else f"{type(err).__name__}: ") + str(err)[:300]
    finally:
        free_device_memory(device)
    print(f"  {dtype} {name}: {_short(row)}", file=sys.stderr, flush=True)
    return row


def _short(row: dict) -> str:
    if "error" in row:
        return row["error"]
    return f"{row['seconds']:.3f} s, peak " + ", ".join(f"{k} {v:,.0f} MB" for k, v in row["peak_mb"].items())


# --- the steps ----------------------------------------------------------------------------------------------------


def ids_of(source, tokens: int) -> torch.Tensor:
    from attnviz.labs.cost.capture_bench import benchmark_text

    return torch.tensor([source.encode(benchmark_text(tokens), tokens).ids], device=source.device)  # (1, tokens)


def plain_model(dtype: str, device: str):
    """SmolLM2 as transformers loads it, with torch's fused attention: no attnviz in its forward."""
    from transformers import AutoModelForCausalLM

    from attnviz.core.devices import torch_dtype
    from attnviz.models.registry import bundled_folder

    folder = bundled_folder(MODEL)
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch_dtype(dtype), attn_implementation="sdpa", device_map=device
    )
    return model.eval()


def statistics_against_eager(record, weights: torch.Tensor) -> dict:
    """The capture's statistics against ``head_statistics`` of the model's own eager weights: the largest
    difference per statistic, and how many heads' flags differ."""
    from attnviz.core.head_stats import STAT_COLUMNS, head_statistics

    ours, theirs = record.statistics, head_statistics(weights, record.mask(0))
    worst = {}
    for column in STAT_COLUMNS:
        if column not in ours or column not in theirs:
            continue
        scale = theirs[column].abs().clip(lower=1) if column == "mean_distance" else 1  # tokens: relative
        worst[column] = float(((ours[column] - theirs[column]).abs() / scale).max())
    return {
        "max_diff": worst,
        "worst": max(worst.values()),
        "flags_differ": int((ours["flags"] != theirs["flags"]).sum()),
    }


def first_chart(record) -> dict:
    """The Heads page's first chart, as pages/widgets/heads.py builds it for a long text (√ weights, a compact
    grid beside the large view for a model of more than 12 layers), and its JSON."""
    from attnviz.figures.heads import GRID_SHOW_ALL, grid_view, make_head_grid_figure

    view = grid_view(record.statistics, record.n_layer, record.n_head, GRID_SHOW_ALL)
    figure = make_head_grid_figure(
        record.pooled_grid("max"), mean=record.mean_grid(), gamma=0.5, max_height=900, **view
    )
    return {"json_mb": len(figure.to_json()) / 2**20}


def sdpa_row(dtype: str, args: argparse.Namespace, ids: torch.Tensor) -> dict:
    """The yardstick: a plain transformers forward of ``ids`` (its model dropped when this returns)."""
    model = plain_model(dtype, args.device)

    @torch.no_grad()
    def forward(n_tokens: int) -> dict:
        model(input_ids=ids[:, :n_tokens], logits_to_keep=1)
        return {"tokens": min(n_tokens, int(ids.shape[1]))}

    return step("sdpa", dtype, args.device, lambda: forward(ids.shape[1]), lambda: forward(128))


def source_rows(source, dtype: str, args: argparse.Namespace) -> list[dict]:
    """The capture, the eager reference, the first chart, decoding and the sweep on attnviz's loaded source."""
    from attnviz.labs.cost.capture_bench import benchmark_text
    from attnviz.labs.heads_matter import ablation
    from attnviz.labs.heads_matter.effect import ablation_effect
    from attnviz.labs.kv.measure import decode_timing

    device, rows, held = args.device, [], {}
    text, small = benchmark_text(args.tokens), benchmark_text(128)

    def capture() -> dict:
        held["record"] = source.run(text, args.tokens, keep_qk=False)
        _ = held["record"].statistics
        return {"tokens": len(held["record"].tokens)}

    rows.append(step("capture", dtype, device, capture, lambda: source.run(small, 128, keep_qk=False).statistics))

    eager_tokens = min(args.eager_tokens, args.tokens)
    eager_text = benchmark_text(eager_tokens)
    eager_ids = ids_of(source, eager_tokens)[0].tolist()  # what run() reads of eager_text

    def eager() -> dict:
        weights, _ = source.reference_pass(eager_ids)  # (n_layer, n_head, T, T), float32 on the host
        record = source.run(eager_text, eager_tokens, keep_qk=False)
        return {"tokens": len(eager_ids), **statistics_against_eager(record, weights)}

    rows.append(step("eager", dtype, device, eager, lambda: source.reference_pass(eager_ids[:64])))
    if "record" in held:
        rows.append(step("first chart", dtype, device, lambda: first_chart(held.pop("record")), None))

    decoded: dict = {}

    def decode(mode: str) -> dict:
        timing = decode_timing(source, PROMPT, args.new, mode=mode)
        decoded[mode] = timing.tokens
        same = decoded.get("cache") == timing.tokens if mode == "recompute" else None
        return {"tokens": args.new, "median_token_s": statistics.median(timing.seconds_per_token),
                "same_tokens_as_cache": same}  # fmt: skip

    for mode in ("cache", "recompute"):
        warm_up = functools.partial(decode_timing, source, PROMPT, 2, mode=mode)
        rows.append(step(f"decode {mode}", dtype, device, functools.partial(decode, mode), warm_up))

    def sweep() -> dict:
        baseline = ablation.sweep_baseline(source, text, args.sweep_tokens)  # its first batched pass included
        if args.sweep == "first":
            values = [v for v in baseline.first.values() if v is not None]
            return {"tokens": baseline.n_tokens, "heads": len(values), "of_heads": len(baseline.heads),
                    "rows_per_pass": baseline.rows, "predicted_rest_s": baseline.seconds(baseline.first),
                    "largest_kl_mean": max(values)}  # fmt: skip
        result = ablation.sweep_result(baseline, ablation.run_pieces(source, text, baseline, {}))
        values = [v for row in result.values for v in row if v is not None]
        return {"tokens": baseline.n_tokens, "heads": len(values), "of_heads": len(baseline.heads),
                "rows_per_pass": result.rows_per_pass, "largest_kl_mean": max(values)}  # fmt: skip

    rows.append(step("sweep", dtype, device, sweep, lambda: ablation_effect(source, small, 32, [(0, 0)])))
    return rows


def dtype_rows(dtype: str, args: argparse.Namespace) -> list[dict]:
    """Every step for one dtype: SmolLM2 loaded by attnviz in it, the yardstick, then attnviz's steps."""
    from attnviz.core.devices import Placement, free_device_memory
    from attnviz.core.memory_errors import is_out_of_memory
    from attnviz.models.hf.loading import load_hf_source

    started = time.perf_counter()
    try:
        source = load_hf_source(MODEL, args.device, placement=Placement(dtype))
    except Exception as err:
        why = ("out of memory: " if is_out_of_memory(err) else f"{type(err).__name__}: ") + str(err)[:300]
        return [{"step": "load", "dtype": dtype, "error": why}]
    synchronize(args.device)
    rows = [{"step": "load", "dtype": dtype, "seconds": time.perf_counter() - started, "peak_mb": read_peaks()}]
    rows.append(sdpa_row(dtype, args, ids_of(source, args.tokens)))
    free_device_memory(args.device)
    rows += source_rows(source, dtype, args)
    sdpa = rows[1].get("seconds")
    for row in rows:
        if row["step"] == "capture" and sdpa and "seconds" in row:
            row["x_sdpa"] = row["seconds"] / sdpa
    return rows


# --- the run and its table ----------------------------------------------------------------------------------------


def machine(device: str) -> dict:
    about = {"device": device, "torch": torch.__version__, "cpus": os.cpu_count(), "python": platform.python_version()}
    if device.startswith("cuda"):
        about["gpus"] = [torch.cuda.get_device_name(i) for i in gpus()]
        about["cuda"] = torch.version.cuda
    return about


def table(result: dict) -> str:
    about = result["machine"]
    lines = [
        f"SmolLM2-135M on {about['device']}"
        + (f" ({', '.join(about['gpus'])})" if about.get("gpus") else f", {about['cpus']} CPUs")
        + f"; {result['tokens']} tokens (eager {result['eager_tokens']}, sweep {result['sweep_tokens']}),"
        f" {result['new']} new tokens decoded, sweep: {result['sweep']}; torch {about['torch']}",
        f"{'dtype':<9} {'step':<17}{'seconds':>9}  {'peak memory (MB)':<34} notes",
    ]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"{row['dtype']:<9} {row['step']:<17}{'-':>9}  {row['error']}")
            continue
        peaks = ", ".join(f"{k} {v:,.0f}" for k, v in row.get("peak_mb", {}).items())
        notes = []
        if "x_sdpa" in row:
            notes.append(f"{row['x_sdpa']:.2f}x sdpa")
        if "worst" in row:
            notes.append(f"stats vs eager: worst {row['worst']:.2e}, flags differ on {row['flags_differ']} heads")
        if "json_mb" in row:
            notes.append(f"figure JSON {row['json_mb']:.2f} MB")
        if "median_token_s" in row:
            notes.append(f"{row['median_token_s'] * 1000:.1f} ms/token")
        if row.get("same_tokens_as_cache") is not None:
            notes.append("same tokens as the cache" if row["same_tokens_as_cache"] else "tokens DIFFER from the cache")
        if "heads" in row:
            notes.append(f"{row['heads']} of {row['of_heads']} heads at {row['tokens']} tokens")
            if "predicted_rest_s" in row:
                notes.append(f"the other {row['of_heads'] - row['heads']} predicted {row['predicted_rest_s']:.0f} s")
        lines.append(f"{row['dtype']:<9} {row['step']:<17}{row['seconds']:>9.3f}  {peaks:<34} {'; '.join(notes)}")
    lines.append(f"total {result['seconds']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--tokens", type=int, default=8192, help="the capture's and the sdpa forward's length")
    parser.add_argument("--eager-tokens", type=int, default=1024, help="the eager reference's length (at most)")
    parser.add_argument("--new", type=int, default=None, help="tokens decoded (default 128 on a GPU, 8 on the CPU)")
    parser.add_argument("--sweep-tokens", type=int, default=None, help="the sweep's length (default 256; CPU 32)")
    parser.add_argument(
        "--sweep", choices=("full", "first"), default=None,
        help="full: every head; first: the sweep's first batched pass and its prediction of the rest (the CPU's default)",
    )  # fmt: skip
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's own)")
    parser.add_argument("--json", action="store_true", help="print the JSON summary only")
    args = parser.parse_args(argv)
    on_cpu = args.device == "cpu"
    if not on_cpu and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (python -m benchmarks.gpu --device cpu --tokens 256 runs the same "
              "steps small on the CPU)")  # fmt: skip
        return 0
    from attnviz.core.devices import free_device_memory, resolve_device

    args.device = resolve_device(args.device)
    args.new = args.new or (8 if on_cpu else 128)
    args.sweep_tokens = args.sweep_tokens or (32 if on_cpu else 256)
    args.sweep = args.sweep or ("first" if on_cpu else "full")
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    rows = []
    for dtype in args.dtypes:
        rows += dtype_rows(dtype, args)
        free_device_memory(args.device)  # the dtype's model is dropped: its memory back before the next
    result = {
        "machine": machine(args.device),
        "tokens": args.tokens,
        "eager_tokens": min(args.eager_tokens, args.tokens),
        "sweep_tokens": args.sweep_tokens,
        "sweep": args.sweep,
        "new": args.new,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    if not args.json:
        print(table(result))
    print(json.dumps(result, indent=None if not args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
