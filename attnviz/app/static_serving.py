"""The ASGI middleware ``serve.py`` puts in front of Streamlit: its files gzipped, its page asking for chunks early.

:class:`StaticCompression` answers, for a GET or HEAD:

- a compressible file of Streamlit's static folder, to a client that accepts gzip and asks for the whole file:
  the gzip bytes compressed once (:class:`attnviz.app.static_assets.StaticAssets`), ``Content-Encoding: gzip``,
  ``Vary: Accept-Encoding``, the variant's own ETag (``If-None-Match`` -> 304) and Streamlit's cache headers;
  any other request for it (no gzip, a range) goes to Streamlit, whose answer gets ``Vary: Accept-Encoding``;
- Streamlit's page (``/``, or any page's URL, which Streamlit answers with ``index.html``): recognised in
  Streamlit's own answer, replaced by the page that asks for the first screen's chunks early and for Plotly's
  when it costs least (:func:`attnviz.app.static_assets.with_early_modules`), gzipped when the client accepts it.

Everything else passes through untouched: the websocket, the health check, media, uploads.
"""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING

import anyio.to_thread

from attnviz.app.static_assets import Encoded, StaticAssets, accepts_gzip, etag_matches

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

HTML = "text/html"


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", ())}


def route_path(scope: Scope, base_url: str) -> str:
    """The request's path under Streamlit's static mount, without its leading slash (``static/js/x.js``, ``heads``).

    The ASGI ``root_path`` (a proxy's prefix) and Streamlit's ``server.baseUrlPath`` are taken off first, as
    Streamlit's router does."""
    path: str = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    base = base_url.strip("/")
    if base and (path == f"/{base}" or path.startswith(f"/{base}/")):
        path = path[len(base) + 1 :]
    return path[1:] if path.startswith("/") else path


def _start(status: int, encoded: Encoded, length: int) -> Message:
    headers = [
        (b"content-type", encoded.media_type.encode()),
        (b"cache-control", encoded.cache_control.encode()),
        (b"etag", encoded.etag.encode()),
        (b"vary", b"Accept-Encoding"),
    ]
    if status == 200:
        headers.append((b"content-length", str(length).encode()))
        if encoded.gzip:
            headers.append((b"content-encoding", b"gzip"))
    return {"type": "http.response.start", "status": status, "headers": headers}


async def send_encoded(send: Send, encoded: Encoded, method: str, if_none_match: str | None) -> None:
    """``encoded`` as the answer: 304 when ``If-None-Match`` names its ETag, no body for a HEAD."""
    if if_none_match is not None and etag_matches(if_none_match, encoded.etag):
        await send(_start(304, encoded, 0))
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await send(_start(200, encoded, len(encoded.body)))
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else encoded.body, "more_body": False})


def _with_vary(message: Message) -> Message:
    headers = list(message.get("headers", ()))
    for i, (name, value) in enumerate(headers):
        if name.lower() == b"vary":
            if b"accept-encoding" not in value.lower():
                headers[i] = (name, value + b", Accept-Encoding")
            break
    else:
        headers.append((b"vary", b"Accept-Encoding"))
    return {**message, "headers": headers}


class StaticCompression:
    """ASGI middleware: Streamlit's static files gzipped once, its page asking for chunks early (module docstring).

    ``assets`` is shared with ``serve.py``'s start-up, which compresses every file before the first visitor; a
    file it has not reached yet is compressed at its first request, in a worker thread."""

    def __init__(self, app: ASGIApp, assets: StaticAssets, base_url: str | None = None):
        self.app = app
        self.assets = assets
        self._base_url = base_url  # None: Streamlit's ``server.baseUrlPath``, read at the first request

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            from streamlit import config

            self._base_url = config.get_option("server.baseUrlPath") or ""
        return self._base_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        relative = route_path(scope, self.base_url)
        gzip_ok = accepts_gzip(headers.get("accept-encoding", ""))
        if self.assets.compressible(relative):
            if gzip_ok and "range" not in headers:
                encoded = self.assets.ready(relative) or await anyio.to_thread.run_sync(self.assets.gzipped, relative)
                await send_encoded(send, encoded, scope["method"], headers.get("if-none-match"))
                return

            async def send_varied(message: Message) -> None:
                await send(_with_vary(message) if message["type"] == "http.response.start" else message)

            await self.app(scope, receive, send_varied)
            return
        await self.app(scope, receive, _PageSwap(send, self.assets, scope["method"], headers, gzip_ok))


class _PageSwap:
    """A ``send`` that replaces Streamlit's page in an answer by the one that asks for the first screen early.

    An HTML answer is held until its end (Streamlit's HTML is its page, a few kB) and compared with the page
    Streamlit ships, decoded first if Streamlit gzipped it (it does for a page's URL, not for ``/``); anything else
    goes out as it came."""

    def __init__(self, send: Send, assets: StaticAssets, method: str, headers: dict[str, str], gzip_ok: bool):
        self.send, self.assets, self.method = send, assets, method
        self.if_none_match = headers.get("if-none-match")
        self.gzip_ok = gzip_ok
        self.start: Message | None = None  # an HTML answer's start, held
        self.encoding = ""  # its Content-Encoding
        self.body = bytearray()

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            response_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message["headers"]}
            if message["status"] == 200 and response_headers.get("content-type", "").startswith(HTML):
                self.start, self.encoding = message, response_headers.get("content-encoding", "")
                return
            await self.send(message)
            return
        if self.start is None or message["type"] != "http.response.body":
            await self.send(message)
            return
        self.body += message.get("body", b"")
        if message.get("more_body", False):
            return
        if self._is_streamlit_page():
            await send_encoded(self.send, self.assets.page(self.gzip_ok), self.method, self.if_none_match)
            return
        await self.send(self.start)
        await self.send({"type": "http.response.body", "body": bytes(self.body), "more_body": False})

    def _is_streamlit_page(self) -> bool:
        if self.method == "HEAD":  # no body to compare: Streamlit's HTML answers are its page
            return True
        body = bytes(self.body)
        if self.encoding == "gzip":
            try:
                body = gzip.decompress(body)
            except OSError:
                return False
        return body == self.assets.original_index
