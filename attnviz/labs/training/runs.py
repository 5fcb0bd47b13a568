"""The tutorial's "loss stuck" pitfall, trained live: one attention layer under three scales.

The task is key-value retrieval. A sequence holds ``pairs`` (key, value)
pairs, each pair one position whose input is the key's embedding plus the
value's; the query is one of those keys, and the answer is its value. Only
attention can solve it: the pair that holds the answer sits at a random
position, so the query must find its key by q·k and read the value through V.
Without that, the best guess is the commonest value in the sequence (with the
default sizes: 15 % right, loss 2.50; a uniform guess is ln 16 = 2.77). Copying
can be solved by a fixed positional pattern and induction needs two layers;
retrieval needs exactly one softmax over content, the thing the scale acts on.

The model is embeddings, our :class:`~attnviz.core.attention.MultiHeadAttention`
(d_model = n_head × d_k, the tutorial's layout) and a linear readout, with
PyTorch's default initialisation. Three runs share the seed, so the same
initial weights and the same batches, and differ only in the ``scale=`` passed
to the attention's forward: 1/√d_k (``sqrt_dk``), 1 (``none``) and
1/√d_model (``sqrt_dmodel``, the bug).

What makes it show: with PyTorch's default initialisation a query component
has variance about 1/3 and a key component (two embeddings summed) about 2/3,
so q·k has a standard deviation of about 0.47·√d_k (5.3 at d_k = 128).
Unscaled, the softmax starts saturated on a random pair (its largest weight is
about 0.7, against 1/32 for flat attention), and a row saturated on a wrong
pair passes almost no gradient back. With plain SGD such rows stay wrong and
the loss stalls far above zero; more steps do not help (2.6 times the default
steps: still 31 % accuracy). 1/√d_model makes the scores √n_head times too
small: the attention starts flat and its logits move slowly, so that run is
late rather than stuck. Adam divides each gradient by its own running size,
which undoes much of a constant factor on the scores: with it the 1/√d_model
run keeps up with 1/√d_k, and the unscaled one learns, slowly (86 % after the
default 300 steps). That is why the default optimiser is plain SGD: it shows
what the scale does to the gradient, where Adam hides most of it.

Losses and accuracies are recorded once per step, on that step's fresh batch
and before the update, so every value is measured on data the model has not
trained on. The final loss and accuracy are measured after the last step on a
held-out set of ``settings.TRAIN_EVAL_SEQUENCES`` sequences. With
``TrainingConfig.train_sequences`` set (small data: the tour's heads sweep) the
steps draw from that many fixed sequences instead, and from the second epoch on a
step's values are on sequences trained on before; the held-out set is the same.

The runs train on ``TrainingConfig.device`` (the CPU by default). The weights
and the batches are drawn on the host, from the seed, then moved, so every
device starts from the same model and sees the same data; a step reads its
loss and accuracy back once (the live curve needs them), an evaluation once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnviz import settings
from attnviz.core.admission import Need
from attnviz.core.attention import MultiHeadAttention, attention_scores
from attnviz.core.budget import training_seconds
from attnviz.core.progress import Progress, or_none
from attnviz.i18n.message import msg
from attnviz.labs.scaling import SCALE_KINDS, scale_factors

SATURATED = 0.9  # a softmax row is saturated when its largest weight reaches this
TARGET, TARGET_WINDOW = 0.9, 10  # "learned": the batch accuracy's mean over 10 steps reaches 90 %
EVAL_CHUNK = 256  # held-out sequences evaluated at a time, which bounds the evaluation's memory
# (sequences x pairs x d_model) float32 tensors a step's or an evaluation's chunk holds at the process's peak, as its
# resident memory says (allocator included): the most of six configs measured (d_model 128 to 1024, batch 32 and 256)
ACTIVATION_WIDTHS = 24
TRAINING_BASE_BYTES = 32 * 2**20  # what the smallest training holds besides (22 MB measured: d_model 8)

_BUILD_LOCK = threading.Lock()  # the seeded initialisation reads torch's global generator

StepCallback = Callable[[int, float, float], None]
QkvCallback = Callable[[Tensor, Tensor, Tensor], None]
ScaleStepCallback = Callable[[str, int, float, float], None]


def scale_for(kind: str, head_dim: int, d_model: int) -> float:
    """The factor the scores are multiplied by: 1/√head_dim, 1 or 1/√d_model; ValueError for another kind."""
    factors = scale_factors(head_dim, d_model)
    if kind not in factors:
        raise ValueError(f"scale kind {kind!r} must be one of {', '.join(SCALE_KINDS)}")
    return factors[kind]


@dataclass(frozen=True)
class TrainingConfig:
    """One request: the layer's size, the optimiser, the task and the seed; invalid values raise ValueError.

    Defaults and ranges come from :mod:`attnviz.settings`. ``training_macs`` bounds the
    work of the three runs together, so no setting holds a server's CPU for long.
    """

    head_dim: int = settings.TRAIN_HEAD_DIM.default
    n_head: int = settings.TRAIN_N_HEAD.default
    steps: int = settings.TRAIN_STEPS.default
    learning_rate: float = settings.TRAIN_LEARNING_RATE[settings.TRAIN_OPTIMISER]
    optimiser: str = settings.TRAIN_OPTIMISER
    seed: int = settings.SEED.default
    pairs: int = settings.TRAIN_PAIRS.default
    keys: int = settings.TRAIN_KEYS.default
    values: int = settings.TRAIN_VALUES.default
    batch: int = settings.TRAIN_BATCH.default
    device: str = "cpu"  # where the runs train: part of the config, so a cached result names its device
    # None: every step draws a fresh batch (unlimited data, the Training page's runs); a number: the runs train on
    # that many sequences, drawn once from the seed and shuffled each epoch (small data: the tour's heads sweep)
    train_sequences: int | None = None

    def __post_init__(self) -> None:
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device must name a torch device, not {self.device!r}") from None
        settings.TRAIN_HEAD_DIM.check(self.head_dim)
        settings.TRAIN_N_HEAD.check(self.n_head)
        settings.TRAIN_STEPS.check(self.steps)
        settings.SEED.check(self.seed)
        settings.TRAIN_PAIRS.check(self.pairs)
        settings.TRAIN_KEYS.check(self.keys)
        settings.TRAIN_VALUES.check(self.values)
        settings.TRAIN_BATCH.check(self.batch)
        if self.keys < self.pairs:
            raise ValueError(msg("training_lib.keys_pairs", keys=self.keys, pairs=self.pairs))
        if self.train_sequences is not None and self.train_sequences < 1:
            raise ValueError(f"train_sequences ({self.train_sequences}) must be at least 1, or None for fresh batches")
        if self.optimiser not in settings.TRAIN_OPTIMISERS:
            raise ValueError(
                msg(
                    "training_lib.optimiser",
                    optimiser=repr(self.optimiser),
                    choices=", ".join(settings.TRAIN_OPTIMISERS),
                )
            )
        low, high = settings.TRAIN_LEARNING_RATE_RANGE
        if not low <= self.learning_rate <= high:  # NaN fails this too
            raise ValueError(msg("training_lib.learning_rate", learning_rate=self.learning_rate, low=low, high=high))
        macs = training_macs(self)
        if macs > settings.TRAIN_MAX_MACS:
            raise ValueError(
                msg(
                    "training_lib.too_costly",
                    tera=macs / 1e12,
                    max_tera=settings.TRAIN_MAX_MACS / 1e12,
                    n_head=self.n_head,
                    head_dim=self.head_dim,
                    d_model=self.d_model,
                    steps=self.steps,
                    max_steps=max_steps(self),
                )
            )

    @property
    def d_model(self) -> int:
        return self.n_head * self.head_dim


def _forward_macs(config: TrainingConfig, batch: int) -> int:
    """Multiply-adds of one forward pass over ``batch`` sequences (the projections dominate)."""
    d, s = config.d_model, config.pairs
    per_sequence = (
        2 * s * d * d  # W_k and W_v over every pair
        + 2 * d * d  # W_q and W_o for the one query
        + 2 * s * d  # q·k and weights·v, all heads: n_head × pairs × d_k each
        + d * config.values  # the readout
    )
    return batch * per_sequence


def variant_macs(config: TrainingConfig, steps: int | None = None) -> int:
    """Multiply-adds of one run (:func:`train_variant`): forward and backward (3 forwards) per step, and two
    held-out evaluations."""
    steps = config.steps if steps is None else steps
    return 3 * _forward_macs(config, config.batch) * steps + 2 * _forward_macs(config, settings.TRAIN_EVAL_SEQUENCES)


def training_macs(config: TrainingConfig, steps: int | None = None) -> int:
    """Multiply-adds of all three runs (:func:`train_scale`)."""
    return len(SCALE_KINDS) * variant_macs(config, steps)


def parameter_count(config: TrainingConfig) -> int:
    """One run's weights: the key and value embeddings, W_q, W_k, W_v and W_o with their biases, the readout."""
    d = config.d_model
    return (config.keys + config.values) * d + 4 * (d * d + d) + d * config.values + config.values


