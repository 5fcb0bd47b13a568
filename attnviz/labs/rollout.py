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
products of T x T), flow the first :func:`flow_tokens`: the whole text up to :data:`FLOW_TOKENS`, fewer where
its T² max-flows (each on up to L·T² edges) would pass :data:`FLOW_MAX_WORK` (deep encoders). With full attention
on a longer text both drop the weight on keys past their bound and renormalise the rows. Capacities are rounded
to integers of :data:`FLOW_SCALE` per unit, so the max-flow (Dinic's algorithm, here, on each output token's part
of the graph) runs in exact integer arithmetic; each flow is then off the float one by at most half a unit per cut
edge. Its time is predicted from its work (the pairs times the edges they walk) at the rate this machine shows.

The head-averaged weights, their rollout and the reach are computed on the model's device when given one (a
record keeps q and k on the host: each layer's window goes there, and the maps come back once). The max-flow is
host work by nature: Dinic's algorithm in Python over integer capacities, on at most FLOW_TOKENS tokens.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.admission import Need
from attnviz.core.attention import reduction_dtype
from attnviz.core.capture import weights_window
from attnviz.core.device_speed import device_of, speedup
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import msg
from attnviz.models.record import AttentionRecord

RESIDUAL = 0.5  # the residual's share: Â = (1 - RESIDUAL)·A + RESIDUAL·I, as in the paper
ROLLOUT_TOKENS = 512  # weights windows stop at 512 x 512 a head (attnviz.core.capture.WINDOW_CELLS)
FLOW_TOKENS = 64  # flow: T² max-flows on graphs of up to L·T² edges
FLOW_SCALE = 10**9  # capacities in units of 1e-9: integer max-flow, exact on the rounded capacities
FLOW_SECONDS_PER_UNIT = 1.0e-6  # a max-flow edge on a busy 2-core CPU (0.3 to 1.5 µs measured): before any probe
FLOW_MAX_WORK = 5.0e7  # max-flow edges in all: MiniLM's 6 layers at 56 tokens, SmolLM2's 30 at 60
FLOW_PROBE_SECONDS = 0.5  # flow_rate times this long on the graph itself before the page offers the flow
FLOW_PROGRESS_STEPS = 100  # the progress bar's steps: equal shares of the predicted work
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

    Entry l is R_l = Â_l · Â_{l-1} · … · Â_0 (in :func:`~attnviz.core.attention.reduction_dtype`: float64 on the
    CPU, float32 on an accelerator; returned as float32), on the weights' device: row i, how output token i after
    layer l draws on input token j. Each row sums to 1.
    """
    if attention.ndim != 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be (n_layer, T, T), not {tuple(attention.shape)}")
    steps = with_residual(attention.to(reduction_dtype(attention.device)), residual)  # (n_layer, T, T)
    out = torch.empty_like(steps)
    joint = torch.eye(steps.shape[-1], dtype=steps.dtype, device=steps.device)
    for layer in range(steps.shape[0]):
        joint = steps[layer] @ joint  # (T, T)
        out[layer] = joint
    return out.float()


@dataclass(frozen=True, eq=False)
class _Network:
    """One output token's part of the flow graph, as arc arrays (see :func:`_source_network`)."""

    adj: list[list[int]]  # node -> its arcs
    head: list[int]  # arc -> the node it enters
    cap: list[int]  # arc -> its capacity
    level: list[int]  # node -> boundaries below the top (the first phase's levels)
    sinks: dict[int, int]  # input token -> its node
    inflow: dict[int, int]  # an input token's node -> the capacity entering it
    out: int  # the capacity leaving the top node


def _source_network(caps: list[list[list[int]]], source: int) -> _Network:
    """The part of the flow graph that output token ``source`` reaches, as arc arrays for :func:`_max_flow`.

    caps: per layer l a (T, T) nested list of integer capacities, edge (l + 1, i) -> (l, j). Node 0 is the top
    node; arc 2k is edge k and arc 2k + 1 its reverse (capacity 0). Only what the top node reaches can carry its
    flow, and a residual path never leaves that set (an arc carries flow only inside it).
    """
    n_layer = len(caps)
    ids: dict[tuple[int, int], int] = {(n_layer, source): 0}
    adj: list[list[int]] = [[]]
    head: list[int] = []
    cap: list[int] = []
    level = [0]
    above = [source]
    for layer in range(n_layer - 1, -1, -1):
        below: list[int] = []
        for i in above:
            u = ids[(layer + 1, i)]
            for j, c in enumerate(caps[layer][i]):
                if c <= 0:
                    continue
                v = ids.get((layer, j))
                if v is None:
                    v = ids[(layer, j)] = len(adj)
                    adj.append([])
                    level.append(n_layer - layer)
                    below.append(j)
                adj[u].append(len(head))
                head.append(v)
                cap.append(c)
                adj[v].append(len(head))
                head.append(u)
                cap.append(0)
        above = below
    sinks = {j: ids[(0, j)] for j in sorted(above)}
    inflow = dict.fromkeys(sinks.values(), 0)
    for arc in range(0, len(head), 2):
        if head[arc] in inflow:
            inflow[head[arc]] += cap[arc]
    return _Network(adj, head, cap, level, sinks, inflow, sum(cap[arc] for arc in adj[0]))


