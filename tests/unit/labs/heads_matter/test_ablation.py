"""Head ablation's math on hand-computed cases, the rewrite of a layer's output, and the lab on the embedded model."""

import json
import math

import numpy as np
import pytest
import torch

from attnviz.figures.ablation import make_ablation_change_figure, make_ablation_sweep_figure
from attnviz.labs.heads_matter import ablation, common, effect, head_specs, reductions, schedule
from attnviz.models.ablation import ablate_output, ablation_hooks, heads_of
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf import points
from attnviz.settings import ABLATION_MODES, ABLATION_TOKENS, SWEEP_TOKENS
from tests.tolerances import assert_exact_on_cpu

TEXT = "the cat sat on the mat and looked at the dog"


def test_kl_by_hand():
    # p = softmax([0, 0]) = (1/2, 1/2); q = softmax([log 3, 0]) = (3/4, 1/4)
    kl = reductions.kl_divergence(torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3.0), 0.0]]))
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert kl.item() == pytest.approx(expected, abs=1e-7)
    same = torch.randn(4, 7)
    assert reductions.kl_divergence(same, same.clone()).tolist() == [0.0] * 4


def test_next_token_loss_by_hand():
    # position 0 predicts id 1 with p = e^2 / (e^2 + 2); position 1 predicts id 0 with p = 1/3; the last predicts none
    logits = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [5.0, 0.0, 0.0]])
    losses = reductions.next_token_losses(logits, [2, 1, 0])
    assert losses.tolist() == pytest.approx([-math.log(math.e**2 / (math.e**2 + 2)), math.log(3.0)], abs=1e-6)


def test_cosine_distance_by_hand():
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [2.0, 0.0]])
    b = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [-1.0, 0.0]])
    assert reductions.cosine_distance(a, b).tolist() == pytest.approx([1.0, 0.0, 0.0, 2.0])
    x = torch.randn(5, 9)
    assert reductions.cosine_distance(x, x.clone()).tolist() == [0.0] * 5  # exactly, not 1 - 0.9999999


def test_the_rewrite_of_a_toy_output():
    output = torch.arange(2 * 3 * 4 * 2, dtype=torch.float32).view(2, 3, 4, 2)  # (B, T, n_head, hd)
    value = torch.arange(2 * 2 * 3 * 2, dtype=torch.float32).view(2, 2, 3, 2) + 100  # (B, n_kv_head 2, S, hd)
    heads = torch.zeros(2, 4, dtype=torch.bool)
    heads[0, 1] = heads[1, 3] = True
    zero = ablate_output(output, value, heads, "zero")
    assert (zero[0, :, 1] == 0).all() and (zero[1, :, 3] == 0).all()
    untouched = ~heads[:, None, :, None].expand_as(output)
    assert torch.equal(zero[untouched], output[untouched])
    mean = ablate_output(output, value, heads, "mean")
    assert torch.equal(mean[0, :, 1], output[0, :, 1].mean(dim=0).expand(3, 2))
    first = ablate_output(output, value, heads, "first")
    # query heads 0, 1 share kv head 0; 2, 3 share kv head 1 (GQA): each ablated head outputs its kv head's v_0
    assert torch.equal(first[0, :, 1], value[0, 0, 0].expand(3, 2))
    assert torch.equal(first[1, :, 3], value[1, 1, 0].expand(3, 2))
    nothing = torch.zeros(2, 4, dtype=torch.bool)
    for mode in ABLATION_MODES:
        assert torch.equal(ablate_output(output, value, nothing, mode), output)


