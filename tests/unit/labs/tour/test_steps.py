"""The tour's steps follow the tutorial: every section in order, each step a live page that exists."""

from pathlib import Path

import pytest

from attnviz.app.navigation import SECTIONS
from attnviz.labs.tour.steps import PITFALLS, STEPS, step_index
from attnviz.labs.tour.steps import SECTIONS as N_SECTIONS

ROOT = Path(__file__).resolve().parents[4]


def test_every_section_in_order_each_step_once():
    sections = [step.section for step in STEPS]
    assert sections == sorted(sections)
    assert set(sections) == set(range(1, N_SECTIONS + 1))
    assert len({step.key for step in STEPS}) == len(STEPS)


def test_five_pitfalls_after_their_table():
    assert len(PITFALLS) == 5
    assert step_index("pitfalls") + 1 == step_index(PITFALLS[0])
    assert all(STEPS[step_index(key)].section == 6 for key in ("pitfalls", *PITFALLS))


def test_every_step_leads_to_a_page_of_the_menu():
    in_menu = {name for pages in SECTIONS.values() for name in pages}
    for step in STEPS:
        assert step.page in in_menu, step
        assert (ROOT / "pages" / f"{step.page}.py").is_file()


def test_an_unknown_step_is_a_key_error():
    assert step_index(STEPS[3].key) == 3
    with pytest.raises(KeyError):
        step_index("no-such-step")
