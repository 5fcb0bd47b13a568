"""The menu: every page file in exactly one section, every section and page titled in both languages."""

from pathlib import Path

from attnviz.app.navigation import SECTIONS
from attnviz.i18n.catalogue import catalogue

ROOT = Path(__file__).resolve().parents[3]
PAGES = [name for section in SECTIONS.values() for name in section]


def test_every_page_is_in_exactly_one_section_and_overview_comes_first():
    files = sorted(p.stem for p in (ROOT / "pages").glob("*.py"))
    listed = [name for section in SECTIONS.values() for name in section]
    assert sorted(listed) == files and len(listed) == len(set(listed)) == len(PAGES)
    assert next(iter(next(iter(SECTIONS.values())))) == "overview"
    assert list(SECTIONS) == ["attention", "labs", "engineering"]


def test_sections_and_pages_have_titles_in_both_languages():
    for lang in ("en", "zh"):
        words = catalogue(lang)
        assert all(f"nav_sections.{section}" in words for section in SECTIONS)
        assert all(f"nav.{name}" in words and f"overview.link_{name}" in words for name in PAGES if name != "overview")
    assert catalogue("zh")["nav_sections.labs"] != catalogue("en")["nav_sections.labs"]
