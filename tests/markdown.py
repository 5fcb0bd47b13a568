"""What a reader sees of Markdown the app wrote: its backslash escapes removed (``num\\_layers`` reads num_layers)."""

import re


def as_read(markdown: str) -> str:
    """``markdown`` with every backslash escape resolved, as the rendered page shows it."""
    return re.sub(r"\\(.)", r"\1", markdown, flags=re.S)
