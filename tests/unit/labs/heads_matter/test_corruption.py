"""The corrupted text patching proposes from a clean one (attnviz.labs.heads_matter.corruption), on a stand-in source whose
tokenizer reads one token a character: every proposal keeps the token length, each kind of swap is found where the
text has it (checked by hand), a swap that would change the length is passed over, and a text without one opens on
the built-in example pair."""

from __future__ import annotations

import pytest

from attnviz.core.tokenizer import Token
from attnviz.labs.heads_matter import corruption
from attnviz.models.source import Encoding


class CharSource:
    """A source that reads one token a character (what patching's proposal asks of a source: ``encode``)."""

    def encode(self, text: str, max_tokens: int) -> Encoding:
        tokens = [Token(ch, i, i + 1) for i, ch in enumerate(text)][:max_tokens]
        return Encoding(ids=[ord(t.text) for t in tokens], tokens=tokens, n_input=len(text))


SOURCE = CharSource()


@pytest.mark.parametrize(
    ("clean", "corrupt", "kind", "old", "new"),
    [
        # a repeated name: its last use becomes the other name (the indirect-object prompt's corruption)
        (corruption.EXAMPLE_CLEAN, corruption.EXAMPLE_CORRUPT, "repeated_name", "John", "Mary"),
        # two names, none repeated: they are exchanged (any lengths: the exchange keeps the text's length)
        ("Alice gave Bob a book because", "Bob gave Alice a book because", "swapped_names", "Alice", "Bob"),
        # one name: the first other name of as many characters (Emma -> Mary; Alice's 5 would change the length)
        ("Yesterday Emma went to the park and", "Yesterday Mary went to the park and", "other_name", "Emma", "Mary"),
        # a number: its last two digits 01 (the greater-than prompt's corruption)
        ("The war lasted from 1732 to 17", "The war lasted from 1701 to 17", "number", "1732", "1701"),
        # a known subject, swapped everywhere with its case kept
        ("The cat sat on the mat. Cats purr; the cat slept.", None, None, None, None),
        ("Cat food for the cat", "Dog food for the dog", "subject", "cat", "dog"),
        ("猫坐在垫子上，因为它累了。", "狗坐在垫子上，因为它累了。", "subject", "猫", "狗"),
    ],
)
def test_each_kind_of_swap_is_proposed_at_the_same_token_length(clean, corrupt, kind, old, new):
    found = corruption.propose_swap(SOURCE, clean, 256)
    if corrupt is None:  # "Cats" is not the word "cat": only the whole words change
        assert found.corrupt == "The dog sat on the mat. Cats purr; the dog slept." and found.kind == "subject"
        return
    assert (found.clean, found.corrupt, found.kind, found.old, found.new) == (clean, corrupt, kind, old, new)
    assert len(SOURCE.encode(found.corrupt, 256).tokens) == len(SOURCE.encode(clean, 256).tokens)
    assert found.message.key == f"patch_proposal.{kind}" and found.message.values["new"] == new


def test_names_come_before_a_number_and_a_number_before_a_subject():
    assert corruption.propose_swap(SOURCE, "In 1999 Mary fed the cat", 256).kind == "other_name"
    assert corruption.propose_swap(SOURCE, "In 1999 the cat slept", 256).kind == "number"


def test_a_swap_that_changes_the_token_length_is_passed_over():
    """Michael is the only 7-letter name: a text naming him once has no other name of his length, so the number is
    swapped instead (9 -> 4); with no number either, nothing is proposed."""
    assert corruption.propose_swap(SOURCE, "Michael left at 9", 256).corrupt == "Michael left at 4"
    assert corruption.propose_swap(SOURCE, "Michael left early", 256) is None


def test_a_swap_past_the_token_limit_changes_nothing_read_and_is_not_proposed():
    """The name lies past the 10 tokens read: the texts read the same, so the swap is no corruption."""
    assert corruption.propose_swap(SOURCE, "It was late when Mary left", 10) is None


def test_a_text_with_no_swap_opens_on_the_built_in_example_and_says_so():
    found = corruption.propose(SOURCE, "The weather is nice today.", 256)
    assert (found.clean, found.corrupt, found.kind) == (
        corruption.EXAMPLE_CLEAN,
        corruption.EXAMPLE_CORRUPT,
        "example",
    )
    words = str(found.message)
    assert "no swap" in words and corruption.EXAMPLE_CLEAN in words and corruption.EXAMPLE_CORRUPT in words
    assert corruption.propose(SOURCE, "", 256).kind == "example"


def test_every_kind_says_what_it_changed_in_both_languages():
    from attnviz.i18n.catalogue import catalogue

    for kind in corruption.KINDS:
        proposal = corruption.Proposal("a John", "a Mary", kind, "John", "Mary")
        for lang in ("en", "zh"):
            assert proposal.message.key in catalogue(lang)
            assert "Mary" in proposal.message.render(lang)
