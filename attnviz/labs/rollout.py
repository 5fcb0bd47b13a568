"""Attention rollout and attention flow across layers (Abnar & Zuidema 2020, "Quantifying Attention Flow in
Transformers").

Both read each layer's attention averaged over heads, A_l (T, T), and add the residual connection as
Â_l = 0.5·A_l + 0.5·I (A_l's rows renormalised first, so a row that a sink or a cut took weight from still sums
to 1). Then:

- rollout multiplies them through the layers, R_l = Â_l · … · Â_0: how much of output token i (after layer l)
  comes from input token j, if mixing were linear and the residual took half;
- flow treats the same Â_l as capacities of a layered graph, one node for each token at each layer boundary and
  an edge from token i above layer l to token j below it with capacity Â_l[i, j], and takes the maximum flow from
  output token i at the top to input token j at the bottom, for every pair.

Exact, so bounded: rollout reads the first :data:`ROLLOUT_TOKENS` tokens (the weights of each layer, then L
products of T x T), flow the first :data:`FLOW_TOKENS` (T² max-flows, each on L·T² edges). Capacities are
rounded to integers of :data:`FLOW_SCALE` per unit, so the max-flow runs in exact integer arithmetic; each flow
is then off the float one by at most half a unit per cut edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import torch
from networkx.algorithms.flow import shortest_augmenting_path
from torch import Tensor

from attnviz.core.progress import Progress
from attnviz.i18n.message import msg
from attnviz.models.record import AttentionRecord

RESIDUAL = 0.5  # the residual's share: Â = (1 - RESIDUAL)·A + RESIDUAL·I, as in the paper
ROLLOUT_TOKENS = 512  # weights windows stop at 512 x 512 a head (attnviz.core.capture.WINDOW_CELLS)
FLOW_TOKENS = 16  # flow: T² max-flows on L·T² edges; 16 tokens through SmolLM2's 30 layers: 3.6 s measured
FLOW_SCALE = 10**9  # capacities in units of 1e-9: integer max-flow, exact on the rounded capacities
FLOW_SECONDS_PER_EDGE = 1.2e-5  # measured: one augmenting-path max-flow costs about this per edge (2 CPU cores)
FLOW_MAX_SECONDS = 30.0  # flow reads fewer tokens where FLOW_TOKENS would take longer (deep encoders)
ROLLOUT_SECONDS_PER_FLOP = 1.2e-10  # measured: SmolLM2, 512 tokens, 30 layers: 17 GFLOP in 1.9 s (2 cores)
FLOW_CONFIRM_SECONDS = 2.0  # flow predicted to take longer waits for a button

KINDS = ("rollout", "flow", "layer_mean")


def renormalised(attention: Tensor) -> Tensor:
    """Rows scaled to sum to 1: (..., T, T) -> (..., T, T); a row with no weight stays 0."""
    total = attention.sum(dim=-1, keepdim=True)  # (..., T, 1)
    return torch.where(total > 0, attention / total.clamp_min(1e-30), torch.zeros_like(attention))


def with_residual(attention: Tensor, residual: float = RESIDUAL) -> Tensor:
    """Â = (1 - residual)·A + residual·I, A's rows renormalised: (..., T, T) -> (..., T, T), every row sums to 1.

    A row with no weight at all (a token that sees nothing, a pad) becomes the identity's row: the token keeps
    what it had.
    """
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"the residual's share ({residual}) must be between 0 and 1")
    a = renormalised(attention)
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)  # (T, T)
    empty = a.sum(dim=-1, keepdim=True) == 0  # (..., T, 1)
    mixed = (1.0 - residual) * a + residual * eye
    return torch.where(empty, eye.expand_as(a), mixed)


def rollout(attention: Tensor, residual: float = RESIDUAL) -> Tensor:
    """Attention rollout after every layer: (n_layer, T, T) head-averaged weights -> (n_layer, T, T).

    Entry l is R_l = Â_l · Â_{l-1} · … · Â_0 (in float64, returned as float32): row i, how output token i after
    layer l draws on input token j. Each row sums to 1.
    """
    if attention.ndim != 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be (n_layer, T, T), not {tuple(attention.shape)}")
    steps = with_residual(attention.double(), residual)  # (n_layer, T, T)
    out = torch.empty_like(steps)
    joint = torch.eye(steps.shape[-1], dtype=steps.dtype)
    for layer in range(steps.shape[0]):
        joint = steps[layer] @ joint  # (T, T)
        out[layer] = joint
    return out.float()


def flow_graph(attention: Tensor, residual: float = RESIDUAL, scale: int = FLOW_SCALE) -> nx.DiGraph:
    """The layered graph of :func:`attention_flow`: nodes (l, t) for boundary l = 0 … n_layer (0: the input,
    n_layer: the top) and token t; an edge (l + 1, i) -> (l, j) with capacity round(scale · Â_l[i, j]) where that
    is positive. attention: (n_layer, T, T)."""
    steps = with_residual(attention.double(), residual)  # (n_layer, T, T)
    graph = nx.DiGraph()
    graph.add_nodes_from((layer, t) for layer in range(steps.shape[0] + 1) for t in range(steps.shape[-1]))
    for layer in range(steps.shape[0]):
        caps = torch.round(steps[layer] * scale).long()  # (T, T)
        rows, cols = torch.nonzero(caps > 0, as_tuple=True)
        graph.add_edges_from(
            ((layer + 1, i), (layer, j), {"capacity": c})
            for i, j, c in zip(rows.tolist(), cols.tolist(), caps[rows, cols].tolist(), strict=True)
        )
    return graph


def attention_flow(
    attention: Tensor,
    residual: float = RESIDUAL,
    *,
    scale: int = FLOW_SCALE,
    progress: Progress | None = None,
) -> Tensor:
    """Attention flow: (n_layer, T, T) head-averaged weights -> (T, T) max-flow values, float32.

    Entry [i, j] is the maximum flow from token i at the top of the last layer given to token j at the input, with
    :func:`with_residual`'s Â as capacities. Each value lies in [0, 1] (what leaves a top node is at most its row
    of capacities, 1). A pair no path joins (a later token, under a causal mask) gets 0 without a max-flow.
    ``progress`` gets a stage "progress.token" and a step per output token.
    """
    if attention.ndim != 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be (n_layer, T, T), not {tuple(attention.shape)}")
    n_layer, n = attention.shape[0], attention.shape[-1]
    graph = flow_graph(attention, residual, scale)
    out = torch.zeros(n, n, dtype=torch.float64)
    if progress is not None:
        progress.stage("progress.token", n)
    for i in range(n):
        top = (n_layer, i)
        reachable = nx.descendants(graph, top)
        # only what the top node reaches can carry its flow: under a causal mask, tokens 0 … i
        below = graph.subgraph(reachable | {top})
        residual_net = None
        for j in range(n):
            if (0, j) in reachable:
                residual_net = shortest_augmenting_path(below, top, (0, j), residual=residual_net, two_phase=True)
                out[i, j] = residual_net.graph["flow_value"] / scale
        if progress is not None:
            progress.step()
    return out.float()


def flow_edges(n_layer: int, n_tokens: int, causal: bool) -> int:
    """Edges of the flow graph: n_layer·T² (full attention) or n_layer·T(T+1)/2 (causal)."""
    per_layer = n_tokens * (n_tokens + 1) // 2 if causal else n_tokens * n_tokens
    return n_layer * per_layer


def flow_seconds(n_layer: int, n_tokens: int, causal: bool) -> float:
    """Predicted seconds of :func:`attention_flow`: one max-flow per joined pair, each about
    :data:`FLOW_SECONDS_PER_EDGE` per edge of the part of the graph its top node reaches (under a causal mask,
    output token i reaches tokens 0 … i: (i + 1) pairs on n_layer·(i + 1)(i + 2)/2 edges)."""
    if causal:
        work = sum((i + 1) * flow_edges(n_layer, i + 1, True) for i in range(n_tokens))
    else:
        work = n_tokens * n_tokens * flow_edges(n_layer, n_tokens, False)
    return work * FLOW_SECONDS_PER_EDGE


def flow_tokens(n_layer: int, n_tokens: int, causal: bool) -> int:
    """How many tokens flow reads: at most :data:`FLOW_TOKENS` and ``n_tokens``, fewer where the prediction would
    pass :data:`FLOW_MAX_SECONDS` (many layers of full attention)."""
    n = max(1, min(FLOW_TOKENS, n_tokens))
    while n > 2 and flow_seconds(n_layer, n, causal) > FLOW_MAX_SECONDS:
        n -= 1
    return n


def flow_nbytes(n_layer: int, n_tokens: int, causal: bool) -> int:
    """Predicted peak bytes of :func:`attention_flow`: the graph and its residual network, about 1 kB an edge."""
    return 1024 * 2 * flow_edges(n_layer, n_tokens, causal) + 64 * 2**10


def rollout_seconds(n_layer: int, n_head: int, head_dim: int, n_tokens: int) -> float:
    """Predicted seconds of :func:`layer_attention` and :func:`rollout`: each head's window from q·k (2·T²·head_dim
    flops), then one T x T product a layer (2·T³)."""
    flops = n_layer * (n_head * 2 * n_tokens**2 * head_dim + 2 * n_tokens**3)
    return flops * ROLLOUT_SECONDS_PER_FLOP


def rollout_nbytes(n_layer: int, n_head: int, n_tokens: int) -> int:
    """Predicted peak bytes: one layer's heads at a time (float32), and the (n_layer, T, T) maps kept, twice."""
    return 4 * n_tokens**2 * (2 * n_head + 3 * n_layer)


