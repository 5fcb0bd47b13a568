"""Patching's first screen and one head patched at one position at a time.

- The corrupted text proposed from the clean one under SmolLM2's own tokenizer (checked by hand: names, a number,
  a subject, none), always of the clean text's token length, and the metric's default tokens, which never leave
  nothing to restore.
- Per-position patching equals a plain pre-hook on the model's output projection that takes one head's slice from
  the clean run at that one position (tests/integration/patching_reference.py), within the bound of two logits'
  roundings (tests/tolerances.py's derived_bound); every position at once is the head's whole patch; positions
  before the first changed token carry nothing.
"""

import pytest

from attnviz.labs.heads_matter import corruption, patching
from tests.integration import patching_reference as ref
from tests.tolerances import derived_bound

IOI_CLEAN = corruption.EXAMPLE_CLEAN
IOI_CORRUPT = corruption.EXAMPLE_CORRUPT


@pytest.mark.parametrize(
    ("clean", "corrupt", "kind"),
    [
        (IOI_CLEAN, IOI_CORRUPT, "repeated_name"),
        ("Alice gave Bob a book because", "Bob gave Alice a book because", "swapped_names"),
        (
            "The war lasted from the year 1732 to the year 17",
            "The war lasted from the year 1701 to the year 17",
            "number",
        ),
        (
            "The Eiffel Tower is in the city of Paris, the capital of",
            "The Eiffel Tower is in the city of Rome, the capital of",
            "subject",
        ),
        ("The weather is nice today.", IOI_CORRUPT, "example"),
    ],
)
def test_the_proposal_under_smollm2s_tokenizer(smollm2, clean, corrupt, kind):
    found = corruption.propose(smollm2, clean, 64)
    assert (found.corrupt, found.kind) == (corrupt, kind)
    assert len(smollm2.encode(found.corrupt, 64).tokens) == len(smollm2.encode(found.clean, 64).tokens)
    assert smollm2.encode(found.corrupt, 64).ids != smollm2.encode(found.clean, 64).ids


def test_the_default_tokens_leave_something_to_restore(smollm2):
    """The indirect-object pair: each text's own answer. "The cat …" / "The dog …": both texts' most likely next
    token is the same, so B is a swapped word, and says so; on both pairs the metric differs between the texts."""
    ioi = patching.default_tokens(smollm2, IOI_CLEAN, IOI_CORRUPT, 64, ("John", "Mary"))
    assert (ioi.a, ioi.b, ioi.note) == (" Mary", " John", None)
    cat = corruption.propose(smollm2, "The cat sat on the mat because it was tired.", 64)
    assert cat.corrupt == "The dog sat on the mat because it was tired."
    tokens = patching.default_tokens(smollm2, cat.clean, cat.corrupt, 64, cat.swapped)
    assert patching.top_next_token(smollm2, cat.clean, 64)[0] == patching.top_next_token(smollm2, cat.corrupt, 64)[0]
    assert tokens.a != tokens.b and tokens.b in (" cat", " dog") and tokens.note.key == "patch_tokens.swapped"
    for clean, corrupt, choice in ((IOI_CLEAN, IOI_CORRUPT, ioi), (cat.clean, cat.corrupt, tokens)):
        pair = patching.run_pair(smollm2, clean, corrupt, 64, patching.Metric("logit-diff", (choice.a, choice.b)))
        assert pair.gap != 0


FAMILIES = [("llama", "float32"), ("gpt2", "float32"), ("llama", "bfloat16")]


