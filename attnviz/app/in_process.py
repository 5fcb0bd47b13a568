"""The app's Streamlit server run inside this Python process (a notebook's kernel), on a thread of its own.

``streamlit run`` owns its process: it runs the server's event loop in the main thread and installs signal
handlers there. A Jupyter kernel already runs its own event loop in the main thread, and signal handlers can only
be installed from it, so :class:`InProcessServer` runs Streamlit's :class:`~streamlit.web.server.Server` (the one
``streamlit run`` starts, on Starlette and uvicorn) in a daemon thread with a fresh asyncio loop, and installs no
signal handler: the kernel's own interrupt and shutdown stay the kernel's. Streamlit's ``Runtime`` is a singleton,
so a process holds one server at a time (:func:`serve` reuses a running one), and Streamlit's config is the
process's: the checkout's ``.streamlit/config.toml`` is applied as ``streamlit run app.py`` in the checkout would
apply it, plus a loopback address and no file watcher.

The script is the checkout's ``app.py`` (with its ``pages/``): a wheel holds the library only, and the error says
so in one line. What a new session opens first (the notebook's model and text) is :func:`opening`, which
:func:`attnviz.app.state.init_state` reads before the sidebar's defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import mimetypes
import socket
import sys
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import attnviz
from attnviz.errors import AppStartError, first_line
from attnviz.i18n.message import msg

FIRST_PORT = 8501  # streamlit's own default, then the next free one, as ``streamlit run`` looks for one
PORT_TRIES = 100
ADDRESS = "127.0.0.1"  # the model is the notebook user's: served to this machine only
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
SCRIPT_THREAD = "ScriptRunner.scriptThread"  # the name Streamlit gives the thread that runs a session's script

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # this machine: never through a proxy
_lock = threading.RLock()
_server: InProcessServer | None = None
_opening: dict[str, str] = {}


def app_script() -> Path:
    """The app's ``app.py``, beside the ``attnviz`` package in a checkout (an editable install); AppStartError,
    one line, where this installation has none (a wheel ships the library and the command line, not the app)."""
    root = Path(attnviz.__file__).resolve().parent.parent
    script = root / "app.py"
    if not script.is_file() or not (root / "pages").is_dir():
        raise AppStartError(msg("open_in_app.no_app", where=str(root)))
    return script


def opening() -> dict[str, str]:
    """What a new session of the in-process app opens with ({"model": key, "text": text}, either may be missing);
    empty in a server started by ``streamlit run``."""
    with _lock:
        return dict(_opening)


def set_opening(**values: str | None) -> None:
    """Set what a new session opens with (``model=``, ``text=``); a None value is left as it was."""
    with _lock:
        _opening.update({name: value for name, value in values.items() if value is not None})


def port_free(port: int, address: str = ADDRESS) -> bool:
    """Whether a server could listen on ``port`` now: bound as Streamlit binds it (SO_REUSEADDR: a port whose
    last connections are still closing is free, one that something listens on is not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def choose_port(port: int | None) -> int:
    """``port`` when it is free, else AppStartError (one line); for None, the first free port from
    :data:`FIRST_PORT`."""
    if port is not None:
        if not port_free(port):
            raise AppStartError(msg("open_in_app.port_busy", port=port))
        return port
    for candidate in range(FIRST_PORT, FIRST_PORT + PORT_TRIES):
        if port_free(candidate):
            return candidate
    raise AppStartError(msg("open_in_app.no_free_port", first=FIRST_PORT, last=FIRST_PORT + PORT_TRIES - 1))


def _checkout_config(root: Path) -> dict[str, object]:
    """The checkout's ``.streamlit/config.toml`` as ``streamlit run``'s flags ({"server.headless": True, ...}):
    Streamlit reads that file from the working directory, and a notebook's is anywhere."""
    path = root / ".streamlit" / "config.toml"
    if not path.is_file():
        return {}
    with path.open("rb") as file:
        sections = tomllib.load(file)
    return {f"{section}.{name}": value for section, options in sections.items() for name, value in options.items()}


def _configure(script: Path, port: int) -> None:
    """Streamlit's process-wide setup for ``script`` on ``port``, as ``streamlit run`` does it before its server
    starts: its config (the checkout's, then this server's own options), its MIME types, the script's folder
    first on ``sys.path`` (the pages import ``pages.widgets``)."""
    from streamlit import config

    flags = {
        **_checkout_config(script.parent),
        "server.port": port,
        "server.address": ADDRESS,
        "server.headless": True,  # the notebook opens the browser itself, when asked
        "browser.gatherUsageStats": False,
        "server.fileWatcherType": "none",  # a notebook's server reruns nothing when a file changes
        "server.runOnSave": False,
    }
    said = logging.getLogger("streamlit.config")  # "restart streamlit" when the port changes: this is that restart
    level = said.level
    said.setLevel(logging.ERROR)
    try:
        config.get_config_options(force_reparse=True, options_from_flags=flags)
    finally:
        said.setLevel(level)
    for kind, extension in (("text/html", ".html"), ("application/javascript", ".js"), ("text/css", ".css")):
        mimetypes.add_type(kind, extension)  # a system's mime.types may lack them: the page's scripts would not run
    mimetypes.add_type("application/javascript", ".mjs")
    if str(script.parent) not in sys.path:
        sys.path.insert(0, str(script.parent))


class InProcessServer:
    """Streamlit's server for ``script`` on ``port``, in a daemon thread with its own event loop.

    :meth:`start` returns once the server answers ``/_stcore/health`` (or raises AppStartError, one line);
    :meth:`stop` shuts it down, closes every session and frees the port, and lets a later server start (Streamlit's
    ``Runtime`` singleton is cleared)."""

    def __init__(self, script: Path, port: int) -> None:
        self.script, self.port = script, port
        self.url = f"http://{ADDRESS}:{port}"
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None  # streamlit.web.server.Server, once created on the server's thread
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._error is None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        _configure(self.script, self.port)
        self._thread = threading.Thread(target=self._run, name=f"attnviz-app-{self.port}", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            self.stop()
            raise AppStartError(msg("open_in_app.no_answer", seconds=round(timeout)))
        if self._error is not None:
            error, self._error = self._error, None
            self.stop()
            if isinstance(error, SystemExit) or (isinstance(error, OSError) and error.errno == errno.EADDRINUSE):
                # taken between the check and the bind (Streamlit exits on a port set by hand that is taken)
                raise AppStartError(msg("open_in_app.port_busy", port=self.port)) from None
            raise AppStartError(msg("open_in_app.did_not_start", error=first_line(error))) from None
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with _DIRECT.open(f"{self.url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or not self.running:
                self.stop()
                raise AppStartError(msg("open_in_app.no_answer", seconds=round(timeout)))
            time.sleep(0.1)

    def _run(self) -> None:
        """The server's thread: a loop of its own (never the kernel's), until :meth:`stop`."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as err:  # SystemExit too: Streamlit exits where a port set by hand is taken
            self._error = err
        finally:
            self._started.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _serve(self) -> None:
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.web.server import Server

        self._server = Server(str(self.script), is_hello=False)
        await self._server.start()
        # app.py always calls st.navigation: no first visitor's run goes down Streamlit's legacy pages/ route (an
        # extra rerun), as attnviz.app.warm sets it for serve.py
        PagesManager.uses_pages_directory = False
        self._started.set()
        await self._server.stopped

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Shut the server down (its sessions closed, its port freed) and wait for its thread; then forget the
        ``Runtime`` singleton, so that another server can start in this process, and drop the models and results
        Streamlit's caches hold for it (a notebook's model among them)."""
        loop, server, thread = self._loop, self._server, self._thread
        if loop is not None and server is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the server has stopped already
                loop.call_soon_threadsafe(server.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            # a page's run still on the model (its session closed, it stops at its next Streamlit call): wait for
            # it, so that the model is given back only once nothing of the app runs it
            deadline = time.monotonic() + timeout
            for running in threading.enumerate():
                if running.name == SCRIPT_THREAD and running is not threading.current_thread():
                    running.join(max(0.0, deadline - time.monotonic()))
        from streamlit.runtime import Runtime

        if server is not None and Runtime._instance is getattr(server, "_runtime", None):
            Runtime._instance = None  # Streamlit never clears it: `streamlit run` stops only with its process
        import streamlit as st

        st.cache_resource.clear()
        self._server = None


def serve(port: int | None = None, timeout: float = START_TIMEOUT_S) -> InProcessServer:
    """The process's app server: the running one (when ``port`` is None or its port), else a new one started on
    ``port`` (None: the first free from :data:`FIRST_PORT`). AppStartError, one line, when the app is not in this
    installation, the port is taken, or the app runs already on another port."""
    global _server
    with _lock:
        if _server is not None and _server.running:
            if port is None or port == _server.port:
                return _server
            raise AppStartError(msg("open_in_app.other_port", running=_server.port, port=port))
        script = app_script()
        server = InProcessServer(script, choose_port(port))
        server.start(timeout)
        _server = server
        return server


def running() -> InProcessServer | None:
    """The process's running app server, or None."""
    with _lock:
        return _server if _server is not None and _server.running else None


def stop() -> None:
    """Stop the process's app server (nothing when none runs) and forget what sessions open with."""
    global _server
    with _lock:
        server, _server = _server, None
        _opening.clear()
    if server is not None:
        server.stop()