def layer_attention(record: AttentionRecord, n_tokens: int = ROLLOUT_TOKENS) -> Tensor:
    """Every layer's weights averaged over heads, on the first ``n_tokens`` tokens: (n_layer, T, T), T = min(q_len,
    n_tokens), float32, 0 where a mask hides a key.

    Pads are left out: no row reads a pad's column and a pad's own row is empty (so :func:`with_residual` keeps it
    as the identity). Under a causal mask the first T rows see only the first T keys, so nothing is cut; with full
    attention the weight on later keys is dropped (rows are renormalised afterwards).
    """
    if n_tokens < 1:
        raise ValueError(f"n_tokens ({n_tokens}) must be at least 1")
    n = min(record.q_len, record.k_len, n_tokens)
    real = torch.tensor([not tok.pad for tok in record.tokens[:n]], dtype=torch.bool)  # (T,)
    keep = real[:, None] & real[None, :]  # (T, T)
    layers = [record.weights(layer, "mean", rows=(0, n), cols=(0, n)) for layer in range(record.n_layer)]
    return torch.stack(layers).float().masked_fill(~keep, 0.0)  # (n_layer, T, T)


def reach(record: AttentionRecord, n_tokens: int = ROLLOUT_TOKENS) -> Tensor:
    """Which cells of the maps can carry weight after each layer: bool (n_layer, T, T), T = min(q_len, n_tokens).

    Entry l is True where a path of keys the masks let through (or the residual) joins query i above layer l to
    input token j; pads' rows and columns are False.
    """
    n = min(record.q_len, record.k_len, n_tokens)
    real = torch.tensor([not tok.pad for tok in record.tokens[:n]], dtype=torch.bool)  # (T,)
    eye = torch.eye(n, dtype=torch.bool)
    joint, out = eye, []
    for layer in range(record.n_layer):
        step = record.keys(layer).block(0, n, 0, n) | eye  # (T, T)
        joint = (step.float() @ joint.float()) > 0  # (T, T)
        out.append(joint & real[:, None] & real[None, :])
    return torch.stack(out)