def test_layers_are_counted_by_calls():
    run = points.Pass(map=None, hooks={})
    a, b, q1, q2 = object(), object(), torch.zeros(1), torch.zeros(1)
    assert run.attention_layer(a, q1) == 0 and run.attention_layer(a, q1) == 0  # the same q again: same layer
    assert run.attention_layer(b, q2) == 1 and run.attention_layer(a, q1) == 2  # a shared module, a new call: new
    rows = [[(1, 2)], [(0, 0)]]
    assert heads_of(rows, 3, 1, 2).tolist() == [[False, False, True], [False, False, False]]
    assert heads_of(rows, 3, 0, 4).tolist()[1] == [True, False, False]
    with pytest.raises(ValueError, match="unknown ablation mode"):
        ablation_hooks([[]], "half", 3)


def test_parse_heads():
    assert head_specs.parse_heads("0.1, 2.3,0.1", 3, 4) == [(0, 1), (2, 3)]
    assert head_specs.parse_heads("1.*", 3, 2) == [(1, 0), (1, 1)]
    for spec, words in (
        ("3.0", "does not exist"),
        ("0.4", "does not exist"),
        ("1", "not a head"),
        ("a.b", "not a head"),
        ("0.1,", "'0.1,' is not a head"),
        ("².1", "not a head"),
        ("", "no heads"),
        ("-1.0", "not a head"),
        ("0.01", "leading zero"),  # not head 1
        ("00.1", "leading zero"),
        ("1.007", "leading zero"),
    ):
        with pytest.raises(ValueError, match=words):
            head_specs.parse_heads(spec, 3, 4)
    assert head_specs.parse_heads("0.0,1.0,2.3", 3, 4) == [(0, 0), (1, 0), (2, 3)]  # a lone 0 is a number
    assert head_specs.read_heads("10.2,999999.*") == [(10, 2), (999999, None)]


def test_a_huge_head_number_is_refused_in_a_short_line():
    for spec in ("1" * 5000 + ".0", "0." + "7" * 5000, "9" * 4000 + ".1", "1" * 7 + ".0"):
        with pytest.raises(ValueError) as caught:
            head_specs.read_heads(spec)
        text = str(caught.value)
        assert "at most 6 digits" in text and "Exceeds" not in text and len(text) < 150, text
        assert "\n" not in text and ("characters" in text or len(spec) <= head_specs.SHOWN_SPEC_CHARS)
    with pytest.raises(ValueError) as caught:
        head_specs.read_heads("x" * 5000)  # a malformed spec is quoted shortened too
    assert len(str(caught.value)) < 150 and "5,000 characters" in str(caught.value)


@pytest.fixture(scope="module")
def embedded():
    return EmbeddedModel(EmbeddedConfig(n_layer=2, n_head=4, n_kv_head=2))


def test_ablating_nothing_changes_nothing_exactly(embedded):
    for mode in ABLATION_MODES:
        result = effect.ablation_effect(embedded, TEXT, 64, [], mode)
        assert_exact_on_cpu(result.hidden_change, 0.0, embedded.device, quantity="unchanged")
        assert_exact_on_cpu(result.change, 0.0, embedded.device, quantity="unchanged")


def test_an_ablation_on_the_embedded_model(embedded):
    result = effect.ablation_effect(embedded, TEXT, 64, [(0, 1), (1, 2)], "first")
    assert not result.logits and result.loss_before is None and result.kl_mean is None
    assert result.hidden_change > 1e-3 and len(result.change) == len(result.tokens)
    top = result.changed_most(3)
    assert [v for _, v in top] == sorted(result.change, reverse=True)[:3]
    value = result.to_json()
    assert value["heads"] == [[0, 1], [1, 2]] and value["kl_per_position"] is None and value["top_before"] is None
    assert len(value["hidden_change_per_position"]) == len(result.tokens)
    with pytest.raises(ValueError, match="does not exist"):
        effect.ablation_effect(embedded, TEXT, 64, [(2, 0)])
    with pytest.raises(ValueError, match="no tokens"):
        effect.ablation_effect(embedded, "", 64, [(0, 0)])


