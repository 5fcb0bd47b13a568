"""A corpus on a Ray cluster (attnviz.labs.corpus.ray_run) against the same corpus in one process.

A local Ray cluster of two workers (one CPU each) runs a small corpus on the embedded model; one worker's
process is killed after the first batch comes back. The run must still hold every text once, and its Parquet
must equal the single-process run's exactly: the same arithmetic on the same machine, provided the
single-process run uses one torch thread as each actor does (with two threads, a matmul's sums are split
differently and about two texts in three differ in a statistic's sixth rounded digit). Each text's statistics do
not depend on the batch it ran in (run_statistics' contract), so the driver's batches (cut by a token guess, with
no tokenizer at hand) need not be the single-process run's. And when Ray is missing or no cluster answers, one
line says so, in seconds.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

import pandas as pd
import pytest
import ray

from attnviz.errors import ClusterUnavailableError, ModelUnavailableError
from attnviz.labs.corpus import CorpusRun
from attnviz.labs.corpus.ray_run import IN_FLIGHT, RayExecutor, connect
from attnviz.labs.corpus.run import run_corpus
from attnviz.labs.cost.sdpa_bench import torch_threads
from attnviz.models.registry import SourceSpec, embedded_spec, open_source

MAX_TOKENS = 48
N_TEXTS = 30
BATCH_TOKENS = 32  # batches of a few texts: 16 of them (by the driver's guess), so a worker dies with batches to come
SPEC = embedded_spec("cpu", seed=3, d_model=32, n_head=4, n_kv_head=2, n_layer=2, causal=True)


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two one-CPU workers, with a small object store; stopped after the module."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 1024**2,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """N_TEXTS short texts of different lengths, one a line."""
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "while",
        "its",
        "owner",
        "read",
        "the",
        "paper",
        "by",
        "the",
        "door",
    ]
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + (i * 5) % 17)) for i in range(N_TEXTS)]
    path = tmp_path_factory.mktemp("corpus") / "texts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class KillingOne:
    """A RayExecutor whose run kills one busy worker's process (SIGKILL: as the OOM killer or a lost node would)
    once the first batch has come back, and counts how far the batches taken run ahead of the results."""

    def __init__(self, executor: RayExecutor) -> None:
        self.executor = executor
        self.killed: int | None = None
        self.taken = self.yielded = self.most_ahead = 0

    def model_info(self) -> dict:
        return self.executor.model_info()

    def probe(self):
        return self.executor.probe()

    def _counted(self, batches):
        for batch in batches:
            self.taken += 1
            yield batch

    def run(self, batches):
        for batch, statistics in self.executor.run(self._counted(batches)):
            self.yielded += 1
            self.most_ahead = max(self.most_ahead, self.taken - self.yielded)
            if self.killed is None:
                self.killed = self.executor.worker_pids(busy_only=True)[0]
                os.kill(self.killed, signal.SIGKILL)
            yield batch, statistics


def read_run(out_dir) -> tuple[pd.DataFrame, pd.DataFrame]:
    heads = pd.read_parquet(out_dir / "heads.parquet").sort_values(["text_id", "layer", "head"])
    texts = pd.read_parquet(out_dir / "texts.parquet").sort_values("text_id")
    return heads.reset_index(drop=True), texts.reset_index(drop=True)


def test_a_worker_killed_mid_run_loses_and_doubles_nothing(cluster, corpus, tmp_path):
    executor = KillingOne(RayExecutor("auto", SPEC, MAX_TOKENS, cpus_per_actor=1))
    assert executor.executor.n_actors == 2
    report = run_corpus(
        None, corpus, tmp_path / "ray", max_tokens=MAX_TOKENS, batch_tokens=BATCH_TOKENS, executor=executor
    )
    with torch_threads(1):  # each actor's one CPU: one thread
        run_corpus(open_source(SPEC), corpus, tmp_path / "local", max_tokens=MAX_TOKENS, batch_tokens=BATCH_TOKENS)

    assert executor.killed is not None
    assert executor.executor.replaced == 1 and executor.executor.resent >= 1
    assert executor.taken == executor.yielded > 2 * 2 * IN_FLIGHT  # every batch once, and more than fit in flight
    assert executor.most_ahead <= 2 * IN_FLIGHT  # never the whole corpus: two actors, IN_FLIGHT batches each
    assert report.texts_done == N_TEXTS and not report.stopped
    heads, texts = read_run(tmp_path / "ray")
    assert texts["text_id"].tolist() == list(range(N_TEXTS))  # every text once
    assert not heads.duplicated(["text_id", "layer", "head"]).any()
    assert len(heads) == N_TEXTS * 2 * 4
    local_heads, local_texts = read_run(tmp_path / "local")
    pd.testing.assert_frame_equal(heads, local_heads, check_exact=True)
    pd.testing.assert_frame_equal(texts, local_texts, check_exact=True)
    # the induction probe ran once, on an actor's model (the driver holds none), as it runs in one process
    ray_probe, local_probe = CorpusRun.open(tmp_path / "ray").probe(), CorpusRun.open(tmp_path / "local").probe()
    assert ray_probe is not None and len(ray_probe) == 2 * 4
    pd.testing.assert_frame_equal(ray_probe, local_probe, check_exact=True)


def test_a_model_an_actor_cannot_open_is_the_model_error(cluster, tmp_path):
    """A folder missing on the worker's node: the loader's own one-line error, not a dead actor sent again."""
    executor = RayExecutor("auto", SourceSpec(str(tmp_path / "absent")), MAX_TOKENS, n_actors=1)
    with pytest.raises(ModelUnavailableError, match="no model folder at"):
        executor.model_info()
    with pytest.raises(ModelUnavailableError, match="no model folder at"):
        list(executor.run(iter([[(0, "a text")]])))
    assert executor.replaced == 0


def test_no_cluster_at_the_address_is_one_line(monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as a process that has not joined a cluster yet
    with pytest.raises(ClusterUnavailableError) as err:
        connect(f"127.0.0.1:{port}")
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in str(err.value)
    assert "\n" not in str(err.value)


def test_without_ray_installed_it_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    with pytest.raises(ClusterUnavailableError, match=r"pip install attnviz\[ray\]"):
        RayExecutor("auto", SPEC, MAX_TOKENS)