@dataclass(frozen=True, eq=False)
class RolloutMaps:
    """What the Rollout page draws for one record.

    layer_mean: (n_layer, T, T) each layer's weights averaged over heads (raw, no residual); rollout: (n_layer, T,
    T) :func:`rollout` after each layer; reach: bool (n_layer, T, T), :func:`reach`; n_tokens: T, the tokens
    read (the first ``min(q_len, ROLLOUT_TOKENS)``); q_len: the record's tokens; causal: the record's.
    """

    layer_mean: Tensor
    rollout: Tensor
    reach: Tensor
    n_tokens: int
    q_len: int
    causal: bool

    @property
    def n_layer(self) -> int:
        return self.layer_mean.shape[0]

    @property
    def truncated(self) -> bool:
        return self.n_tokens < self.q_len

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.layer_mean, self.rollout, self.reach))


def rollout_maps(record: AttentionRecord, n_tokens: int = ROLLOUT_TOKENS) -> RolloutMaps:
    """The head-averaged weights and their rollout for the first ``n_tokens`` tokens of ``record``."""
    if record.n_layer < 1:
        raise ValueError(msg("rollout_lib.no_layers"))
    means = layer_attention(record, n_tokens)
    return RolloutMaps(
        layer_mean=means,
        rollout=rollout(means),
        reach=reach(record, n_tokens),
        n_tokens=means.shape[-1],
        q_len=record.q_len,
        causal=record.causal,
    )


def flow_map(maps: RolloutMaps, up_to: int, progress: Progress | None = None) -> Tensor:
    """:func:`attention_flow` through layers 0 … ``up_to`` on the first :func:`flow_tokens` tokens: (T_f, T_f)."""
    if not 0 <= up_to < maps.n_layer:
        raise ValueError(msg("model_errors.layer_range", layer=up_to, last=maps.n_layer - 1))
    n = flow_tokens(up_to + 1, maps.n_tokens, maps.causal)
    return attention_flow(maps.layer_mean[: up_to + 1, :n, :n], progress=progress)
