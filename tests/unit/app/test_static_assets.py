"""Streamlit's files as serve.py sends them: gzip once, the ETags, and the page that asks for its chunks early."""

import gzip
import json
import re

import pytest

from attnviz.app.static_assets import (
    FIRST_SCREEN,
    INDEX,
    PLOTLY,
    StaticAssets,
    accepts_gzip,
    chunk_file,
    encode,
    etag_matches,
    import_closure,
    static_imports,
    streamlit_static_dir,
    with_early_modules,
)

PAGE = """<!DOCTYPE html>
<html lang="en">
  <head>
    <script type="module" crossorigin src="./static/js/index.abc.js"></script>
    <link rel="modulepreload" crossorigin href="./static/js/shared.abc.js">
    <link rel="stylesheet" crossorigin href="./static/css/index.abc.css">
  </head>
  <body><div id="root"></div></body>
</html>
"""
HREF = re.compile(r'<link rel="modulepreload" crossorigin href="\./static/js/([^"]+)">')


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip", True),
        ("gzip, deflate, br, zstd", True),  # Chromium's
        ("GZip;q=0.5", True),
        ("br;q=1.0, gzip;q=0.8, *;q=0.1", True),
        ("*", True),
        ("x-gzip", True),
        ("", False),
        ("identity", False),
        ("br, deflate", False),
        ("gzip;q=0", False),
        ("gzip;q=0.000, br", False),
        ("*;q=0", False),
        ("br, *;q=0.5, gzip;q=0", False),  # named gzip refused: the wildcard does not bring it back
        ("gzip;q=nonsense", False),
    ],
)
def test_accept_encoding_is_read_with_its_quality_values(header, accepted):
    assert accepts_gzip(header) is accepted


def test_if_none_match_is_compared_weakly_against_every_tag_it_lists():
    assert etag_matches('"abc"', '"abc"')
    assert etag_matches('W/"abc"', '"abc"')  # nginx's gzip marks a strong tag weak
    assert etag_matches('"x", "abc"', '"abc"')
    assert etag_matches("*", '"abc"')
    assert not etag_matches('"abd"', '"abc"')
    assert not etag_matches('"abc-gzip"', '"abc"')


def test_a_modules_static_imports_are_the_ones_it_opens_with_and_nothing_in_its_code():
    source = (
        'import{a as b,c}from"./one.abc.js";import"./two.abc.js";import * as ns from "./three.abc.js";\n'
        'import {d} from \'./four.abc.js\';var x=`import{e}from"./not-an-import.js"`;import("./dynamic.js")'
    )
    assert static_imports(source) == ["./one.abc.js", "./two.abc.js", "./three.abc.js", "./four.abc.js"]
    assert static_imports('var a=1;import"./late.js"') == []
    assert static_imports("") == []


def test_a_chunk_and_its_imports_at_any_depth_once_each_even_in_a_cycle(tmp_path):
    (tmp_path / "Chart.h1.js").write_text('import{a}from"./dep.h2.js";import"./shared.h3.js";code()')
    (tmp_path / "dep.h2.js").write_text('import{b}from"./deep.h4.js";import"./Chart.h1.js";code()')
    (tmp_path / "deep.h4.js").write_text("code()")
    (tmp_path / "shared.h3.js").write_text('import"./missing.h5.js";code()')  # a name that is no file: skipped
    assert import_closure(tmp_path, "Chart.h1.js") == ["Chart.h1.js", "dep.h2.js", "shared.h3.js", "deep.h4.js"]


def test_an_elements_chunk_is_found_by_its_name_and_only_when_there_is_one(tmp_path):
    for name in ("Radio.h1.js", "RadioGroup.h2.js", "Radio.h3.css", "Checkbox.a.js", "Checkbox.b.js", "Tab.x.y.js"):
        (tmp_path / name).write_text("")
    assert chunk_file(tmp_path, "Radio") == "Radio.h1.js"  # not RadioGroup's, not a style sheet
    assert chunk_file(tmp_path, "Checkbox") is None  # two builds' worth: which one the page asks for is unknown
    assert chunk_file(tmp_path, "Tab") is None
    assert chunk_file(tmp_path, "Missing") is None


