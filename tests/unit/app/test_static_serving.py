"""The middleware serve.py puts in front of Streamlit, driven through ASGI with a stand-in for Streamlit behind it."""

import asyncio
import gzip

import pytest

from attnviz.app.static_assets import INDEX, PLOTLY, StaticAssets
from attnviz.app.static_serving import StaticCompression, route_path

PAGE = b"""<!DOCTYPE html>
<html>
  <head>
    <script type="module" crossorigin src="./static/js/index.abc.js"></script>
  </head>
  <body><div id="root"></div></body>
</html>
"""
SCRIPT = b"export const plot = () => 'drawn';\n" * 400
CHUNK = f"static/js/{PLOTLY}.p1.js"


@pytest.fixture
def assets(tmp_path):
    js = tmp_path / "static" / "js"
    js.mkdir(parents=True)
    (js / "index.abc.js").write_bytes(b"app()")
    (js / f"{PLOTLY}.p1.js").write_bytes(SCRIPT)
    (tmp_path / INDEX).write_bytes(PAGE)
    return StaticAssets(tmp_path, elements=(PLOTLY,))


class Streamlit:
    """What Streamlit's server answers: the file (identity, its own ETag), its page for any other path (gzipped
    when asked, as its gzip middleware does for a page's URL), 206 for a range, 404 under _stcore."""

    def __init__(self, gzip_pages: bool = False):
        self.gzip_pages = gzip_pages
        self.calls = []

    async def __call__(self, scope, receive, send):
        self.calls.append(scope["path"])
        headers = dict(scope["headers"])
        path = scope["path"]
        if path == f"/{CHUNK}":
            status, body, head = 200, SCRIPT, [(b"content-type", b"application/javascript"), (b"etag", b'"st"')]
            if b"range" in headers:
                status, body = 206, SCRIPT[:10]
                head.append((b"content-range", f"bytes 0-9/{len(SCRIPT)}".encode()))
        elif path.startswith("/_stcore/"):
            status, body, head = 404, b"<html>not found</html>", [(b"content-type", b"text/html; charset=utf-8")]
        else:
            status, body, head = 200, PAGE, [(b"content-type", b"text/html; charset=utf-8"), (b"etag", b'"st"')]
            if self.gzip_pages and path != "/" and b"gzip" in headers.get(b"accept-encoding", b""):
                body = gzip.compress(body)
                head += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*head, (b"content-length", str(len(body)).encode())],
            }
        )
        half = len(body) // 2  # in two parts, as a file response streams
        await send({"type": "http.response.body", "body": body[:half], "more_body": True})
        await send(
            {
                "type": "http.response.body",
                "body": b"" if scope["method"] == "HEAD" else body[half:],
                "more_body": False,
            }
        )


