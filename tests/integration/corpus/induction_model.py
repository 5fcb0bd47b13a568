"""A two-layer GPT-2 whose weights are set by hand: a previous-token head, an induction head built on it by
K-composition, and heads whose OV circuits copy or do not (the probe's known answers).

The residual stream has three blocks of one-hot coordinates: TOK (the token, V dims), POS (the position, P dims) and
PREV (the previous token, V dims, written by layer 0). The embedding puts 1 at TOK[token] and POS[position]; every
LayerNorm (weight 1, bias 0) then maps a one-hot to about sqrt(D / n_ones) and subtracts the same small constant
from every coordinate, which moves each score by a constant along a row (the softmax ignores it). The MLPs are zero.

- layer 0, head 0, previous token: q = POS[t], k = POS[j] shifted by one, so the score is high only at j = t - 1;
  its OV reads TOK and writes PREV: every position then holds the token before it in PREV.
- layer 0, head 1: zero (attends uniformly, writes nothing).
- layer 1, head 0, induction: q = TOK[i], k = PREV[j]: high where the token before j is i's token, which in the
  repeated half is j = i - L + 1; its OV copies, TOK[v] to TOK[v], which the tied unembedding reads as token v's
  logit: a copying head.
- layer 1, head 1: the previous-token pattern again, its OV writing TOK[v] to TOK[v + 1]: it raises another
  token's logit than the one it attends to (low copying).
"""

from __future__ import annotations

from pathlib import Path

import torch

V = 256  # the vocabulary: a word-level tokenizer of "t0" … "t255", "t0" its one special token (end of text)
P = 32  # positions
D = 2 * V + P  # TOK | POS | PREV
HEAD_DIM = D // 2
TOK, POS, PREV = 0, V, V + P
SHARP = 2.0  # on the query: scores of about 16 × SHARP between a match and a miss (after the 1/sqrt(head_dim))

INDUCTION_HEAD = (1, 0)
PREVIOUS_TOKEN_HEAD = (0, 0)
SHIFT_HEAD = (1, 1)


def _previous_token_qk(c_attn: torch.Tensor, head: int) -> None:
    """Head ``head``'s q reads POS[t] into its dim t, its k POS[j] into dim j + 1: q·k is high at j = t - 1."""
    q0, k0 = head * HEAD_DIM, D + head * HEAD_DIM
    for p in range(P):
        c_attn[POS + p, q0 + p] = SHARP
        if p + 1 < P:
            c_attn[POS + p, k0 + p + 1] = 1.0


def _tok_value(c_attn: torch.Tensor, head: int) -> None:
    """Head ``head``'s v reads TOK[v] into its dim v."""
    v0 = 2 * D + head * HEAD_DIM
    for v in range(V):
        c_attn[TOK + v, v0 + v] = 1.0


def save_tokenizer(folder: Path) -> None:
    """A word-level tokenizer of exactly V tokens (the loader refuses a tokenizer larger than the embedding)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", eos_token="t0").save_pretrained(folder)


def build(folder: Path) -> Path:
    """The model saved to ``folder`` with its tokenizer, as a user's local model would be."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=V, n_positions=P, n_embd=D, n_layer=2, n_head=2, n_inner=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for norm in (
            model.transformer.ln_f,
            *(b.ln_1 for b in model.transformer.h),
            *(b.ln_2 for b in model.transformer.h),
        ):
            norm.weight.fill_(1.0)
        wte, wpe = model.transformer.wte.weight, model.transformer.wpe.weight  # (V, D), (P, D)
        wte[torch.arange(V), TOK + torch.arange(V)] = 1.0
        wpe[torch.arange(P), POS + torch.arange(P)] = 1.0
        scale0 = (D / 2) ** -0.5  # a LayerNorm'd one-hot of 2 ones is about sqrt(D / 2): written back as about 1
        scale1 = (D / 3) ** -0.5  # layer 1 reads 3 ones (TOK, POS, PREV)
        layer0, layer1 = (block.attn for block in model.transformer.h)
        _previous_token_qk(layer0.c_attn.weight, 0)  # Conv1D: x @ weight, weight (D, 3D) = [q | k | v]
        _tok_value(layer0.c_attn.weight, 0)
        for v in range(V):
            layer0.c_proj.weight[v, PREV + v] = scale0
        for v in range(V):  # layer 1 head 0: q TOK[i], k PREV[j]
            layer1.c_attn.weight[TOK + v, v] = SHARP
            layer1.c_attn.weight[PREV + v, D + v] = 1.0
        _tok_value(layer1.c_attn.weight, 0)
        _previous_token_qk(layer1.c_attn.weight, 1)
        _tok_value(layer1.c_attn.weight, 1)
        for v in range(V):
            layer1.c_proj.weight[v, TOK + v] = scale1  # head 0 copies
            layer1.c_proj.weight[HEAD_DIM + v, TOK + (v + 1) % V] = scale1  # head 1 writes the next token
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return folder
