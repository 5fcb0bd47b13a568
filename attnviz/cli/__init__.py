"""The command line: ``python -m attnviz <subcommand>``.

One module per subcommand (``heads``, ``compare``, ``scaling``, ``ablate``, ``patch``, ``logits``, ``train_scale``,
``mask_doctor``, ``kv_cache``, ``bench``, ``corpus``) holds its arguments (``add_command``) and the function that runs it. Beside them is what
they share: ``output`` (every line a command prints), ``checks`` (bad input, bounds and budgets) and ``loading``
(the model a per-text command reads). Here are the parser and :func:`main`. Bad input exits non-zero with a
one-line reason on stderr, never a traceback; so does a bug of attnviz's own (exit 70, its traceback on stderr
only with ``ATTNVIZ_TRACEBACK=1``).

The parser is built from light modules only: a subcommand imports torch, transformers and pandas (several seconds)
inside the function that runs it, after the checks that need no model, so that ``--help``, ``--version``, a
mistyped flag and bad input answer at once. ``arguments`` holds the per-text flags for that reason, apart from
``loading``, which only a running command imports.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from attnviz import __version__, settings
from attnviz.cli import (
    ablate,
    bench,
    compare,
    corpus,
    heads,
    kv_cache,
    logits,
    mask_doctor,
    patch,
    scaling,
    train_scale,
)
from attnviz.cli.checks import CheckFailedError, CommandError, check_typed_strings
from attnviz.cli.output import out, stdout_is_unicode
from attnviz.core.files import printable
from attnviz.core.memory_errors import is_out_of_memory, one_line
from attnviz.core.pass_errors import attnviz_bug
from attnviz.errors import AttnvizBugError, ModelUnavailableError, first_line

COMMANDS = (
    heads,
    compare,
    scaling,
    ablate,
    patch,
    logits,
    train_scale,
    mask_doctor,
    kv_cache,
    bench,
    corpus,
)  # in --help's order
BUG_EXIT = 70  # sysexits' EX_SOFTWARE: attnviz's own error, told apart from bad input (2) and a failed check (1)


def one_line_errors(parser: argparse.ArgumentParser, command: str) -> None:
    """Bad arguments to ``command`` as one line on stderr and exit 2, like every other error it reports."""

    def error(message: str) -> NoReturn:
        prefix = f"attnviz {command}" if command else "attnviz"
        parser.exit(2, printable(f"{prefix}: error: {message}") + "\n")  # the message may quote what was typed

    parser.error = error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnviz", description="See what multi-head attention does to text."
    )
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.add_command(sub)
    one_line_errors(parser, "")
    for name, command in sub.choices.items():
        one_line_errors(command, name)  # every error one line on stderr, as other programs read it
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    out.escaped = False
    if not stdout_is_unicode() and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # --help's √ and anything else printed outside Output
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # as parse_args does, but from the subcommand's parser when it has its own error format
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        commands = ",".join(next(a for a in parser._actions if a.dest == "command").choices)
        print(f"attnviz: error: no command given; usage: {parser.prog} {{{commands}}} ... (or --help)", file=sys.stderr)
        return 2
    try:
        check_typed_strings(args, getattr(args, "parser", parser))
        code = args.func(args)
        out.notice(args.command)
        return code
    except BrokenPipeError:  # `... | head` closed the pipe: not an error
        sys.stderr.close()
        return 0
    except CommandError as err:  # its text names the user's paths and values: printable keeps it one line
        print(printable(f"attnviz {args.command}: error: {err}"), file=sys.stderr)
        return 2
    except OSError as err:  # a path no library check caught: still one line, naming the reason
        print(printable(f"attnviz {args.command}: error: {first_line(err)}"), file=sys.stderr)
        return 2
    except ModelUnavailableError as err:  # said in one line already (out of memory among them): the model's
        print(printable(f"attnviz {args.command}: error: {err}"), file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as err:  # out of memory where no command caught it: one line too
        if not is_out_of_memory(err):
            return report_bug(args.command, err)
        print(printable(f"attnviz {args.command}: error: {one_line(err)}"), file=sys.stderr)
        return 2
    except CheckFailedError as err:
        out.notice(args.command)
        print(printable(f"attnviz {args.command}: {err}"), file=sys.stderr)
        return 1
    except Exception as err:  # what no command expected is attnviz's bug, said as one
        return report_bug(args.command, err)


def report_bug(command: str, err: Exception) -> int:
    """A bug of attnviz's (raised as :class:`AttnvizBugError` by a pass, or any error no command expected): one
    line on stderr saying so, the traceback before it only with ``ATTNVIZ_TRACEBACK=1``; exit :data:`BUG_EXIT`."""
    bug = err if isinstance(err, AttnvizBugError) else attnviz_bug(err)
    if os.environ.get(settings.TRACEBACK_ENV, "").strip() == "1":
        traceback.print_exception(err, file=sys.stderr)
        hint = ""
    else:
        hint = f" ({settings.TRACEBACK_ENV}=1 prints its traceback)"
    print(printable(f"attnviz {command}: error: {bug}; please report it{hint}"), file=sys.stderr)
    return BUG_EXIT
