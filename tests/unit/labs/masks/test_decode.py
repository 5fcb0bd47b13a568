"""The mask doctor on decode steps, chunks over a KV cache and packed documents: hand-built masks, exact cells."""

import pytest
import torch

from attnviz.core.masks import causal_mask, document_mask
from attnviz.labs.masks.builder import built_mask, custom_mask, decode_mask
from attnviz.labs.masks.doctor import Expectation, diagnose, expected_keep, parse_expect
from attnviz.labs.masks.gallery import diagnose_bug, gallery
from attnviz.labs.masks.reading import infer_convention

CAUSAL = Expectation("causal")
DOCS = parse_expect("documents:5,3,4")


def kinds(diagnosis) -> list[str]:
    return [p.kind for p in diagnosis.problems]


def problem(diagnosis, kind):
    return next(p for p in diagnosis.problems if p.kind == kind)


def notes(diagnosis) -> str:
    return " | ".join(str(note) for note in diagnosis.notes)


def test_a_decode_step_is_read_as_one_query_when_q_len_says_so():
    step = torch.ones(1, 8, dtype=torch.bool)  # the 8th token sees the 7 cached and itself
    diagnosis = diagnose(step, convention="keep", expect=CAUSAL, q_len=1)
    assert diagnosis.ok and diagnosis.keep.shape == (1, 8) and diagnosis.offset == 7
    assert diagnosis.to_json() == {"ok": True, "convention": "keep", "shape": [1, 8], "problems": [], "offset": 7}
    assert "1 query row at position 7 of 8 keys" in notes(diagnosis)
    assert diagnose(step, convention="keep", expect=CAUSAL, offset=7).ok  # --offset says it too
    assert diagnose(torch.zeros(1, 8), expect=CAUSAL, q_len=1).ok  # additive, all kept
    # without q_len a (1, T) mask stays a key mask, as before: a causal key mask leaks, with a hint
    as_key_mask = diagnose(step, convention="keep", expect=CAUSAL)
    assert kinds(as_key_mask) == ["future_leak"] and problem(as_key_mask, "future_leak").count == 28
    assert "offset" not in as_key_mask.to_json() and "--q-len 1" in notes(as_key_mask)


def test_a_decode_step_that_misses_the_newest_key_or_its_own():
    stale = causal_mask(1, 8, offset=6)  # the step forgot the token it is computing
    diagnosis = diagnose(stale, convention="keep", expect=CAUSAL, q_len=1)
    assert kinds(diagnosis) == ["missing_self"] and problem(diagnosis, "missing_self").examples == [[0, 7]]
    assert "column 7 + i" in str(problem(diagnosis, "missing_self").message)
    # told the query sits at 3, a full row sees 4 keys after it
    diagnosis = diagnose(torch.ones(1, 8, dtype=torch.bool), convention="keep", expect=CAUSAL, offset=3)
    assert kinds(diagnosis) == ["future_leak"]
    assert problem(diagnosis, "future_leak").examples == [[0, 4], [0, 5], [0, 6], [0, 7]]
    assert "offset 3, as given" in notes(diagnosis)


def test_an_offset_one_too_large_is_a_future_leak_with_the_cells_named():
    chunk = causal_mask(3, 8, offset=6)  # the cache holds 5 tokens: offset=start + 1
    diagnosis = diagnose(chunk, convention="keep", expect=CAUSAL)
    leak = problem(diagnosis, "future_leak")
    assert kinds(diagnosis) == ["future_leak"] and leak.count == 2 and leak.examples == [[0, 6], [1, 7]]
    assert "query 5 → key 6" in str(leak.message)  # named by position, as the figures name rows (not row 0)
    assert "causal with offset 6, not 5" in notes(diagnosis)
    assert diagnosis.to_json()["offset"] == 5
    too_small = diagnose(causal_mask(3, 8, offset=4), convention="keep", expect=CAUSAL)  # one too small
    assert kinds(too_small) == ["missing_self"]
    assert problem(too_small, "missing_self").examples == [[0, 5], [1, 6], [2, 7]]


def test_a_chunk_aligned_bottom_right_passes_and_top_left_fails():
    assert diagnose(causal_mask(3, 8), convention="keep", expect=CAUSAL).ok  # offset 5 = 8 - 3
    top_left = torch.ones(3, 8, dtype=torch.bool).tril()  # SDPA's is_causal on a rectangle
    diagnosis = diagnose(top_left, convention="keep", expect=CAUSAL)
    assert kinds(diagnosis) == ["missing_self", "over_masked"]
    assert problem(diagnosis, "missing_self").examples == [[0, 5], [1, 6], [2, 7]]
    over = problem(diagnosis, "over_masked")
    assert over.count == 12  # each row blocks keys i + 1 .. i + 5, its own (i + 5) counted as missing_self
    assert over.examples[:4] == [[0, 1], [0, 2], [0, 3], [0, 4]]
    assert "top-left" in notes(diagnosis) and "causal_lower_right" in notes(diagnosis)
    assert diagnose(top_left, convention="keep", expect=CAUSAL, offset=0).ok  # unless its queries do come first


