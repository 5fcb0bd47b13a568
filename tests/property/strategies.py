"""Shared hypothesis strategies: hostile text, option values near and far beyond their bounds."""

from hypothesis import strategies as st

HOSTILE = [
    "<script>alert(1)</script>",
    "__init__",
    "[UNK]",
    "<|endoftext|>",
    "**bold**",
    "`code`",
    "[link](http://example.com)",
    "$x^2$",
    "<b>b</b>",
    "~~gone~~",
    ":smile:",
    "| a | b |",
    "\u202eevil\u202c",
    "a\u200bb",
    "\x00\x07\x1b[31m",
    "猫坐在垫子上",
    "👨‍👩‍👧 🏳️‍🌈 👍🏽",
    "\ufeff\u2028\u2029",
    "%{z}",
    "\\",
]

# any code point, surrogates included (what os.fsdecode makes of a non-UTF-8 command line)
any_char = st.characters(codec=None, exclude_categories=())
raw_argv = st.binary(max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape"))

text = st.one_of(
    st.text(max_size=60),
    st.text(any_char, max_size=60),
    raw_argv,
    st.sampled_from(HOSTILE),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=8)), min_size=1, max_size=6).map(" ".join),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=3), st.integers(50, 400)),
    st.sampled_from(["", " ", "\n\t ", "-", "--", "--json", "-h"]),
)

huge = st.sampled_from([2**31, 2**32, 2**63, 2**64, 10**30, -(2**63), -(10**30)])
garbage = st.sampled_from(["", "abc", "1e3", "1.5", "nan", "inf", "-inf", "0x10", "٣", "1_000", " 4", "+5", "１２"])


def int_option(*near: int) -> st.SearchStrategy[str]:
    """An integer option's value as typed: at and around ``near``, huge, negative, a float or garbage."""
    return st.one_of(
        st.sampled_from(near).flatmap(lambda n: st.integers(n - 1, n + 1)),
        huge,
        st.floats(allow_nan=True, allow_infinity=True),
        garbage,
    ).map(str)