def test_the_batched_sweep_equals_each_head_alone(embedded):
    sweep = ablation.ablation_sweep(embedded, TEXT, 64, "mean", limit=1)  # one ablation a pass
    batched = ablation.ablation_sweep(embedded, TEXT, 64, "mean")  # all eight in one pass
    assert batched.rows_per_pass > 1 and sweep.rows_per_pass == 1
    alone = effect.ablation_effect(embedded, TEXT, 64, [(1, 3)], "mean").hidden_change
    assert sweep.values[1][3] == pytest.approx(alone, abs=1e-6)
    for row, other in zip(sweep.values, batched.values, strict=True):
        assert row == pytest.approx(other, abs=1e-6)


def test_the_token_limits(embedded):
    long = "word " * 3000
    result = effect.ablation_effect(embedded, long, 8192, [(0, 0)])
    assert len(result.tokens) == ABLATION_TOKENS and result.truncated
    assert ablation.ablation_sweep(embedded, long, 8192).n_tokens == SWEEP_TOKENS
    assert common.rows_per_pass(256, 49152) == 5 and common.rows_per_pass(256, 384) == common.PASS_ROWS


def test_the_figures(embedded):
    result = effect.ablation_effect(embedded, "<b>x</b> %{y} cat", 64, [(0, 0)])
    fig = make_ablation_change_figure(result)
    assert len(fig.data[0].y) == len(result.tokens)
    assert all("<b>" not in label for label in fig.data[0].customdata)  # markup escaped
    sweep = make_ablation_sweep_figure(ablation.ablation_sweep(embedded, TEXT, 16))
    assert sweep.data[0].z.shape == (2, 4)


class FakeLM:
    """A source with an LM head whose logits are a fixed table shifted by each ablated head: what the lab reduces."""

    name, n_layer, n_head, d_model = "fake", 2, 3, 8
    ablation_modes = ABLATION_MODES

    def __init__(self, n_tokens: int, vocab: int = 11) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n_tokens,), generator=generator).tolist()
        self.table = torch.randn(n_tokens, vocab, generator=generator)
        self.shift = torch.randn(self.n_layer, self.n_head, n_tokens, vocab, generator=generator)

    def encode(self, text, max_tokens, keep="start"):
        from attnviz.core.tokenizer import Token
        from attnviz.models.source import Encoding

        n = min(max_tokens, len(self.ids))
        return Encoding(ids=self.ids[:n], tokens=[Token(f"t{i}", i, i + 1) for i in range(n)], n_input=len(self.ids))

    def logits(self, heads, n):
        return self.table[:n] + sum((self.shift[layer, head, :n] for layer, head in heads), torch.zeros(()))

    def ablated_outputs(self, text, max_tokens, head_sets, mode):
        from attnviz.models.source import AblatedOutputs

        encoding = self.encode(text, max_tokens)
        values = torch.stack([self.logits(heads, len(encoding.ids)) for heads in head_sets])
        return AblatedOutputs(encoding=encoding, values=values, logits=True, layers_run=self.n_layer)

    def token_texts(self, ids):
        return [f"v{i}" for i in ids]