def test_a_rectangle_without_an_offset_is_read_bottom_right():
    mask = causal_mask(4, 7)
    assert mask.tolist()[0] == [True, True, True, True, False, False, False]  # query 0 sits at position 3
    diagnosis = diagnose(mask, convention="keep", expect=CAUSAL)
    assert diagnosis.ok and diagnosis.offset == 3 and torch.equal(diagnosis.expected, mask)
    assert "aligned bottom-right (a KV cache of 3 tokens" in notes(diagnosis)
    assert torch.equal(expected_keep(CAUSAL, 7, q_len=4), mask)
    # with no expectation only the structural checks run, at the same offset
    assert diagnose(mask, convention="keep").ok
    assert kinds(diagnose(torch.zeros(4, 7, dtype=torch.bool), convention="keep")) == ["fully_masked_row"]
    # a block mask of the same chunk, read from its diagonal at the offset
    assert infer_convention(~mask, offset=3)[0] == "block"
    inverted = diagnose(~mask, convention="keep", expect=CAUSAL)
    assert kinds(inverted) == ["inverted"] and diagnose(~mask, expect=CAUSAL).convention == "block"


def test_packed_documents_pass_and_each_leak_names_its_documents():
    assert diagnose(document_mask([5, 3, 4]), convention="keep", expect=DOCS).ok
    leaky = document_mask([5, 3, 4])
    leaky[5, 4] = True  # the first token of document 1 sees the last of document 0
    diagnosis = diagnose(leaky, convention="keep", expect=DOCS)
    cross = problem(diagnosis, "cross_document")
    assert kinds(diagnosis) == ["cross_document"] and cross.count == 1 and cross.examples == [[5, 4]]
    assert cross.extra == {"documents": [[1, 0]]} and "document 1 → document 0" in str(cross.message)
    assert diagnosis.to_json()["problems"] == [
        {"kind": "cross_document", "count": 1, "examples": [[5, 4]], "documents": [[1, 0]]}
    ]
    assert diagnosis.to_json()["documents"] == [5, 3, 4]
    ahead = document_mask([5, 3, 4])
    ahead[4, 5] = True  # a later key of another document: a cross-document leak, counted once
    assert kinds(diagnose(ahead, convention="keep", expect=DOCS)) == ["cross_document"]
    within = document_mask([5, 3, 4])
    within[5, 6] = True  # a later key of its own document
    assert problem(diagnose(within, convention="keep", expect=DOCS), "future_leak").examples == [[5, 6]]


def test_a_plain_causal_mask_over_packed_documents_leaks_across_every_boundary():
    diagnosis = diagnose(causal_mask(12), convention="keep", expect=DOCS)
    cross = problem(diagnosis, "cross_document")
    assert kinds(diagnosis) == ["cross_document"]
    assert cross.count == 78 - (15 + 6 + 10)  # the causal cells outside the three triangles
    assert cross.examples[:5] == [[5, 0], [5, 1], [5, 2], [5, 3], [5, 4]]


def test_over_masking_inside_a_document_is_reported_as_before():
    mask = document_mask([5, 3, 4])
    mask[6, 5] = False  # document 1's second token forgets its first
    mask[9, 9] = False
    diagnosis = diagnose(mask, convention="keep", expect=DOCS)
    assert kinds(diagnosis) == ["missing_self", "over_masked"]
    assert problem(diagnosis, "over_masked").examples == [[6, 5]]
    assert problem(diagnosis, "missing_self").examples == [[9, 9]]


def test_a_decode_step_inside_packed_documents():
    step = document_mask([5, 3, 4])[-1:]  # the last token of document 2 over the whole pack
    assert diagnose(step, convention="keep", expect=DOCS, q_len=1).ok
    leak = causal_mask(1, 12)
    cross = problem(diagnose(leak, convention="keep", expect=DOCS, q_len=1), "cross_document")
    assert cross.count == 8 and cross.examples[0] == [0, 0] and cross.extra["documents"][0] == [2, 0]


