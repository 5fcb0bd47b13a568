"""``streamlit run serve.py``: the app warmed at start, as ``make run`` and the container image serve it."""

import re

import pytest

from tests.integration.chromium import assert_no_exception
from tests.integration.test_browser import assert_sidebar_kept_its_defaults
from tools.browser import ROOT, streamlit_server, wait_for_charts, wait_until_idle

pytestmark = pytest.mark.browser


def _log(url: str) -> str:
    port = url.rsplit(":", 1)[1]
    return (ROOT / ".pytest_cache" / f"streamlit-{port}.log").read_text()


def test_a_warmed_server_has_loaded_the_default_model_before_its_first_visitor(browser):
    with streamlit_server(timeout=300.0, script="serve.py") as url:
        before = _log(url)
        assert "attnviz: warmed up in" in before
        assert len(re.findall(r"attnviz: loaded .*\[embedded", before)) == 1, before
        context = browser.new_context(viewport={"width": 1400, "height": 1600})
        page = context.new_page()
        page.goto(f"{url}/heads")  # a shared link: the first session of this server
        wait_for_charts(page, 3)
        wait_until_idle(page)
        assert_no_exception(page)
        assert_sidebar_kept_its_defaults(page)
        context.close()
        # the visitor's page used the model the warm-up loaded: no second load of it
        assert len(re.findall(r"attnviz: loaded .*\[embedded", _log(url))) == 1
