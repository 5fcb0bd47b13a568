"""An encoder-decoder's two checks, each one pass of :meth:`~attnviz.models.hf.seq2seq.Seq2SeqSource.run_pair_hooked`:
whether padding reaches any real query (:func:`pad_weights`) and whether its weights look trained
(:func:`weights_check`). :class:`~attnviz.models.hf.seq2seq.Seq2SeqSource` holds both as its own."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnviz.core.masks import pad_row
from attnviz.models.record import KINDS
from attnviz.models.weights_check import REFERENCE_TEXT, REFERENCE_TOKENS, WeightsCheck, from_logits, norms_at_init


@torch.no_grad()
def pad_weights(
    source, texts: Sequence[str], max_tokens: int, side: str = "right", n_generate: int = 8, masked: bool = True
) -> dict[str, float]:
    """Several sources padded to one length on ``side``, each with the model's own greedy target (of up to
    ``n_generate`` tokens and its source's length, so the targets' lengths differ too) padded on the right: the
    largest weight any real query puts on a pad key, for each kind ({"encoder", "decoder", "cross"}). The source's
    padding mask reaches the encoder and cross-attention, the target's the decoder; ``masked=False`` passes neither
    (a check that catches a leak must see one). ``source``: a Seq2SeqSource."""
    sources = [source.encode(text, max_tokens).ids for text in texts]
    # each target no longer than its source, so that a batch's targets are padded too
    targets = [[source.start_id, *source.greedy_target(ids, n_generate)[: len(ids)]] for ids in sources]
    pad = source.tokenizer.pad_token_id if source.tokenizer.pad_token_id is not None else 0
    S, T = max(map(len, sources)), max(map(len, targets))
    source_real = torch.tensor([pad_row([1] * len(ids), S, 0, side) for ids in sources], dtype=torch.bool)
    target_real = torch.tensor([pad_row([1] * len(ids), T, 0, "right") for ids in targets], dtype=torch.bool)
    masks = {"attention_mask": source_real.long(), "decoder_attention_mask": target_real.long()} if masked else {}
    weights: dict[str, list] = {kind: [] for kind in KINDS}  # kind -> each layer's (B, n_head, q_len, k_len)
    source.run_pair_hooked(
        torch.tensor([pad_row(ids, S, pad, side) for ids in sources], device=source.device),
        torch.tensor([pad_row(ids, T, pad, "right") for ids in targets], device=source.device),
        {"attn.weights": lambda kind, layer, w: weights[kind].append(w)},
        **{name: mask.to(source.device) for name, mask in masks.items()},
    )
    sides = {
        "encoder": (weights["encoder"], source_real, source_real),
        "decoder": (weights["decoder"], target_real, target_real),
        "cross": (weights["cross"], target_real, source_real),
    }
    worst = {}
    for kind, (layers, rows, keys) in sides.items():
        on_pads = [w.float().cpu()[b][:, rows[b]][..., ~keys[b]] for w in layers for b in range(len(texts))]
        worst[kind] = max((float(x.max()) for x in on_pads if x.numel()), default=0.0)
    return worst


def weights_check(source) -> WeightsCheck:
    """Whether the weights look trained (attnviz.models.weights_check): the decoder's loss on the reference text,
    teacher-forced over the same text as its source. ``source``: a Seq2SeqSource (which keeps it once per load)."""
    ids = source.encode(REFERENCE_TEXT, REFERENCE_TOKENS).ids
    target = source.encode_target(REFERENCE_TEXT, REFERENCE_TOKENS).ids
    logits = []
    source.run_pair_hooked(
        torch.tensor([ids], device=source.device),
        torch.tensor([[source.start_id, *target]], device=source.device),
        {"logits": logits.append},
        attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=source.device),
    )
    return from_logits(logits[0][0, :-1], torch.tensor(target), "target", norms_at_init(source.whole))
