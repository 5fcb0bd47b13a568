"""What a command checks before it runs (the text, every number's range, the request budget), and the two
ways it fails: bad input (exit 2) and a check the user asked for that failed (exit 1). Every command imports it, so
it imports no torch: the request budget's arithmetic is imported when a budget is checked."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from attnviz import settings

if TYPE_CHECKING:
    from attnviz.core.budget import RequestCost
    from attnviz.models.source import AttentionSource


class CommandError(Exception):
    """A problem with the user's input, reported as one line on stderr."""


class CheckFailedError(Exception):
    """A check the user asked for (--parity) ran and failed: exit 1 after the output, one line on stderr."""


def check_text(text: str, what: str = "the text") -> str:
    """``text`` as typed; CommandError when the command line held bytes that are not UTF-8.

    Python hands such bytes over as lone surrogates (U+DC80-U+DCFF, PEP 383); a tokenizer cannot read
    them, and guessing their encoding would analyse text the user did not type.
    """
    for index, ch in enumerate(text):
        if 0xD800 <= ord(ch) <= 0xDFFF:
            byte = f"byte 0x{ord(ch) - 0xDC00:02X}" if 0xDC80 <= ord(ch) <= 0xDCFF else f"U+{ord(ch):04X}"
            raise CommandError(
                f"{what} is not valid UTF-8 ({byte} at character {index + 1}); pass UTF-8 text "
                "(check the terminal's encoding, e.g. LANG=C.UTF-8)"
            )
    return text


# positionals by their argparse dest, as a message names them; an option is named by its flag ("--target")
TEXT_NAMES = {"text": "the text", "corrupt": "the corrupted text", "text_b": "TEXT_B"}
# paths: a file name may be any bytes (POSIX), which Python hands over as the same surrogates; the OS reads them
PATH_DESTS = frozenset({"model", "model_b", "offload_folder", "file", "config"})


def check_typed_strings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Every string a command was given (its texts, --target, --metric, --heads, --token, ...), paths aside,
    through :func:`check_text`: CommandError naming the first that is not valid UTF-8, before the command runs."""
    for action in parser._actions:
        if action.dest in PATH_DESTS or action.nargs == 0:
            continue
        value = getattr(args, action.dest, None)
        what = TEXT_NAMES.get(action.dest, action.dest) if not action.option_strings else action.option_strings[-1]
        if action.dest == "text" and hasattr(args, "text_b"):
            what = "TEXT_A"  # compare's two texts
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                check_text(item, what)


# every numeric option, by its argparse dest, and the range a user may give (None: the option may be left out)
TEXT_BOUNDS = {
    "max_tokens": dataclasses.replace(settings.MAX_TOKENS, name="--max-tokens"),
    "d_model": settings.D_MODEL,
    "n_head": settings.N_HEAD,
    "n_kv_head": settings.N_KV_HEAD,
    "n_layer": settings.N_LAYER,
    "seed": settings.SEED,
}


def check_bounds(args: argparse.Namespace, bounds: dict[str, settings.Bound]) -> None:
    """CommandError naming the setting and its range for the first value out of it (a list: every value checked).

    The messages are the library's own ("n_layer (0) must be from 1 to 12"), which scripts already read."""
    for dest, bound in bounds.items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if item is not None and not bound.low <= item <= bound.high:
                raise CommandError(f"{bound.name} ({item}) must be from {bound.low} to {bound.high}")


def check_text_arguments(args: argparse.Namespace) -> None:
    """A per-text command's text and numbers, checked before any model is loaded: CommandError for the first
    problem (bytes that are not UTF-8, an empty text, a number out of its range)."""
    check_text(args.text)
    if not args.text.strip():
        raise CommandError("the text is empty; give some words to analyse")
    check_bounds(args, TEXT_BOUNDS)


def over_budget_line(cost: RequestCost) -> str:
    """The one line a capture over the request budget exits with: its numbers, what fits, and the flag."""
    return (
        f"this request reads {cost.tokens:,} tokens x {cost.n_layer} layers x {cost.n_head} heads = "
        f"{cost.head_tokens:,} head-tokens, over the request budget of {cost.budget:,} (about {cost.peak_gb:,.1f} GB "
        f"and {cost.seconds:,.0f} s here); --max-tokens {cost.max_tokens:,} or fewer fits, "
        "or pass --over-budget to run it anyway"
    )


def check_budget(source: AttentionSource, args: argparse.Namespace) -> None:
    """CommandError (exit 2) when the capture would be over the request budget and --over-budget was not given.

    The same question the local app asks (``attnviz.app.loading.within_budget``), priced from the text's token
    count after encoding, before any capture runs."""
    from attnviz.core.budget import request_cost
    from attnviz.core.device_speed import device_of

    n_tokens = len(source.encode(args.text, args.max_tokens).tokens)
    shape = (source.n_layer, source.n_head, source.n_kv_head, source.head_dim, n_tokens)
    cost = request_cost(*shape, device=device_of(source))
    if cost.over and not args.over_budget:
        raise CommandError(over_budget_line(cost))