def once_js() -> str:
    from attnviz.app.static_assets import PLOTLY_ONCE

    return PLOTLY_ONCE.read_text(encoding="utf-8")


def _fake_build(tmp_path):
    js = tmp_path / "static" / "js"
    js.mkdir(parents=True)
    (js / "index.abc.js").write_text('import"./shared.abc.js";app()')
    (js / "shared.abc.js").write_text("shared()")
    (js / "Selectbox.s1.js").write_text('import{x}from"./shared.abc.js";import{y}from"./menu.m1.js";select()')
    (js / "menu.m1.js").write_text("menu()")
    (js / f"{PLOTLY}.p1.js").write_text('import{a}from"./index.abc.js";import{w}from"./wrapper.w1.js";' + "x" * 4096)
    (js / "wrapper.w1.js").write_text('import{y}from"./menu.m1.js";wrap()')
    (tmp_path / INDEX).write_text(PAGE)
    return js


def test_the_page_preloads_each_elements_chunk_and_its_imports_once_after_streamlits_own(tmp_path):
    js = _fake_build(tmp_path)
    page = with_early_modules(PAGE, js, ("Selectbox", "NoSuchElement", PLOTLY))
    hrefs = HREF.findall(page)
    # Streamlit's own first, then in the elements' order; nothing the page already lists, nothing twice; Plotly's
    # chunk and what it alone imports are not in the list: the page's script asks for them
    assert hrefs == ["shared.abc.js", "Selectbox.s1.js", "menu.m1.js"]
    assert page.index("index.abc.css") < page.index("Selectbox.s1.js") < page.index("</head>")
    # Plotly fetched with the page and evaluated once the server runs it, through the very URL Streamlit imports
    # it by; on a page without charts (the root, the Overview) once that page is drawn; on the Heads page, whose
    # first map is attnviz's canvas, fetched and evaluated only after that map is drawn
    script = page[page.index('<script type="module">') : page.index("</head>")]
    assert f'import("./static/js/{PLOTLY}.p1.js")' in script and script.count("import(") == 1
    assert f'const fetchPlotly = () => ["{PLOTLY}.p1.js", "wrapper.w1.js"].forEach(' in script
    assert '"running"' in script and '"notRunning"' in script and "requestIdleCallback" in script
    assert '["", "overview"].includes(' in script
    assert '["heads"].includes(' in script and 'addEventListener("attnviz:first-map", start' in script
    # Plotly drawing each chart once: a classic script, before Streamlit's modules, so it hears window.Plotly set
    # (a classic script, unlike a module, runs as it is parsed: before any module Streamlit's page loads)
    once = page.index("attnviz: each Plotly chart drawn once")
    assert page.rindex("<script>", 0, once) < once < page.index("</head>") and "</script" not in once_js()
    added = page.rindex("\n", 0, page.index("<script>\n")) + 1  # the first line added: the classic script's
    assert page.replace(page[added : page.index("</head>")], "") == (
        PAGE.replace("  </head>", "</head>")
    )  # nothing else of Streamlit's page changed
    assert '["about", "home"].includes(' in with_early_modules(PAGE, js, (PLOTLY,), chartless=("home", "about"))


def test_without_plotly_among_the_elements_the_page_gets_no_script(tmp_path):
    js = _fake_build(tmp_path)
    page = with_early_modules(PAGE, js, ("Selectbox",))
    assert HREF.findall(page)[1:] == ["Selectbox.s1.js", "menu.m1.js"]
    assert '<script type="module">' not in page and PLOTLY not in page


def test_a_page_that_is_not_streamlits_is_left_as_it_is(tmp_path):
    js = _fake_build(tmp_path)
    for page in ("<html><head></head></html>", PAGE.replace("</head>", ""), ""):
        assert with_early_modules(page, js) == page


