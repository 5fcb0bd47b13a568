"""A stand-in model source for the corpus run's unit tests: ``run_statistics`` as the contract gives it (design A),
each statistic a fixed function of the text, so a row's value says which text it came from."""

import math
import zlib
from dataclasses import dataclass

import pandas as pd

from attnviz.models.statistics import TextStatistics

STATS = ("entropy", "max_weight", "prev_token_weight")


@dataclass
class Encoded:
    tokens: list[str]


class FakeSource:
    name = "fake"
    device = "cpu"
    dtype = "float32"
    implementation = "stand-in"

    def __init__(self, n_layer: int = 2, n_head: int = 3, stacks: bool = False) -> None:
        self.n_layer, self.n_head, self.stacks = n_layer, n_head, stacks
        self.batches: list[list[str]] = []

    def encode(self, text: str, max_tokens: int) -> Encoded:
        return Encoded(text.split()[:max_tokens])

    def run_statistics(self, texts: list[str], max_tokens: int) -> list[TextStatistics]:
        self.batches.append(list(texts))
        return [self._one(text, max_tokens) for text in texts]

    def _one(self, text: str, max_tokens: int) -> TextStatistics:
        n_input = len(text.split())
        seed = zlib.crc32(text.encode())
        rows = []
        parts = [("encoder", "self"), ("decoder", "cross")] if self.stacks else [None]
        for part in parts:
            for layer in range(self.n_layer):
                for head in range(self.n_head):
                    value = (seed % 1000) / 1000 + layer + head / 10
                    row = {} if part is None else {"stack": part[0], "kind": part[1]}
                    row.update(layer=layer, head=head, entropy=value, max_weight=1 / (1 + value))
                    row["prev_token_weight"] = math.nan if head == 0 else value / 10  # NaN kept, never counted
                    row["flags"] = "sink" if head == 1 else ""
                    rows.append(row)
        routes = ("fused",) * self.n_layer
        return TextStatistics(min(n_input, max_tokens), n_input, pd.DataFrame(rows), routes)