@pytest.mark.parametrize(("family", "dtype"), FAMILIES)
def test_one_position_at_a_time_equals_plain_hooks_at_that_position(tmp_path, smollm2, family, dtype):
    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement

    source = load_hf_source(str(ref.tiny_family(tmp_path / family, smollm2, family)), placement=Placement(dtype))
    pair = patching.run_pair(source, ref.CLEAN, ref.CORRUPT, 32, patching.parse_metric(ref.METRIC))
    tokens, n_depth, head_dim = pair.metric.ids, ref.depth(source.model, dtype), source.head_dim
    for layer, head in ref.HEADS[family]:
        found = patching.patch_positions(source, pair, (layer, head))
        assert found.head == (layer, head) and len(found.values) == pair.n_tokens == 2
        cut = slice(head * head_dim, (head + 1) * head_dim)
        projection = ref.projections(source.model)[layer]
        moved = 0.0
        for position in range(pair.n_tokens):
            last = ref.patched_logits(source, projection, cut, [position])
            expected = float(last[tokens[0]] - last[tokens[1]])
            bound = 2 * derived_bound(dtype, ref.logit_size(last, tokens), n_depth, ref.SAFETY[dtype])
            assert abs(found.values[position] - expected) <= bound, (family, dtype, layer, head, position)
            assert found.fractions[position] == pytest.approx((found.values[position] - pair.corrupt) / pair.gap)
            moved = max(moved, abs(expected - pair.corrupt) / bound)
        assert moved > 1, (family, dtype, layer, head)  # a position moves the metric past rounding: it can fail
        # every position at once is the head's whole patch
        last = ref.patched_logits(source, projection, cut)
        bound = 2 * derived_bound(dtype, ref.logit_size(last, tokens), n_depth, ref.SAFETY[dtype])
        (at_once,) = patching.patch_position_sets(source, pair, (layer, head), [list(range(pair.n_tokens))])
        whole = patching.patch_heads(source, pair, [(layer, head)])[(layer, head)]
        assert abs(at_once - whole) <= bound and abs(at_once - float(last[tokens[0]] - last[tokens[1]])) <= bound


def test_positions_before_the_swap_carry_nothing_on_smollm2(smollm2):
    """The indirect-object pair differs from its 10th token on (", John" / ", Mary"): a head patched at an earlier
    position gets the z it already has, so the metric stays the corrupted run's, within rounding; patching every
    position at once is the head's whole patch; the last position carries most of it. A position outside the text
    and a head the model lacks are refused."""
    pair = patching.run_pair(smollm2, IOI_CLEAN, IOI_CORRUPT, 64, patching.parse_metric("logit-diff: Mary, John"))
    first = next(i for i, (a, b) in enumerate(zip(pair.clean_ids, pair.corrupt_encoding.ids, strict=True)) if a != b)
    assert first == 9
    head = (23, 3)  # the name mover: its effect is at the last position
    found = patching.patch_positions(smollm2, pair, head)
    config = smollm2.model.config
    n_depth = ref.forward_depth(config.num_hidden_layers, config.hidden_size, config.intermediate_size)
    size = ref.logit_size(pair.corrupt_out[-1].double(), pair.metric.ids)
    bound = 2 * derived_bound("float32", size, n_depth, ref.SAFETY["float32"])
    assert all(abs(v - pair.corrupt) <= bound for v in found.values[:first]), (found.values[:first], bound)
    assert abs(found.values[-1] - pair.corrupt) > bound  # where the name mover reads the names: it can fail
    (at_once,) = patching.patch_position_sets(smollm2, pair, head, [list(range(pair.n_tokens))])
    whole = patching.patch_heads(smollm2, pair, [head])[head]
    assert abs(at_once - whole) <= bound
    # a stopped run's positions are kept: Continue runs only the rest (a kept value is not recomputed)
    kept = {0: 123.0, 1: found.values[1]}
    resumed = patching.patch_positions(smollm2, pair, head, done=kept)
    assert resumed.values[0] == 123.0 and set(kept) == set(range(pair.n_tokens))
    assert all(abs(a - b) <= bound for a, b in zip(resumed.values[1:], found.values[1:], strict=True))
    with pytest.raises(ValueError, match="outside the text"):
        patching.patch_position_sets(smollm2, pair, head, [[pair.n_tokens]])
    with pytest.raises(ValueError, match=r"head 30\.9 does not exist"):
        patching.patch_positions(smollm2, pair, (30, 9))
