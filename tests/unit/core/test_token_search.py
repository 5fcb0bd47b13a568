"""Token search on hand-made tokens: single tokens, spans of several, words in pieces, case, overlaps, context
edges, the result cap, empty and huge queries."""

from attnviz.core.token_search import MAX_QUERY_CHARS, find_tokens, normalised_query, search_text
from attnviz.core.tokenizer import Token, tokenize

TEXT = "The cat sat on the mat because it was tired."
TOKENS = tokenize(TEXT)  # The cat sat on the mat because it was tired .


def spans(result) -> list[tuple[int, int]]:
    return [(o.index, o.stop) for o in result.occurrences]


def test_the_searchable_text_reads_as_the_source():
    assert search_text(TOKENS).text == "the cat sat on the mat because it was tired."
    assert search_text(TOKENS, match_case=True).text == TEXT
    index = search_text(TOKENS)
    assert len(index.owner) == len(index.text)
    assert index.owner[:5] == [0, 0, 0, 1, 1]  # "The" is token 0; the space before "cat" belongs to "cat"


def test_a_single_token_and_a_span_of_several():
    result = find_tokens(TOKENS, "mat")
    assert spans(result) == [(5, 6)] and result.total == 1
    occurrence = result.occurrences[0]
    assert occurrence.matched == ("mat",)
    assert occurrence.before == ("cat", "sat", "on", "the") and occurrence.after == ("because", "it", "was", "tired")
    assert occurrence.cut_before and occurrence.cut_after
    result = find_tokens(TOKENS, "mat because")
    assert spans(result) == [(5, 7)] and result.occurrences[0].matched == ("mat", "because")
    assert spans(find_tokens(TOKENS, "  mat \n because ")) == [(5, 7)]  # any run of whitespace is one space
    assert spans(find_tokens(TOKENS, "tired.")) == [(9, 11)]  # "." follows "tired" with no space in the text
    assert spans(find_tokens(TOKENS, "at b")) == [(5, 7)]  # a piece of each


def test_a_word_split_into_pieces_is_found_whole_and_by_piece():
    # WordPiece-style pieces as display_tokens shows them, and SentencePiece/byte-level raw strings
    tokens = [
        Token("[CLS]", 0, 0, special=True, raw="[CLS]"),
        Token("un", 0, 2, raw="un"),
        Token("·believ", 2, 8, raw="##believ"),
        Token("·able", 8, 12, raw="##able"),
        Token("story", 13, 18, raw="story"),
        Token("[SEP]", 18, 18, special=True, raw="[SEP]"),
    ]
    assert search_text(tokens).text == "[cls] unbelievable story [sep]"
    result = find_tokens(tokens, "unbelievable")
    assert spans(result) == [(1, 4)] and result.occurrences[0].matched == ("un", "·believ", "·able")
    assert spans(find_tokens(tokens, "believ")) == [(2, 3)]
    assert spans(find_tokens(tokens, "eva")) == [(2, 4)]  # across two pieces
    assert spans(find_tokens(tokens, "[CLS] un")) == [(0, 2)]


def test_byte_level_tokens_with_spaces_in_their_spans_and_byte_pieces_of_one_character():
    # SmolLM2's offsets include the space before a word ("Ġcat" spans " cat"); 猫 is three byte pieces
    tokens = [
        Token("The", 0, 3, raw="The"),
        Token("cat", 3, 7, raw="Ġcat"),
        Token("猫(1/3)", 7, 9, raw="Ġç"),
        Token("猫(2/3)", 8, 9, raw="Į"),
        Token("猫(3/3)", 8, 9, raw="«"),
        Token("坐(1/2)", 9, 10, raw="åĿ"),
        Token("坐(2/2)", 9, 10, raw="Ĳ"),
        Token("⏎", 10, 11, raw="Ċ"),
        Token("New", 11, 14, raw="New"),
    ]
    assert search_text(tokens).text == "the cat 猫坐 new"
    assert spans(find_tokens(tokens, "猫")) == [(2, 5)]  # all three pieces of the character
    assert spans(find_tokens(tokens, "猫坐")) == [(2, 7)]
    assert spans(find_tokens(tokens, "坐 new")) == [(5, 9)]  # the newline token reads as a space
    assert spans(find_tokens(tokens, "the cat")) == [(0, 2)]


