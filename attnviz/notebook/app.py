"""The dashboard on the notebook's own model: :func:`open_in_app`.

The model is lent, not copied: :func:`attnviz.models.registry.borrowed_source` switches it to attnviz's attention
for as long as the app runs, and :func:`attnviz.models.registry.lend` offers that source to the app under a key of
its own, which the sidebar lists (and opens first) beside the embedded and bundled models. The app's server runs
in this process, on a thread of its own (:mod:`attnviz.app.in_process`), so its pages run the very model object
the notebook holds: any dtype, device map or patch it has. :meth:`AppHandle.stop` (or the interpreter's exit)
stops the server and gives every lent model back as it was, bit for bit.

Nothing of Streamlit is imported until :func:`open_in_app` is called: a notebook that only draws views never
pays for it.
"""

from __future__ import annotations

import atexit
import html
import importlib
import threading
import webbrowser
from contextlib import ExitStack
from dataclasses import dataclass, field
from urllib.parse import urlencode

from attnviz.errors import AppStartError
from attnviz.i18n.message import msg
from attnviz.models import registry

KEY_PREFIX = "notebook:"  # a lent model's key: "notebook:gpt2", what a ?model= link names


@dataclass
class _Lending:
    """A model lent to the app: its key, the model object (to know it again) and what gives it back."""

    key: str
    model: object
    name: str
    giving_back: ExitStack = field(repr=False)


_lock = threading.RLock()
_lendings: list[_Lending] = []
_at_exit = [False]
_used_keys: set[str] = set()  # every key lent in this process, given back or not


@dataclass
class AppHandle:
    """The app opened on a notebook's model: ``url`` opens it on that model (and the text given), ``stop()``
    stops the app and gives every lent model back; shown in a cell as a link."""

    url: str
    name: str
    key: str

    @property
    def running(self) -> bool:
        from attnviz.app import in_process

        return in_process.running() is not None and any(lending.key == self.key for lending in _lendings)

    def stop(self) -> None:
        """Stop the app (its sessions closed, its port freed) and give back every model lent to it, as it was."""
        stop_app()

    def _repr_html_(self) -> str:
        if not self.running:
            return html.escape(str(msg("open_in_app.stopped", name=self.name)))
        words = html.escape(str(msg("open_in_app.open", name=self.name)))
        url = html.escape(self.url, quote=True)
        return f'<a href="{url}" target="_blank" rel="noopener">{words}</a> <code>{html.escape(self.url)}</code>'

    def __repr__(self) -> str:
        return f"{msg('open_in_app.open', name=self.name)}: {self.url}"


def _lent_key(name: str) -> str:
    """A key no model has been lent under in this process: the name, then a number (a cache keyed by the spec must
    never hand out an earlier model under a reused key)."""
    taken = set(registry.lent_choices()) | {lending.key for lending in _lendings}
    base = f"{KEY_PREFIX}{name}"
    key, n = base, 1
    while key in taken or key in _used_keys:
        n += 1
        key = f"{base} ({n})"
    _used_keys.add(key)
    return key


def _lend(model, tokenizer) -> _Lending:
    """The model's lending: the one already made for this model object, else a new one (borrowed for the app's
    life)."""
    for lending in _lendings:
        if lending.model is model:
            return lending
    giving_back = ExitStack()
    source = giving_back.enter_context(registry.borrowed_source(model, tokenizer))
    try:
        key = _lent_key(source.name)
        registry.lend(key, source)
        giving_back.callback(registry.take_back, key)
    except BaseException:
        giving_back.close()
        raise
    lending = _Lending(key, model, source.name, giving_back)
    _lendings.append(lending)
    return lending


def open_in_app(model, tokenizer, *, text: str | None = None, port: int | None = None, open_browser: bool = False):
    """Start the attnviz dashboard on ``model`` (a transformers model object, as the notebook holds it) and its
    ``tokenizer``, in this process; return an :class:`AppHandle` (its ``url``, ``stop()``, a link in the cell).

    ``text``: the text the app opens with (the sidebar's default otherwise); ``port``: the port to serve on (None:
    the running app's, else the first free from 8501); ``open_browser``: open the URL in this machine's browser.
    A second call while the app runs lends its model to the same app (the same model object is lent once), and
    the returned URL opens that one. The model stays switched to attnviz's attention until ``stop()`` (or the
    interpreter's exit), which gives it back as it was.

    One-line errors, never a traceback from Streamlit: ModelUnavailableError for a model attnviz cannot read,
    AppStartError where the app cannot start (its port taken, the app not in this installation, another port
    asked of a running app), ValueError for an argument that is not one.
    """
    if text is not None and not isinstance(text, str):
        raise ValueError(f"text must be a str or None, not {type(text).__name__}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise ValueError(f"port must be a number from 1 to 65535 or None, not {port!r}")
    from attnviz.app import in_process  # Streamlit only now: a notebook that never opens the app never imports it
    from attnviz.app.links import LINK_TEXT_CHARS

    with _lock:
        in_process.app_script()  # no app in this installation: said before the model is switched
        running = in_process.running()
        if running is None:
            port = in_process.choose_port(port)  # a taken port too is said before the model is switched
        elif port not in (None, running.port):
            raise AppStartError(msg("open_in_app.other_port", running=running.port, port=port))
        new = not any(lending.model is model for lending in _lendings)
        lending = _lend(model, tokenizer)
        try:
            server = in_process.serve(port)
        except BaseException:
            if new:
                _give_back(lending)
            raise
        threading.Thread(target=_import_first_page, name="attnviz-app-imports", daemon=True).start()
        in_process.set_opening(model=lending.key, text=text)
        if not _at_exit[0]:
            atexit.register(stop_app)
            _at_exit[0] = True
    query = {"model": lending.key}
    if text is not None and len(text) <= LINK_TEXT_CHARS:
        query["text"] = text  # a longer text is the session's first text all the same (in_process.opening)
    url = f"{server.url}/?{urlencode(query)}"
    if open_browser:
        webbrowser.open(url)
    return AppHandle(url=url, name=lending.name, key=lending.key)


def _import_first_page() -> None:
    """Import what the app's first page imports (:data:`attnviz.app.warm.MODULES`) while the notebook's user is
    still to click the link: the first visit does not wait for it (once imported, this costs nothing)."""
    from attnviz.app.warm import MODULES

    for name in MODULES:
        importlib.import_module(name)


def _give_back(lending: _Lending) -> None:
    with _lock:
        if lending in _lendings:
            _lendings.remove(lending)
    lending.giving_back.close()


def stop_app() -> None:
    """Stop the app started by :func:`open_in_app` (nothing when none runs) and give every lent model back: the
    server first, so that no page runs a model while it is given back."""
    from attnviz.app import in_process

    with _lock:
        in_process.stop()
        lendings = list(reversed(_lendings))
        for lending in lendings:
            _give_back(lending)
