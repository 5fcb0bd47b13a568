"""The repeated-random-token probe: which heads do induction, attend to a token's earlier copy, and copy what they
read.

A sequence of ``seq_len`` random tokens repeated once (the model's leading special tokens, BOS or [CLS], first; its
trailing ones, [SEP] or </s>, last) is the standard test of Olsson et al. (2022) and TransformerLens: in the second
copy every token has been seen before, so a head that looks up "what followed this token last time" shows it on
random tokens, where nothing else can explain it. For each head, over the second copy's queries i (the first copy
starting at position p, the second at p + L):

- ``induction``: the mean weight on i − L + 1, the token after the earlier occurrence of i's token (TransformerLens'
  ``induction_score``: the pattern's diagonal at offset 1 − L, here over the repeated half only);
- ``duplicate``: the mean weight on i − L, the earlier occurrence itself (a duplicate-token head);
- ``copying``: whether the head's output raises the logits of the tokens it attends to (Olsson et al.'s copying,
  read from this probe instead of the OV circuit's eigenvalues). The head's direct contribution to the logits at
  query i, through the final norm with its scale frozen (:mod:`attnviz.labs.heads_matter.direct_logits`) and the
  unembedding, is d_i = norm_i(z_i W_O) U; the score is Σ_j A[i, j] (d_i[t_j] − mean_v d_i[v]): the
  attention-weighted boost of each attended token's logit over the vocabulary's mean, in logits, averaged over the
  second copy and the sequences. It is positive for a head whose OV circuit copies (an induction head's raises the
  token it predicts), near 0 for one that writes elsewhere, and NaN where the source cannot say: no LM head, head
  outputs not readable, or a final norm or scale the direct logits refuse (the reason is in ``frame.attrs``).

Every source is asked what it can do (its hook points, capabilities and whether it reads token ids), never its
class. Weights come from the source's own capture: the ``attn`` point with a :class:`CaptureSession` keeping q and
k (full weights recomputed from them), the model's eager weights where its route has no ``attn`` point, an
encoder-decoder's ``attn.weights`` (its encoder reads the repeated sequence, its decoder the start token then the
same sequence teacher-forced; cross-attention rows are NaN: induction is defined within one sequence).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd
import torch
from accelerate.utils import align_module_device
from torch import Tensor

from attnviz.core.capture import CaptureSession, weights_window
from attnviz.labs.heads_matter.direct_logits import NORM_TOLERANCE, determined_joins, norm_reading, tolerance
from attnviz.models.source import AttentionSource, Capability, EditsHeads, Encoding

SEQ_LEN = 50  # TransformerLens' choice: long enough that chance matches of a random token are rare
N_SEQS = 4  # 200 queries a head: a mean weight's standard error about 0.035 at most (a weight's spread is <= 1/2)
BATCH = 8  # sequences per pass: weights of n_layer × n_head × (2L + 2)² floats each
EMBEDDED_VOCAB = 50_000  # a source without a vocabulary reads words: drawn from this many
PROBE_COLUMNS = ("induction", "duplicate", "copying")
KINDS = (("encoder", "self"), ("decoder", "causal"), ("decoder", "cross"))  # as heads --json names them
VOCAB_BLOCK = 4096  # unembedding rows averaged at a time: never a float64 copy of the whole (vocab, d) weight


def _vocabulary(source: AttentionSource) -> tuple[int, set[int]]:
    """How many ids the model's embedding and tokenizer share, and the special ids to avoid."""
    tokenizer = getattr(source, "tokenizer", None)
    sizes = [n for n in (getattr(getattr(source, "config", None), "vocab_size", None),) if n]
    if tokenizer is not None:
        sizes.append(len(tokenizer))
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    return (min(sizes) if sizes else 0), special


def _specials(source: AttentionSource) -> tuple[list[int], list[int]]:
    """The special ids the source puts before and after a text: a one-word text's lead and trail."""
    encoding = source.encode("a", 16)
    if encoding.ids is None:
        return [], []
    flags = [t.special for t in encoding.tokens]
    first = next((i for i, s in enumerate(flags) if not s), len(flags))
    last = len(flags) - next((i for i, s in enumerate(reversed(flags)) if not s), 0)
    return encoding.ids[:first], encoding.ids[last:]


