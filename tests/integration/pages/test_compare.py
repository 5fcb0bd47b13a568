"""Side by side through the command line (``compare``) and the page (AppTest), on the embedded model."""

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz import cli
from attnviz.app import hosted
from attnviz.models.registry import EMBEDDED
from tests.cli import attnviz
from tests.integration.tiny_models import tiny
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
PAGE = "pages/compare.py"
TEXT_A, TEXT_B = "The cat sat on the mat.", "The dog sat on the mat today."
STATS = ["entropy", "entropy_norm", "max_weight", "first_token_weight", "prev_token_weight", "self_weight"]


def run_json(*args):
    done = attnviz(*args, "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stdout)


@pytest.fixture(scope="module")
def two_texts():
    """``compare`` of two texts, and ``heads`` of each: three runs shared by the tests below."""
    return run_json("compare", TEXT_A, TEXT_B), run_json("heads", TEXT_A), run_json("heads", TEXT_B)


def test_a_and_b_are_exactly_what_heads_prints(two_texts):
    (_, compared), (heads_a, _), (heads_b, _) = two_texts
    assert list(compared)[:3] == ["a", "b", "diff"]
    assert set(compared) == {"a", "b", "diff", "jsd", "alignment", "note"}
    # byte for byte: heads prints its object with indent=2, and so does this one once taken out
    assert json.dumps(compared["a"], indent=2) + "\n" == heads_a
    assert json.dumps(compared["b"], indent=2) + "\n" == heads_b


def test_the_diff_is_b_minus_a_of_the_two_heads_runs(two_texts):
    (_, compared), (_, a), (_, b) = two_texts
    assert len(compared["diff"]) == len(a["stats"]) == a["n_layer"] * a["n_head"]
    for row, head_a, head_b in zip(compared["diff"], a["stats"], b["stats"], strict=True):
        assert (row["layer"], row["head"]) == (head_a["layer"], head_a["head"]) == (head_b["layer"], head_b["head"])
        assert set(row) == {"layer", "head", *(k for k in head_a if k not in ("layer", "head", "flags"))}
        assert all(k in row for k in STATS)
        for name, value in row.items():
            if name in ("layer", "head"):
                continue
            if head_a[name] is None or head_b[name] is None:
                assert value is None
            else:  # each side and the diff are rounded to 6 places
                assert value == pytest.approx(head_b[name] - head_a[name], abs=1.5e-6), name
    assert compared["alignment"]["aligned"] == 6  # The _ sat on the mat . : all but cat/dog and today
    assert all(0.0 <= row["jsd"] <= 1.0 for row in compared["jsd"])
    assert compared["note"] is None


def in_process(capsys, *args):
    """``compare`` through :func:`attnviz.cli.main` in this process (one import of torch for every case)."""
    code = cli.main([*map(str, args), "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_same_text_twice_is_no_change(capsys):
    code, out, _ = in_process(capsys, "compare", TEXT_A, TEXT_A, "--json")
    assert code == 0
    same = json.loads(out)
    assert all(v == 0 for row in same["diff"] for k, v in row.items() if k not in ("layer", "head") and v is not None)
    assert all(row["jsd"] == 0 for row in same["jsd"])


def test_two_masks_on_the_embedded_model(capsys):
    code, out, _ = in_process(capsys, "compare", TEXT_A, TEXT_A, "--mask-b", "causal", "--json")
    assert code == 0
    masks = json.loads(out)
    assert masks["a"]["causal"] is False and masks["b"]["causal"] is True
    assert masks["a"]["tokens"] == masks["b"]["tokens"] and masks["alignment"]["aligned"] == len(masks["a"]["tokens"])
    assert all(row["jsd"] > 1e-4 for row in masks["jsd"])  # hiding the future moves every head's pattern
    assert all(row["n_queries"] == len(masks["a"]["tokens"]) - 1 for row in masks["jsd"])  # row 0 sees one key


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["compare", TEXT_A, ""], "TEXT_B is empty"),
        (["compare", "  ", TEXT_B], "TEXT_A is empty"),
        (["compare", TEXT_A, TEXT_B, "--model", "/no/such/model"], "/no/such/model"),
        (["compare", TEXT_A, TEXT_A, "--model", "smollm2", "--mask-b", "causal"], "--mask-b needs"),
        (["compare", TEXT_A, TEXT_A, "--model-b", "minilm"], "different tokens"),
        (["compare", TEXT_A, TEXT_B, "--seed-b", "-1"], "--seed-b"),
        (["compare", TEXT_A, TEXT_B, "--model-b", ""], "'' is not a Hugging Face model folder"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(args, says, capsys):
    code, out, err = in_process(capsys, *args)
    assert code == 2, (out, err)
    assert not out and len(err.strip().splitlines()) == 1, err
    assert says in err and err.startswith("attnviz compare: error:")


def test_an_empty_model_b_is_the_error_an_empty_model_is(capsys):
    # --model-b '' once compared model A with itself and exited 0
    code_b, out_b, err_b = in_process(capsys, "compare", TEXT_A, TEXT_B, "--model-b", "")
    code_a, _, err_a = in_process(capsys, "compare", TEXT_A, TEXT_B, "--model", "")
    assert (code_b, out_b, err_b) == (code_a, "", err_a) == (2, "", err_a)
    assert len(err_b.splitlines()) == 1


def test_bad_input_from_another_program_is_exit_2_without_a_traceback():
    done = attnviz("compare", TEXT_A, "", "--quiet")
    assert done.returncode == 2 and not done.stdout
    assert done.stderr == "attnviz compare: error: TEXT_B is empty; give some words to compare\n"


def test_the_readable_report_lists_the_heads_that_moved_most(capsys):
    code, out, _ = in_process(capsys, "compare", TEXT_A, TEXT_B)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("A: embedded default") and lines[1].startswith("B: embedded default")
    assert "aligned: 6 of A's 7 tokens" in lines[2]
    assert lines[4].split()[:3] == ["layer", "head", "jsd"] and len(lines) == 5 + 8


def test_the_page_on_the_embedded_model():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()  # two models: every sidebar model is loaded
    at.text_area(key="text").input(TEXT_A).run()
    at.switch_page(PAGE).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    stats, jsd, _ = (spec_of(c) for c in at.get("plotly_chart"))
    a, b, diff = (decode(trace["z"]) for trace in stats["data"])
    assert diff.shape == (2, 4) and abs(diff - (b - a)).max() < 1e-5
    assert stats["data"][2]["zmid"] == 0 and jsd["data"][0]["zmin"] == 0
    top = float(np.nanmax(decode(jsd["data"][0]["z"])))
    assert top <= jsd["data"][0]["zmax"] <= 1.1 * top  # fitted to the values, not 0 to 1
    assert any(f"to {jsd['data'][0]['zmax']:g} bits" in c.value for c in at.caption)  # and the scale is said
    largest = at.dataframe[0].value
    assert len(largest) == 8 and list(largest.columns)[-1] == "B − A"
    assert all(v == float(f"{v:.3g}") for column in largest.columns[2:] for v in largest[column])  # 3 digits
    assert any("align" in c.value for c in at.caption)
    # one head in A and B, by default the one that moved most, on one colour scale, and B − A
    moved = decode(jsd["data"][0]["z"])
    layer, head = np.unravel_index(np.nanargmax(moved), moved.shape)
    assert at.selectbox(key="compare_head").value == f"{layer}:{head}"
    side_a, side_b, change = spec_of(at.get("plotly_chart")[2])["data"]
    assert (side_a["zmin"], side_a["zmax"]) == (side_b["zmin"], side_b["zmax"]) and change["zmid"] == 0
    assert not [w.value for w in at.warning]  # a short comparison runs at once: no estimate left on screen

    at.selectbox(key="compare_stat").set_value("first_token_weight").run()
    assert not at.exception
    at.radio(key="compare_mode").set_value("masks").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.radio(key="compare_mask_b").value == "causal"  # A is bidirectional: B defaults to the other mask
    assert any("causal" in c.value for c in at.caption)
    at.radio(key="compare_mode").set_value("models").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == 3  # the embedded model under another seed: the same tokens
    # only the models that read the text as A does are offered: MiniLM's WordPiece and SmolLM2's BPE are not
    assert at.selectbox(key="compare_model_b").options == [hosted.model_label(EMBEDDED), hosted.model_label("path")]
    at.selectbox(key="model").set_value("minilm").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    # no model in the sidebar shares MiniLM's tokenizer: said up front, and only a folder or hub id is offered
    assert any("No other model in the sidebar" in i.value for i in at.info)
    assert at.selectbox(key="compare_model_b").options == [hosted.model_label("path")]


@pytest.fixture(scope="module")
def llamas(tmp_path_factory, smollm2):
    """Three tiny random Llamas with SmolLM2's tokenizer: two of one shape (other weights), one deeper."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("compare")
    return (
        tiny(root / "a", smollm2, LlamaConfig, LlamaForCausalLM),
        tiny(root / "b", smollm2, LlamaConfig, LlamaForCausalLM, intermediate_size=96),
        tiny(root / "deep", smollm2, LlamaConfig, LlamaForCausalLM, num_hidden_layers=3),
    )


def test_two_models_with_one_tokenizer_and_two_shapes(llamas, capsys):
    a, b, deep = llamas
    code, out, err = in_process(capsys, "compare", TEXT_A, TEXT_A, "--model", a, "--model-b", b, "--json")
    assert code == 0, err
    same_shape = json.loads(out)
    assert same_shape["a"]["tokens"] == same_shape["b"]["tokens"] and len(same_shape["diff"]) == 2 * 4
    assert any(row["jsd"] > 1e-4 for row in same_shape["jsd"])  # other weights, other patterns
    code, out, err = in_process(capsys, "compare", TEXT_A, TEXT_A, "--model", a, "--model-b", deep, "--json")
    assert code == 0, err
    other_shape = json.loads(out)
    assert other_shape["diff"] == [] and other_shape["jsd"] == [] and "differ in shape" in other_shape["note"]
    assert other_shape["b"]["n_layer"] == 3
    code, out, err = in_process(capsys, "compare", TEXT_A, TEXT_A, "--model", a, "--model-b", "default")
    assert code == 2 and "different tokens" in err


def test_the_page_on_two_local_models_and_a_mask_it_cannot_change(llamas):
    a, _, deep = llamas
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(a)).run()
    at.text_area(key="text").input(TEXT_A).run()
    at.switch_page(PAGE).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert len(at.get("plotly_chart")) == 3  # two texts on the local model: statistics, JSD, one head
    at.radio(key="compare_mode").set_value("masks").run()
    assert not at.exception
    assert any("not available" in i.value for i in at.info) and not at.get("plotly_chart")
    at.radio(key="compare_mode").set_value("models").run()
    # SmolLM2 reads the text as these Llamas with its tokenizer do: it is offered, before anything is tried
    assert at.selectbox(key="compare_model_b").options == [hosted.model_label("smollm2"), hosted.model_label("path")]
    at.selectbox(key="compare_model_b").set_value("path").run()
    at.text_input(key="compare_model_path_b").input(str(deep)).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert any("differ in shape" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 1 and len(spec_of(at.get("plotly_chart")[0])["data"]) == 2  # A, B only
