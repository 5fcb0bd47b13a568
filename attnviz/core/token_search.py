"""Find a word or a piece of one in a long text's tokens: where it occurs, and a few tokens of context.

The tokens are joined into one searchable text as a person reads them: a piece that continues a word
("·believ", "##ing") is joined without a space, a word the source separates by a space gets one, the byte
pieces of one character ("猫(1/3)", "猫(2/3)", "猫(3/3)") give that character once, and whitespace tokens
(␣, ⏎) are one space. A query is found in that text, so it may span tokens ("mat because", "unbelievably"),
and each character maps back to the token it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from attnviz.core.tokenizer import Token

MAX_QUERY_CHARS = 200  # a longer query is cut to this (no token sequence a person types is longer)
CONTEXT_TOKENS = 4  # tokens of context either side of an occurrence
RESULTS_LISTED = 20  # occurrences listed; the total is still counted

_BYTE_PIECE = re.compile(r"^(.+?)\((\d+)/(\d+)\)$")  # "猫(2/3)": the second of three byte pieces of 猫
_SPACE_MARKS = ("Ġ", "▁", " ")  # a raw token string starting so has a space before it in the source
_WHITESPACE_SHOWN = ("␣", "⏎")


@dataclass(frozen=True)
class SearchText:
    """Tokens as one searchable string: ``text``, and for each of its characters the token it came from
    (``owner``; a joining space belongs to the token after it)."""

    text: str
    owner: list[int]
    match_case: bool
    # tokens that add no character of their own but belong with the one before (a character's later byte pieces)
    follows: frozenset[int]


@dataclass(frozen=True)
class Occurrence:
    """One place the query occurs: tokens ``index`` to ``stop - 1``, with up to ``CONTEXT_TOKENS`` either side.

    ``before``, ``matched`` and ``after`` are display texts; ``cut_before`` / ``cut_after`` say whether the
    text goes on beyond the context.
    """

    index: int
    stop: int
    before: tuple[str, ...]
    matched: tuple[str, ...]
    after: tuple[str, ...]
    cut_before: bool
    cut_after: bool


@dataclass(frozen=True)
class SearchResult:
    """What a search found: the query as searched, the first occurrences in text order, how many in all, and
    whether the query was cut to :data:`MAX_QUERY_CHARS`."""

    query: str
    occurrences: tuple[Occurrence, ...]
    total: int
    query_cut: bool = False


def _piece(token: Token) -> tuple[str, bool]:
    """The characters a token adds to the searchable text, and whether it is joined to the one before."""
    text = token.text
    if token.unknown and text.endswith("[UNK]") and len(text) > len("[UNK]"):
        text = text[: -len("[UNK]")]
    byte = _BYTE_PIECE.match(text)
    if byte and int(byte.group(2)) <= int(byte.group(3)):
        return (byte.group(1) if byte.group(2) == "1" else ""), False
    if text.startswith("·") and len(text) > 1:  # display_tokens' mark of a piece continuing a word
        return text[1:], True
    return text, token.raw.startswith("##")


def _adjacent(token: Token, before: Token | None) -> bool:
    """Whether the source text has no space between ``before`` and ``token`` (both with real spans)."""
    if before is None or before.special or token.special or before.start < 0 or token.start < 0:
        return False
    if before.end <= before.start or token.end <= token.start:  # no spans (a tokenizer without offsets)
        return False
    return token.start == before.end and not token.raw.startswith(_SPACE_MARKS)


def search_text(tokens: list[Token], match_case: bool = False) -> SearchText:
    """The tokens joined as a person reads them (see the module docstring), lower-cased unless ``match_case``."""
    parts: list[str] = []
    owner: list[int] = []
    follows: set[int] = set()
    before: Token | None = None  # the last token that added characters
    for i, token in enumerate(tokens):
        if token.pad or (not token.special and token.text in _WHITESPACE_SHOWN):
            if parts and parts[-1] != " ":
                parts.append(" ")
                owner.append(i)
            before = None
            continue
        piece, joined = _piece(token)
        if not piece:
            follows.add(i)
            continue
        if not match_case:
            piece = piece.lower()  # per piece: a few characters change length when lowered ("İ")
        if parts and parts[-1] != " " and not (joined or _adjacent(token, before)):
            parts.append(" ")
            owner.append(i)
        parts.append(piece)
        owner.extend([i] * len(piece))
        before = token
    if parts and parts[-1] == " ":
        parts.pop()
        owner.pop()
    return SearchText("".join(parts), owner, match_case, frozenset(follows))


def normalised_query(query: str, match_case: bool = False) -> tuple[str, bool]:
    """The query as searched: cut to :data:`MAX_QUERY_CHARS`, runs of whitespace one space, trimmed, lower-cased
    unless ``match_case``; and whether it was cut."""
    cut = len(query) > MAX_QUERY_CHARS
    query = " ".join(query[:MAX_QUERY_CHARS].split())
    return (query if match_case else query.lower()), cut


def find_tokens(
    tokens: list[Token],
    query: str,
    *,
    match_case: bool = False,
    context: int = CONTEXT_TOKENS,
    limit: int = RESULTS_LISTED,
) -> SearchResult:
    """Every place ``query`` occurs in ``tokens``, in text order, case-insensitive unless ``match_case``.

    Overlapping matches count ("nana" twice in "nanana") when they cover different tokens; matches within
    the same tokens are one occurrence. The first ``limit`` are returned with ``context`` tokens either side,
    all are counted. An empty query finds nothing.
    """
    return search_in(tokens, search_text(tokens, match_case), query, context=context, limit=limit)


def search_in(
    tokens: list[Token], index: SearchText, query: str, *, context: int = CONTEXT_TOKENS, limit: int = RESULTS_LISTED
) -> SearchResult:
    """:func:`find_tokens` over a :func:`search_text` prepared once for ``tokens`` (reused across queries)."""
    needle, cut = normalised_query(query, index.match_case)
    if not needle:
        return SearchResult(needle, (), 0, cut)
    owner, follows = index.owner, index.follows
    found: list[Occurrence] = []
    total = 0
    last: tuple[int, int] | None = None
    # a lookahead finds overlapping matches too
    for match in re.finditer(f"(?={re.escape(needle)})", index.text):
        start = match.start()
        first, stop = owner[start], owner[start + len(needle) - 1] + 1
        while stop in follows:
            stop += 1
        if (first, stop) == last:
            continue
        last = (first, stop)
        total += 1
        if len(found) < limit:
            found.append(_occurrence(tokens, first, stop, context))
    return SearchResult(needle, tuple(found), total, cut)


def _occurrence(tokens: list[Token], first: int, stop: int, context: int) -> Occurrence:
    lo, hi = max(0, first - context), min(len(tokens), stop + context)
    return Occurrence(
        index=first,
        stop=stop,
        before=tuple(token.text for token in tokens[lo:first]),
        matched=tuple(token.text for token in tokens[first:stop]),
        after=tuple(token.text for token in tokens[stop:hi]),
        cut_before=lo > 0,
        cut_after=hi < len(tokens),
    )
