"""``attnviz kv-cache``: the KV cache a model config needs, exactly, and what engines allocate.

Its torch-backed imports are inside :func:`kv_cache_command` (why: :mod:`attnviz.cli`)."""

from __future__ import annotations

import argparse
import sys

from attnviz import settings
from attnviz.cli.arguments import integer
from attnviz.cli.checks import CommandError
from attnviz.cli.output import out


def _size(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,} B ({n / 2**20:,.1f} MiB)"


class _Working:
    """One transient line on stderr while kv-cache reads a config and measures transformers' cache (a second or
    two, mostly importing transformers' modeling code), erased before the answer; nothing unless stderr is a
    terminal, so pipes, files and --json see exactly what they saw before."""

    def __init__(self, text: str) -> None:
        self.shown = sys.stderr.isatty()
        self.text = text

    def __enter__(self) -> None:
        if self.shown:
            sys.stderr.write(self.text)
            sys.stderr.flush()

    def __exit__(self, *exc) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def kv_cache_command(args: argparse.Namespace) -> int:
    """The KV cache a model config needs: exit 0, or 2 with one line for an unreadable or unusable config."""
    from attnviz.errors import ConfigError
    from attnviz.labs.kv.agreement import transformers_agreement
    from attnviz.labs.kv.config import load_config
    from attnviz.labs.kv.engines import engine_estimates
    from attnviz.labs.kv.memory import estimate, kind_counts

    try:
        with _Working("attnviz kv-cache: reading the config and measuring transformers' cache..."):
            cfg = load_config(args.config)
            default = min(settings.KV_DEFAULT_SEQ_LEN, cfg.max_positions or settings.KV_DEFAULT_SEQ_LEN)
            seq_len = default if args.seq_len is None else args.seq_len
            result = estimate(cfg, args.batch, seq_len, args.dtype, block_size=args.block_size)
            # --json prints no engine, so transformers' cache is not measured for it (estimate checks the same input)
            engines = [] if args.json else engine_estimates(cfg, args.batch, seq_len, args.dtype)
            agreement = (
                None if args.json else transformers_agreement(cfg, args.batch, seq_len, args.dtype, args.block_size)
            )
    except (ConfigError, ValueError) as err:
        raise CommandError(str(err)) from err
    if args.json:
        out.json(
            {
                "attention": cfg.attention,
                "layers": cfg.n_layer,
                "kv_heads": cfg.n_kv_head,
                "head_dim": cfg.head_dim,
                "bytes_per_token": result.bytes_per_token,
                "total_bytes": result.total_bytes,
                "per_layer": result.per_layer,
                "window": cfg.window,
            }
        )
        return 0
    kinds = ", ".join(f"{count} {kind}" for kind, count in kind_counts(cfg).items())
    block = f", blocks of {args.block_size}" if args.block_size else ""
    out.line(f"{cfg.name}: {cfg.attention.upper()}, {cfg.n_layer} layers ({kinds}), {cfg.n_head} query heads")
    if cfg.attention == "mla":
        out.line(f"latent per token and layer: {cfg.kv_lora_rank} + rope {cfg.qk_rope_head_dim}")
    else:
        out.line(f"kv heads {cfg.n_kv_head} x head_dim {cfg.head_dim}, window {cfg.window or 'none'}")
    out.line(f"batch {args.batch} x seq_len {seq_len:,}, cache dtype {args.dtype}{block}")
    out.line(f"bytes per token (all layers, no window): {result.bytes_per_token:,}")
    out.line(f"minimum cache: {_size(result.total_bytes)}")
    for kind, size in result.per_kind.items():
        out.line(f"  {kind:8s} {_size(size)}")
    out.line("what engines allocate:")
    for figure in engines:
        out.line(f"  {figure.engine:26s} {_size(figure.total_bytes)}")
        out.line(f"    {figure.rule} ({figure.source})")
    if agreement is not None and not agreement.reasons:
        out.line("transformers' figure equals the minimum to the byte")
    elif agreement is not None:
        if agreement.agrees:
            out.line("transformers' figure equals the minimum, by differences that cancel:")
        else:
            out.line(f"transformers' figure differs from the minimum by {agreement.difference:+,} B:")
        for reason in agreement.reasons:
            out.line(f"  {reason.text}")
    for note in cfg.notes:
        out.line(f"note: {note}")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``kv-cache``: the config, the sequence, the cache dtype and blocks, --json."""
    kv = sub.add_parser("kv-cache", help="the KV cache a model config needs, exactly, and what engines allocate")
    kv.add_argument("config", metavar="CONFIG_OR_DIR", help="a config.json, a model folder, minilm or smollm2")
    kv.add_argument(
        "--seq-len",
        type=integer,
        default=None,
        help=f"tokens per sequence (default {settings.KV_DEFAULT_SEQ_LEN}, capped at the model's max positions)",
    )
    kv.add_argument("--batch", type=integer, default=1, help="sequences (default 1)")
    kv.add_argument("--dtype", choices=settings.KV_DTYPES, default="bf16", help="cache dtype (default bf16)")
    kv.add_argument("--block-size", type=integer, default=None, help="round each sequence up to blocks of K tokens")
    kv.add_argument("--json", action="store_true", help="print one JSON object")
    kv.set_defaults(func=kv_cache_command, parser=kv)
