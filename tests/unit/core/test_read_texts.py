"""Each token's own text as the model read it (attnviz.core.token_display.read_texts), what the command line prints:
a leading space kept where the tokenizer's token holds it, whether its span covers the space (byte-level BPE) or
not (SentencePiece, trimmed offsets); special tokens and byte pieces of one character as before."""

from attnviz.core.token_display import read_texts
from attnviz.core.tokenizer import Token


def test_a_token_that_holds_its_leading_space_reads_with_it():
    text = "When Mary  went"
    tokens = [
        Token("<s>", 0, 0, special=True, raw="<s>"),
        Token("When", 0, 4, raw="When"),
        Token("Mary", 4, 9, raw="ĠMary"),  # byte-level BPE: the span covers the space
        Token("␣", 9, 10, raw="Ġ"),
        Token("went", 11, 15, raw="▁went"),  # SentencePiece with trimmed offsets: the span does not
    ]
    assert read_texts(text, tokens) == ["<s>", "When", " Mary", " ", " went"]


def test_pieces_without_a_space_and_pieces_of_one_character_keep_their_text():
    text = "unbelievable 猫"
    tokens = [
        Token("un", 0, 2, raw="un"),
        Token("·believ", 2, 8, raw="##believ"),  # WordPiece: no space in the token, none added
        Token("·able", 8, 12, raw="##able"),
        Token("猫(1/2)", 12, 14, raw="Ġç"),  # two byte pieces share the character's span: as displayed
        Token("猫(2/2)", 13, 14, raw="Į"),
    ]
    assert read_texts(text, tokens) == ["un", "believ", "able", "猫(1/2)", "猫(2/2)"]


def test_a_token_without_a_span_keeps_its_display_text():
    assert read_texts("a b", [Token("a", 0, 0, raw="a")]) == ["a"]
