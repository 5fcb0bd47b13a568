"""The notebook's labs (attnviz.notebook.labs) on a model held in memory: each gives what the command line gives for
the same model saved to a folder and the same text, to the last bit (the same arithmetic in the same process); the
model's outputs are the same after each call, bit for bit; a lab the model cannot do, or one over the time budget,
says why in one line; the output draws offline, plotly.js carried once."""

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
)

from attnviz import cli
from attnviz.errors import ModelUnavailableError
from attnviz.labs.heads_matter.ablation import SweepBaseline
from attnviz.labs.heads_matter.attribution import estimate_ablation
from attnviz.labs.heads_matter.common import rounded
from attnviz.models.hf.bundled import minilm_dir
from attnviz.models.registry import SourceSpec, open_source
from attnviz.notebook.labs import (
    OverBudgetError,
    ablation,
    direct_logits,
    estimate,
    mask_doctor,
    patching,
)
from attnviz.notebook.labs import result as lab_result
from tests.integration.tiny_models import tiny, tiny_seq2seq

TEXT = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
METRIC = "logit-diff: Mary, John"
PROBE = torch.arange(5, 37)[None]  # the ids the model's outputs are compared on, before and after each call


@pytest.fixture(scope="module")
def folder(smollm2):
    """A tiny Llama (2 layers x 4 heads, 2 KV heads) saved as a user's local model, SmolLM2's tokenizer beside it."""
    where = Path(tempfile.mkdtemp(prefix="attnviz-nb-labs-"))
    yield tiny(where / "tiny-llama", smollm2, LlamaConfig, LlamaForCausalLM)
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def held(folder):
    """The same model as a notebook holds it: loaded by transformers, left in training mode, as after fine-tuning."""
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.train()
    return model, AutoTokenizer.from_pretrained(folder)


def outputs(model, input_ids) -> torch.Tensor:
    found = model(input_ids=input_ids)
    return found.logits if hasattr(found, "logits") else found.last_hidden_state


@contextmanager
def left_as_it_was(model, input_ids=PROBE):
    """The block leaves the model's outputs the same bit for bit, its training mode, its attention and its weights'
    gradients as they were (the estimate runs a backward: none lands on a weight)."""
    with torch.no_grad():
        before = outputs(model, input_ids)
    mode, implementation = model.training, model.config._attn_implementation
    grads = [(p.requires_grad, p.grad) for p in model.parameters()]
    yield
    with torch.no_grad():
        after = outputs(model, input_ids)
    assert torch.equal(before, after)
    assert model.training == mode and model.config._attn_implementation == implementation
    assert [(p.requires_grad, p.grad) for p in model.parameters()] == grads


def cli_json(capsys, *argv) -> dict:
    code = cli.main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def as_printed(value: dict) -> dict:
    """A lab's JSON as the command line prints it (tuples as lists, floats as JSON reads them back)."""
    return json.loads(json.dumps(value))


def test_the_sweep_is_the_clis(capsys, folder, held):
    model, tokenizer = held
    expected = cli_json(capsys, "ablate", TEXT, "--model", str(folder), "--heads", "all", "--quiet")
    with left_as_it_was(model):
        found = ablation(model, tokenizer, TEXT)
    assert as_printed(found.json) == expected
    sweep = found.extra["sweep"]
    assert found.lab == "sweep" and list(found.frame.columns) == ["layer", "head", "kl_mean", "loss_change"]
    assert len(found.frame) == 2 * 4 and expected["sweep_measure"] == "kl_mean"
    flat = [v for row in sweep.values for v in row]
    assert found.frame["kl_mean"].tolist() == flat
    assert [rounded(v) for v in flat] == [v for row in expected["sweep"] for v in row]  # the JSON's rounding
    assert np.array_equal(np.asarray(found.figure.data[0].z, dtype=float), np.asarray(sweep.values, dtype=float))
    assert len(found.figures) == 2  # the sweep's map, then every head together, position by position


def test_named_heads_ablated_together_are_the_clis(capsys, folder, held):
    model, tokenizer = held
    expected = cli_json(capsys, "ablate", TEXT, "--model", str(folder), "--heads", "0.1,1.*", "--mode", "mean")
    with left_as_it_was(model):
        found = ablation(model, tokenizer, TEXT, "0.1,1.*", mode="mean")
    assert as_printed(found.json) == expected
    assert expected["heads"] == [[0, 1], [1, 0], [1, 1], [1, 2], [1, 3]] and found.extra["sweep"] is None
    assert found.frame["token"].tolist() == [t.text for t in found.found.tokens]
    assert found.frame["change"].tolist() == found.found.change
    assert [rounded(v) for v in found.frame["change"][:-1]] == expected["kl_per_position"]
    same = ablation(model, tokenizer, TEXT, [(0, 1), (1, 0), (1, 1), (1, 2), (1, 3)], mode="mean")
    assert same.json == found.json  # pairs, as typed or as tuples


