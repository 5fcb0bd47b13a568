"""Rollout and flow (attnviz.labs.rollout) against cases computed by hand and independent computations."""

import math

import networkx as nx
import numpy as np
import pytest
import torch

from attnviz.core.capture import capture_weights
from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress
from attnviz.core.tokenizer import Token
from attnviz.labs import rollout
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.record import AttentionRecord
from tests.tolerances import bound, derived_bound
from tests.unit.labs.role_patterns import pattern, record_of

FLOW = bound("flow")  # the integer max-flow against a float one (tests/tolerances.py)

# two causal layers on two tokens: Â_0 = [[1, 0], [.25, .75]], Â_1 = [[1, 0], [.1, .9]]
CAUSAL_2 = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.2, 0.8]]])
# three tokens, full attention, two layers: Â_0 = [[1, 0, 0], [.5, .5, 0], [0, 0, 1]], Â_1[0] = [.5, .25, .25]
FULL_3 = torch.tensor(
    [
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
        [[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    ]
)


def test_residual_by_hand():
    a = torch.tensor([[0.6, 0.4], [0.3, 0.7]])
    assert torch.allclose(rollout.with_residual(a), torch.tensor([[0.8, 0.2], [0.15, 0.85]]))
    # a row a sink took 20 % of is renormalised first; an empty row keeps the token as it was
    short = torch.tensor([[0.4, 0.4], [0.0, 0.0]])
    assert torch.allclose(rollout.with_residual(short), torch.tensor([[0.75, 0.25], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="between 0 and 1"):
        rollout.with_residual(a, residual=1.5)


def test_rollout_of_two_layers_by_hand():
    r = rollout.rollout(CAUSAL_2)
    assert torch.allclose(r[0], torch.tensor([[1.0, 0.0], [0.25, 0.75]]))
    # R_1 = Â_1 Â_0: row 1 = .1·[1, 0] + .9·[.25, .75]
    assert torch.allclose(r[1], torch.tensor([[1.0, 0.0], [0.325, 0.675]]))
    assert torch.allclose(rollout.rollout(FULL_3)[1, 0], torch.tensor([0.625, 0.125, 0.25]))


def test_flow_of_two_layers_by_hand():
    f = rollout.attention_flow(CAUSAL_2)
    # (2,1) -> (0,0): .1 through (1,0), min(.9, .25) through (1,1); (2,1) -> (0,1): min(.9, .75)
    assert torch.allclose(f, torch.tensor([[1.0, 0.0], [0.35, 0.75]]), atol=FLOW, rtol=0)
    # three tokens: (2,0) -> (0,0) = .5 via (1,0) + min(.25, .5) via (1,1) + 0 via (1,2)
    f3 = rollout.attention_flow(FULL_3)
    assert torch.allclose(f3[0], torch.tensor([0.75, 0.25, 0.25]), atol=FLOW, rtol=0)
    # one layer: one edge a pair, the flow is the capacity
    one = rollout.attention_flow(FULL_3[:1])
    assert torch.allclose(one, rollout.with_residual(FULL_3[0]), atol=FLOW, rtol=0)


def test_identity_attention_gives_the_identity():
    eye = torch.eye(5).expand(3, 5, 5)
    assert torch.equal(rollout.rollout(eye), eye)
    assert torch.equal(rollout.attention_flow(eye), torch.eye(5))


def random_attention(n_layer: int, n: int, causal: bool, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(n_layer, n, n, generator=g) ** 3
    if causal:
        a = torch.tril(a)
    return a / a.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [True, False])
def test_rows_sum_to_one_and_flow_stays_within_its_capacities(causal):
    a = random_attention(4, 7, causal)
    r = rollout.rollout(a)
    # float64 rows cast to float32 (eps/2 an entry) and summed again in float32 over 7 keys
    assert torch.allclose(r.sum(-1), torch.ones(4, 7), atol=derived_bound("float32", 1.0, 2 * 7), rtol=0)
    assert (r >= 0).all()
    f = rollout.attention_flow(a)
    assert (f >= 0).all() and (f <= 1 + FLOW).all()
    into_input = rollout.with_residual(a[0]).sum(dim=0)  # (T,) what can reach each input token
    assert (f <= into_input[None, :] + FLOW).all()
    if causal:  # a later input is out of reach
        assert torch.equal(f.triu(1), torch.zeros(7, 7))


def test_flow_equals_networkx_on_float_capacities():
    """An independent max-flow: networkx's preflow-push on the float capacities, the graph built here."""
    a = random_attention(3, 5, causal=False, seed=3)
    steps = 0.5 * a + 0.5 * torch.eye(5)
    graph = nx.DiGraph()
    for layer in range(3):
        for i in range(5):
            for j in range(5):
                graph.add_edge((layer + 1, i), (layer, j), capacity=float(steps[layer, i, j]))
    want = torch.tensor(
        [[nx.maximum_flow_value(graph, (3, i), (0, j)) for j in range(5)] for i in range(5)], dtype=torch.float32
    )
    assert torch.allclose(rollout.attention_flow(a), want, atol=FLOW, rtol=0)


def test_flow_reports_equal_shares_of_its_work_up_to_the_whole():
    seen = []
    rollout.attention_flow(random_attention(2, 9, True), progress=Progress(seen.append))
    done = [s.done for s in seen]
    assert done == sorted(done) and done[-1] == rollout.FLOW_PROGRESS_STEPS == seen[-1].total
    assert seen[-1].label == "rollout_lib.flow_progress" and seen[-1].fraction == 1.0
    # the output tokens go mixed: each half of the order holds early and late ones (small and large graphs)
    order = rollout.flow_order(40)
    assert sorted(order) == list(range(40))
    for half in (order[:20], order[20:]):
        assert min(half) < 10 and max(half) >= 30


def full_text_flow(a: torch.Tensor) -> torch.Tensor:
    """Flow on the whole text, independently: networkx's preflow-push on the float capacities Â (no cut, no
    renormalisation past any bound), the layered graph built here. a: (n_layer, T, T)."""
    n_layer, n = a.shape[0], a.shape[-1]
    steps = 0.5 * (a / a.sum(-1, keepdim=True)).double() + 0.5 * torch.eye(n, dtype=torch.float64)
    graph = nx.DiGraph()
    for layer in range(n_layer):
        for i in range(n):
            for j in range(n):
                if steps[layer, i, j] > 0:
                    graph.add_edge((layer + 1, i), (layer, j), capacity=float(steps[layer, i, j]))
    return torch.tensor(
        [[nx.maximum_flow_value(graph, (n_layer, i), (0, j)) for j in range(n)] for i in range(n)], dtype=torch.float32
    )


def encoder_maps(a: torch.Tensor) -> rollout.RolloutMaps:
    n_layer, n = a.shape[0], a.shape[-1]
    return rollout.RolloutMaps(a, rollout.rollout(a), torch.ones(n_layer, n, n, dtype=torch.bool), n, n, False)


@pytest.mark.slow
def test_encoder_flow_reads_the_whole_text_up_to_its_bound():
    """Defect 7: an encoder's flow was computed on the first 16 tokens, the rows renormalised, while the page and
    the README said that happens only past the bound. 20 tokens of full attention lie within the bound: the map is
    the flow of the whole text."""
    a = random_attention(2, 20, causal=False, seed=7)
    maps = encoder_maps(a)
    assert rollout.flow_tokens(2, 20, causal=False) == 20
    f = rollout.flow_map(maps, 1)
    assert f.shape == (20, 20)
    torch.testing.assert_close(f, full_text_flow(a), atol=FLOW, rtol=0)
    # what the first 16 tokens alone give (the old map) differs: the cut weight matters
    cut = full_text_flow(a[:, :16, :16])
    assert (cut - full_text_flow(a)[:16, :16]).abs().max() > 0.01


def test_past_its_bound_encoder_flow_reads_the_first_tokens_renormalised():
    """Past :func:`flow_tokens` (a deep encoder's bound) the map is the flow of the first T_f tokens with the weight
    on later keys dropped and rows renormalised, as the page says."""
    n_layer = 12
    bound = rollout.flow_tokens(n_layer, 8192, causal=False)
    assert bound < rollout.FLOW_TOKENS and rollout.flow_work(n_layer, bound, False) <= rollout.FLOW_MAX_WORK
    a = random_attention(n_layer, bound + 3, causal=False, seed=1)
    weights = rollout.flow_input(encoder_maps(a), n_layer - 1)
    assert torch.equal(weights, a[:, :bound, :bound])
    assert rollout.flow_input(encoder_maps(a), 0).shape == (1, bound + 3, bound + 3)  # one layer: the whole text


def test_flow_work_counts_the_pairs_and_the_edges_each_max_flow_walks():
    caps = torch.round(rollout.with_residual(random_attention(3, 6, True).double()) * rollout.FLOW_SCALE).long()
    work = rollout.flow_row_work(rollout.with_residual(random_attention(3, 6, True).double()))
    for i in range(6):
        net = rollout._source_network(caps.tolist(), i)
        assert work[i] == len(net.sinks) * len(net.head) // 2  # every weight positive: nothing rounds to 0
    for causal in (True, False):
        a = torch.ones(4, 7, 7)
        a = a.tril() if causal else a
        assert rollout.flow_work_of(a) == rollout.flow_work(4, 7, causal)


def test_the_measured_rate_extrapolates_the_timed_max_flows():
    """flow_rate times the graph at the work's median: building it and its max-flow to the first input token whole,
    then some of the others, scaled to all of them. With a clock that moves 1 s a reading, building and the first
    take 1 s, one other max-flow 2 s, so all four others 8 s."""
    a = random_attention(2, 5, causal=True)
    ticks = iter(range(100))
    rate = rollout.flow_rate(a, budget_s=0.5, clock=lambda: float(next(ticks)))
    work = rollout.flow_row_work(rollout.with_residual(a.double()))
    # under a causal mask token i's work grows about as i³: tokens 0 … 3 hold under half of it, the last crosses it
    assert work[:4].sum() < work.sum() / 2
    assert rate == pytest.approx((1 + 2 * 4) / float(work[4]))
    assert rollout.measured_flow_seconds(a) > 0


def test_layer_attention_is_the_mean_over_heads():
    heads = [pattern("sink", 6), pattern("previous-token", 6), pattern("uniform", 6)]
    record = record_of([heads, heads[::-1]])
    means = rollout.layer_attention(record)
    want = torch.stack(heads).mean(0)
    assert means.shape == (2, 6, 6)
    tol = bound("record_weights")  # a mean of the hand-made records' weights (tests/tolerances.py)
    assert torch.allclose(means[0], want, atol=tol, rtol=0) and torch.allclose(means[1], want, atol=tol, rtol=0)
    assert rollout.layer_attention(record, n_tokens=4).shape == (2, 4, 4)


def test_pads_are_left_out():
    n = 4
    weights = torch.full((1, n, n), 1.0 / n)
    capture = capture_weights(weights, KeyRanges.full(n), bin_size=1, scale=1.0)
    tokens = [Token(f"t{i}", i, i + 1) for i in range(3)] + [Token("<pad>", 3, 3, special=True, pad=True)]
    record = AttentionRecord("pads", tokens, [capture], 1, causal=False, implementation="test", n_input_tokens=n)
    maps = rollout.rollout_maps(record)
    assert torch.equal(maps.layer_mean[0, :, 3], torch.zeros(n)) and torch.equal(maps.layer_mean[0, 3], torch.zeros(n))
    # the real rows renormalised over the three real keys: 1/2 on itself, 1/6 on each other
    assert torch.allclose(maps.rollout[0, 0, :3], torch.tensor([2 / 3, 1 / 6, 1 / 6]))
    assert not maps.reach[0, 3].any() and not maps.reach[0, :, 3].any()


def test_rollout_matches_plain_numpy_on_the_reference_weights():
    """The capture's head means, rolled out, against numpy on the source's eager weights (n_layer, n_head, T, T)."""
    model = EmbeddedModel(EmbeddedConfig(d_model=32, n_head=4, n_layer=3, causal=True))
    text = "the cat sat on the mat because it was tired and the dog barked"
    record = model.run(text, 64)
    reference = model.reference_weights(text, 64).double().numpy()
    joint = np.eye(reference.shape[-1])
    for layer in range(reference.shape[0]):
        a = reference[layer].mean(axis=0)
        a = a / a.sum(axis=-1, keepdims=True)
        joint = (0.5 * a + 0.5 * np.eye(a.shape[0])) @ joint
    maps = rollout.rollout_maps(record)
    assert maps.n_tokens == reference.shape[-1] == record.q_len
    # the capture's weights against eager's, two routes (tests/tolerances.py); each layer's Â takes half of a row's
    # T weight errors, which add as a random walk, and the row-stochastic product carries them through its layers
    n_layer, n = reference.shape[0], reference.shape[-1]
    tol = n_layer * 0.5 * math.sqrt(n) * bound("attention")
    np.testing.assert_allclose(maps.rollout[-1].double().numpy(), joint, atol=tol, rtol=0)
    assert torch.equal(maps.reach[-1], torch.ones_like(maps.reach[-1]).tril())


def test_flow_map_reads_the_whole_text_up_to_a_layer():
    a = random_attention(3, 20, True)
    maps = rollout.RolloutMaps(a, rollout.rollout(a), torch.ones(3, 20, 20, dtype=torch.bool), 20, 20, True)
    f = rollout.flow_map(maps, 1)
    assert f.shape == (20, 20)
    assert torch.equal(f, rollout.attention_flow(a[:2]))
    with pytest.raises(ValueError):
        rollout.flow_map(maps, 3)


def test_the_bounds_hold_and_are_predicted():
    assert rollout.flow_tokens(6, 53, causal=False) == 53  # MiniLM at 53 tokens: the whole text
    assert rollout.flow_tokens(30, 8192, causal=True) == 60  # SmolLM2's 30 layers
    assert rollout.flow_tokens(2, 8192, causal=False) == rollout.FLOW_TOKENS  # the embedded model by default
    deep = rollout.flow_tokens(12, 8192, causal=False)  # a deep encoder reads fewer tokens to stay in its work
    assert deep < rollout.FLOW_TOKENS and rollout.flow_work(12, deep, False) <= rollout.FLOW_MAX_WORK
    assert rollout.flow_work(12, deep + 1, False) > rollout.FLOW_MAX_WORK
    assert rollout.flow_tokens(2, 1, True) == 1
    assert rollout.flow_edges(2, 3, causal=True) == 12 and rollout.flow_edges(2, 3, causal=False) == 18
    assert rollout.rollout_seconds(30, 9, 64, 512) < 20
