"""Each lab the Compare, Rollout, Training and Patching pages run states its price beside its code (host bytes, device
bytes where it runs on the model's device, seconds on that device), and the pages ask the lab: here each price by
hand, growing with its input, and on a (named, never touched) accelerator where the lab runs on one."""

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnviz import settings
from attnviz.core.tokenizer import Token
from attnviz.labs import compare as cmp
from attnviz.labs import rollout
from attnviz.labs.heads_matter import corruption
from attnviz.labs.training import runs as training
from attnviz.labs.training.runs import TrainingConfig
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.source import Encoding
from tests.unit.labs.role_patterns import KINDS, pattern, record_of

head_pair_module = importlib.import_module("attnviz.labs.compare.head_pair")  # the package's head_pair is the function

# --- Compare: one head in A and B


def test_a_head_pair_is_priced_by_the_weights_it_recomputes_at_the_comparisons_rate():
    """8 tokens, all aligned, head_dim 8 (record_of's q is (n_head, T, T)): in each record the whole map (8 x 8) and
    B − A's 8 rows of 8 keys, each weight 2 x 8 + CELL_FLOPS flops, at FLOPS_PER_SECOND, and a call for the map and
    one for the rows (one run); the bytes of a chunk."""
    a = record_of([[pattern(kind, 8) for kind in KINDS]])
    comparison = cmp.compare_records(a, record_of([[pattern(kind, 8) for kind in reversed(KINDS)]]))
    assert len(comparison.alignment) == 8 and a.full_view
    need = cmp.head_pair_need(comparison)
    assert need.seconds == pytest.approx(2 * ((8 * 8 + 8 * 8) * (2 * 8 + 30) / 2e9 + 2 * 1.5e-4))
    assert (need.nbytes, need.device_nbytes, need.device) == (32 * 2**23, 0, None)  # the records' q and k: the host
    longer = record_of([[pattern(kind, 16) for kind in KINDS]])
    assert cmp.head_pair_need(cmp.compare_records(longer, longer)).seconds > need.seconds


def test_the_rows_b_minus_a_reads_by_hand():
    assert cmp.diff_rows(10) == 10  # whole
    assert cmp.diff_rows(1000) == 1000  # bins of 4, every row
    assert cmp.diff_rows(1001) == 1001  # ... and a last bin of 1
    assert cmp.diff_plan(5000) == (20, 3)  # bins of 20, every 3rd row past 2**23 weights
    assert cmp.diff_rows(5000) == 250 * 7  # 7 of each bin's 20 rows