def training_nbytes(config: TrainingConfig) -> int:
    """The three runs' predicted peak: :data:`TRAINING_BASE_BYTES`, each run's weights, gradients and (Adam) two
    moments in float32, held at once, and the largest chunk of sequences in flight (a step's batch or an
    evaluation's :data:`EVAL_CHUNK`) at :data:`ACTIVATION_WIDTHS` (sequences x pairs x d_model) float32 tensors."""
    states = 4 if config.optimiser == "adam" else 2
    weights = len(SCALE_KINDS) * parameter_count(config) * 4 * states
    sequences = max(config.batch, min(EVAL_CHUNK, settings.TRAIN_EVAL_SEQUENCES))
    return TRAINING_BASE_BYTES + weights + ACTIVATION_WIDTHS * sequences * config.pairs * config.d_model * 4


def training_need(config: TrainingConfig) -> Need:
    """What :func:`train_scale` of ``config`` costs (:class:`~attnviz.core.admission.Need`): :func:`training_nbytes`
    on the host and, where it trains on an accelerator, in its memory too (the weights are drawn on the host: an
    upper bound there then); its seconds from its multiply-adds at the CPU's measured rate
    (:func:`attnviz.core.budget.training_seconds`), on every device: a step's small matmuls and its read-back are
    bound by kernel launches on an accelerator, not by arithmetic, so the capture's speed-up does not carry over."""
    nbytes = training_nbytes(config)
    on_device = config.device.split(":")[0] != "cpu"
    return Need(nbytes, training_seconds(training_macs(config)), nbytes if on_device else 0, config.device)


