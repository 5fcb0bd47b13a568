"""The notebook labs' pure parts: the mask doctor on tensors built by hand (no model), the tables built from the labs'
own results, the words in the reader's language without changing the kernel's, and plotly.js written into the
first output of a kernel only."""

import pandas as pd
import pytest
import torch

from attnviz.errors import MaskFileError
from attnviz.i18n.translate import language
from attnviz.labs.heads_matter.ablation import AblationSweep
from attnviz.labs.heads_matter.attribution import Estimate
from attnviz.labs.heads_matter.patching import Metric, PatchResult
from attnviz.notebook.labs import LabResult, mask_doctor
from attnviz.notebook.labs.ablate import estimate_frame, sweep_frame
from attnviz.notebook.labs.patch import patching_frame
from attnviz.notebook.labs.result import checked_max_tokens, checked_text, forget_plotly, in_language

PLOTLY_JS = "plotly.js v"  # plotly.js's own banner, at the top of the library written inline


def causal(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def test_a_clean_mask_has_no_problem():
    found = mask_doctor(causal(5), expect="causal")
    assert found.json == {"ok": True, "convention": "keep", "shape": [5, 5], "problems": []}
    assert found.frame.empty and list(found.frame.columns) == ["kind", "count", "examples", "message"]
    assert [trace.type for trace in found.figure.data] == ["heatmap"]  # nothing marked


def test_padding_attended_is_found_in_its_sequence():
    mask = torch.ones(2, 4, 4, dtype=torch.bool)  # the second sequence is 3 tokens long: its pad key is kept
    found = mask_doctor(mask, expect="padding", lengths="4,3")
    assert found.json["problems"] == [{"kind": "attends_padding", "count": 3, "examples": [[0, 3], [1, 3], [2, 3]]}]
    assert found.found.problems[0].batch_examples == [1, 1, 1]
    drawn = mask_doctor(mask, expect="padding", lengths=[4, 3], sequence=1, labels=list("abcd"))
    (marks,) = [trace for trace in drawn.figure.data if trace.type == "scatter"]
    assert (list(marks.x), list(marks.y)) == (["d"] * 3, ["a", "b", "c"])  # the sequence asked for, its labels
    assert [trace.type for trace in found.figure.data] == ["heatmap"]  # sequence 0: nothing marked


def test_a_decode_step_is_drawn_at_its_position():
    step = torch.ones(1, 6, dtype=torch.bool)
    step[0, 5] = False  # the query cannot see itself
    found = mask_doctor(step, expect="causal", q_len=1)
    assert found.json["offset"] == 5 and [p["kind"] for p in found.json["problems"]] == ["missing_self"]
    z = found.figure.data[0].z
    assert z.shape == (6, 6) and z[5].tolist() == [1, 1, 1, 1, 1, 0] and not z[:5].any()


def test_a_shape_no_reading_fits_is_told_without_a_picture():
    found = mask_doctor(torch.ones(3, 3, dtype=torch.bool), expect="causal+padding", lengths="2,2")
    assert [p["kind"] for p in found.json["problems"]] == ["bad_shape"] and found.figure is None
    forget_plotly()
    assert found._repr_html_().count("bad_shape") == 1  # the table instead
    assert PLOTLY_JS in mask_doctor(causal(3))._repr_html_()  # plotly.js still to come: nothing was drawn


def test_what_the_command_line_refuses_is_refused():
    with pytest.raises(ValueError, match="additive"):
        mask_doctor(torch.zeros(3, 3), convention="keep")
    with pytest.raises(MaskFileError, match=r"integer 2 at \[0, 1\]"):
        mask_doctor([[1, 2], [0, 1]])
    with pytest.raises(ValueError, match="empty"):
        checked_text("  ")
    with pytest.raises(ValueError, match="max_tokens"):
        checked_max_tokens(0)
    assert checked_max_tokens(None) == 8192 and checked_max_tokens(12) == 12  # None: the lab's own limit


def test_the_words_follow_lang_and_the_kernel_keeps_its_language():
    mask = causal(4)
    mask[0, 3] = True
    english, chinese = mask_doctor(mask, expect="causal"), mask_doctor(mask, expect="causal", lang="zh")
    assert english.json == chinese.json  # a language changes words, never results
    assert english.frame["message"][0] != chinese.frame["message"][0]
    assert english.figure.layout.title.text != chinese.figure.layout.title.text
    assert language() == "en" and in_language("zh", language) == "zh" and language() == "en"


def test_plotly_js_goes_into_the_first_output_of_a_kernel_only():
    found = mask_doctor(causal(3))
    forget_plotly()
    first, second = found._repr_html_(), found._repr_html_()
    assert first.count(PLOTLY_JS) == 1 and PLOTLY_JS not in second
    assert PLOTLY_JS in found.to_html()  # saved alone: carries it
    forget_plotly()
    assert PLOTLY_JS in found._repr_html_()


def records(frame: pd.DataFrame) -> list[dict]:
    """A table's rows, NaN (a head not run, or without a value: pandas' missing number) read as None."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def test_tables_from_the_labs_results():
    sweep = AblationSweep("m", "zero", 5, "kl_mean", [[0.5, None], [0.25, 1.0]], 4, loss_change=[[1.0, None], [2, 3]])
    assert records(sweep_frame(sweep))[:2] == [
        {"layer": 0, "head": 0, "kl_mean": 0.5, "loss_change": 1.0},
        {"layer": 0, "head": 1, "kl_mean": None, "loss_change": None},
    ]
    found = Estimate([[0.1, -0.2]], 0.0, "1 forward", saturated=[(0, 1)], graddrop=[[0.3, 0.4]])
    assert records(estimate_frame(found)) == [
        {"layer": 0, "head": 0, "estimate": 0.1, "graddrop": 0.3, "saturated": False, "cancelling": False},
        {"layer": 0, "head": 1, "estimate": -0.2, "graddrop": 0.4, "saturated": True, "cancelling": False},
    ]
    patched = PatchResult("m", ["a"], ["b"], Metric("loss"), 1.0, 0.0, [[None, 0.5]], 0.0, found)
    assert records(patching_frame(patched)) == [
        {"layer": 0, "head": 0, "effect": None, "estimate": 0.1},
        {"layer": 0, "head": 1, "effect": 0.5, "estimate": -0.2},
    ]


def test_a_result_is_frozen_short_in_text_and_saved_whole(tmp_path):
    found = LabResult("x", pd.DataFrame(), (), {})
    with pytest.raises(AttributeError):
        found.lab = "y"
    drawn = mask_doctor(causal(3))
    assert repr(drawn) == "<attnviz mask_doctor: a table of 0 rows x 4 columns, 1 figure(s)>"
    drawn.save(tmp_path / "mask.html")
    page = (tmp_path / "mask.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and page.count(PLOTLY_JS) == 1
