"""``source.run_statistics`` against ``heads --json`` of each text run alone: every source, batched and padded.

A statistics pass runs its texts as one right-padded batch, on the reference route by default and on the fused one
(attnviz.core.capture.fused) where ``STATISTICS_ROUTE`` is "fused" and a layer's mask allows. A text alone on the
reference route gets exactly ``heads_json(source.run(text, ...))["stats"]``; otherwise the two agree within a
bound derived here (STYLE §22, tests/tolerances.py):

- the fused route against the reference, per row: ``bound("row_statistics")`` (a score of ≤ 128 products of size
  ≤ 8 rounded differently; a weight moves by at most that, an entropy sums weight errors that cancel);
- the pass itself: a padded batch runs the model's matmuls on another shape and the fused route's outputs feed the
  next layer, so a score is off by the rounding of the whole forward that feeds it,
  ``derived_bound("float32", 8, forward_depth(n_layer, d_model, d_ff))`` (which also covers the entropy's
  lse - E[s], a sum over T·head_dim ≤ that depth); in bfloat16 the outputs are rounded to bfloat16 between layers,
  so one bfloat16 step of a weight, the table's bound (tolerance("cpu", "bfloat16", ...));
- a statistic is a mean over rows of such values: no larger; mean distance is in tokens, so times T - 1, and
  entropy_norm divides by log(visible keys) ≥ log 2;
- both sides are rounded to 6 places: one step (1e-6) more.

The reference route in a padded batch has only the pass's part of the bound (the same kernel on every row).
"""

import math

import pandas as pd
import pytest
import torch

from attnviz.cli.heads import heads_json, pair_json
from attnviz.core.capture import fused
from attnviz.core.devices import Placement
from attnviz.models.hf.loading import load_hf_source
from attnviz.models.registry import embedded_spec, open_source
from attnviz.models.statistics import TextStatistics
from attnviz.settings import TARGET_GENERATED
from tests.integration.tiny_models import tiny, tiny_seq2seq
from tests.tolerances import bound, derived_bound, forward_depth, tolerance

TEXTS = [
    "The cat sat on the mat because it was tired.",
    "Hi",
    "Attention lets every token look at every other token and decide how much each one matters.",
    "one two three",
]
MAX_TOKENS = 48
ROUNDING = 1e-6  # heads --json rounds to 6 places


def expected_frame(source, text: str) -> pd.DataFrame:
    return pd.DataFrame(heads_json(source.run(text, MAX_TOKENS, keep_qk=False), text)["stats"])


def limit(name: str, n_tokens: int, per_row: float) -> float:
    """The bound of statistic ``name`` (the module's derivation); 0 where the two sides are the same arithmetic."""
    if per_row == 0.0:
        return 0.0
    scale = {"entropy_norm": 1 / math.log(2), "mean_distance": max(n_tokens - 1, 1)}.get(name, 1.0)
    return per_row * scale + ROUNDING


def float32_row_bound(config) -> float:
    """The fused route in a padded batch: the route's per-row bound and the pass's (the module's first two items)."""
    return bound("row_statistics") + pass_bound(config)


def assert_frames_close(got: TextStatistics, expected: pd.DataFrame, per_row: float) -> None:
    frame = got.frame
    assert list(frame.columns) == list(expected.columns)
    assert frame["layer"].tolist() == expected["layer"].tolist() and frame["head"].tolist() == expected["head"].tolist()
    for column in ("stack", "kind", "flags"):
        if column in expected:
            assert frame[column].tolist() == expected[column].tolist(), column
    for name in expected.columns:
        if name in ("stack", "kind", "layer", "head", "flags"):
            continue
        want = expected[name].astype(float).to_numpy()  # null -> NaN
        have = frame[name].astype(float).to_numpy()
        assert (pd.isna(want) == pd.isna(have)).all(), name
        both = ~pd.isna(want)
        worst = float(abs(have[both] - want[both]).max()) if both.any() else 0.0
        assert worst <= limit(name, got.n_tokens, per_row), f"{name}: {worst:.3g}"


@pytest.fixture
def fused_route(monkeypatch):
    """Statistics passes take the fused route where a layer's mask allows (the default is the reference)."""
    monkeypatch.setattr(fused, "STATISTICS_ROUTE", "fused")