def test_the_estimate_is_the_labs_on_the_clis_model(folder, held):
    """No command prints the ablation estimate: the same lab function on the model the command line loads."""
    model, tokenizer = held
    source = open_source(SourceSpec(str(folder), "cpu"))
    expected = estimate_ablation(source, TEXT, 256, "mean", graddrop=True)
    with left_as_it_was(model):
        found = estimate(model, tokenizer, TEXT, mode="mean", graddrop=True)
    assert found.found.values == expected.values and found.found.graddrop == expected.graddrop
    assert found.found.flags() == expected.flags()
    assert {k: v for k, v in found.json.items() if k != "seconds"} == {
        k: v for k, v in expected.to_json().items() if k != "seconds"
    }
    assert found.frame["estimate"].tolist() == [v for row in expected.values for v in row]
    assert list(found.frame.columns) == ["layer", "head", "estimate", "graddrop", "saturated", "cancelling"]


def test_patching_is_the_clis(capsys, folder, held):
    model, tokenizer = held
    argv = ("patch", TEXT, CORRUPT, "--model", str(folder), "--metric", METRIC, "--estimate", "--positions", "1.2")
    expected = cli_json(capsys, *argv, "--quiet")
    with left_as_it_was(model):
        found = patching(model, tokenizer, TEXT, CORRUPT, metric=METRIC, estimate=True, positions="1.2")
    value = as_printed(found.json)
    for estimated in (value["estimate"], expected["estimate"]):
        estimated.pop("seconds")  # its own time
    assert value == expected
    assert expected["positions"]["head"] == "1.2" and len(found.figures) == 3  # exact, estimated, positions
    flat = [v for row in found.found.effects for v in row]
    assert found.frame["effect"].tolist() == flat and None not in flat
    assert found.frame["estimate"].tolist() == [v for row in found.found.estimate.values for v in row]


def test_direct_logits_are_the_clis(capsys, folder, held):
    model, tokenizer = held
    argv = ("logits", TEXT, "--model", str(folder), "--token", " Mary", "--position", "-3", "--quiet")
    expected = cli_json(capsys, *argv)
    with left_as_it_was(model):
        found = direct_logits(model, tokenizer, TEXT, token=" Mary", position=-3)
    assert as_printed(found.json) == expected
    assert expected["position"] == len(expected["tokens"]) - 3
    assert found.frame["contribution"].tolist() == [v for row in expected["heads"] for v in row]
    assert len(found.figures) == 2  # the layer x head map, the top head at every position


def leaking_mask(n: int = 8) -> torch.Tensor:
    """A causal keep mask with one future key let through: query 2 sees key 6."""
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    mask[2, 6] = True
    return mask