def test_encoding_is_deterministic_and_each_variant_has_its_own_etag():
    data = b"function f(){return 1}\n" * 200
    zipped, again, plain = (
        encode("static/js/x.js", data, True),
        encode("static/js/x.js", data, True),
        encode("static/js/x.js", data, False),
    )
    assert gzip.decompress(zipped.body) == data and plain.body == data
    assert zipped.body == again.body and zipped.etag == again.etag  # no time stamp in the gzip header
    assert zipped.etag != plain.etag and re.fullmatch(r'"[0-9a-f]{32}"', zipped.etag)
    assert zipped.gzip and not plain.gzip
    assert zipped.media_type in ("application/javascript", "text/javascript; charset=utf-8")
    assert zipped.cache_control == "public, immutable, max-age=31536000"  # Streamlit's for its hashed files
    assert encode(INDEX, b"<html>", True).cache_control == "no-cache"
    assert encode("manifest.json", b"{}", True).cache_control == "no-cache"
    assert encode("static/css/a.css", b"a{}", True).media_type == "text/css; charset=utf-8"


def test_only_text_files_big_enough_to_gain_are_compressed_each_once(tmp_path):
    _fake_build(tmp_path)
    (tmp_path / "static" / "media").mkdir()
    (tmp_path / "static" / "media" / "font.woff2").write_bytes(b"\0" * 4096)  # compressed already
    (tmp_path / "static" / "css").mkdir()
    (tmp_path / "static" / "css" / "big.css").write_text("a{color:red}\n" * 100)
    assets = StaticAssets(tmp_path)
    big = f"static/js/{PLOTLY}.p1.js"
    assert assets.compressible(big) and assets.compressible("static/css/big.css")
    assert not assets.compressible("static/js/menu.m1.js")  # under MIN_BYTES
    assert not assets.compressible("static/media/font.woff2")
    assert not assets.compressible(INDEX)  # the page is served rewritten: assets.page()
    assert not assets.compressible("../serve.py") and not assets.compressible("static/js/nope.js")
    first = assets.gzipped(big)
    assert assets.gzipped(big) is first  # compressed once
    assert gzip.decompress(first.body) == (tmp_path / big).read_bytes()
    assert assets.prepare() == len(first.body) + len(assets.gzipped("static/css/big.css").body)
    for zipped in (True, False):
        page = assets.page(zipped)
        text = gzip.decompress(page.body) if zipped else page.body
        assert b"Selectbox.s1.js" in text and page.cache_control == "no-cache" and page.gzip is zipped
    assert assets.original_index == PAGE.encode()


def test_streamlits_own_page_preloads_existing_chunks_of_the_first_screen_once_each():
    static = streamlit_static_dir()
    assets = StaticAssets(static)
    page = gzip.decompress(assets.page(True).body).decode()
    hrefs = HREF.findall(page)
    assert len(hrefs) == len(set(hrefs))  # no module asked twice
    assert all((static / "static" / "js" / href).is_file() for href in hrefs)
    plotly = chunk_file(static / "static" / "js", PLOTLY)
    assert plotly is not None and plotly not in hrefs and f'import("./static/js/{plotly}")' in page
    for element in FIRST_SCREEN:
        if element != PLOTLY:
            assert chunk_file(static / "static" / "js", element) in hrefs, element
    # the Plotly chunk and what it alone imports: asked for by the page's script, never twice
    closure = json.loads(re.search(r"const fetchPlotly = \(\) => (\[.*?\])\.forEach", page).group(1))
    assert closure[0] == plotly and not set(closure) & set(hrefs)
    # what the chunks import is preloaded too: the Plotly chunk's own imports are all in the page
    listed = set(hrefs) | set(closure) | set(re.findall(r'src="\./static/js/([^"]+)"', page))
    assert {path.removeprefix("./") for path in static_imports((static / "static/js" / plotly).read_text())} <= listed
