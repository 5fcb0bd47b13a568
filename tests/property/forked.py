"""``attnviz.cli.main(argv)`` in a forked child, with a wall-clock limit and a memory cap: a hang or a blow-up
fails the case, not the session.

The child is forked from the test process, which has already imported attnviz and torch, so a case costs tens of
milliseconds instead of the 3 s a fresh ``python -m attnviz`` spends importing torch. The child's stdout and stderr
are files, as a real process's are: UTF-8, strict on stdout and backslashreplace on stderr (what Python gives a
program in a UTF-8 locale). The parent watches the child's resident memory while it runs and kills it past the cap;
the child's own high-water mark (``VmHWM``, reset by the fork) is checked too, to catch a spike between two looks.
``RLIMIT_AS`` is a last backstop so that a runaway child cannot take the machine with it.

No child is forked after an accelerator was initialised in this process: a CUDA context (or Apple's Metal) does not
survive a fork, and the child would fail or hang on its first use of the device. The warm-up runs on the CPU, and
the suite asks CUDA's availability through NVML (``PYTORCH_NVML_BASED_CUDA_CHECK=1``, tests/conftest.py), which
initialises nothing. When an accelerator is in use all the same (a GPU test ran earlier in this process, or the
machine has MPS), each child is started with ``spawn`` instead: a fresh interpreter that imports attnviz and torch
itself (seconds, not milliseconds) and runs the same case under the same bounds, its memory counted from the moment
it starts the case. On a machine where no accelerator was touched nothing changes: every child is forked.
"""

from __future__ import annotations

import contextlib
import io
import logging
import multiprocessing
import os
import pickle
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

import torch

from attnviz.cli import main

TIMEOUT_S = 30.0  # a case that should take under a second on a quiet machine; a busy 2-core CI machine is slower
MEMORY_MB = 1536  # growth over the child's memory at the fork; an honest CLI run on small inputs stays far under
_POLL_S = 0.005
PROGRESS = re.compile(r"^\[\s*\d+%\] ")  # a loading progress line on stderr
_SHOW_WARNING = warnings.showwarning  # the interpreter's, before pytest replaces it for a test


