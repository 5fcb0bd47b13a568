"""Every default and limit in one place: the sidebar, the CLI and ``EmbeddedConfig`` read these.

A limit here is a promise: at every value a user can set, the capture stays
within the memory bound that ``benchmarks/`` measures (see the README).
"""

from __future__ import annotations

from dataclasses import dataclass

EXAMPLES = {
    "English: the cat": "The cat sat on the mat because it was tired.",
    "English: pronouns": "The trophy did not fit in the suitcase because it was too big.",
    "中文: 猫": "猫坐在垫子上，因为它累了。",
    "中文: 注意力": "注意力机制让每个词都能看到句子里的其他词。",
    "Mixed 中英 + emoji": "Attention 注意力 is all you need 👍🏽!",
}
DEFAULT_EXAMPLE = "English: the cat"
DEFAULT_TEXT = EXAMPLES[DEFAULT_EXAMPLE]


@dataclass(frozen=True)
class Bound:
    """An integer setting: its default and the inclusive range a user may choose from."""

    name: str
    default: int
    low: int
    high: int

    def check(self, value: int) -> int:
        """``value`` if it lies in range; ValueError naming the setting and the range otherwise."""
        if not self.low <= value <= self.high:
            raise ValueError(f"{self.name} ({value}) must be from {self.low} to {self.high}")
        return value


MAX_TOKENS = Bound("max_tokens", 256, 1, 8192)
D_MODEL = Bound("d_model", 64, 2, 1024)
N_HEAD = Bound("n_head", 4, 1, 64)
N_KV_HEAD = Bound("n_kv_head", 0, 0, 64)  # 0: as many as n_head (MHA)
N_LAYER = Bound("n_layer", 2, 1, 12)
SEED = Bound("seed", 0, 0, 2**32 - 1)
GENERATE_TOKENS = Bound("tokens to generate", 12, 1, 64)

# pages that hold every weight of a short input, or many rows of one, read at most this much
PARITY_TOKENS = 512  # parity compares every weight of every layer against the eager reference
PADDING_TOKENS = 384  # per sentence on the Padding page: each drawn whole, about 47 MB a SmolLM2 sentence
PADDING_SENTENCES = 8
GENERATION_CONTEXT = 2048  # prompt + generated tokens on the Generation page

# the shared result cache of a server (records, batches, generations, parity): an LRU bounded in bytes
CACHE_MB_ENV = "ATTNVIZ_CACHE_MB"
CACHE_MB_DEFAULT = 2048
CACHE_ENTRIES = 32