def random_runs(n_seqs: int, seq_len: int, vocab_size: int, avoid: set[int], seed: int) -> Tensor:
    """``n_seqs`` runs of ``seq_len`` ids drawn uniformly (seeded) from the vocabulary less ``avoid``: (n_seqs, L)."""
    allowed = torch.tensor(sorted(set(range(vocab_size)) - avoid), dtype=torch.long)
    if allowed.numel() < 2:
        raise ValueError(f"the probe needs a vocabulary of at least 2 ordinary tokens, this one has {allowed.numel()}")
    generator = torch.Generator().manual_seed(seed)
    return allowed[torch.randint(0, allowed.numel(), (n_seqs, seq_len), generator=generator)]


def stripes(weights: Tensor, first: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """The induction and duplicate stripes of weights (B, n_head, T, T) whose first copy starts at ``first``:
    each (n_head,), summed over the batch and the second copy's queries."""
    queries = torch.arange(first + seq_len, first + 2 * seq_len, device=weights.device)  # (L,)
    induction = weights[:, :, queries, queries - seq_len + 1]  # (B, n_head, L)
    duplicate = weights[:, :, queries, queries - seq_len]  # (B, n_head, L)
    return induction.double().sum(dim=(0, 2)).cpu(), duplicate.double().sum(dim=(0, 2)).cpu()


def _captured(session: CaptureSession, n_tokens: int) -> Iterator[tuple[int, Tensor]]:
    """Each captured layer's weights (B, n_head, T, T), recomputed from the q and k the session kept."""
    for layer in range(len(session.layers[0])):
        full = [
            weights_window(rows[layer], None, (0, n_tokens), (0, n_tokens)) for rows in session.layers
        ]  # B × (n_head, T, T)
        yield layer, torch.stack(full)


def _one_stack_weights(source: AttentionSource, ids: Tensor, reads_ids: bool) -> Iterator[tuple[int, Tensor]]:
    """One pass of a one-stack source on ids (B, T): each layer's weights (B, n_head, T, T)."""
    batch, T = ids.shape
    if "attn" in source.hook_points:  # the capture: q and k kept, every weight recomputed from them
        session = CaptureSession(batch, T, source.n_layer * source.n_head, keep_qk=True)
        inputs = ids.to(source.device) if reads_ids else [[f"w{int(i)}" for i in row] for row in ids]
        source.run_hooked(inputs, {"attn": session})
        yield from _captured(session, T)
        return
    result = source.run_hooked(ids.to(source.device), {}, output_attentions=True)  # the model's own eager weights
    for layer, weights in enumerate(result.output.attentions):
        yield layer, weights.float()


def _mean_row(head: torch.nn.Module) -> Tensor:
    """The mean of the LM head's rows, (d,) float64 on the CPU, summed a block of rows at a time where the head
    lives (brought there by accelerate where it is offloaded)."""
    with align_module_device(head):
        weight = head.weight.detach()  # (vocab, d)
        total = sum(block.to(torch.float64).sum(dim=0) for block in weight.split(VOCAB_BLOCK))  # (d,)
        return (total / weight.shape[0]).cpu()


def _copying(
    source: AttentionSource, ids: list[int], weights: list[Tensor], first: int, seq_len: int, means: dict
) -> Tensor:
    """One sequence's copying score summed over the second copy's queries: (n_layer, n_head) float64 (the module
    docstring defines it); ``weights``: each layer's (n_head, T, T); ``means``: the LM head's mean row, kept
    across sequences. ValueError where it cannot be read."""
    zs: dict[int, Tensor] = {}

    def record(layer: int, z: Tensor) -> Tensor:
        zs[layer] = z[0].detach()  # (T, n_head, head_dim)
        return z

    _, read = source.head_pass(Encoding(ids=ids, tokens=[], n_input=len(ids)), 1, record, read=True)
    if isinstance(read, str) or read is None:
        raise ValueError(read or "it has no LM head")
    if read.transformed is not None:
        raise ValueError(f"{read.transformed} transforms a head's output before the residual stream")
    reading = norm_reading(
        read.residual,
        read.normed,
        read.norm_weight,
        read.norm_bias,
        read.norm_eps,
        tolerance(read.dtype, NORM_TOLERANCE),
    )
    if reading is None:
        raise ValueError(f"its final norm ({read.norm}) is not read by a frozen scale")
    centre, _, gain, sigma = reading  # gain (d,), sigma (T, 1) float64
    joins = determined_joins(read, len(zs))
    scale = float(read.head_scale.value) * float(read.logit_scale.value)
    rows, _ = read.unembedding_rows(ids)  # (T, d): the unembedding of each token of the sequence
    u = rows.to("cpu", torch.float64) * scale
    if "row" not in means:
        means["row"] = _mean_row(read.lm_head)
    mean_u = means["row"] * scale  # (d,): the vocabulary's mean row
    queries = slice(first + seq_len, first + 2 * seq_len)
    scores = []
    for layer, (w_o, _) in enumerate(source.head_blocks()):
        z = zs[layer][queries].to("cpu", torch.float64)  # (L, n_head, head_dim)
        out = torch.einsum("qhk,hkd->qhd", z, w_o.to("cpu", torch.float64)) * float(joins[layer].value)  # (L, H, d)
        if centre:
            out = out - out.mean(dim=-1, keepdim=True)
        out = out / sigma[queries, None] * gain  # (L, n_head, d): the head's part of the normed stream
        boost = torch.einsum("qhd,kd->hqk", out, u) - torch.einsum("qhd,d->hq", out, mean_u)[..., None]  # (H, L, T)
        scores.append((weights[layer][:, queries].to(torch.float64).cpu() * boost).sum(dim=(1, 2)))  # (n_head,)
    return torch.stack(scores)


def _copying_reason(source: AttentionSource) -> str | None:
    """Why the source's heads cannot be given a copying score, or None where they can."""
    if Capability.GENERATE not in source.capabilities:
        return "it has no LM head"
    if Capability.EDIT_HEADS not in source.capabilities or not isinstance(source, EditsHeads):
        return "its heads' outputs cannot be read"
    return None


def _frame(rows: list[dict], stacked: bool) -> pd.DataFrame:
    columns = [*(("stack", "kind") if stacked else ()), "layer", "head", *PROBE_COLUMNS]
    frame = pd.DataFrame(rows, columns=columns)
    frame[["layer", "head"]] = frame[["layer", "head"]].astype("int32")
    frame[list(PROBE_COLUMNS)] = frame[list(PROBE_COLUMNS)].astype("float64")
    return frame


def _pair_probe(source, runs: Tensor, seq_len: int, batch: int) -> pd.DataFrame:
    """An encoder-decoder: its encoder reads lead + run + run + trail, its decoder the start token + run + run."""
    lead, trail = _specials(source)
    start = int(source.start_id)
    sums: dict[tuple[str, str, int], list[Tensor]] = {}
    for chunk in runs.split(batch):
        repeated = torch.cat([chunk, chunk], dim=1)  # (B, 2L)
        encoder_ids = torch.cat(
            [torch.tensor([lead] * len(chunk), dtype=torch.long).view(len(chunk), -1), repeated,
             torch.tensor([trail] * len(chunk), dtype=torch.long).view(len(chunk), -1)], dim=1)  # fmt: skip
        decoder_ids = torch.cat([torch.full((len(chunk), 1), start, dtype=torch.long), repeated], dim=1)
        firsts = {"encoder": len(lead), "decoder": 1}

        def read(kind: str, layer: int, weights: Tensor, firsts=firsts) -> None:
            if kind == "cross":
                return
            stack, name = KINDS[0] if kind == "encoder" else KINDS[1]
            found = stripes(weights.float(), firsts[kind], seq_len)
            key = (stack, name, layer)
            sums[key] = [a + b for a, b in zip(sums[key], found, strict=True)] if key in sums else list(found)

        source.run_pair_hooked(
            encoder_ids.to(source.device),
            decoder_ids.to(source.device),
            {"attn.weights": read},
            attention_mask=torch.ones_like(encoder_ids).to(source.device),
        )
    n = len(runs) * seq_len
    rows = [
        {"stack": s, "kind": k, "layer": layer, "head": h, "induction": float(ind[h]) / n,
         "duplicate": float(dup[h]) / n, "copying": math.nan}
        for (s, k, layer), (ind, dup) in sums.items() for h in range(len(ind))
    ]  # fmt: skip
    n_cross_layer, n_cross_head = source.kind_shapes["cross"]
    rows += [
        {"stack": "decoder", "kind": "cross", "layer": layer, "head": h, "induction": math.nan,
         "duplicate": math.nan, "copying": math.nan}
        for layer in range(n_cross_layer) for h in range(n_cross_head)
    ]  # fmt: skip
    frame = _frame(rows, stacked=True)
    frame.attrs["notes"] = {
        "cross": "cross-attention reads the source, not its own sequence: induction is defined within one sequence",
        "copying": "not computed for encoder-decoders",
    }
    return frame


def induction_probe(
    source: AttentionSource,
    *,
    seq_len: int = SEQ_LEN,
    n_seqs: int = N_SEQS,
    seed: int = 0,
    batch: int = BATCH,
    runs: Tensor | None = None,
) -> pd.DataFrame:
    """Every head's induction, duplicate and copying scores on ``n_seqs`` random runs of ``seq_len`` tokens each
    repeated once (the module docstring defines them): one row per head, columns layer, head (int32), [stack, kind
    for an encoder-decoder, as ``heads --json`` names them], induction, duplicate, copying (float64; NaN where the
    source cannot say, the reason in ``frame.attrs["notes"]``). ``batch`` sequences share a pass for the weights;
    copying reads each sequence's head outputs in a pass of its own (:meth:`EditsHeads.head_pass`). ``seq_len`` is
    cut to what the model's positions hold (``frame.attrs["seq_len"]`` says what was read). ``runs``: the runs to
    repeat, ids (n_seqs, seq_len), instead of drawing them (a check that reads the same ids another way)."""
    if seq_len < 2 or n_seqs < 1 or batch < 1:
        raise ValueError(f"seq_len ({seq_len}) must be at least 2, n_seqs ({n_seqs}) and batch ({batch}) at least 1")
    lead, trail = _specials(source)
    reads_ids = source.encode("a", 16).ids is not None
    vocab_size, special = _vocabulary(source) if reads_ids else (EMBEDDED_VOCAB, set())
    seq_len = min(seq_len, (source.max_positions - len(lead) - len(trail) - 1) // 2)
    if seq_len < 2:
        raise ValueError(f"{source.name} reads {source.max_positions} positions: too few to repeat a run of 2")
    if runs is None:
        runs = random_runs(n_seqs, seq_len, vocab_size, special | set(lead) | set(trail), seed)  # (n_seqs, L)
    n_seqs, seq_len = runs.shape
    if Capability.TARGET in source.capabilities and "attn.weights" in getattr(source, "pair_points", ()):
        frame = _pair_probe(source, runs, seq_len, batch)
        frame.attrs["seq_len"] = seq_len
        return frame
    first = len(lead)
    why_not = _copying_reason(source) if reads_ids else "it reads no token ids"
    induction = duplicate = copying = None
    means: dict[str, Tensor] = {}
    with torch.no_grad():
        for chunk in runs.split(batch):
            ids = torch.cat([torch.tensor(lead, dtype=torch.long).expand(len(chunk), -1), chunk, chunk,
                             torch.tensor(trail, dtype=torch.long).expand(len(chunk), -1)], dim=1)  # fmt: skip
            layers = [weights for _, weights in _one_stack_weights(source, ids, reads_ids)]  # each (B, H, T, T)
            found = [stripes(w, first, seq_len) for w in layers]
            ind, dup = torch.stack([f[0] for f in found]), torch.stack([f[1] for f in found])  # (n_layer, n_head)
            induction = ind if induction is None else induction + ind
            duplicate = dup if duplicate is None else duplicate + dup
            for b in range(len(chunk) if why_not is None else 0):
                try:
                    one = _copying(source, ids[b].tolist(), [w[b] for w in layers], first, seq_len, means)
                except ValueError as err:
                    why_not = str(err)
                    break
                copying = one if copying is None else copying + one
    n = n_seqs * seq_len
    n_layer, n_head = induction.shape
    rows = [
        {"layer": layer, "head": h, "induction": float(induction[layer, h]) / n,
         "duplicate": float(duplicate[layer, h]) / n,
         "copying": math.nan if why_not is not None or copying is None else float(copying[layer, h]) / n}
        for layer in range(n_layer) for h in range(n_head)
    ]  # fmt: skip
    frame = _frame(rows, stacked=False)
    frame.attrs["seq_len"] = seq_len
    frame.attrs["notes"] = {} if why_not is None else {"copying": why_not}
    return frame