def _status(pid: int | str = "self") -> dict[str, int]:
    """VmSize, VmRSS and VmHWM of process ``pid`` in KiB ({} when it is gone)."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                name, _, rest = line.partition(":")
                if name in ("VmSize", "VmRSS", "VmHWM"):
                    values[name] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return values


@dataclass
class Outcome:
    """What one forked run did. ``failure`` is None for a run that finished: "timeout", "memory", "crash"
    (killed by a signal or exited without a result) or "exception" (``main`` raised; ``traceback`` says what)."""

    argv: list[str]
    code: int | None = None
    out: str = ""
    err: str = ""
    failure: str | None = None
    traceback: str = ""
    seconds: float = 0.0
    grew_mb: float = 0.0
    extra: dict = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"argv={self.argv!r} code={self.code} failure={self.failure} seconds={self.seconds:.1f} "
            f"grew={self.grew_mb:.0f} MB\nstderr={self.err[-2000:]!r}\n{self.traceback[-3000:]}"
        )


def fork_hazard() -> str | None:
    """Why a child forked from this process now could not use the accelerator (None when forking is safe)."""
    if torch.cuda.is_initialized():
        return "CUDA is initialised in this process, and a CUDA context does not survive a fork"
    if torch.backends.mps.is_available():
        return "Apple's Metal (MPS) is loaded in this process, and it does not survive a fork"
    return None


def _child(
    argv: list[str], out_path: str, err_path: str, result_path: str, memory_mb: int, env: dict, start_path: str = ""
) -> None:
    """Run ``main(argv)`` in this (forked or spawned) process and write the result to ``result_path``; never returns.

    ``start_path``: where a spawned child writes its resident memory (KiB) as it starts the case, after its imports.
    """
    result = {"code": None, "traceback": ""}
    try:
        torch.set_num_threads(1)  # the parent's pool does not survive a fork, and CI has two cores for everything
        os.environ.update(env)
        start = _status()
        if start_path:
            with open(start_path, "w") as file:
                file.write(str(start.get("VmRSS", 0)))
        limit = (start.get("VmSize", 0) * 1024) + 4 * memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out_path, os.O_WRONLY), (2, err_path, os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)  # what C code and sys.__stderr__ write lands in the captured files too
            os.close(opened)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True
        )
        sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
        # a real process prints warnings and log records on stderr; pytest records them instead
        warnings.resetwarnings()
        for action, category in (("ignore", DeprecationWarning), ("ignore", PendingDeprecationWarning)):
            warnings.simplefilter(action, category)
        warnings.showwarning = _SHOW_WARNING
        logging.root.handlers.clear()
        try:
            result["code"] = main(argv)
        except SystemExit as exit_:  # argparse's exits, as the interpreter turns them into a status
            code = exit_.code
            result["code"] = code if isinstance(code, int) else (0 if code is None else 1)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # a closed stream (BrokenPipeError's handler closes stderr)
        result["start_rss_kb"] = start.get("VmRSS", 0)
        result["hwm_kb"] = _status().get("VmHWM", 0)
    except BaseException:  # what the interpreter would print as a traceback
        result["traceback"] = traceback.format_exc()
    try:
        with open(result_path, "wb") as file:
            pickle.dump(result, file)
    finally:
        os._exit(0)


_warmed: list[bool] = []


def warm() -> None:
    """Run each subcommand once in this process, output dropped, before the first fork: what it imports on first
    use (transformers' loaders, accelerate, sympy: 5 s) is then imported once, not in every child."""
    if _warmed:
        return
    _warmed.append(True)
    import numpy as np

    folder = tempfile.mkdtemp(prefix="attnviz-forked-warm-")
    mask = os.path.join(folder, "mask.npy")
    np.save(mask, np.tril(np.ones((3, 3), dtype=bool)))
    argvs = [  # on the CPU: the parent initialises no accelerator, so its children may fork
        ["heads", "hi", "--quiet", "--json", "--device", "cpu"],
        ["scaling", "hi", "--quiet", "--json", "--device", "cpu"],
        ["heads", "hi", "--quiet", "--device", "cpu", "--model", os.path.join(folder, "missing")],
        ["kv-cache", "minilm", "--json"],
        ["mask-doctor", mask, "--json"],
    ]
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for argv in argvs:
            with contextlib.suppress(Exception, SystemExit):
                main(argv)
    from transformers import BertModel, LlamaForCausalLM  # noqa: F401  what a model folder's config asks for


class Child:
    """One forked run in progress (spawned where :func:`fork_hazard` says a fork is unsafe); :meth:`wait` (or
    :meth:`poll` until it returns an Outcome) ends it."""

    def __init__(self, argv: list[str], *, timeout: float, memory_mb: int, env: dict | None = None) -> None:
        self.hazard = fork_hazard()
        if self.hazard is None:
            warm()
        self.argv, self.timeout, self.memory_mb = list(argv), timeout, memory_mb
        self.folder = tempfile.mkdtemp(prefix="attnviz-forked-")
        self.paths = [os.path.join(self.folder, name) for name in ("out", "err", "result")]
        for path in self.paths[:2]:
            open(path, "wb").close()
        sys.stdout.flush()
        sys.stderr.flush()
        self.started = time.monotonic()
        self.start_path = ""
        if self.hazard is None:
            self.pid = os.fork()
            if self.pid == 0:
                _child(self.argv, *self.paths, memory_mb, env or {})
            self.rss0: int | None = _status(self.pid).get("VmRSS", 0)
        else:  # a fresh interpreter, our own child all the same: waitpid and /proc read it as a forked one
            self.start_path = os.path.join(self.folder, "start")
            args = (self.argv, *self.paths, memory_mb, env or {}, self.start_path)
            process = multiprocessing.get_context("spawn").Process(target=_child, args=args)
            process.start()
            self.pid = process.pid
            self.rss0 = None  # known once the child has imported what it needs and starts the case
        self.peak = self.rss0 or 0
        self.outcome: Outcome | None = None

    def _baseline(self) -> int | None:
        """The child's resident memory (KiB) as it started the case: at the fork, or as a spawned child wrote it."""
        if self.rss0 is None:
            with contextlib.suppress(OSError, ValueError), open(self.start_path) as file:
                self.rss0 = self.peak = int(file.read())
        return self.rss0

    def _kill(self, failure: str) -> Outcome:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        return self._finish(failure)

    def _finish(self, failure: str | None, status: int = 0) -> Outcome:
        outcome = Outcome(self.argv, seconds=time.monotonic() - self.started)
        outcome.out, outcome.err = (self._read(p) for p in self.paths[:2])
        base = self._baseline()
        outcome.grew_mb = 0.0 if base is None else max(0, self.peak - base) / 1024
        if failure is None:
            try:
                with open(self.paths[2], "rb") as file:
                    result = pickle.load(file)
            except (OSError, EOFError, pickle.UnpicklingError):
                result = None
            if result is None:
                failure = "crash"
                outcome.traceback = f"no result; wait status {status}"
            else:
                outcome.code, outcome.traceback = result["code"], result["traceback"]
                if "hwm_kb" in result:
                    outcome.grew_mb = max(outcome.grew_mb, (result["hwm_kb"] - result["start_rss_kb"]) / 1024)
                if outcome.traceback:
                    failure = "exception"
                elif outcome.grew_mb > self.memory_mb:
                    failure = "memory"
        outcome.failure = failure
        for path in [*self.paths, self.start_path]:
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.rmdir(self.folder)
        self.outcome = outcome
        return outcome

    @staticmethod
    def _read(path: str) -> str:
        with open(path, "rb") as file:
            return file.read(1 << 20).decode("utf-8", "replace")

    def poll(self) -> Outcome | None:
        """The outcome once the child ended (or was killed for its time or memory); None while it runs."""
        if self.outcome is not None:
            return self.outcome
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            return self._finish(None, status)
        base = self._baseline()
        if base is not None:  # a spawned child's imports are not the case's growth
            self.peak = max(self.peak, _status(self.pid).get("VmRSS", 0))
            if self.peak - base > self.memory_mb * 1024:
                return self._kill("memory")
        if time.monotonic() - self.started > self.timeout:
            return self._kill("timeout")
        return None

    def wait(self) -> Outcome:
        try:
            while (outcome := self.poll()) is None:
                time.sleep(_POLL_S)
        except BaseException:  # the session is stopping (or the case's own guard fired): leave no child behind
            self.stop()
            raise
        return outcome

    def stop(self) -> None:
        if self.outcome is None:
            self._kill("stopped")


def run(argv: list[str], *, timeout: float = TIMEOUT_S, memory_mb: int = MEMORY_MB, env: dict | None = None) -> Outcome:
    """``python -m attnviz ARGV`` as a forked child of this process, bounded in time and memory."""
    return Child(argv, timeout=timeout, memory_mb=memory_mb, env=env).wait()


def run_all(
    argvs: list[list[str]], *, parallel: int = 3, timeout: float = TIMEOUT_S, memory_mb: int = MEMORY_MB
) -> list[Outcome]:
    """Every argv of ``argvs`` as its own bounded child, ``parallel`` at a time; outcomes in the order given."""
    outcomes: list[Outcome | None] = [None] * len(argvs)
    running: dict[int, Child] = {}
    queue = list(enumerate(argvs))
    try:
        while queue or running:
            while queue and len(running) < parallel:
                index, argv = queue.pop(0)
                running[index] = Child(argv, timeout=timeout, memory_mb=memory_mb)
            for index, child in list(running.items()):
                if (outcome := child.poll()) is not None:
                    outcomes[index] = outcome
                    del running[index]
            time.sleep(_POLL_S)
    except BaseException:
        for child in running.values():
            child.stop()
        raise
    return outcomes  # type: ignore[return-value]


def problem(outcome: Outcome, codes: set[int]) -> str | None:
    """Why ``outcome`` breaks the CLI's rule, or None: a documented exit status, no traceback, no hang, no
    blow-up, and on a non-zero exit exactly one stderr line starting with "attnviz" besides the progress lines; no
    raw escape character anywhere on stderr (progress lines echo what they load escaped)."""
    if outcome.failure:
        return outcome.failure
    if outcome.code not in codes:
        return f"exit {outcome.code}, expected one of {sorted(codes)}"
    if "Traceback (most recent call last)" in outcome.err:
        return "a traceback on stderr"
    if "\x1b" in outcome.err:
        return "a raw escape character on stderr"
    if outcome.code != 0:  # loading progress ("[ 90%] Loading …", without --quiet) may come before the error
        lines = [line for line in outcome.err.splitlines() if not PROGRESS.match(line)]
        if len(lines) != 1 or not lines[0].startswith("attnviz"):
            return f"{len(lines)} stderr lines, not one starting with 'attnviz'"
    return None


def check(argv: list[str], codes: set[int], **kwargs) -> Outcome:
    """Run ``argv`` forked and assert the CLI's rule (see :func:`problem`)."""
    outcome = run(argv, **kwargs)
    why = problem(outcome, codes)
    assert why is None, f"{why}: {outcome.describe()}"
    return outcome