@pytest.mark.parametrize(
    ("mask", "options", "said"),
    [
        (document_mask([5, 3, 4]), {"expect": parse_expect("documents:5,3")}, "add up to 8 tokens"),
        (torch.ones(8, 4, dtype=torch.bool), {"expect": CAUSAL}, "more queries (8) than keys (4)"),
        (causal_mask(1, 8), {"expect": CAUSAL, "q_len": 2}, "holds 1 query row, not the 2"),
        (causal_mask(3, 8), {"expect": CAUSAL, "offset": 6}, "positions 6 to 8, beyond its 8 keys"),
        (causal_mask(8), {"q_len": 1}, "holds 8 query rows, not the 1"),
    ],
)
def test_a_shape_that_fits_no_reading_is_a_bad_shape(mask, options, said):
    diagnosis = diagnose(mask, convention="keep", **options)
    assert kinds(diagnosis) == ["bad_shape"] and said in str(diagnosis.problems[0].message)
    assert diagnosis.problems[0].count == 1 and diagnosis.keep is None


def test_arguments_that_do_not_fit_are_value_errors():
    with pytest.raises(ValueError, match="offset must be a whole number >= 0"):
        diagnose(causal_mask(3, 8), convention="keep", offset=-1)
    with pytest.raises(ValueError, match="q_len must be a whole number >= 1"):
        diagnose(causal_mask(3, 8), convention="keep", q_len=0)
    with pytest.raises(ValueError, match="does not go with --lengths"):
        diagnose(
            causal_mask(8).expand(2, 8, 8), convention="keep", expect=parse_expect("documents:4,4"), lengths=[8, 8]
        )
    for text in ("documents", "documents:", "documents:5,0", "documents:x"):
        with pytest.raises(ValueError, match="--expect documents"):
            parse_expect(text)
    assert parse_expect("Documents:5,3,4") == Expectation("documents", documents=(5, 3, 4))
    assert str(DOCS) == "documents:5,3,4" and DOCS.causal and not DOCS.needs_lengths
    with pytest.raises(ValueError, match="documents"):
        Expectation("causal", documents=(2, 2))


def test_a_batch_of_left_padded_decode_steps():
    lengths = [6, 4]
    expect = Expectation("causal+padding")
    steps = expected_keep(expect, 6, lengths=lengths, side="left", q_len=1)  # (2, 1, 6)
    assert steps.tolist() == [[[True] * 6], [[False, False, True, True, True, True]]]
    assert diagnose(steps, convention="keep", expect=expect, lengths=lengths, side="left", q_len=1).ok
    unpadded = torch.ones(2, 1, 6, dtype=torch.bool)
    diagnosis = diagnose(unpadded, convention="keep", expect=expect, lengths=lengths, side="left", q_len=1)
    assert kinds(diagnosis) == ["attends_padding"] and problem(diagnosis, "attends_padding").examples == [
        [0, 0],
        [0, 1],
    ]
    assert problem(diagnosis, "attends_padding").batch_examples == [1, 1]


def test_the_lab_builds_decode_steps_and_packed_documents():
    step = decode_mask(8, 3)
    assert torch.equal(step.raw, causal_mask(3, 8)) and step.q_len == 3 and step.expect == "causal"
    assert torch.equal(step.keep, causal_mask(8))  # the cached rows are causal: the whole text as it acts
    plus = built_mask("decode", 8, q_len=3, align="plus_one")
    assert torch.equal(plus.raw, causal_mask(3, 8, offset=6)) and plus.keep[5:].tolist() == plus.raw.tolist()
    assert torch.equal(
        built_mask("decode", 8, q_len=3, align="top_left").raw, torch.ones(3, 8, dtype=torch.bool).tril()
    )
    found = diagnose(plus.raw, convention=plus.convention, expect=parse_expect(plus.expect), q_len=plus.q_len)
    assert problem(found, "future_leak").examples == [[0, 6], [1, 7]]
    cells = plus.full_cells(problem(found, "future_leak").cells)
    assert cells.shape == (8, 8) and cells.nonzero().tolist() == [[5, 6], [6, 7]]
    for q_len in (0, 8):
        with pytest.raises(ValueError, match="between 1 and 7"):
            decode_mask(8, q_len)
    packed = built_mask("document", 6, documents=[4, 2], causal=True)
    assert packed.expect == "documents:4,2" and diagnose(packed.raw, expect=parse_expect(packed.expect)).ok
    own = custom_mask(torch.zeros(2, 5), "keep")  # an additive (2, 5) step: the cached rows built additive too
    assert (
        own.q_len == 2
        and own.acting.shape == (5, 5)
        and torch.equal(own.keep, causal_mask(5) | (torch.arange(5) >= 3)[:, None])
    )


