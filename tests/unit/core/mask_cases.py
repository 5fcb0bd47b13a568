"""Masks as the libraries write them, and the shapes the attention tests run them on."""

import torch

T, F_ = True, False

B, N_HEAD, N_KV_HEAD, Q_LEN, K_LEN, HEAD_DIM = 2, 4, 2, 3, 5, 8


def hf_mask(dtype, dead_row=1, hidden_key=3):
    """A Hugging Face-style additive mask (Q_LEN, K_LEN): finfo.min on one whole row and one key."""
    mask = torch.zeros(Q_LEN, K_LEN, dtype=dtype)
    mask[:, hidden_key] = torch.finfo(dtype).min
    mask[dead_row] = torch.finfo(dtype).min
    return mask