def _max_flow(net: _Network, sink: int) -> int:
    """The maximum flow from the network's top node (node 0) to node ``sink``: Dinic's algorithm on integer
    capacities, exact.

    The first phase's levels are the boundaries (every edge goes one boundary down), later phases' come from a
    breadth-first search of the residual network. It stops once the flow meets the smaller of what leaves the top
    node and what can enter the sink, as many pairs do in the first phase.
    """
    adj, head = net.adj, net.head
    res = net.cap[:]
    bound = min(net.out, net.inflow[sink])
    n_nodes = len(adj)
    level = net.level[:]
    for v in net.inflow:  # the other input tokens are dead ends for this sink
        if v != sink:
            level[v] = -1
    flow = 0
    while flow < bound:
        if flow:  # a later phase: levels from a breadth-first search of the residual network
            level = [-1] * n_nodes
            level[0] = 0
            queue = deque([0])
            while queue:
                u = queue.popleft()
                next_level = level[u] + 1
                for arc in adj[u]:
                    v = head[arc]
                    if level[v] < 0 and res[arc] > 0:
                        level[v] = next_level
                        queue.append(v)
            if level[sink] < 0:
                break
        current = [0] * n_nodes
        pushed = False
        while flow < bound:  # augment along shortest paths until none is left (a blocking flow)
            path: list[int] = []
            u = 0
            while u != sink:
                arcs, k, next_level = adj[u], current[u], level[u] + 1
                n_arcs = len(arcs)
                while k < n_arcs and not (res[arcs[k]] > 0 and level[head[arcs[k]]] == next_level):
                    k += 1
                current[u] = k
                if k < n_arcs:
                    path.append(arcs[k])
                    u = head[arcs[k]]
                    continue
                level[u] = -2  # a dead end: no shortest path leaves it
                if not path:
                    break
                u = head[path.pop() ^ 1]
                current[u] += 1
            if u != sink:
                break
            amount = min(res[arc] for arc in path)
            for arc in path:
                res[arc] -= amount
                res[arc ^ 1] += amount
            flow += amount
            pushed = True
        if not pushed:
            break
    return flow


def flow_row_work(attention: Tensor) -> Tensor:
    """The predicted work of each output token's max-flows: (n_layer, T, T) weights -> (T,) float64, the input
    tokens it reaches (its max-flows) times the edges of the graph it reaches (what each walks, measured: the time
    per pair and edge stays within a factor of 1.5 from 16 to 64 tokens, encoder or decoder)."""
    edges = attention > 0  # (n_layer, T, T); the residual joins each token to itself
    edges = edges | torch.eye(attention.shape[-1], dtype=torch.bool)
    n = attention.shape[-1]
    reached = torch.eye(n, dtype=torch.float64)  # (T sources, T tokens at the boundary above the layer)
    total = torch.zeros(n, dtype=torch.float64)
    for layer in range(attention.shape[0] - 1, -1, -1):
        step = edges[layer].double()  # (T, T)
        total += reached @ step.sum(dim=-1)  # edges leaving what each source reaches above this layer
        reached = ((reached @ step) > 0).double()  # (T, T)
    return reached.sum(dim=-1) * total


