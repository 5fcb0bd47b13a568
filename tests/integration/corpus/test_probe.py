"""The repeated-random-token probe (attnviz.labs.corpus.probe) against answers known without it.

- A GPT-2 whose weights are set by hand (tests/integration/corpus/induction_model.py): a previous-token head, an
  induction head composed on it, a head that attends uniformly and a previous-token head that writes the next
  token. Each head's attention on the probe's sequences is known exactly in the limit of hard attention, so its
  induction and duplicate scores are too; the copying head must score positive and the others not.
- TransformerLens' definition of the induction score, written here from transformers' own eager weights
  (``output_attentions=True``): the pattern's diagonal at offset 1 - L, over the repeated half, on SmolLM2 (read
  through attnviz's capture) and a tiny GPT-Neo (read from its own eager attention, a local layer among them).
- What every kind of source gives: an encoder (MiniLM: no LM head, copying NaN and said why), the embedded model
  (words, not ids) and an encoder-decoder (rows by stack and kind, cross-attention NaN and said why).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from attnviz.labs.corpus.probe import PROBE_COLUMNS, induction_probe
from attnviz.models.hf.loading import load_hf_source
from tests.integration.corpus import induction_model as hand
from tests.integration.tiny_models import tiny, tiny_seq2seq
from tests.tolerances import bound

L, N_SEQS = 10, 4


@pytest.fixture(scope="module")
def hand_built(tmp_path_factory):
    return load_hf_source(str(hand.build(tmp_path_factory.mktemp("induction") / "hand")))


@pytest.fixture(scope="module")
def hand_runs() -> torch.Tensor:
    """Runs of the hand-built model's ordinary tokens (1 … V - 1; 0 is its special token), (N_SEQS, L)."""
    return torch.randint(1, hand.V, (N_SEQS, L), generator=torch.Generator().manual_seed(7))


def ideal_scores(runs: torch.Tensor) -> dict[tuple[int, int], tuple[float, float]]:
    """Each hand-built head's (induction, duplicate) under hard attention, from the design alone.

    Layer 1 head 0 attends evenly to every key j <= i whose PREV holds i's token: the token before j, or, at j = 0
    (whose previous-token head could only attend to itself), token 0's own. The previous-token heads put all their
    weight on i - 1 (never i - L + 1 or i - L for L > 2); the zero head attends evenly to the i + 1 keys it sees."""
    induction = duplicate = uniform = 0.0
    for row in runs.tolist():
        tokens = row + row
        previous = [tokens[0], *tokens[:-1]]
        for i in range(L, 2 * L):
            matches = [j for j in range(i + 1) if previous[j] == tokens[i]]
            induction += (i - L + 1 in matches) / len(matches)
            duplicate += (i - L in matches) / len(matches)
            uniform += 1.0 / (i + 1)
    n = runs.shape[0] * L
    return {
        hand.INDUCTION_HEAD: (induction / n, duplicate / n),
        hand.PREVIOUS_TOKEN_HEAD: (0.0, 0.0),
        (0, 1): (uniform / n, uniform / n),
        hand.SHIFT_HEAD: (0.0, 0.0),
    }


def hard_attention_bound(n_keys: int) -> float:
    """How far the model's softmax lies from hard attention: each of at most ``n_keys`` keys a head should not see
    keeps exp(-gap) of the weight. The design's gap is SHARP x s^2 / sqrt(head_dim), s^2 = D / n_ones the
    LayerNorm'd one-hot's square (layer 1 reads 3 ones: about 22); what the stream holds besides the one-hots
    (LayerNorm's constant, the writes of imperfect attention) leaves at least half of it (safety factor 2 in the
    exponent), plus float32's rounding of the weights (the attention bound)."""
    gap = hand.SHARP * (hand.D / 3) / math.sqrt(hand.HEAD_DIM)
    return n_keys * math.exp(-gap / 2) + bound("attention")


def test_hand_built_induction_head(hand_built, hand_runs):
    assert hand_built.encode("t5", 8).ids == [5]  # no special tokens around a text: the runs start at position 0
    frame = induction_probe(hand_built, runs=hand_runs)
    assert list(frame.columns) == ["layer", "head", *PROBE_COLUMNS] and len(frame) == 4
    assert frame.attrs["seq_len"] == L and frame.attrs["notes"] == {}
    tolerance = hard_attention_bound(2 * L)
    scores = frame.set_index(["layer", "head"])
    for head, (induction, duplicate) in ideal_scores(hand_runs).items():
        assert scores.induction[head] == pytest.approx(induction, abs=tolerance), head
        assert scores.duplicate[head] == pytest.approx(duplicate, abs=tolerance), head
    assert scores.induction[hand.INDUCTION_HEAD] > 0.9  # near 1: the probe finds the induction head
    assert scores.induction.drop(hand.INDUCTION_HEAD).max() < 0.2  # and nothing else
    drawn = induction_probe(hand_built, seq_len=L, n_seqs=N_SEQS, seed=3).set_index(["layer", "head"]).induction
    assert drawn[hand.INDUCTION_HEAD] > 0.9 and drawn.drop(hand.INDUCTION_HEAD).max() < 0.2  # its own runs too


def test_copying_tells_a_copying_head(hand_built, hand_runs):
    """The induction head's OV copies (TOK[v] to TOK[v]): it raises the logit of the token it attends to, by about
    one LayerNorm'd unit through the tied unembedding. The shifted head writes TOK[v + 1]: the attended token's
    logit falls below the vocabulary's mean. The previous-token head writes PREV, which the unembedding does not
    read (after the final norm's centring, it moves every logit alike): 0; the zero head writes nothing: 0."""
    copying = induction_probe(hand_built, runs=hand_runs).set_index(["layer", "head"]).copying
    assert copying[hand.INDUCTION_HEAD] > 1.0
    assert copying[hand.SHIFT_HEAD] < 0.0
    assert abs(copying[hand.PREVIOUS_TOKEN_HEAD]) < 1e-3 and copying[(0, 1)] == 0.0
    assert copying[hand.INDUCTION_HEAD] == copying.max()