def test_the_rows_priced_are_the_rows_head_pair_reads(monkeypatch):
    model = EmbeddedModel(EmbeddedConfig(n_layer=1))
    words = ("the cat sat on the mat and " * 80).split()
    a = model.run(" ".join(words), 500)
    b = model.run(" ".join([*words[:50], "dog", *words[51:]]), 500)
    comparison = cmp.compare_records(a, b)
    n = len(comparison.alignment)
    read = []

    def counted(record, layer, queries, keys, head=None):
        read.append(len(queries))
        return cmp.aligned_rows(record, layer, queries, keys, head)

    monkeypatch.setattr(head_pair_module, "aligned_rows", counted)
    for max_cells in (head_pair_module.DIFF_CELLS, n * n // 3):  # every row; every few rows of a bin
        read.clear()
        pair = cmp.head_pair(comparison, 0, 0, max_side=100, max_cells=max_cells, chunk_elements=4096)
        assert sum(read) == 2 * cmp.diff_rows(n, 100, max_cells)  # each record's rows
        assert pair.stride == cmp.diff_plan(n, 100, max_cells)[1]
    assert cmp.diff_rows(n, 100, n * n // 3) < cmp.diff_rows(n, 100)


# --- Rollout and flow


def test_rollout_is_priced_on_the_host_on_a_cpu_and_on_the_device_on_an_accelerator(monkeypatch):
    """2 layers x 4 heads, 8 tokens, head_dim 8: the maps' bytes 4 T² (2 n_head + 3 n_layer), the flops
    n_layer (n_head 2 T² head_dim + 2 T³) at ROLLOUT_SECONDS_PER_FLOP, divided on an accelerator by its speed-up
    (named here, never measured) whose memory holds the maps and a layer's q and k too."""
    record = record_of([[pattern(kind, 8) for kind in KINDS]] * 2)
    monkeypatch.setattr(rollout, "speedup", lambda device: 1.0 if device in (None, "cpu") else 4.0)
    need = rollout.rollout_need(record, SimpleNamespace(device="cpu", head_dim=8))
    nbytes = 4 * 8**2 * (2 * 4 + 3 * 2)
    seconds = 2 * (4 * 2 * 8**2 * 8 + 2 * 8**3) * 1.2e-10
    assert (need.nbytes, need.device_nbytes, need.device) == (nbytes, 0, "cpu")
    assert need.seconds == pytest.approx(seconds)
    on_gpu = rollout.rollout_need(record, SimpleNamespace(device=torch.device("cuda", 0), head_dim=8))
    assert (on_gpu.nbytes, on_gpu.device_nbytes, on_gpu.device) == (nbytes, nbytes + 2 * 4 * 8 * 8 * 4, "cuda:0")
    assert on_gpu.seconds == pytest.approx(seconds / 4.0) and on_gpu.on_accelerator
    longer = record_of([[pattern(kind, 16) for kind in KINDS]] * 2)
    assert rollout.rollout_need(longer, SimpleNamespace(device="cpu", head_dim=8)).seconds > need.seconds
    assert rollout.rollout_need(record, SimpleNamespace(device="cpu", head_dim=8), n_tokens=4).nbytes == 4 * 16 * 14


def test_flow_is_priced_by_its_work_then_by_the_rate_timed_on_its_graph():
    """2 layers, 8 tokens, causal: output token i reaches i + 1 tokens over (i + 1) + (i + 1)(i + 2) / 2 edges."""
    work = sum((i + 1) * ((i + 1) + (i + 1) * (i + 2) // 2) for i in range(8))
    need = rollout.flow_need(2, 8, True)
    assert need.seconds == pytest.approx(work * rollout.FLOW_SECONDS_PER_UNIT)
    assert need.nbytes == 48 * 2 * 64 + 400 * 2 * 36 + 64 * 2**10 and need.device_nbytes == 0
    assert rollout.flow_need(2, 8, True, seconds=3.5).seconds == 3.5  # timed on this machine: quoted as timed
    assert rollout.flow_need(2, 8, False).seconds > need.seconds > rollout.flow_need(2, 4, True).seconds


def test_the_flows_probe_costs_its_row_within_its_budget():
    """The probe times the row of median work (twice the mean row's at most), for at most its budget past the
    row's first max-flow: never more than the flow, and about the budget on a large graph."""
    small = rollout.flow_probe_need(2, 8, True)
    row = 2 * rollout.flow_seconds(2, 8, True) / 8
    assert small.seconds == pytest.approx(row) and small.nbytes == rollout.flow_need(2, 8, True).nbytes
    large = rollout.flow_probe_need(30, 60, True)
    row = 2 * rollout.flow_seconds(30, 60, True) / 60
    assert row > rollout.FLOW_PROBE_SECONDS
    assert large.seconds == pytest.approx(rollout.FLOW_PROBE_SECONDS + 2 * row / 60)
    assert small.seconds < large.seconds < rollout.flow_need(30, 60, True).seconds


# --- Training


def test_training_is_priced_by_its_weights_states_and_largest_chunk_by_hand():
    """The defaults: d_model 512, 128 keys, 16 values; 3 runs x (weights + gradients) in float32 (SGD), the
    evaluation's chunk of 256 sequences x 32 pairs x 512 at 24 widths, and the base."""
    config = TrainingConfig()
    weights = (128 + 16) * 512 + 4 * (512 * 512 + 512) + 512 * 16 + 16
    assert training.parameter_count(config) == weights == 1_132_560
    need = training.training_need(config)
    nbytes = 32 * 2**20 + 3 * weights * 4 * 2 + 24 * 256 * 32 * 512 * 4
    assert (need.nbytes, need.device_nbytes, need.device) == (nbytes, 0, "cpu")
    assert need.seconds == pytest.approx(training.training_macs(config) * settings.TRAIN_SECONDS_PER_TMAC / 1e12)
    adam = training.training_need(TrainingConfig(optimiser="adam", learning_rate=1e-3))
    assert adam.nbytes == nbytes + 3 * weights * 4 * 2  # its two moments
    wide = training.training_need(TrainingConfig(n_head=8, steps=20, pairs=64))
    assert wide.nbytes == 32 * 2**20 + 3 * (144 * 1024 + 4 * (1024 * 1024 + 1024) + 1024 * 16 + 16) * 4 * 2 + (
        24 * 256 * 64 * 1024 * 4
    )
    assert training.training_need(TrainingConfig(steps=600)).seconds > need.seconds


def test_training_on_an_accelerator_holds_its_working_set_there_at_the_cpus_seconds():
    cpu = training.training_need(TrainingConfig())
    gpu = training.training_need(TrainingConfig(device="cuda:0"))  # a config only: nothing runs
    assert (gpu.nbytes, gpu.device_nbytes, gpu.device, gpu.seconds) == (cpu.nbytes, cpu.nbytes, "cuda:0", cpu.seconds)
    assert gpu.on_accelerator


# --- Patching: the proposed corrupted text


class CountingTokenizer:
    """A source whose tokenizer reads the clean texts as one token and every other as two, so that no swap ever
    fits, and counts its calls and the bytes they read."""

    def __init__(self, clean: str):
        self.clean, self.calls = clean, []

    def encode(self, text: str, max_tokens: int) -> Encoding:
        self.calls.append(len(text.encode("utf-8")))
        n = 1 if text in (self.clean, corruption.EXAMPLE_CLEAN) else 2
        return Encoding(None, [Token("x", 0, 1)] * n, n)


def test_a_proposal_is_priced_by_the_bytes_it_reads_and_every_read_it_may_make():
    text = corruption.EXAMPLE_CLEAN  # 58 bytes; a repeated name and two names to exchange: 2 swaps
    assert corruption.swap_count(text) == 2
    need = corruption.propose_need(text)
    assert need.seconds == pytest.approx(6 * (2e-4 + 58 * 1.5e-6))  # the text and 2 swaps, twice (the example's)
    assert (need.nbytes, need.device_nbytes, need.device) == (58 * 160, 0, None)
    longer = corruption.propose_need(text + " and then Bob " + "the cat sat on the mat " * 100)
    assert longer.seconds > need.seconds and longer.nbytes > need.nbytes


@pytest.mark.parametrize(
    "text",
    [
        "Mary went home with 42 cats in 1999 and a dog",  # a single name (19 others), numbers, subjects
        "我住在北京，猫很可爱",  # CJK subjects, 3 bytes a character
        "Nothing to swap here.",
    ],
)
def test_the_reads_priced_are_the_reads_a_proposal_makes_when_no_swap_fits(text):
    source = CountingTokenizer(text)
    proposal = corruption.propose(source, text, 64)
    assert proposal.kind == "example" and proposal.corrupt == corruption.EXAMPLE_CORRUPT
    example = len(corruption.EXAMPLE_CLEAN.encode("utf-8"))
    size, n_text = len(text.encode("utf-8")), 1 + corruption.swap_count(text)
    assert len(source.calls) == n_text + 1 + corruption.swap_count(corruption.EXAMPLE_CLEAN)
    # each swap's read priced at the text's length: a swap changes a word, a few bytes
    assert all(abs(n - size) <= 3 for n in source.calls[:n_text])
    need = corruption.propose_need(text)
    reads = [size] * n_text + source.calls[n_text:]
    assert need.seconds == pytest.approx(sum(2e-4 + n * 1.5e-6 for n in reads))
    assert need.nbytes == max(len(text.encode("utf-8")), example) * 160


# --- the pages ask the labs


def test_no_page_prices_a_job_by_hand():
    """Every price is a lab's (or the app's capture price): no page or page widget builds a Need itself."""
    root = Path(__file__).resolve().parents[3] / "pages"
    pricing = [path.name for path in sorted(root.rglob("*.py")) if "Need(" in path.read_text(encoding="utf-8")]
    assert pricing == []