def check_batch(source, per_row: float, routes: set[str]) -> list[TextStatistics]:
    results = source.run_statistics(TEXTS, MAX_TOKENS)
    assert len(results) == len(TEXTS)
    for text, result in zip(TEXTS, results, strict=True):
        encoding = source.encode(text, MAX_TOKENS)
        assert result.n_tokens == len(encoding.ids) and result.n_input_tokens == encoding.n_input
        assert set(result.routes) == routes
        assert_frames_close(result, expected_frame(source, text), per_row)
    assert len({r.n_tokens for r in results}) > 2  # texts of different lengths: the batch was padded
    return results


def pass_bound(config) -> float:
    """A padded batch's own rounding: the forward that feeds a score, on another shape (the module's second item)."""
    depth = forward_depth(config.num_hidden_layers, config.hidden_size, getattr(config, "intermediate_size", None))
    return derived_bound("float32", 8.0, depth)


@pytest.mark.parametrize("key", ["smollm2", "minilm"])
def test_bundled_models_in_one_padded_batch(request, key):
    source = request.getfixturevalue(key)
    results = check_batch(source, pass_bound(source.config), {"reference"})
    if key == "smollm2":
        assert results[1].n_tokens == 1  # "Hi" is one token: no row with a choice, every statistic NaN
        assert results[1].frame["entropy"].isna().all()


@pytest.fixture(scope="module")
def folders(tmp_path_factory, smollm2):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("run_statistics")
    sizes = {"max_position_embeddings": 64}
    return {
        "llama": tiny(root / "llama", smollm2, LlamaConfig, LlamaForCausalLM, **sizes),
        "gpt2": tiny(root / "gpt2", smollm2, GPT2Config, GPT2LMHeadModel, n_embd=64, n_head=4, n_layer=2, **sizes),
        "bert": tiny(root / "bert", smollm2, BertConfig, BertModel, **sizes),
    }


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
def test_tiny_families_on_the_fused_route(folders, family, fused_route):
    source = load_hf_source(str(folders[family]))
    check_batch(source, float32_row_bound(source.config), {"fused"})


def test_bfloat16_on_the_fused_route(folders, fused_route):
    source = load_hf_source(str(folders["llama"]), placement=Placement("bfloat16"))
    assert source.dtype == torch.bfloat16
    per_row = tolerance("cpu", "bfloat16", "entropy")  # the table's largest row bound in bfloat16
    check_batch(source, per_row, {"fused"})


def test_a_text_alone_is_exact(smollm2, monkeypatch):
    """A batch of one runs as ``run`` runs a text (no padding mask): on the reference route the same numbers
    exactly; on the fused route within its bound."""
    (result,) = smollm2.run_statistics([TEXTS[0]], MAX_TOKENS)
    assert set(result.routes) == {"reference"}
    assert_frames_close(result, expected_frame(smollm2, TEXTS[0]), 0.0)
    monkeypatch.setattr(fused, "STATISTICS_ROUTE", "fused")
    (result,) = smollm2.run_statistics([TEXTS[0]], MAX_TOKENS)
    assert set(result.routes) == {"fused"}
    assert_frames_close(result, expected_frame(smollm2, TEXTS[0]), float32_row_bound(smollm2.config))


def test_embedded_model_is_exact():
    source = open_source(embedded_spec("cpu"))
    for text, result in zip(TEXTS[:2], source.run_statistics(TEXTS[:2], MAX_TOKENS), strict=True):
        assert set(result.routes) == {"reference"}
        assert_frames_close(result, expected_frame(source, text), 0.0)


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_encoder_decoders_text_by_text(tmp_path, family):
    """Each text the source, the model writing its target: each kind's rows with stack and kind, as ``heads``."""
    source = load_hf_source(str(tiny_seq2seq(tmp_path / family, family)))
    results = source.run_statistics(TEXTS[:2], MAX_TOKENS)
    for text, result in zip(TEXTS[:2], results, strict=True):
        pair = source.run_pair(text, "", MAX_TOKENS, n_generate=TARGET_GENERATED)
        expected = pd.DataFrame(pair_json(pair, text)["stats"])
        assert set(result.routes) == {"eager"} and result.n_tokens == len(pair.source_tokens)
        assert list(result.frame["stack"].unique()) == ["encoder", "decoder"]
        assert_frames_close(result, expected, 0.0)


def test_a_text_with_no_tokens(smollm2):
    """An empty text beside others: no row, so every statistic NaN; alone there is nothing to run."""
    empty, other = smollm2.run_statistics(["", "Hi there"], MAX_TOKENS)
    assert empty.n_tokens == 0 and other.n_tokens == 2
    assert empty.frame.drop(columns=["layer", "head", "flags"]).isna().all().all()
    with pytest.raises(ValueError):
        smollm2.run_statistics([""], MAX_TOKENS)