def test_the_gallerys_kv_offset_bug_is_checked_as_a_chunk_and_packing_leaks():
    bugs = {bug.key: bug for bug in gallery(8, causal=True)}
    kv = bugs["kv_offset"]
    assert kv.raw.shape == (4, 8) and kv.q_len == 4 and torch.equal(kv.raw, kv.buggy[4:])
    found = diagnose_bug(kv)
    assert kinds(found) == ["future_leak"] and problem(found, "future_leak").examples == [[0, 5], [1, 6], [2, 7]]
    assert found.offset == 4
    docs = bugs["document_leak"]
    assert docs.expect == "documents:4,4" and torch.equal(docs.correct, document_mask([4, 4]))
    cross = problem(diagnose_bug(docs), "cross_document")
    assert cross.count == 16 and cross.examples[0] == [4, 0] and cross.extra["documents"][0] == [1, 0]


def test_the_leak_is_measured_against_packed_documents_when_they_fit_the_text():
    from attnviz.labs.masks.effects import meant_keep

    keep = causal_mask(4)
    assert torch.equal(meant_keep(keep, parse_expect("documents:2,2")), document_mask([2, 2]))
    assert torch.equal(meant_keep(keep, parse_expect("documents:2,3")), keep)  # a bad_shape: nothing to measure


def test_a_steps_rows_are_named_by_their_position_in_the_text():
    top_left = torch.ones(3, 8, dtype=torch.bool).tril()
    missing = problem(diagnose(top_left, convention="keep", expect=CAUSAL), "missing_self")
    assert "(positions 5, 6, 7)" in str(missing.message) and missing.examples == [[0, 5], [1, 6], [2, 7]]
    fully = problem(diagnose(torch.zeros(2, 8, dtype=torch.bool), convention="keep"), "fully_masked_row")
    assert "(positions 6, 7)" in str(fully.message)
    square = problem(diagnose(causal_mask(4).tril(-1), convention="keep", expect=CAUSAL), "missing_self")
    assert "(rows 0, 1, 2, 3)" in str(square.message)  # a whole sequence: its rows are its positions


def test_a_key_mask_whose_documents_do_not_add_up_is_bad_shape_not_an_error():
    for documents in ("5,3,4", "99999999999999999999"):
        diagnosis = diagnose(
            torch.ones(1, 8, dtype=torch.bool), convention="keep", expect=parse_expect(f"documents:{documents}")
        )
        (bad,) = diagnosis.problems
        assert (
            bad.kind == "bad_shape" and bad.extra["reason"] == "documents_total" and "has 8 keys" in bad.extra["detail"]
        )
    fits = diagnose(torch.ones(1, 8, dtype=torch.bool), convention="keep", expect=parse_expect("documents:5,3"))
    assert kinds(fits) == ["future_leak", "cross_document"]  # a key mask over packed documents: every key


def test_lengths_and_numbers_are_ascii_digits_only():
    from attnviz.labs.masks.doctor import parse_lengths

    assert parse_lengths(" 5, 3") == [5, 3] and parse_expect("sliding: 4").window == 4
    for text in ("٥,3", "5,٣", "1_0", "+5", "５"):  # Arabic-Indic and full-width digits, int()'s underscores and signs
        with pytest.raises(ValueError, match="whole numbers"):
            parse_lengths(text)
        with pytest.raises(ValueError, match="whole numbers"):
            parse_expect(f"documents:{text}")
    for text in ("sliding:٣", "prefix:٣", "sliding:1_0"):
        with pytest.raises(ValueError, match="needs a whole number"):
            parse_expect(text)


def test_bidirectional_documents_see_their_own_document_both_ways():
    expect = parse_expect("bidirectional-documents:2,3")
    assert expect.kind == "documents" and expect.bidirectional and not expect.causal
    assert torch.equal(expected_keep(expect, 5), document_mask([2, 3], causal=False))
    assert str(expect) == "bidirectional-documents:2,3" and parse_expect(str(expect)) == expect
    assert diagnose(document_mask([2, 3], causal=False), convention="keep", expect=expect).ok
    late = diagnose(document_mask([3, 2], causal=False), convention="keep", expect=expect)
    assert kinds(late) == ["cross_document", "over_masked"] and problem(late, "cross_document").examples[0] == [0, 2]
    assert kinds(diagnose(document_mask([2, 3]), convention="keep", expect=expect)) == ["over_masked"]
    with pytest.raises(ValueError, match="document lengths go with"):
        Expectation("causal", bidirectional=True)