def attention_flow(
    attention: Tensor,
    residual: float = RESIDUAL,
    *,
    scale: int = FLOW_SCALE,
    progress: Progress | None = None,
) -> Tensor:
    """Attention flow: (n_layer, T, T) head-averaged weights -> (T, T) max-flow values, float32.

    Entry [i, j] is the maximum flow from token i at the top of the last layer given to token j at the input, with
    :func:`with_residual`'s Â as capacities (rounded to integers of 1 / ``scale``; exact max-flows on those). Each
    value lies in [0, 1] (what leaves a top node is at most its row of capacities, 1). A pair no path joins (a later
    token, under a causal mask) gets 0 without a max-flow.

    ``progress`` gets one stage, "rollout_lib.flow_progress", of :data:`FLOW_PROGRESS_STEPS` equal steps: shares
    of the predicted work (:func:`flow_row_work`), so the time left is the work left at the rate this machine
    has shown. The output tokens go in a mixed order (:func:`flow_order`), so the work done at any moment holds
    large and small graphs alike and its rate stands for the rest.
    """
    if attention.ndim != 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"attention must be (n_layer, T, T), not {tuple(attention.shape)}")
    n = attention.shape[-1]
    steps = with_residual(attention.double(), residual)  # (n_layer, T, T)
    caps = torch.round(steps * scale).long().tolist()  # n_layer x T x T integers
    work = flow_row_work(steps)  # (T,)
    total = float(work.sum())
    report = or_none(progress)
    report.stage("rollout_lib.flow_progress", FLOW_PROGRESS_STEPS)
    out = torch.zeros(n, n, dtype=torch.float64)
    done, reported = 0.0, 0
    for i in flow_order(n):
        net = _source_network(caps, i)
        for j, node in net.sinks.items():
            out[i, j] = _max_flow(net, node) / scale
        done += float(work[i])
        due = min(FLOW_PROGRESS_STEPS, int(FLOW_PROGRESS_STEPS * done / total)) - reported
        if due > 0:
            report.step(due)
            reported += due
    return out.float()


def flow_order(n_tokens: int) -> list[int]:
    """The order :func:`attention_flow` takes its output tokens in: 0 … T - 1 by the golden-ratio sequence
    (frac(i·0.618…)), so that every stretch of it mixes early and late tokens (under a causal mask, small and large
    graphs) and the progress bar's rate so far stands for the rest."""
    return sorted(range(n_tokens), key=lambda i: (i * 0.6180339887498949) % 1.0)


