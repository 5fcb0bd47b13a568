"""Ranks and the project's one Spearman, by hand: ties, a constant input, and tensors and sequences alike."""

import math

import pytest
import torch

from attnviz.core.alignment import monotonicity
from attnviz.core.ranking import ranks, spearman
from attnviz.labs.heads_matter.agreement import agreement


def test_ranks_average_ties():
    assert ranks(torch.tensor([3, 1, 3, 2])).tolist() == [2.5, 0.0, 2.5, 1.0]


def test_spearman_by_hand():
    assert spearman(torch.arange(4), torch.tensor([0, 1, 2, 3])) == pytest.approx(1.0)
    assert spearman(torch.arange(4), torch.tensor([3, 2, 1, 0])) == pytest.approx(-1.0)
    assert spearman(torch.arange(4), torch.tensor([2, 2, 2, 2])) is None  # constant: no order, undefined
    # x ranks 0..3, y = [0, 2, 1, 3] ranks the same; centred: (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5)
    # Σxy = 2.25 - .25 - .25 + 2.25 = 4, Σx² = Σy² = 5: ρ = 0.8
    assert spearman(torch.arange(4), torch.tensor([0, 2, 1, 3])) == pytest.approx(0.8)
    assert spearman(torch.arange(1), torch.tensor([0])) is None


def test_a_constant_input_is_undefined_and_each_caller_says_so_as_before():
    for x, y in (([1, 1, 1], [1, 2, 3]), ([1, 2, 3], [0.5, 0.5, 0.5]), ([2.0, 2.0], [2.0, 2.0]), ([], []), ([7], [3])):
        assert spearman(x, y) is None
        assert spearman(torch.tensor(x), torch.tensor(y)) is None
    # the agreement of an estimate that ranks nothing (every |estimate| equal): NaN, null in its JSON, as before
    found = agreement([[0.2, -0.2], [0.2, 0.2]], [[0.6, 0.1], [-0.3, 0.05]], k=2)
    assert math.isnan(found.spearman) and found.to_json()["spearman"] is None
    # a head whose hard alignment never moves has monotonicity 0, as before
    still = torch.zeros(1, 4, 3)
    still[..., 1] = 1.0
    assert monotonicity(still).tolist() == [0.0]


def test_a_sequence_reads_as_float64_and_agrees_with_its_tensor_bit_for_bit():
    # 1 + 1e-9 and 1 are two values in float64 but one in float32: read as float64 they are not tied
    x, y = [1.0, 1.0 + 1e-9, 3.0], [1.0, 2.0, 3.0]
    assert spearman(x, y) == pytest.approx(1.0)
    a = [0.3, 0.1, 0.4, 0.1, 0.5, 0.9, 0.2, 0.6]
    b = [0.2, 0.7, 0.1, 0.8, 0.2, 0.8, 0.4, 0.5]
    assert spearman(a, b) == spearman(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
    # ties averaged: ranks of a (0.1 twice: 0.5 each) and of b (0.2 and 0.8 twice each) worked out by hand
    ra = [3, 0.5, 4, 0.5, 5, 7, 2, 6]
    rb = [1.5, 5, 0, 6.5, 1.5, 6.5, 3, 4]
    assert ranks(torch.tensor(a)).tolist() == ra and ranks(torch.tensor(b)).tolist() == rb
    ma, mb = sum(ra) / 8, sum(rb) / 8
    num = sum((p - ma) * (q - mb) for p, q in zip(ra, rb, strict=True))
    den = (sum((p - ma) ** 2 for p in ra) * sum((q - mb) ** 2 for q in rb)) ** 0.5
    assert spearman(a, b) == pytest.approx(num / den, rel=1e-15, abs=0)