def transformer_lens_scores(folder, runs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TransformerLens' ``induction_score`` written out: each pattern's diagonal at offset 1 - L (query i, key
    i - L + 1), here over the repeated half only (TransformerLens' own stripe also holds the two first-half queries
    before it), averaged over sequences and queries; beside it the duplicate-token stripe at offset -L. The
    patterns are transformers' eager attention's on a fresh load of ``folder``, on the runs repeated (a model that
    reads no BOS): (n_layer, n_head) each."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    L = runs.shape[1]
    with torch.no_grad():
        patterns = model(input_ids=torch.cat([runs, runs], dim=1), output_attentions=True).attentions
    induction = torch.stack([p.diagonal(offset=1 - L, dim1=-2, dim2=-1)[..., -L:].mean(dim=(0, 2)) for p in patterns])
    duplicate = torch.stack([p.diagonal(offset=-L, dim1=-2, dim2=-1)[..., -L:].mean(dim=(0, 2)) for p in patterns])
    return induction.double(), duplicate.double()


def check_against_transformer_lens(source, folder, runs: torch.Tensor) -> pd.DataFrame:
    """The probe's scores equal TransformerLens' on the same ids: two routes in float32 (attnviz's capture, or the
    model's own eager attention, against a fresh eager load), each weight within the attention bound, and so is a
    mean of weights."""
    assert source.encode("a", 8).ids == source.token_ids("a")  # no BOS or other special: the ids are the runs
    frame = induction_probe(source, runs=runs).set_index(["layer", "head"]).sort_index()
    induction, duplicate = transformer_lens_scores(folder, runs)
    shape = induction.shape
    assert frame.induction.to_numpy().reshape(shape) == pytest.approx(induction.numpy(), abs=bound("attention"))
    assert frame.duplicate.to_numpy().reshape(shape) == pytest.approx(duplicate.numpy(), abs=bound("attention"))
    return frame


def test_transformer_lens_definition_on_smollm2(smollm2):
    """SmolLM2 through attnviz's capture (the ``attn`` point): it has induction heads, so the comparison is not
    of near-zeros alone."""
    from attnviz.models.hf.bundled import prepared_folder

    runs = torch.randint(3, smollm2.config.vocab_size, (1, L), generator=torch.Generator().manual_seed(1))
    frame = check_against_transformer_lens(smollm2, prepared_folder("smollm2"), runs)
    assert frame.induction.max() > 0.5 and frame.copying.notna().all()


def test_transformer_lens_definition_on_the_eager_route(tmp_path, smollm2):
    """GPT-Neo runs on its own eager attention in attnviz (no ``attn`` point: the probe reads the weights the model
    returns), its second layer local (a window of 8 keys: i - L + 1 is out of its reach, so its scores are 0)."""
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    sizes = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "window_size": 8, "max_position_embeddings": 64}
    sizes["attention_types"] = [[["global", "local"], 1]]
    folder = tiny(tmp_path / "neo", smollm2, GPTNeoConfig, GPTNeoForCausalLM, initializer_range=0.3, **sizes)
    source = load_hf_source(str(folder))
    assert "attn" not in source.hook_points
    runs = torch.randint(3, smollm2.config.vocab_size, (2, L), generator=torch.Generator().manual_seed(2))
    frame = check_against_transformer_lens(source, folder, runs)
    assert (frame.loc[1].induction == 0).all() and (frame.loc[0].induction > 0).all()


def test_encoder_reads_no_copying(minilm):
    frame = induction_probe(minilm, seq_len=6, n_seqs=2)
    assert len(frame) == minilm.n_layer * minilm.n_head
    assert frame.induction.between(0, 1).all() and frame.duplicate.between(0, 1).all()
    assert frame.copying.isna().all() and frame.attrs["notes"] == {"copying": "it has no LM head"}


def test_a_source_without_a_vocabulary():
    """The embedded model reads words, not ids: the probe draws words, and copying has no unembedding to read."""
    from attnviz.models.embedded.config import EmbeddedConfig
    from attnviz.models.embedded.model import EmbeddedModel

    source = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=2, causal=True))
    frame = induction_probe(source, seq_len=6, n_seqs=2)
    assert len(frame) == 8 and frame.induction.between(0, 1).all() and frame.duplicate.between(0, 1).all()
    assert frame.copying.isna().all() and frame.attrs["notes"] == {"copying": "it reads no token ids"}


def test_encoder_decoder_by_kind(tmp_path):
    source = load_hf_source(str(tiny_seq2seq(tmp_path / "bart", "bart")))
    frame = induction_probe(source, seq_len=6, n_seqs=2)
    assert list(frame.columns) == ["stack", "kind", "layer", "head", *PROBE_COLUMNS]
    kinds = frame.groupby(["stack", "kind"]).size().to_dict()
    assert kinds == {("decoder", "causal"): 8, ("decoder", "cross"): 8, ("encoder", "self"): 8}
    within = frame[frame.kind != "cross"]
    assert within.induction.between(0, 1).all() and within.duplicate.notna().all()
    assert frame[frame.kind == "cross"][list(PROBE_COLUMNS)].isna().all().all()
    assert set(frame.attrs["notes"]) == {"cross", "copying"}