def request(app, path, method="GET", headers=(), root_path=""):
    """Drive ``app`` with one HTTP request; (status, headers as a dict of lists, body)."""
    scope = {"type": "http", "method": method, "path": path, "root_path": root_path, "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}  # fmt: skip
    messages = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        messages.append(message)

    asyncio.run(app(scope, receive, send))
    start = messages[0]
    got = {}
    for name, value in start["headers"]:
        got.setdefault(name.decode().lower(), []).append(value.decode())
    body = b"".join(m.get("body", b"") for m in messages[1:])
    assert all(m["type"] == "http.response.body" for m in messages[1:]) and not messages[-1].get("more_body")
    return start["status"], got, body


def test_a_script_goes_out_gzipped_to_a_client_that_accepts_it_with_its_own_etag(assets):
    streamlit = Streamlit()
    app = StaticCompression(streamlit, assets, base_url="")
    status, headers, body = request(app, f"/{CHUNK}", headers=[("Accept-Encoding", "gzip, deflate, br")])
    assert status == 200 and gzip.decompress(body) == SCRIPT
    assert headers["content-encoding"] == ["gzip"] and headers["vary"] == ["Accept-Encoding"]
    assert headers["content-length"] == [str(len(body))] and len(body) < len(SCRIPT) / 10
    assert headers["cache-control"] == ["public, immutable, max-age=31536000"]
    assert headers["etag"] != ['"st"'] and streamlit.calls == []  # answered here, Streamlit not asked
    # the same tag again: 304, no body; HEAD: the headers of the GET, no body
    status, again, body = request(
        app, f"/{CHUNK}", headers=[("Accept-Encoding", "gzip"), ("If-None-Match", headers["etag"][0])]
    )
    assert (status, body) == (304, b"") and again["etag"] == headers["etag"] and again["vary"] == ["Accept-Encoding"]
    status, head, body = request(app, f"/{CHUNK}", "HEAD", headers=[("Accept-Encoding", "gzip")])
    assert (status, body) == (200, b"") and head["content-length"] == headers["content-length"]


def test_a_script_goes_out_as_streamlit_sends_it_without_gzip_or_for_a_range_marked_vary(assets):
    streamlit = Streamlit()
    app = StaticCompression(streamlit, assets, base_url="")
    for accept in ([], [("Accept-Encoding", "identity")], [("Accept-Encoding", "gzip;q=0")]):
        status, headers, body = request(app, f"/{CHUNK}", headers=accept)
        assert (status, body) == (200, SCRIPT) and "content-encoding" not in headers
        assert headers["vary"] == ["Accept-Encoding"] and headers["etag"] == ['"st"']
    status, headers, body = request(app, f"/{CHUNK}", headers=[("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")])
    assert (status, body) == (206, SCRIPT[:10]) and "content-encoding" not in headers
    assert streamlit.calls == [f"/{CHUNK}"] * 4


@pytest.mark.parametrize("gzip_pages", [False, True])
@pytest.mark.parametrize("path", ["/", "/heads", f"/{INDEX}"])
def test_streamlits_page_is_replaced_by_the_one_that_asks_for_plotly_early(assets, path, gzip_pages):
    app = StaticCompression(Streamlit(gzip_pages=gzip_pages), assets, base_url="")
    status, headers, body = request(app, path, headers=[("Accept-Encoding", "gzip")])
    assert status == 200 and headers["content-encoding"] == ["gzip"] and headers["vary"] == ["Accept-Encoding"]
    page = gzip.decompress(body)
    assert f'import("./static/js/{PLOTLY}.p1.js")'.encode() in page and page.endswith(PAGE[-30:])  # the rewritten one
    assert headers["cache-control"] == ["no-cache"] and headers["content-length"] == [str(len(body))]
    status, plain, body = request(app, path)
    assert status == 200 and "content-encoding" not in plain and body == page
    assert plain["etag"] != headers["etag"]  # one tag a variant
    status, _, body = request(app, path, headers=[("Accept-Encoding", "gzip"), ("If-None-Match", headers["etag"][0])])
    assert (status, body) == (304, b"")
    status, head, body = request(app, path, "HEAD")
    assert (status, body) == (200, b"") and head["content-length"] == plain["content-length"]


def test_other_answers_pass_through_untouched(assets):
    streamlit = Streamlit()
    app = StaticCompression(streamlit, assets, base_url="")
    status, headers, body = request(app, "/_stcore/nothing", headers=[("Accept-Encoding", "gzip")])
    assert (status, body) == (404, b"<html>not found</html>") and "vary" not in headers
    status, headers, body = request(app, f"/{CHUNK}", "POST", headers=[("Accept-Encoding", "gzip")])
    assert (status, body) == (200, SCRIPT) and "vary" not in headers  # neither compressed nor marked


def test_the_path_is_read_below_a_proxys_prefix_and_streamlits_base_url(assets):
    scope = {"path": "/proxy/app/static/js/x.js", "root_path": "/proxy"}
    assert route_path(scope, "/app/") == "static/js/x.js"
    assert route_path({"path": "/application/x"}, "app") == "application/x"
    assert route_path({"path": "/heads"}, "") == "heads"
    app = StaticCompression(Streamlit(), assets, base_url="app")
    status, headers, body = request(app, f"/app/{CHUNK}", headers=[("Accept-Encoding", "gzip")])
    assert status == 200 and headers["content-encoding"] == ["gzip"] and gzip.decompress(body) == SCRIPT