def test_the_lm_reductions_over_several_chunks():
    n = max(2 * reductions.REDUCE_POSITIONS, SWEEP_TOKENS) + 44  # several chunks of positions; over the sweep's
    source = FakeLM(n)
    heads = [(0, 2), (1, 1)]
    result = effect.ablation_effect(source, "x", 10_000, heads)
    before, after = source.logits([], n), source.logits(heads, n)
    assert result.loss_before == pytest.approx(float(reductions.next_token_losses(before, source.ids).mean()), abs=1e-6)
    assert result.loss_after == pytest.approx(float(reductions.next_token_losses(after, source.ids).mean()), abs=1e-6)
    kl = reductions.kl_divergence(before, after)
    assert result.kl_mean == pytest.approx(float(kl[:-1].mean()), abs=1e-6)
    assert result.change == pytest.approx(kl.tolist(), abs=1e-6)
    probs, ids = torch.softmax(after[-1], dim=-1).topk(5)
    assert result.top_after[-1] == [(f"v{int(i)}", pytest.approx(float(p))) for i, p in zip(ids, probs, strict=True)]
    value = result.to_json()
    assert len(value["top_before"]) == 5 and len(value["kl_per_position"]) == n - 1 and value["hidden_change"] is None
    assert sum(value["kl_per_position"]) / (n - 1) == pytest.approx(value["kl_mean"], abs=1e-6)  # the same positions
    nothing = effect.ablation_effect(source, "x", 10_000, [])
    assert nothing.kl_mean == 0.0 and nothing.loss_after == nothing.loss_before
    one = effect.ablation_effect(FakeLM(1), "x", 10, heads)  # one token: nothing to predict
    assert one.loss_before is None and one.kl_mean is None and len(one.top_after) == 1
    sweep = ablation.ablation_sweep(source, "x", 10_000)
    assert sweep.n_tokens == SWEEP_TOKENS and sweep.measure == "kl_mean"
    alone = effect.ablation_effect(source, "x", SWEEP_TOKENS, [(1, 2)]).kl_mean
    assert sweep.values[1][2] == pytest.approx(alone, abs=1e-6)


