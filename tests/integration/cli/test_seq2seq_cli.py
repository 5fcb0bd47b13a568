"""``heads`` on an encoder-decoder: a source and a target (typed or written by the model), and a ``stack`` and
``kind`` on each head entry; one line and exit 2 for what it cannot take."""

import json

import pytest

from tests.cli import attnviz
from tests.integration.tiny_models import tiny_seq2seq

SELF_KEYS = {"entropy", "entropy_norm", "max_weight", "first_token_weight", "prev_token_weight", "self_weight"}
CROSS_KEYS = {"entropy", "entropy_norm", "max_weight", "first_token_weight", "alignment_offset", "monotonicity"}


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return tiny_seq2seq(tmp_path_factory.mktemp("cli") / "t5", "t5")


def test_heads_with_a_target(t5):
    proc = attnviz("heads", "The cat sat.", "--model", t5, "--target", "Die Katze sass.", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["tokens"] == ["[CLS]", "The", "cat", "sat", ".", "[SEP]"]
    assert result["target_tokens"][0] == "[PAD]"  # T5's decoder starts from its pad token
    assert result["target_tokens"][1:] == ["[CLS]", "Die", "Katz", "·e", "sas", "·s", ".", "[SEP]"]  # all the target
    assert result["generated"] is False and result["target"] == "die katze sass."
    kinds = [(entry["stack"], entry["kind"]) for entry in result["stats"]]
    assert kinds == [("encoder", "self")] * 8 + [("decoder", "causal")] * 8 + [("decoder", "cross")] * 8
    assert set(result["stats"][0]) >= SELF_KEYS and set(result["stats"][8]) >= SELF_KEYS
    assert set(result["stats"][16]) >= CROSS_KEYS and "prev_token_weight" not in result["stats"][16]
    assert result["n_decoder_layer"] == 2 and result["n_decoder_head"] == 4


def test_heads_with_the_models_own_target(t5):
    proc = attnviz("heads", "The cat sat.", "--model", t5, "--generate", "3", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["generated"] is True
    assert 2 <= len(result["target_tokens"]) <= 4  # the start token, then what it wrote


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["--generate", "0"], "--generate must be 1 to 64, not 0"),
        (["--generate", "65"], "--generate must be 1 to 64, not 65"),
        (["--target", " "], "--target is empty"),
        (["--target", "a", "--generate", "2"], "give --target TEXT or --generate N, not both"),
        (["--parity"], "--parity: an encoder-decoder runs on its own eager attention"),
    ],
)
def test_what_it_cannot_take_is_one_line(t5, extra, line):
    proc = attnviz("heads", "The cat sat.", "--model", t5, "--quiet", *extra)
    assert proc.returncode == 2
    assert line in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_target_for_a_model_of_one_text_is_one_line():
    proc = attnviz("heads", "The cat sat.", "--target", "x", "--quiet")
    assert proc.returncode == 2
    assert "--target and --generate are for encoder-decoders" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_generating_on_a_decoder_deeper_than_its_encoder(tmp_path):
    """transformers sizes generate's cache by the config's num_hidden_layers (T5's num_layers, the encoder's):
    with three decoder layers on two encoder layers the third failed with "list index out of range"."""
    import torch

    from attnviz.models.hf.loading import load_hf_source

    deep = tiny_seq2seq(tmp_path / "t5", "t5", num_layers=2, num_decoder_layers=3)
    proc = attnviz("heads", "The cat sat.", "--model", deep, "--generate", "4", "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["n_layer"] == 2 and result["n_decoder_layer"] == 3 and result["generated"] is True
    source = load_hf_source(str(deep))
    ids = source.encode("The cat sat.", 64).ids
    uncached = source.whole.generate(
        input_ids=torch.tensor([ids]), max_new_tokens=4, min_new_tokens=1, do_sample=False, num_beams=1,
        decoder_start_token_id=source.start_id, use_cache=False,
    )  # fmt: skip
    assert source.greedy_target(ids, 4) == uncached[0, 1:].tolist()  # the same tokens as without a cache