def flow_work(n_layer: int, n_tokens: int, causal: bool) -> float:
    """The predicted work of :func:`attention_flow` on ``n_tokens`` tokens through ``n_layer`` layers where every
    weight is positive (:func:`flow_row_work`'s units): under a causal mask output token i reaches tokens 0 … i
    (i + 1 pairs on (i + 1) + (n_layer - 1)·(i + 1)(i + 2)/2 edges), with full attention every token (T pairs on
    T + (n_layer - 1)·T² edges)."""
    if causal:
        return float(sum((i + 1) * ((i + 1) + (n_layer - 1) * (i + 1) * (i + 2) // 2) for i in range(n_tokens)))
    return float(n_tokens * n_tokens * (n_tokens + (n_layer - 1) * n_tokens * n_tokens))


def flow_edges(n_layer: int, n_tokens: int, causal: bool) -> int:
    """Edges of the flow graph: n_layer·T² (full attention) or n_layer·T(T+1)/2 (causal)."""
    per_layer = n_tokens * (n_tokens + 1) // 2 if causal else n_tokens * n_tokens
    return n_layer * per_layer


def flow_seconds(n_layer: int, n_tokens: int, causal: bool, seconds_per_unit: float = FLOW_SECONDS_PER_UNIT) -> float:
    """Predicted seconds of :func:`attention_flow`: :func:`flow_work` at ``seconds_per_unit`` (by default the
    rate measured on a 2-core CPU; :func:`flow_rate` measures this machine's on the graph itself)."""
    return flow_work(n_layer, n_tokens, causal) * seconds_per_unit


def flow_tokens(n_layer: int, n_tokens: int, causal: bool) -> int:
    """How many tokens flow reads: at most :data:`FLOW_TOKENS` and ``n_tokens``, fewer where its predicted work
    would pass :data:`FLOW_MAX_WORK` (many layers of full attention). It depends on the shapes only, never on
    the machine, so a result is the same wherever it is computed."""
    n = max(1, min(FLOW_TOKENS, n_tokens))
    while n > 2 and flow_work(n_layer, n, causal) > FLOW_MAX_WORK:
        n -= 1
    return n


def flow_nbytes(n_layer: int, n_tokens: int, causal: bool) -> int:
    """Predicted peak bytes of :func:`attention_flow`: the integer capacities (n_layer·T² Python ints) and one
    output token's graph at a time (its arc arrays and residual copy, about 400 B an edge)."""
    return 48 * n_layer * n_tokens**2 + 400 * flow_edges(n_layer, n_tokens, causal) + 64 * 2**10


def flow_need(n_layer: int, n_tokens: int, causal: bool, seconds: float | None = None) -> Need:
    """What :func:`attention_flow` on ``n_tokens`` tokens through ``n_layer`` layers costs, on the host (the
    max-flow is host work): :func:`flow_nbytes`, and ``seconds`` when this machine's rate was measured
    (:func:`measured_flow_seconds`, quoted), else :func:`flow_seconds` at the default rate."""
    if seconds is None:
        seconds = flow_seconds(n_layer, n_tokens, causal)
    return Need(flow_nbytes(n_layer, n_tokens, causal), seconds)


def flow_probe_need(n_layer: int, n_tokens: int, causal: bool, budget_s: float = FLOW_PROBE_SECONDS) -> Need:
    """What :func:`measured_flow_seconds` costs: the flow's graph (:func:`flow_nbytes`), and the row it times at the
    default rate: the row of median work (at most twice the mean row's, ``2 x flow_seconds / n_tokens``, under a
    causal mask), whole, or where it is longer its first max-flow (about ``2 x row / n_tokens``) and ``budget_s``."""
    row = 2 * flow_seconds(n_layer, n_tokens, causal) / max(1, n_tokens)
    return Need(flow_nbytes(n_layer, n_tokens, causal), min(row, budget_s + 2 * row / max(1, n_tokens)))


def flow_rate(attention: Tensor, budget_s: float = FLOW_PROBE_SECONDS, clock=time.perf_counter) -> float:
    """This machine's seconds per unit of :func:`flow_row_work`, timed on the graph ``attention`` (n_layer, T, T)
    itself: the output token at the work's median (half of all the work lies in graphs no larger than its), its graph
    built, its max-flow to the first input token (where a sink gathers the flow: often the costliest) and to others
    taken spread out (every k-th) for about ``budget_s``, the others' time scaled to all of them."""
    steps = with_residual(attention.double())  # (n_layer, T, T)
    work = flow_row_work(steps)  # (T,)
    by_work = torch.argsort(work, stable=True)
    row = int(by_work[int(torch.searchsorted(torch.cumsum(work[by_work], 0), work.sum() / 2))])
    caps = torch.round(steps * FLOW_SCALE).long().tolist()
    start = clock()
    net = _source_network(caps, row)
    first = net.sinks.get(0)
    if first is not None:
        _max_flow(net, first)
    fixed = clock() - start
    others = [node for j, node in net.sinks.items() if j != 0]
    stride = max(1, len(others) // 8)
    done, start = 0, clock()
    for node in [node for k in range(stride) for node in others[k::stride]]:
        _max_flow(net, node)
        done += 1
        if clock() - start >= budget_s:
            break
    seconds = fixed + ((clock() - start) * len(others) / done if done else 0.0)
    return max(seconds, 1e-9) / float(work[row])


def flow_work_of(attention: Tensor) -> float:
    """The work of :func:`attention_flow` on ``attention`` (n_layer, T, T): :func:`flow_row_work` summed."""
    return float(flow_row_work(with_residual(attention.double())).sum())


def measured_flow_seconds(attention: Tensor, budget_s: float = FLOW_PROBE_SECONDS) -> float:
    """Predicted seconds of :func:`attention_flow` on ``attention`` (n_layer, T, T): its work
    (:func:`flow_row_work`) at the rate :func:`flow_rate` measures on this machine, on this graph."""
    return flow_work_of(attention) * flow_rate(attention, budget_s)


def rollout_seconds(n_layer: int, n_head: int, head_dim: int, n_tokens: int) -> float:
    """Predicted seconds of :func:`layer_attention` and :func:`rollout`: each head's window from q·k (2·T²·head_dim
    flops), then one T x T product a layer (2·T³)."""
    flops = n_layer * (n_head * 2 * n_tokens**2 * head_dim + 2 * n_tokens**3)
    return flops * ROLLOUT_SECONDS_PER_FLOP


def rollout_nbytes(n_layer: int, n_head: int, n_tokens: int) -> int:
    """Predicted peak bytes: one layer's heads at a time (float32), and the (n_layer, T, T) maps kept, twice."""
    return 4 * n_tokens**2 * (2 * n_head + 3 * n_layer)


def rollout_need(record: AttentionRecord, source, n_tokens: int = ROLLOUT_TOKENS) -> Need:
    """What :func:`rollout_maps` of ``record`` costs on ``source``'s device (:class:`~attnviz.core.admission.Need`):
    :func:`rollout_nbytes` on the host (where the maps come back; an upper bound there when the work runs on an
    accelerator) and, on an accelerator, in its memory too with each layer's window of q and k (float32 at most);
    :func:`rollout_seconds` on that device (the CPU's rate divided by its measured speed-up,
    :func:`attnviz.core.device_speed.speedup`)."""
    n = min(record.q_len, record.k_len, n_tokens)
    device = device_of(source)
    nbytes = rollout_nbytes(record.n_layer, record.n_head, n)
    seconds = rollout_seconds(record.n_layer, record.n_head, source.head_dim, n) / speedup(device)
    on_device = device is not None and device.split(":")[0] != "cpu"
    window = 2 * record.n_head * n * source.head_dim * 4  # one layer's q and k rows, moved to the device
    return Need(nbytes, seconds, nbytes + window if on_device else 0, device)


def layer_attention(
    record: AttentionRecord, n_tokens: int = ROLLOUT_TOKENS, device: torch.device | str | None = None
) -> Tensor:
    """Every layer's weights averaged over heads, on the first ``n_tokens`` tokens: (n_layer, T, T), T = min(q_len,
    n_tokens), float32, 0 where a mask hides a key, computed on and returned on ``device`` (the CPU when None).

    Pads are left out: no row reads a pad's column and a pad's own row is empty (so :func:`with_residual` keeps it
    as the identity). Under a causal mask the first T rows see only the first T keys, so nothing is cut; with full
    attention the weight on later keys is dropped (rows are renormalised afterwards).
    """
    if n_tokens < 1:
        raise ValueError(f"n_tokens ({n_tokens}) must be at least 1")
    n = min(record.q_len, record.k_len, n_tokens)
    real = torch.tensor([not tok.pad for tok in record.tokens[:n]], dtype=torch.bool, device=device)  # (T,)
    keep = real[:, None] & real[None, :]  # (T, T)
    # what record.weights(layer, "mean", ...) gives, with the window computed on the device
    layers = [weights_window(capture, None, (0, n), (0, n), device=device).mean(dim=0) for capture in record.layers]
    return torch.stack(layers).float().masked_fill(~keep, 0.0)  # (n_layer, T, T)


def reach(record: AttentionRecord, n_tokens: int = ROLLOUT_TOKENS, device: torch.device | str | None = None) -> Tensor:
    """Which cells of the maps can carry weight after each layer: bool (n_layer, T, T), T = min(q_len, n_tokens),
    on ``device`` (the CPU when None).

    Entry l is True where a path of keys the masks let through (or the residual) joins query i above layer l to
    input token j; pads' rows and columns are False.
    """
    n = min(record.q_len, record.k_len, n_tokens)
    real = torch.tensor([not tok.pad for tok in record.tokens[:n]], dtype=torch.bool, device=device)  # (T,)
    eye = torch.eye(n, dtype=torch.bool, device=device)
    joint, out = eye, []
    for layer in range(record.n_layer):
        step = record.keys(layer).block(0, n, 0, n, device=device) | eye  # (T, T)
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


def rollout_maps(
    record: AttentionRecord, n_tokens: int = ROLLOUT_TOKENS, device: torch.device | str | None = None
) -> RolloutMaps:
    """The head-averaged weights and their rollout for the first ``n_tokens`` tokens of ``record``, computed on
    ``device`` (the model's; the CPU when None) and kept on the host."""
    if record.n_layer < 1:
        raise ValueError(msg("rollout_lib.no_layers"))
    means = layer_attention(record, n_tokens, device)
    return RolloutMaps(
        layer_mean=means.cpu(),
        rollout=rollout(means).cpu(),
        reach=reach(record, n_tokens, device).cpu(),
        n_tokens=means.shape[-1],
        q_len=record.q_len,
        causal=record.causal,
    )


def flow_input(maps: RolloutMaps, up_to: int) -> Tensor:
    """The weights flow reads through layers 0 … ``up_to``: (up_to + 1, T_f, T_f), the first
    T_f = :func:`flow_tokens` tokens of the maps (the whole text up to that bound: with full attention, past it
    the weight on later keys is dropped and the rows renormalised)."""
    if not 0 <= up_to < maps.n_layer:
        raise ValueError(msg("model_errors.layer_range", layer=up_to, last=maps.n_layer - 1))
    n = flow_tokens(up_to + 1, maps.n_tokens, maps.causal)
    return maps.layer_mean[: up_to + 1, :n, :n]


def flow_map(maps: RolloutMaps, up_to: int, progress: Progress | None = None) -> Tensor:
    """:func:`attention_flow` through layers 0 … ``up_to`` on :func:`flow_input`: (T_f, T_f)."""
    return attention_flow(flow_input(maps, up_to), progress=progress)