def test_case_insensitive_by_default_and_exact_when_asked():
    assert spans(find_tokens(TOKENS, "the")) == [(0, 1), (4, 5)]
    assert spans(find_tokens(TOKENS, "THE")) == [(0, 1), (4, 5)]
    assert spans(find_tokens(TOKENS, "The", match_case=True)) == [(0, 1)]
    assert find_tokens(TOKENS, "THE", match_case=True).total == 0
    assert normalised_query(" A  B ") == ("a b", False)
    # a character that grows when lowered ("İ" is two) keeps every later character on its own token
    tokens = tokenize("İstanbul and Ankara")
    assert spans(find_tokens(tokens, "ankara")) == [(2, 3)]


def test_overlapping_matches_count_once_per_place():
    tokens = [Token("na", 0, 2), Token("·na", 2, 4), Token("·na", 4, 6)]
    result = find_tokens(tokens, "nana")
    assert spans(result) == [(0, 2), (1, 3)] and result.total == 2  # "nanana" holds "nana" at 0 and 2
    result = find_tokens(tokenize("banana"), "ana")  # twice inside one token: one place
    assert spans(result) == [(0, 1)] and result.total == 1


def test_context_stops_at_the_start_and_the_end():
    first = find_tokens(TOKENS, "the cat").occurrences[0]
    assert first.before == () and not first.cut_before
    assert first.after == ("sat", "on", "the", "mat") and first.cut_after
    last = find_tokens(TOKENS, ".").occurrences[0]
    assert (last.index, last.stop) == (10, 11)
    assert last.before == ("mat", "because", "it", "was", "tired")[-4:] and last.cut_before
    assert last.after == () and not last.cut_after
    near = find_tokens(TOKENS, "it", context=2).occurrences[0]
    assert near.before == ("mat", "because") and near.after == ("was", "tired")


def test_results_are_capped_and_all_counted():
    tokens = tokenize(" ".join(["cat", "dog"] * 100))
    result = find_tokens(tokens, "cat", limit=20)
    assert result.total == 100 and len(result.occurrences) == 20
    assert [o.index for o in result.occurrences] == list(range(0, 40, 2))  # the first twenty, in text order
    assert find_tokens(tokens, "cat dog cat").total == 99


def test_empty_absent_and_huge_queries():
    for query in ("", "   ", "\n\t"):
        result = find_tokens(TOKENS, query)
        assert result.total == 0 and result.occurrences == () and result.query == "" and not result.query_cut
    assert find_tokens(TOKENS, "zebra").total == 0
    assert find_tokens([], "cat").total == 0
    huge = find_tokens(TOKENS, "cat " * 25_000)  # 100,000 characters
    assert huge.query_cut and len(huge.query) <= MAX_QUERY_CHARS and huge.total == 0
    cut = find_tokens(TOKENS, "mat" + "x" * 100_000)
    assert cut.query_cut and cut.query == "mat" + "x" * (MAX_QUERY_CHARS - 3)


def test_special_characters_are_searched_literally():
    tokens = tokenize("a (b) [c]* d.e")
    assert spans(find_tokens(tokens, "(b)")) == [(1, 4)]
    assert spans(find_tokens(tokens, "[c]*")) == [(4, 8)]
    assert find_tokens(tokens, ".*").total == 0


def test_unknown_and_pad_tokens():
    tokens = [
        Token("猫[UNK]", 0, 1, raw="[UNK]", unknown=True),
        Token("cat", 2, 5),
        Token("[PAD]", 0, 0, special=True, pad=True, raw="[PAD]"),
    ]
    assert search_text(tokens).text == "猫 cat"
    assert spans(find_tokens(tokens, "猫 cat")) == [(0, 2)]
    assert find_tokens(tokens, "pad").total == 0
