"""A bug of attnviz's met in a page's pass: one line in the page saying it is attnviz's, the traceback in the
server log, never shown as the model's failure. The page the app runs is replaced by one whose pass fails."""

import logging

from streamlit.testing.v1 import AppTest


def bug_in_a_page():
    import torch

    from attnviz.app.widgets import run_page
    from attnviz.core.attention import attention_scores
    from attnviz.models.source import running

    class Page:
        def run(self):
            with running("tiny", "cpu"):
                attention_scores(torch.zeros(1, 1, 2, 4), torch.zeros(4), 1.0)  # attnviz's IndexError

    run_page(Page())


def test_a_bug_shows_one_line_saying_it_is_attnviz_and_logs_the_traceback(caplog):
    with caplog.at_level(logging.ERROR, logger="attnviz.app.widgets"):
        at = AppTest.from_function(bug_in_a_page).run()
    assert not at.exception and len(at.error) == 1
    shown = at.error[0].value.replace("\\", "")  # the data in it is escaped as Markdown
    assert shown.startswith("a bug in attnviz (at attnviz/core/attention.py:") and "\n" not in shown
    assert "IndexError: tuple index out of range. Its full traceback is in the server log" in shown
    assert "failed while running" not in shown
    (record,) = [r for r in caplog.records if r.name == "attnviz.app.widgets"]
    logged = caplog.text
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "Traceback" in logged and "in attention_scores" in logged and "IndexError" in logged
