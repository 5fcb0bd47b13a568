"""docs/notebooks/long_text.ipynb as a reader runs it: 2,000 tokens through SmolLM2 with ``show`` and ``capture``
(attnviz's bounded capture of the model as loaded; its views drawn from the capture with no second pass), then saved
as HTML and opened in Chromium with the network refused. Its own module, so its own xdist group: it is the longest of the notebooks (a capture of 2,000 tokens)."""

import pytest

from tests.integration.notebook.executed import (
    Runs,
    hover_large_maps,
    opened_offline,
    outputs_html,
    screenshot,
    script_copies,
    sizes,
    views,
)

N_TOKENS = 2000


@pytest.fixture(scope="module")
def run():
    done = Runs()
    yield done["long_text"]
    done.close()


def test_runs_with_a_pooled_view_the_statistics_and_the_model_as_it_was(run, record_property):
    record_property("seconds", round(run.seconds, 1))
    ((_, payload),) = views(run)
    kind = payload["kinds"][0]
    assert len(kind["queries"]) == N_TOKENS and kind["causal"]
    maps = kind["maps"]
    assert maps["bin_q"] > 1 and not kind["lines"]  # pooled cells: a long text's map is not every weight
    assert maps["q"] == -(-N_TOKENS // maps["bin_q"])
    cells = [c for c in run.notebook.cells if c.cell_type == "code"]
    html = "".join(h for cell in cells for h in outputs_html(cell))
    assert script_copies(html) == 1
    table = next(h for cell in cells if "captured.statistics" in cell.source for h in outputs_html(cell))
    assert [f"<th>{i}</th>" in table for i in range(11)] == [True] * 10 + [False]  # head(10): rows 0 to 9
    for column in ("layer", "head", "entropy", "max_weight"):
        assert f"<th>{column}</th>" in table
    last = cells[-1].outputs[0]["data"]["text/plain"]
    assert last == "('sdpa', 0)"  # torch's attention again, no hook left on any module


@pytest.mark.browser
def test_the_saved_page_draws_offline_and_hovers(run, page, record_property):
    path = run.page()
    assert script_copies(path.read_text(encoding="utf-8")) == 1
    refused = opened_offline(page, path, 1)
    assert hover_large_maps(page, views(run)) == 1
    assert refused == []
    screenshot(page, "long_text")
    saved = sizes(run)
    record_property("sizes", saved)
    print(saved)
