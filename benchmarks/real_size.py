"""A 1B-class checkpoint on this machine: ``python -m benchmarks.real_size [--tokens 512] [--cases ...] [--json]``.

The model is TinyLlama-1.1B's published configuration (hidden 2,048, MLP 5,632, 22 layers, 32 query heads sharing
4 key/value heads, RoPE θ 10,000, untied embeddings) with random weights, saved in bfloat16 as the real one is
(2.4 GB), with SmolLM2's tokenizer: its 49,152 ids are more than TinyLlama's 32,000, so the vocabulary is 49,152
(1.17 B parameters in place of 1.10 B; attnviz refuses a tokenizer with ids past the embedding). It is built once
on the meta device, filled in place (normal, σ 0.02; norms 1) and saved to attnviz's cache folder
(``$XDG_CACHE_HOME/attnviz/benchmarks/``), where later runs find it.

Each case runs in a fresh Python and reports the time to load the model, the time of the pass itself, the peak
resident memory once loaded and at the end (VmHWM: the whole program, file pages of the weights included) and the
peak anonymous memory (sampled every 20 ms: what the process really holds, without the page cache it maps):

- ``attnviz-bf16``: ``python -m attnviz heads TEXT --max-tokens 512 --dtype bfloat16`` (every statistic);
- ``attnviz-auto``: the same with ``--dtype auto`` (on this CPU: float32 when its 4.7 GB fit in half the free memory);
- ``attnviz-offload``: ``--dtype bfloat16 --device-map auto --max-memory cpu=1GiB --offload-folder DIR``:
  accelerate keeps about 1 GiB of layers in memory and reads the rest from disk for each pass;
- ``transformers-sdpa``: ``AutoModelForCausalLM.from_pretrained(dtype=bfloat16, attn_implementation="sdpa")``,
  one forward of the same ids (the yardstick: the model without looking at its attention);
- ``transformers-eager``: the same with eager attention and ``output_attentions=True`` (every weight, bfloat16);
- ``transformers-offload``: the sdpa forward under the same device map and caps as ``attnviz-offload``.

The commands run in-process in the child (``attnviz.cli.main``), with the loading function wrapped to time it.
Torch uses ``--threads`` threads (2: the whole machine). bfloat16 matmuls on a CPU without AVX-512 BF16 are
emulated, several times slower than float32: ``--tokens`` lowers the length for a quick look.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

CASES = (
    "attnviz-bf16",
    "attnviz-auto",
    "attnviz-offload",
    "transformers-sdpa",
    "transformers-eager",
    "transformers-offload",
)
# TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T, config.json (as published)
TINYLLAMA = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
OFFLOAD_CAP = "cpu=1GiB"
BUILD_VERSION = 1  # bump when the checkpoint's recipe changes, so the cached one is rebuilt
SEED = 0


def checkpoint_dir() -> Path:
    from attnviz.models.hf.bundled import cache_dir

    return cache_dir() / "benchmarks" / f"tinyllama-1.1b-random-bf16-v{BUILD_VERSION}"


def weights_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def build_checkpoint(folder: Path) -> dict:
    """The random 1B-class checkpoint in ``folder`` (built once): its vocabulary, parameters and build time."""
    if (folder / "config.json").is_file() and any(folder.glob("*.safetensors")):
        config = json.loads((folder / "config.json").read_text())
        return {"vocab_size": config["vocab_size"], "built_s": None}
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from attnviz.models.hf.bundled import prepared_folder

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(prepared_folder("smollm2"))
    vocab = max(TINYLLAMA["vocab_size"], len(tokenizer))
    config = LlamaConfig(
        **{**TINYLLAMA, "vocab_size": vocab},
        architectures=["LlamaForCausalLM"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="bfloat16",
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)  # shapes only: no 4.7 GB of float32 initialisation
    model = model.to(torch.bfloat16).to_empty(device="cpu")
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.fill_(1.0)
            else:
                parameter.normal_(0.0, 0.02, generator=generator)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"vocab_size": vocab, "built_s": time.perf_counter() - started}


# --- one case, in a fresh process ---------------------------------------------------------------------------------


class AnonymousPeak:
    """The largest RssAnon of this process, sampled every ``every`` seconds on a thread."""

    def __init__(self, every: float = 0.02) -> None:
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        from attnviz.labs.cost.peak_memory import status_bytes

        while not self._stop.is_set():
            self.peak = max(self.peak, status_bytes("RssAnon") or 0)
            self._stop.wait(self.every)

    def __enter__(self) -> AnonymousPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _mb(n: int | None) -> float | None:
    return None if n is None else n / 2**20


def _attnviz_case(case: str, folder: Path, tokens: int, text: str, offload_folder: str) -> dict:
    """``python -m attnviz heads`` in this process; the model's load timed by wrapping the CLI's loader."""
    from attnviz import cli
    from attnviz.cli import loading
    from attnviz.labs.cost.peak_memory import status_bytes

    seen: dict = {}
    real_open = loading.open_source

    def timed_open(spec, progress=None):
        started = time.perf_counter()
        source = real_open(spec, progress=progress)
        seen.update(load_s=time.perf_counter() - started, load_peak=status_bytes("VmHWM"), source=source)
        seen["loaded_at"] = time.perf_counter()
        return source

    loading.open_source = timed_open
    dtype = "auto" if case == "attnviz-auto" else "bfloat16"
    args = ["heads", text, "--model", str(folder), "--max-tokens", str(tokens), "--json", "--quiet", "--dtype", dtype]
    if case == "attnviz-offload":
        args += ["--device-map", "auto", "--max-memory", OFFLOAD_CAP, "--offload-folder", offload_folder]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(args)
    ended = time.perf_counter()
    if code != 0:
        raise RuntimeError(f"attnviz heads exited {code}")
    source = seen["source"]
    result = json.loads(printed.getvalue())
    return {
        "load_s": seen["load_s"],
        "run_s": ended - seen["loaded_at"],
        "load_peak": seen["load_peak"],
        "tokens": len(result["tokens"]),
        "dtype": str(source.dtype).removeprefix("torch."),
        "placement": [list(run) for run in source.placement],
    }


def _transformers_case(case: str, folder: Path, tokens: int, text: str, offload_folder: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.labs.cost.peak_memory import status_bytes

    ids = torch.tensor([AutoTokenizer.from_pretrained(folder)(text)["input_ids"][:tokens]])  # (1, tokens)
    eager = case == "transformers-eager"
    extra = {}
    if case == "transformers-offload":
        from attnviz.core.devices import accelerate_max_memory, parse_max_memory

        extra = {"device_map": "auto", "max_memory": accelerate_max_memory(parse_max_memory(OFFLOAD_CAP))}
        extra["offload_folder"] = offload_folder
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.bfloat16, attn_implementation="eager" if eager else "sdpa", **extra
    ).eval()
    load_s, load_peak = time.perf_counter() - started, status_bytes("VmHWM")
    started = time.perf_counter()
    with torch.no_grad():
        out = model(input_ids=ids, logits_to_keep=1, output_attentions=eager)
        if eager:
            assert len(out.attentions) == model.config.num_hidden_layers
    placement = sorted(set(map(str, (getattr(model, "hf_device_map", None) or {}).values())))
    return {
        "load_s": load_s,
        "run_s": time.perf_counter() - started,
        "load_peak": load_peak,
        "tokens": int(ids.shape[1]),
        "dtype": "bfloat16",
        "placement": [["devices", ", ".join(placement)]] if placement else [],
    }


def run_case_here(case: str, folder: Path, tokens: int, threads: int) -> dict:
    """One case in this process: times in seconds, memory in MB."""
    import torch

    from attnviz.labs.cost.capture_bench import benchmark_text
    from attnviz.labs.cost.peak_memory import status_bytes

    torch.set_num_threads(threads)
    text = benchmark_text(tokens)
    before = status_bytes("VmRSS")  # torch, transformers and attnviz imported: what a process costs with no model
    with tempfile.TemporaryDirectory(prefix="attnviz-offload-") as offload_folder, AnonymousPeak() as anonymous:
        run = _attnviz_case if case.startswith("attnviz") else _transformers_case
        row = run(case, folder, tokens, text, offload_folder)
        offloaded = sum(f.stat().st_size for f in Path(offload_folder).rglob("*") if f.is_file())
    return {
        "case": case,
        **{k: v for k, v in row.items() if k != "load_peak"},
        "rss_before_mb": _mb(before),
        "load_peak_mb": _mb(row["load_peak"]),
        "peak_rss_mb": _mb(status_bytes("VmHWM")),
        "peak_anon_mb": _mb(anonymous.peak),
        "offload_folder_mb": _mb(offloaded),
    }


def run_case(case: str, folder: Path, tokens: int, threads: int, timeout_s: float) -> dict:
    """:func:`run_case_here` in a fresh Python; a case that fails or runs out of memory says so in its row."""
    from attnviz.labs.cost.peak_memory import run_child

    args = ["-m", "benchmarks.real_size", "--child", case, "--folder", str(folder)]
    args += ["--tokens", str(tokens), "--threads", str(threads)]
    started = time.perf_counter()
    try:
        proc = run_child(args, timeout_s, fixed_malloc=False)  # the whole program, as users run it
    except Exception as err:  # subprocess.TimeoutExpired
        return {"case": case, "failed": f"{type(err).__name__}: {err}"[:200]}
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = "killed (out of memory?)" if proc.returncode < 0 else (lines[-1] if lines else f"exit {proc.returncode}")
        return {"case": case, "failed": why[:300]}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["wall_s"] = time.perf_counter() - started  # the whole process: start, imports, load, pass, exit
    return row


# --- the run and its table ----------------------------------------------------------------------------------------


def benchmark(cases: list[str], tokens: int, threads: int, timeout_s: float) -> dict:
    folder = checkpoint_dir()
    built = build_checkpoint(folder)
    weights = weights_bytes(folder)
    rows = []
    for case in cases:
        rows.append(run_case(case, folder, tokens, threads, timeout_s))
        print(f"  {case}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    base = next((r for r in rows if r["case"] == "transformers-sdpa" and "failed" not in r), None)
    for row in rows:
        if "failed" in row:
            continue
        row["load_peak_x_weights"] = row["load_peak_mb"] * 2**20 / weights
        row["load_growth_x_weights"] = (row["load_peak_mb"] - row["rss_before_mb"]) * 2**20 / weights
        row["run_x_sdpa"] = row["run_s"] / base["run_s"] if base else None
    return {
        "model": "TinyLlama-1.1B's configuration, random weights, bfloat16",
        "vocab_size": built["vocab_size"],
        "built_s": built["built_s"],
        "checkpoint": str(folder),
        "weights_mb": weights / 2**20,
        "tokens": tokens,
        "threads": threads,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "rows": rows,
    }


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(result: dict) -> str:
    lines = [
        f"{result['model']}: vocabulary {result['vocab_size']:,} (SmolLM2's tokenizer; TinyLlama's is 32,000), "
        f"weights {result['weights_mb']:,.0f} MB on disk; {result['tokens']} tokens, {result['threads']} threads, "
        f"{result['cpus']} CPUs, load average {result['load_average']:.1f} at the end",
        f"{'case':<21}{'dtype':>9}{'load s':>8}{'run s':>8}{'x sdpa':>8}{'RSS before':>11}{'load peak':>10}"
        f"{'x weights':>10}{'peak RSS':>9}{'peak anon':>10}  placement",
    ]
    for r in result["rows"]:
        if "failed" in r:
            lines.append(f"{r['case']:<21} failed: {r['failed']}")
            continue
        where = "; ".join(f"{part or 'whole model'} → {device}" for part, device in r["placement"]) or "one device"
        lines.append(
            f"{r['case']:<21}{r['dtype']:>9}{r['load_s']:>8.1f}{r['run_s']:>8.1f}{_cell(r['run_x_sdpa'], '.2f'):>8}"
            f"{r['rss_before_mb']:>11,.0f}{r['load_peak_mb']:>10,.0f}{r['load_peak_x_weights']:>10.2f}"
            f"{r['peak_rss_mb']:>9,.0f}{r['peak_anon_mb']:>10,.0f}  {where}"
        )
    lines.append(
        "MB are MiB; load peak and peak RSS count the weights' file pages the process maps; peak anon does not"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds a case may take")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case_here(args.child, args.folder, args.tokens, args.threads)))
        return
    result = benchmark(args.cases, args.tokens, args.threads, args.timeout)
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    main()
