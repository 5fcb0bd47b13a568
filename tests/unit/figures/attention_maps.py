"""Random attention maps for the figure tests: rows that sum to one, as a softmax gives."""

import torch


def random_attention(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).softmax(-1)
