"""``kv-cache`` per real config, before and after the probe: ``python -m benchmarks.kv_cache [--no-before]``.

Each row is one config (every preset of :mod:`attnviz.labs.kv.presets`, plus Jamba v0.1, a hybrid with 28 Mamba
layers among 32), run as a user runs it: ``python -m attnviz kv-cache DIR`` in a fresh process, timed in three
parts: importing the CLI (``attnviz.cli``, torch and pandas with it), importing the transformers modules every
config needs (its configuration and modeling utilities), and the answer (reading the config, the estimate and
the engines, transformers' figure measured on the meta device with the family's modeling code). Wall and CPU
seconds are both given: on a shared machine the wall clock counts other programs' turns.

*before* runs the measurement as attnviz did it until now, a prefill of the whole length (at most 8,192 tokens)
through every layer (``transformers_cache_elements(..., probe=False)``); *after* runs it as it is now, a
7-token probe in which layers built alike run once, each cache layer continued to the length by its own
``update``. ``same`` says whether the two printed exactly the same bytes. The page's figure (``page s``) is the
answer in one warm process, configs taken one after another, as the KV page computes it for a preset it has not
seen: transformers already imported, the family's modeling code not.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

# Jamba v0.1's config.json (ai21labs/Jamba-v0.1), the hybrid that took minutes
JAMBA_V01 = {
    "architectures": ["JambaForCausalLM"], "attention_dropout": 0.0, "attn_layer_offset": 4, "attn_layer_period": 8,
    "bos_token_id": 1, "eos_token_id": 2, "expert_layer_offset": 1, "expert_layer_period": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "mamba_conv_bias": True,
    "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256, "mamba_expand": 2, "mamba_proj_bias": False,
    "max_position_embeddings": 262144, "model_type": "jamba", "num_attention_heads": 32, "num_experts": 16,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_logits_to_keep": 1,
    "output_router_logits": False, "pad_token_id": 0, "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "use_mamba_kernels": True, "vocab_size": 65536,
}  # fmt: skip


def configs() -> dict[str, dict]:
    from attnviz.labs.kv.presets import PRESETS

    return {**{key: preset.config for key, preset in PRESETS.items()}, "jamba-v0.1": JAMBA_V01}


def child(mode: str, folder: str) -> None:
    """One ``kv-cache FOLDER`` in this fresh process; prints the times and the output's hash as JSON."""
    wall, cpu = time.perf_counter(), time.process_time()
    import attnviz.cli

    imported = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    import transformers.configuration_utils
    import transformers.modeling_utils  # noqa: F401  (what reading a config and building a model import)

    library = time.perf_counter() - wall, time.process_time() - cpu
    if mode == "before":
        from attnviz.models.hf import cache_layout

        cache_layout._measure = cache_layout._measure_every_layer  # the prefill of the whole length, every layer
    wall, cpu, text = time.perf_counter(), time.process_time(), io.StringIO()
    with redirect_stdout(text):
        code = attnviz.cli.main(["kv-cache", folder])
    answer = time.perf_counter() - wall, time.process_time() - cpu
    print(
        json.dumps(
            {
                "code": code,
                "import_s": imported[0],
                "import_cpu_s": imported[1],
                "transformers_s": library[0],
                "transformers_cpu_s": library[1],
                "answer_s": answer[0],
                "answer_cpu_s": answer[1],
                "sha": hashlib.sha256(text.getvalue().encode()).hexdigest(),
            }
        )
    )


def run_child(mode: str, folder: Path, timeout: float) -> dict | None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.kv_cache", "--child", mode, str(folder)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def page_seconds(raws: dict[str, dict]) -> dict[str, float]:
    """What the KV page spends on each config it has not seen, in one warm process (wall seconds)."""
    import copy

    from attnviz.labs.kv.config import config_from_dict
    from attnviz.labs.kv.engines import engine_estimates
    from attnviz.labs.kv.memory import estimate

    config_from_dict({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 1, "hidden_size": 8})
    seconds = {}
    for key, raw in raws.items():
        start = time.perf_counter()
        cfg = config_from_dict(copy.deepcopy(raw), name=key)
        seq_len = min(8192, cfg.max_positions or 8192)  # the page's default length
        estimate(cfg, 1, seq_len, "bf16")
        engine_estimates(cfg, 1, seq_len, "bf16")
        seconds[key] = time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--no-before", action="store_true", help="time only the current measurement")
    parser.add_argument("--before-timeout", type=float, default=900.0, help="give up on one 'before' run after S s")
    parser.add_argument("--only", nargs="+", default=None, help="these configs only (preset keys, jamba-v0.1)")
    parser.add_argument("--json", default=None, help="write the rows to this file")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    raws = configs()
    if args.only:
        raws = {key: raws[key] for key in args.only}
    print(f"# {platform.processor() or platform.machine()}, python {platform.python_version()}; wall s (CPU s)")
    print(f"{'config':20s} {'before answer':>14s} {'after answer':>13s} {'page s':>7s}  same  "
          f"{'import attnviz.cli':>18s} {'import transformers':>19s}")  # fmt: skip
    pages = page_seconds(raws)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key, raw in raws.items():
            folder = Path(tmp) / key
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(raw))
            after = run_child("after", folder, 300)
            before = None if args.no_before else run_child("before", folder, args.before_timeout)
            rows.append({"config": key, "before": before, "after": after, "page_s": pages[key]})

            def cell(run, part, width):
                if run is None:
                    return f"{'-':>{width}s}"
                return f"{run[part + '_s']:>{width - 7}.2f} ({run[part + '_cpu_s']:4.1f})"

            same = "-" if before is None or after is None else ("yes" if before["sha"] == after["sha"] else "NO")
            print(
                f"{key:20s} {cell(before, 'answer', 14)} {cell(after, 'answer', 13)} {pages[key]:7.2f}  {same:4s}  "
                f"{cell(after, 'import', 18)} {cell(after, 'transformers', 19)}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