def test_the_cli_in_process(capsys):
    from attnviz import cli

    assert cli.main(["ablate", "the cat sat", "--heads", "all", "--json", "--quiet"]) == 0
    value = json.loads(capsys.readouterr().out)
    assert len(value["sweep"]) == 2 and len(value["sweep"][0]) == 4 and len(value["heads"]) == 8
    assert value["sweep_measure"] == "hidden_change"
    assert cli.main(["ablate", "the cat sat", "--heads", "0.1", "--mode", "first", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "mode first, heads 0.1" in out and "cosine distance" in out
    for argv in (
        ["--heads", "9.0"],
        ["--heads", "0.9"],
        ["--heads", "1"],
        ["--heads", "a.b"],
        ["--heads", "0.1,"],
        ["--heads", ""],
        ["--heads", "0.1", "--mode", "half"],
        ["--heads", "0.01"],  # not head 1
        ["--heads", "1" * 5000 + ".0"],  # not Python's "Exceeds the limit (4300 digits)", not 5 kB echoed
        ["--heads", "0." + "3" * 4000],
        [],  # --heads is required
    ):
        code = 2
        try:
            code = cli.main(["ablate", "the cat sat", "--quiet", *argv])
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
        assert len(err) < 300 and "Exceeds" not in err, (argv[:1], err[:300])
    assert cli.main(["ablate", "  ", "--heads", "0.1", "--quiet"]) == 2
    assert "empty" in capsys.readouterr().err


def reference_log_softmax(logits: torch.Tensor) -> np.ndarray:
    """log softmax in float64 with NumPy, from the float32 logits as the model gave them."""
    x = logits.numpy().astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def reference_kl(before: torch.Tensor, after: torch.Tensor) -> np.ndarray:
    log_p, log_q = reference_log_softmax(before), reference_log_softmax(after)
    return (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)


FLOAT64_TOLERANCE = 1e-10  # float32 reductions over 49,152 logits are 1e-6 to 1e-4 off (issue 25, defect 3)
# the sweep's reduction (kl_rows: float32 products summed in float64, issue 29) is within this of float64: 1,000
# times inside issue 29's bound for the sweep (1e-6), and 1,000 times closer than a float32 reduction
SWEEP_TOLERANCE = 2e-9


def test_losses_and_kl_are_reduced_in_float64_over_a_real_vocabulary():
    """SmolLM2's vocabulary, logits of its size (a spread of a few nats around 10): every reduction agrees with a
    float64 reference to FLOAT64_TOLERANCE; float32 misses it by 1e-6 or more."""
    n, vocab = 40, 49_152
    generator = torch.Generator().manual_seed(3)
    before = torch.randn(n, vocab, generator=generator) * 3 + 10
    after = before + torch.randn(n, vocab, generator=generator) * 0.01  # a weak head: KL about 5e-5
    ids = torch.randint(0, vocab, (n,), generator=generator).tolist()
    log_p = reference_log_softmax(before)
    losses = -log_p[np.arange(n - 1), ids[1:]]
    assert np.abs(reductions.next_token_losses(before, ids).numpy() - losses).max() < FLOAT64_TOLERANCE
    kl = reference_kl(before, after)
    assert np.abs(reductions.kl_divergence(before, after).numpy() - kl).max() < FLOAT64_TOLERANCE
    rows = reductions.kl_rows(before, torch.stack([after, before]), positions=16)  # chunks of positions, two rows
    assert np.abs(rows[0].numpy() - kl).max() < SWEEP_TOLERANCE and rows[1].abs().max() == 0.0
    far = before + torch.randn(n, vocab, generator=generator) * 30  # logits moved past BIG_CHANGE: reduced directly
    direct = reductions.kl_rows(before, far[None], positions=16)[0].numpy()
    assert np.abs(direct - reference_kl(before, far)).max() < 1e-9 * reference_kl(before, far).max()
    _, losses = reductions.kl_rows(before, torch.stack([after, far]), positions=16, ids=ids)
    for row, logits in ((0, after), (1, far)):
        expected = -reference_log_softmax(logits)[np.arange(n - 1), ids[1:]]
        assert np.abs(losses[row].numpy() - expected).max() < SWEEP_TOLERANCE * max(1.0, np.abs(expected).max())


def test_logits_formed_block_by_block_reduce_as_the_whole_logits_do():
    """kl_through_head: rows given by what an LM head reads (a weak change, a large one past BIG_CHANGE, none), a
    biased head over SmolLM2's vocabulary size: the KL and the losses of kl_rows on the whole logits, to
    SWEEP_TOLERANCE of the value; the unchanged row exactly 0."""
    from attnviz.labs.heads_matter.reductions import head_reduction, kl_through_head

    generator = torch.Generator().manual_seed(5)
    n, d, vocab = 40, 64, 49_152
    weight = torch.randn(vocab, d, generator=generator) * 0.3
    bias = torch.randn(vocab, generator=generator) * 0.1
    x = torch.randn(n, d, generator=generator) * 3
    rows = torch.stack(
        [x + 0.01 * torch.randn(n, d, generator=generator), x + 3 * torch.randn(n, d, generator=generator), x]
    )
    before = torch.nn.functional.linear(x, weight, bias)
    ids = torch.randint(0, vocab, (n,), generator=generator).tolist()
    reduction = reductions.reduction_of(before)
    kl, losses = reductions.kl_rows(
        before, torch.nn.functional.linear(rows, weight, bias), ids=ids, reduction=reduction
    )
    got, got_losses = kl_through_head(rows, head_reduction(reduction, weight, bias), ids=ids, block=1000)
    assert float(kl[1].median()) > 10.0  # the large change: most positions reduced the direct way
    assert ((got - kl).abs() <= SWEEP_TOLERANCE * kl.abs().clamp_min(1.0)).all()
    assert ((got_losses - losses).abs() <= SWEEP_TOLERANCE * losses.abs().clamp_min(1.0)).all()
    assert got[2].abs().max() == 0.0 and torch.equal(got_losses[2], losses[2])


class ShiftedLM:
    """An LM whose logits are a fixed (T, 49,152) table plus a small shift per ablated head: the lab's
    reductions end to end, against the float64 reference."""

    name, n_layer, n_head, d_model = "shifted", 2, 2, 8
    ablation_modes = ABLATION_MODES

    def __init__(self, n_tokens: int = 24, vocab: int = 49_152) -> None:
        generator = torch.Generator().manual_seed(5)
        self.ids = torch.randint(0, vocab, (n_tokens,), generator=generator).tolist()
        self.table = torch.randn(n_tokens, vocab, generator=generator) * 3 + 10
        self.shift = torch.randn(self.n_layer, self.n_head, n_tokens, vocab, generator=generator) * 0.01

    def encode(self, text, max_tokens, keep="start"):
        return FakeLM.encode(self, text, max_tokens, keep)

    def logits(self, heads, n):
        return self.table[:n] + sum((self.shift[layer, head, :n] for layer, head in heads), torch.zeros(()))

    ablated_outputs = FakeLM.ablated_outputs
    token_texts = FakeLM.token_texts


def test_an_ablation_and_the_sweep_agree_with_a_float64_reference():
    source = ShiftedLM()
    n = len(source.ids)
    result = effect.ablation_effect(source, "x", 64, [(1, 0)])
    before, after = source.logits([], n), source.logits([(1, 0)], n)
    for got, logits in ((result.loss_before, before), (result.loss_after, after)):
        expected = -reference_log_softmax(logits)[np.arange(n - 1), source.ids[1:]].mean()
        assert abs(got - expected) < FLOAT64_TOLERANCE
    kl = reference_kl(before, after)
    assert abs(result.kl_mean - kl[:-1].mean()) < FLOAT64_TOLERANCE
    assert np.abs(np.array(result.change) - kl).max() < FLOAT64_TOLERANCE
    sweep = ablation.ablation_sweep(source, "x", 64)
    for layer, head in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        expected = reference_kl(before, source.logits([(layer, head)], n))[:-1].mean()
        assert abs(sweep.values[layer][head] - expected) < SWEEP_TOLERANCE


class TimedLM(FakeLM):
    """FakeLM on a clock of its own: a pass of R rows of T tokens takes 0.05 + 0.001 R T seconds."""

    def __init__(self, n_tokens: int, vocab: int = 11, n_layer: int = 4, n_head: int = 6) -> None:
        self.n_layer, self.n_head = n_layer, n_head
        super().__init__(n_tokens, vocab)
        generator = torch.Generator().manual_seed(1)
        self.shift = torch.randn(n_layer, n_head, n_tokens, vocab, generator=generator)
        self.now, self.passes = 0.0, []

    def clock(self) -> float:
        return self.now

    def ablated_outputs(self, text, max_tokens, head_sets, mode):
        out = super().ablated_outputs(text, max_tokens, head_sets, mode)
        R, T = out.values.shape[:2]
        self.now += 0.05 + 0.001 * R * T
        self.passes.append((R, T))
        return out


def test_the_sweep_is_priced_from_a_pass_timed_at_the_texts_own_length():
    short = TimedLM(11)
    baseline = ablation.sweep_baseline(short, "x", 256, clock=short.clock)
    assert baseline.n_tokens == 11 and baseline.rows == common.PASS_ROWS  # 16 rows of 11 tokens: a quick pass
    assert baseline.timed_rows == 16 and len(baseline.first) == 16  # the first piece ran, and was timed as a pass
    assert baseline.pass_seconds == pytest.approx(0.05 + 0.001 * 16 * 11)
    left = baseline.pieces(baseline.first)
    assert [len(piece) for piece in left] == [8]  # 24 heads: 16 done, 8 left
    assert baseline.seconds(baseline.first) == pytest.approx(baseline.pass_seconds * 8 / 16)
    long = TimedLM(300)  # read as the sweep's 256
    baseline = ablation.sweep_baseline(long, "x", 10_000, clock=long.clock)
    one_row = 0.05 + 0.001 * 256
    assert baseline.n_tokens == SWEEP_TOKENS and baseline.rows == int(schedule.PASS_SECONDS / one_row)
    assert baseline.pass_seconds == pytest.approx(0.05 + 0.001 * baseline.rows * 256)  # a pass within 2 s, timed
    n_passes = -(-24 // baseline.rows)
    assert len(baseline.pieces()) == n_passes and len(baseline.first) == baseline.rows
    start = long.now
    sweep = ablation.sweep_result(baseline, ablation.run_pieces(long, "x", baseline, {}))
    real = long.now - start
    assert sweep.complete and baseline.seconds(baseline.first) == pytest.approx(real)  # the rest: whole passes
    slow = TimedLM(200)  # 3 s a pass more: one row a pass, timed by the baseline
    slow.ablated_outputs = lambda *args: (setattr(slow, "now", slow.now + 3.0), TimedLM.ablated_outputs(slow, *args))[1]
    baseline = ablation.sweep_baseline(slow, "x", 256, clock=slow.clock)
    assert baseline.rows == 1 and not baseline.first and baseline.seconds() == pytest.approx(24 * (3.05 + 0.2))
    slow = TimedLM(11)  # ... but short rows stay batched: 16 x 11 tokens cost little more than one row
    slow.ablated_outputs = lambda *args: (setattr(slow, "now", slow.now + 3.0), TimedLM.ablated_outputs(slow, *args))[1]
    baseline = ablation.sweep_baseline(slow, "x", 256, clock=slow.clock)
    assert baseline.rows == 16 and baseline.pass_seconds == pytest.approx(3.05 + 0.001 * 16 * 11)


class StopAfter:
    """A progress reporter that raises after ``n`` steps, as Streamlit stops a script at a Stop click."""

    def __init__(self, n: int) -> None:
        self.n = n

    def stage(self, *args, **kwargs) -> None:
        pass

    def step(self, n: int = 1) -> None:
        self.n -= 1
        if self.n <= 0:
            raise KeyboardInterrupt


def test_a_stopped_sweep_keeps_its_passes_and_resumes_to_the_same_map():
    source = TimedLM(11)
    baseline = ablation.sweep_baseline(source, "x", 256, clock=source.clock, limit=11 * 11 * 4 * 4)  # 4 rows a pass
    assert baseline.rows == 4 and len(baseline.first) == 4
    values: dict = {}
    with pytest.raises(KeyboardInterrupt):
        ablation.run_pieces(source, "x", baseline, values, StopAfter(2))  # stopped as the 2nd pass after the first ends
    partial = ablation.sweep_result(baseline, values)
    assert partial.n_done == 12 and partial.n_heads == 24 and not partial.complete
    assert sum(v is not None for row in partial.values for v in row) == 12
    assert all(layer * 6 + head < 12 for layer, head, _ in partial.ranked(24))  # only heads that ran are ranked
    ablation.run_pieces(source, "x", baseline, values)  # Continue
    whole = ablation.sweep_result(baseline, values)
    fresh = ablation.ablation_sweep(source, "x", 256)
    assert whole.complete and np.allclose(whole.values, fresh.values, rtol=0, atol=1e-12)
    assert [v is None for row in partial.values for v in row] == [not d for row in partial.done for d in row]
    fig = make_ablation_sweep_figure(partial)
    assert "not run" in fig.data[0].text[3][5] and fig.data[0].text[0][0] != "not run (the sweep was stopped)"


def test_the_sweep_ranks_its_heads_by_effect():
    sweep = ablation.AblationSweep(
        "m", "zero", 3, "kl_mean", [[0.1, None, 0.3], [0.3, 0.05, 0.2]], 4, [[True, True, True], [True, True, False]]
    )
    assert sweep.ranked(3) == [(0, 2, 0.3), (1, 0, 0.3), (1, 2, 0.2)]  # ties: the earlier head first
    assert len(sweep.ranked()) == 5 and sweep.n_done == 5 and not sweep.complete
    one = ablation.ablation_sweep(FakeLM(1), "x", 10)  # one token: no next token, no value, nothing ranked
    assert one.ranked() == [] and one.complete and all(v is None for row in one.values for v in row)