def max_steps(config: TrainingConfig) -> int:
    """The most steps ``config``'s sizes allow within ``settings.TRAIN_MAX_MACS`` (0 if none fit)."""
    fixed = training_macs(config, steps=0)
    per_step = training_macs(config, steps=1) - fixed
    return max(0, (settings.TRAIN_MAX_MACS - fixed) // per_step)


@dataclass(frozen=True)
class RetrievalBatch:
    """Sequences of the key-value retrieval task.

    keys, values: (batch, pairs), the keys of a sequence distinct; query, answer,
    answer_position: (batch,), with ``keys[b, answer_position[b]] == query[b]`` and
    ``values[b, answer_position[b]] == answer[b]``.
    """

    keys: Tensor
    values: Tensor
    query: Tensor
    answer: Tensor
    answer_position: Tensor

    def __len__(self) -> int:
        return self.keys.shape[0]

    def rows(self, start: int, stop: int) -> RetrievalBatch:
        """Sequences ``start`` to ``stop`` (exclusive)."""
        return RetrievalBatch(
            *(t[start:stop] for t in (self.keys, self.values, self.query, self.answer, self.answer_position))
        )

    def to(self, device: torch.device | str) -> RetrievalBatch:
        """The same sequences on ``device``."""
        return RetrievalBatch(
            *(t.to(device) for t in (self.keys, self.values, self.query, self.answer, self.answer_position))
        )


def retrieval_batch(batch: int, pairs: int, n_keys: int, n_values: int, generator: torch.Generator) -> RetrievalBatch:
    """``batch`` random sequences of ``pairs`` (key, value) pairs and one query, drawn from ``generator``."""
    if not 1 <= pairs <= n_keys:
        raise ValueError(f"pairs ({pairs}) must be from 1 to the number of keys ({n_keys})")
    keys = torch.rand(batch, n_keys, generator=generator).argsort(dim=-1)[:, :pairs]  # (batch, pairs), distinct
    values = torch.randint(n_values, (batch, pairs), generator=generator)  # (batch, pairs)
    position = torch.randint(pairs, (batch,), generator=generator)  # (batch,)
    query = keys.gather(1, position[:, None])[:, 0]  # (batch,)
    answer = values.gather(1, position[:, None])[:, 0]  # (batch,)
    return RetrievalBatch(keys, values, query, answer, position)


class RetrievalModel(nn.Module):
    """Key and value embeddings, one :class:`MultiHeadAttention` (head_dim = d_k) and a linear readout.

    The query attends over the pairs; nothing else connects the question to its answer.
    """

    def __init__(self, config: TrainingConfig) -> None:
        super().__init__()
        self.key_embedding = nn.Embedding(config.keys, config.d_model)
        self.value_embedding = nn.Embedding(config.values, config.d_model)
        self.attention = MultiHeadAttention(config.d_model, config.n_head)
        self.readout = nn.Linear(config.d_model, config.values)

    def forward(
        self, batch: RetrievalBatch, scale: float, need_weights: bool = False, on_qkv: QkvCallback | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Logits over the values (batch, values), and the weights (batch, n_head, 1, pairs) when asked for.

        ``on_qkv(q, k, v)`` gets what entered the softmax, as in :class:`MultiHeadAttention`.
        """
        pairs = self.key_embedding(batch.keys) + self.value_embedding(batch.values)  # (B, pairs, d_model)
        query = self.key_embedding(batch.query)[:, None, :]  # (B, 1, d_model)
        out, weights = self.attention(
            query, pairs, pairs, need_weights=need_weights, scale=scale, on_qkv=on_qkv
        )  # (B, 1, d_model)
        return self.readout(out[:, 0]), weights  # (B, values)


def build_model(config: TrainingConfig) -> RetrievalModel:
    """The model with PyTorch's default initialisation, drawn from ``config.seed``.

    Torch's global generator is forked, so the caller's random state is untouched, and
    the build holds a lock, so concurrent sessions cannot interleave their draws.
    """
    with _BUILD_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return RetrievalModel(config)


def make_optimiser(config: TrainingConfig, parameters) -> torch.optim.Optimizer:
    """Plain SGD (no momentum) or Adam (torch's defaults), at ``config.learning_rate``."""
    if config.optimiser == "sgd":
        return torch.optim.SGD(parameters, lr=config.learning_rate)
    return torch.optim.Adam(parameters, lr=config.learning_rate)


@dataclass(frozen=True)
class AttentionSummary:
    """How the query's attention is spread over the pairs, averaged over held-out sequences and heads.

    max_weight: the largest weight (1/pairs is flat, 1 is one-hot); answer_weight: the
    weight on the pair that holds the answer; wrong_saturated: the share of rows whose
    largest weight, ≥ ``SATURATED``, sits on another pair (stuck: almost no gradient);
    score_std: the standard deviation of the scaled scores q·k · scale.
    """

    max_weight: float
    answer_weight: float
    wrong_saturated: float
    score_std: float


def summarise_attention(weights: Tensor, answer_position: Tensor, scores: Tensor) -> AttentionSummary:
    """weights and scores (batch, n_head, 1, pairs), answer_position (batch,) -> the summary, over batch and heads."""
    w = weights[:, :, 0, :]  # (batch, n_head, pairs)
    top, where = w.max(dim=-1)  # (batch, n_head)
    answer = answer_position[:, None].expand_as(top)  # (batch, n_head)
    on_answer = w.gather(-1, answer[..., None])[..., 0]  # (batch, n_head)
    wrong = (top >= SATURATED) & (where != answer)  # (batch, n_head)
    means = torch.stack([top.mean(), on_answer.mean(), wrong.float().mean(), scores.std()])  # read back once
    return AttentionSummary(*means.cpu().tolist())


@dataclass(frozen=True)
class Evaluation:
    loss: float
    accuracy: float
    attention: AttentionSummary


@torch.no_grad()
def evaluate(model: RetrievalModel, data: RetrievalBatch, scale: float) -> Evaluation:
    """Mean cross-entropy, accuracy and the attention summary on ``data``, in chunks of ``EVAL_CHUNK`` sequences,
    on the model's device (``data`` is moved there)."""
    data = data.to(next(model.parameters()).device)
    sums, weights, positions, scores = [], [], [], []

    def keep_scores(q: Tensor, k: Tensor, v: Tensor) -> None:
        scores.append(attention_scores(q, k, scale))  # (b, n_head, 1, pairs)

    for start in range(0, len(data), EVAL_CHUNK):
        chunk = data.rows(start, start + EVAL_CHUNK)
        logits, w = model(chunk, scale, need_weights=True, on_qkv=keep_scores)  # (b, values), (b, n_head, 1, pairs)
        loss = F.cross_entropy(logits, chunk.answer, reduction="sum")
        sums.append(torch.stack([loss, (logits.argmax(dim=-1) == chunk.answer).sum().to(loss.dtype)]))
        weights.append(w)
        positions.append(chunk.answer_position)
    loss = correct = 0.0
    for chunk_loss, chunk_correct in torch.stack(sums).cpu().tolist():  # one read back; summed on the host, in order
        loss += chunk_loss
        correct += chunk_correct
    summary = summarise_attention(torch.cat(weights), torch.cat(positions), torch.cat(scores))  # (N, n_head, 1, pairs)
    return Evaluation(loss / len(data), correct / len(data), summary)


@dataclass(frozen=True)
class RunResult:
    """One variant's training.

    losses, accuracies: one value per step taken, on that step's fresh batch before the
    update; final_loss, final_accuracy: on the held-out set after the last step taken.
    seconds: this run's own wall time (build, steps and evaluations). stopped: ended by
    ``should_stop`` before ``config.steps``. Tuples, so a cached result cannot be changed.
    """

    scale: str
    scale_value: float
    losses: tuple[float, ...]
    accuracies: tuple[float, ...]
    final_loss: float
    final_accuracy: float
    seconds: float
    stopped: bool
    attention_start: AttentionSummary
    attention_end: AttentionSummary

    @property
    def steps_done(self) -> int:
        return len(self.losses)

    @property
    def steps_to_target(self) -> int | None:
        """The step at which the batch accuracy, averaged over ``TARGET_WINDOW`` steps, first reached ``TARGET``."""
        return first_step_reaching(self.accuracies, TARGET, TARGET_WINDOW)


@dataclass
class _Run:
    """One variant in progress: the model, its optimiser and its own stream of batches."""

    config: TrainingConfig
    kind: str
    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        started = time.perf_counter()
        c = self.config
        self.scale = scale_for(self.kind, c.head_dim, c.d_model)
        self.model = build_model(c).to(c.device)  # drawn on the host: the same weights on every device
        self.optimiser = make_optimiser(c, self.model.parameters())
        # every variant draws the same held-out set and then the same batches, in the same order
        self.data = torch.Generator().manual_seed(c.seed)
        self.held_out = retrieval_batch(settings.TRAIN_EVAL_SEQUENCES, c.pairs, c.keys, c.values, self.data)
        # a fixed training set is drawn after the held-out one (so it never is the held-out set), from the same seed
        self.training_set = (
            None
            if c.train_sequences is None
            else retrieval_batch(c.train_sequences, c.pairs, c.keys, c.values, self.data)
        )
        self.queue: list[int] = []  # the training set's sequences still to be seen this epoch, in order
        self.start = evaluate(self.model, self.held_out, self.scale)
        self.seconds += time.perf_counter() - started

    def next_batch(self) -> RetrievalBatch:
        """A fresh batch; or, on a fixed training set, its next ``batch`` sequences: each epoch is the whole set in
        a new seeded order, and a batch that runs past an epoch's end takes the rest from the next one."""
        c = self.config
        if self.training_set is None:
            return retrieval_batch(c.batch, c.pairs, c.keys, c.values, self.data)
        while len(self.queue) < c.batch:
            self.queue += torch.randperm(len(self.training_set), generator=self.data).tolist()
        picked, self.queue = torch.tensor(self.queue[: c.batch]), self.queue[c.batch :]
        s = self.training_set
        return RetrievalBatch(*(t[picked] for t in (s.keys, s.values, s.query, s.answer, s.answer_position)))

    def step(self) -> tuple[float, float]:
        """One SGD/Adam step on the next batch; returns its loss and accuracy, measured before the update (on data
        not trained on yet, unless the training set is fixed and this is its second epoch or later)."""
        started = time.perf_counter()
        c = self.config
        batch = self.next_batch().to(c.device)  # drawn on the host
        logits, _ = self.model(batch, self.scale)  # (batch, values)
        loss = F.cross_entropy(logits, batch.answer)
        accuracy = (logits.detach().argmax(dim=-1) == batch.answer).float().mean()
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        self.optimiser.step()
        step_loss, accuracy = torch.stack([loss.detach(), accuracy]).cpu().tolist()  # the step's one read back
        self.losses.append(step_loss)
        self.accuracies.append(accuracy)
        self.seconds += time.perf_counter() - started
        return self.losses[-1], accuracy

    def result(self) -> RunResult:
        started = time.perf_counter()
        end = evaluate(self.model, self.held_out, self.scale)
        self.seconds += time.perf_counter() - started
        return RunResult(
            scale=self.kind,
            scale_value=self.scale,
            losses=tuple(self.losses),
            accuracies=tuple(self.accuracies),
            final_loss=end.loss,
            final_accuracy=end.accuracy,
            seconds=self.seconds,
            stopped=len(self.losses) < self.config.steps,
            attention_start=self.start.attention,
            attention_end=end.attention,
        )


@dataclass(frozen=True)
class TrainedRun:
    """A run with what it leaves besides its numbers: the trained ``model`` (its weights, to look inside) and the
    ``held_out`` sequences its final numbers were measured on (on the host)."""

    result: RunResult
    model: RetrievalModel
    held_out: RetrievalBatch


def _trained(
    config: TrainingConfig, scale_kind: str, on_step: StepCallback | None, should_stop: Callable[[], bool] | None
) -> _Run:
    run = _Run(config, scale_kind)
    for step in range(1, config.steps + 1):
        if should_stop is not None and should_stop():
            break
        loss, accuracy = run.step()
        if on_step is not None:
            on_step(step, loss, accuracy)
    return run


def train_variant(
    config: TrainingConfig,
    scale_kind: str,
    on_step: StepCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RunResult:
    """Train one variant for ``config.steps`` steps, or until ``should_stop()`` (asked before each step) is true.

    ``on_step(step, loss, accuracy)`` is called after each step, step counting from 1.
    The same config and kind always give the same result.
    """
    return _trained(config, scale_kind, on_step, should_stop).result()


def train_kept(config: TrainingConfig, scale_kind: str, should_stop: Callable[[], bool] | None = None) -> TrainedRun:
    """:func:`train_variant`, keeping the trained model and the held-out set (the same result, number for number)."""
    run = _trained(config, scale_kind, None, should_stop)
    return TrainedRun(run.result(), run.model, run.held_out)


def train_scale(
    config: TrainingConfig | None = None,
    on_step: ScaleStepCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    *,
    steps: int | None = None,
    seed: int | None = None,
    progress: Progress | None = None,
) -> list[RunResult]:
    """The three variants (``SCALE_KINDS`` order), trained in lockstep: step 1 of each, then step 2 of each, …

    Lockstep keeps the live curves side by side, and a stop leaves all three at the same
    step. Each run is exactly what :func:`train_variant` gives alone (its own model and
    batch stream). ``steps`` and ``seed`` override the config's (validated again), for
    the CLI. ``on_step(scale, step, loss, accuracy)`` is called after each variant's step;
    ``should_stop()`` is asked before each round; ``progress`` gets a step a round (all three runs' step).
    """
    config = config or TrainingConfig()
    overrides = {name: value for name, value in (("steps", steps), ("seed", seed)) if value is not None}
    if overrides:
        config = replace(config, **overrides)
    runs = [_Run(config, kind) for kind in SCALE_KINDS]
    progress = or_none(progress)
    progress.stage("progress.step", config.steps)  # after building the models: the first step is a step like the rest
    for step in range(1, config.steps + 1):
        if should_stop is not None and should_stop():
            break
        for run in runs:
            loss, accuracy = run.step()
            if on_step is not None:
                on_step(run.kind, step, loss, accuracy)
        progress.step()
    return [run.result() for run in runs]


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The trailing mean of the last ``window`` values at each step (fewer at the start)."""
    if window < 1:
        raise ValueError(f"window ({window}) must be at least 1")
    out, total = [], 0.0
    for i, x in enumerate(values):
        total += x
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def first_step_reaching(values: Sequence[float], level: float, window: int) -> int | None:
    """The first step (counting from 1) whose trailing mean over ``window`` values is ≥ ``level``; None if none is."""
    for step, mean in enumerate(moving_average(values, window), start=1):
        if step >= window and mean >= level:
            return step
    return None