def test_the_mask_doctor_finds_a_leak_as_the_cli_does(capsys, tmp_path):
    mask = leaking_mask()
    path = tmp_path / "mask.npy"
    np.save(path, mask.numpy())
    code = cli.main(["mask-doctor", str(path), "--expect", "causal", "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err  # problems found
    expected = json.loads(captured.out)
    found = mask_doctor(mask, expect="causal")
    assert as_printed(found.json) == expected
    assert expected["problems"] == [{"kind": "future_leak", "count": 1, "examples": [[2, 6]]}]
    assert found.frame["kind"].tolist() == ["future_leak"] and "6" in found.frame["message"][0]
    (marks,) = [trace for trace in found.figure.data if trace.type == "scatter"]
    assert (list(marks.x), list(marks.y)) == (["6"], ["2"])  # the leaking cell, marked on the page's picture
    assert as_printed(mask_doctor(mask.to(torch.int64).numpy(), expect="causal").json) == expected  # 0/1 integers


def test_a_lab_the_model_cannot_do_says_why_in_one_line(capsys, tmp_path):
    """An encoder-decoder's heads' outputs cannot be read or replaced: the command line's sentence, one line."""
    where = tiny_seq2seq(tmp_path / "tiny-bart", "bart")
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(where), AutoTokenizer.from_pretrained(where)
    capsys.readouterr()  # the progress bars of saving and loading it
    code = cli.main(["patch", TEXT, CORRUPT, "--model", str(where), "--metric", "loss", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    with left_as_it_was(model):
        for run in (
            lambda: patching(model, tokenizer, TEXT, CORRUPT, metric="loss"),
            lambda: direct_logits(model, tokenizer, TEXT),
            lambda: estimate(model, tokenizer, TEXT),
        ):
            with pytest.raises(ModelUnavailableError) as raised:
                run()
            assert "\n" not in str(raised.value) and "cannot read or replace its heads' outputs" in str(raised.value)
            assert err.strip() == f"attnviz patch: error: {raised.value}"


def test_an_encoder_is_patched_by_its_hidden_states_and_has_no_logit(capsys):
    """MiniLM as a notebook holds it: patched by the change of its last hidden states (the page's metric for an
    encoder, which no command offers: the lab on the model the command line loads), and no logit to attribute, in
    the command line's words."""
    from attnviz.labs.heads_matter import patching as lab

    where = minilm_dir()
    model, tokenizer = AutoModel.from_pretrained(where), AutoTokenizer.from_pretrained(where)
    clean, corrupt = "the cat sat on the mat because it was warm", "the dog sat on the mat because it was warm"
    source = open_source(SourceSpec(str(where), "cpu"))
    pair = lab.run_pair(source, clean, corrupt, 256, lab.Metric("hidden"))
    expected = lab.patch_result(pair, lab.patch_heads(source, pair, [(0, 0), (5, 11)]), 0.0, None)
    capsys.readouterr()
    assert cli.main(["logits", clean, "--model", str(where), "--quiet"]) == 2
    err = capsys.readouterr().err
    with left_as_it_was(model, input_ids=PROBE[:, :8]):
        found = patching(model, tokenizer, clean, corrupt, heads="0.0,5.11")
        assert found.json["metric"] == "hidden" and found.found.effects == expected.effects
        with pytest.raises(ModelUnavailableError, match="has no LM head") as raised:
            direct_logits(model, tokenizer, clean)
    assert err.strip() == f"attnviz logits: error: {raised.value}"


def test_over_the_budget_it_says_so_and_runs_when_asked(monkeypatch, held):
    """The command line's budget (SWEEP_BUDGET_S) against the time measured here: the tiny model's sweep times every
    head in its first pass (nothing left to predict), so the prediction of the rest is made long."""
    model, tokenizer = held
    monkeypatch.setattr("attnviz.cli.ablate.SWEEP_BUDGET_S", 1e-9)  # patching: any pass is over it
    monkeypatch.setattr(SweepBaseline, "seconds", lambda self, done=None: 1e6)
    with left_as_it_was(model):
        with pytest.raises(
            OverBudgetError,
            match=r"the sweep ablates 8 heads one at a time on 14 tokens, about 1,000,000 s here, over the sweep budget of 0 s.*over_budget=True",
        ) as raised:
            ablation(model, tokenizer, TEXT)
        assert "\n" not in str(raised.value)
        with pytest.raises(OverBudgetError, match=r"patching 8 heads on 14 tokens"):
            patching(model, tokenizer, TEXT, CORRUPT, metric=METRIC)
        assert (
            patching(model, tokenizer, TEXT, CORRUPT, metric=METRIC, over_budget=True).found.effects[1][2] is not None
        )


@pytest.mark.browser
def test_saved_outputs_draw_offline(browser, held, tmp_path):
    """Two outputs saved as a notebook saves them: the first carries plotly.js, the second uses it; opened as a file
    with every request refused, on a page with require.js's ``define`` (classic Jupyter, nbconvert), both draw."""
    model, tokenizer = held
    first, second = ablation(model, tokenizer, TEXT, "0.1"), mask_doctor(leaking_mask(), expect="causal")
    lab_result.forget_plotly()  # a new kernel
    shown = [first._repr_html_(), second._repr_html_()]
    assert "plotly.js v" in shown[0] and "plotly.js v" not in shown[1] and len(shown[1]) < len(shown[0]) // 50
    amd = "<script>window.define = function () { window.__amd = true; }; window.define.amd = {};</script>"
    path = tmp_path / "saved.html"
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'>{amd}</head><body>{''.join(shown)}</body></html>"
    )
    url, attempted = path.as_uri(), []
    page = browser.new_page()
    try:
        page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
        page.on("request", lambda r: r.url != url and not r.url.startswith("data:") and attempted.append(r.url))
        page.on("pageerror", lambda err: attempted.append(f"page error: {err}"))
        page.goto(url)
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2", timeout=20_000)
        drawn = page.evaluate("[...document.querySelectorAll('.js-plotly-plot')].map(p => p.data.length)")
        assert drawn == [1, 2]  # the bars; the mask and its leak marked
    finally:
        page.close()
    assert attempted == []
