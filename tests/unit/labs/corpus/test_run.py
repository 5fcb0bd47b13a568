"""A corpus run with a stand-in source: batches bounded by tokens, every text once, stop and resume equal to an
unbroken run, the folder's contract (design B), and the summary against numpy on the parts."""

import json

import numpy as np
import pandas as pd
import pytest

from attnviz.labs.corpus import run as corpus_run
from attnviz.labs.corpus.run import plan_batches, route_runs, run_corpus
from attnviz.labs.corpus.store import CorpusRun
from tests.unit.labs.corpus.fake_source import STATS, FakeSource

N_TEXTS = 40


@pytest.fixture
def corpus(tmp_path):
    texts = [" ".join(f"w{i}" for _ in range(1 + (i * 7) % 13)) for i in range(N_TEXTS)]
    texts[5] = ""  # an empty text: skipped, its id kept
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def run(source, corpus, out, **options):
    options.setdefault("max_tokens", 10)
    options.setdefault("batch_tokens", 24)
    return run_corpus(source, corpus, out, probe=False, **options)


def rows(out):
    return CorpusRun.open(out).heads().sort_values(["text_id", "layer", "head"]).reset_index(drop=True)


def test_plan_batches_sorts_by_length_and_bounds_padded_tokens():
    window = [(i, "t", n) for i, n in enumerate([5, 1, 9, 3, 3, 30, 2])]
    batches = plan_batches(window, batch_tokens=10)
    assert [[n for _, _, n in b] for b in batches] == [[1, 2, 3], [3, 5], [9], [30]]
    assert all(len(b) * max(n for _, _, n in b) <= 10 or len(b) == 1 for b in batches)


def test_a_run_writes_every_text_once_in_bounded_batches(corpus, tmp_path):
    source = FakeSource()
    report = run(source, corpus, tmp_path / "out")
    texts = CorpusRun.open(tmp_path / "out").texts(list(range(N_TEXTS)))
    assert sorted(texts) == [i for i in range(N_TEXTS) if i != 5]
    assert report.texts_done == report.texts_total == N_TEXTS - 1 and not report.stopped
    for batch in source.batches:
        assert len(batch) * max(min(len(t.split()), 10) for t in batch) <= 24 or len(batch) == 1
    seen = [t for batch in source.batches for t in batch]
    assert len(seen) == N_TEXTS - 1  # no text twice
    heads = rows(tmp_path / "out")
    assert len(heads) == (N_TEXTS - 1) * 2 * 3
    assert list(heads.columns) == ["text_id", "layer", "head", "n_tokens", *STATS, "flags"]
    assert heads.dtypes["text_id"] == np.int64 and heads.dtypes["layer"] == np.int32
    assert heads.dtypes["n_tokens"] == np.int32 and heads.dtypes["entropy"] == np.float64
    assert heads["prev_token_weight"].isna().sum() == (N_TEXTS - 1) * 2  # head 0's NaN kept
    assert report.routes == ["fused", "fused"] and report.tokens_done == int(
        heads.groupby("text_id").n_tokens.first().sum()
    )


def test_the_summary_equals_numpy_on_the_parts(corpus, tmp_path):
    run(FakeSource(), corpus, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    heads = rows(tmp_path / "out")
    assert {"model", "dtype", "device", "implementation", "routes", "file", "max_tokens", "texts_total"} <= set(summary)
    assert summary["texts_done"] == N_TEXTS - 1 and summary["stopped"] is False and summary["probe"] is None
    assert len(summary["heads"]) == 6
    eps = np.finfo(np.float64).eps  # streamed (pairwise) against two-pass: a few roundings per part on values ~3
    for head in summary["heads"]:
        values = heads[(heads.layer == head["layer"]) & (heads["head"] == head["head"])]
        assert head["n_texts"] == len(values)
        for stat in STATS:
            column = values[stat].dropna().to_numpy()
            if len(column) == 0:
                assert head[stat] == {"mean": None, "std": None, "min": None, "max": None}
                continue
            expected = [column.mean(), column.std(), column.min(), column.max()]
            got = [head[stat][k] for k in ("mean", "std", "min", "max")]
            np.testing.assert_allclose(
                got, expected, rtol=0, atol=64 * eps * np.abs(column).max() * np.sqrt(len(column))
            )


def test_stop_then_resume_equals_an_unbroken_run(corpus, tmp_path):
    run(FakeSource(), corpus, tmp_path / "whole")
    asked = []

    def stop_after_three():
        asked.append(1)
        return len(asked) > 3

    first = FakeSource()
    report = run(first, corpus, tmp_path / "broken", should_stop=stop_after_three)
    assert report.stopped and report.texts_total is None and len(first.batches) == 3
    assert json.loads((tmp_path / "broken" / "summary.json").read_text())["stopped"] is True
    second = FakeSource()
    resumed = run(second, corpus, tmp_path / "broken", resume=True)
    done_first = {t for b in first.batches for t in b}
    assert not done_first & {t for b in second.batches for t in b}  # nothing run twice
    assert not resumed.stopped and resumed.texts_done == N_TEXTS - 1 and resumed.routes == ["fused", "fused"]
    pd.testing.assert_frame_equal(rows(tmp_path / "broken"), rows(tmp_path / "whole"))
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    broken = json.loads((tmp_path / "broken" / "summary.json").read_text())
    assert broken["texts_done"] == whole["texts_done"] and broken["tokens_done"] == whole["tokens_done"]
    for a, b in zip(broken["heads"], whole["heads"], strict=True):
        for stat in STATS:
            assert a[stat].keys() == b[stat].keys()
            np.testing.assert_allclose(
                [np.nan if v is None else v for v in a[stat].values()],
                [np.nan if v is None else v for v in b[stat].values()],
                rtol=1e-12,
            )


def test_a_part_left_alone_by_a_crash_is_removed_and_its_batch_rerun(corpus, tmp_path):
    out = tmp_path / "out"
    run(FakeSource(), corpus, out, should_stop=iter([False, False, True]).__next__)
    part = sorted((out / "texts.parquet").glob("part-*.parquet"))[-1]
    part.unlink()  # killed between the heads part and the texts part
    run(FakeSource(), corpus, out, resume=True)
    run(FakeSource(), corpus, tmp_path / "whole")
    pd.testing.assert_frame_equal(rows(out), rows(tmp_path / "whole"))


def test_limit_and_resume_with_a_larger_limit(corpus, tmp_path):
    out = tmp_path / "out"
    report = run(FakeSource(), corpus, out, limit=10)
    assert report.texts_done == report.texts_total == 10
    assert sorted(CorpusRun.open(out).heads()["text_id"].unique()) == [i for i in range(11) if i != 5]
    report = run(FakeSource(), corpus, out, limit=20, resume=True)
    assert report.texts_done == 20


@pytest.mark.parametrize(
    "change,reason",
    [({"max_tokens": 11}, "its max_tokens is 10, not 11"), ({"batch_tokens": 50}, "its batch_tokens is 24, not 50")],
)
def test_resume_refuses_a_different_run(corpus, tmp_path, change, reason):
    run(FakeSource(), corpus, tmp_path / "out", limit=2)
    with pytest.raises(ValueError, match=reason):
        run(FakeSource(), corpus, tmp_path / "out", resume=True, **change)


def test_a_folder_not_empty_needs_resume(corpus, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty; pass --resume"):
        run(FakeSource(), corpus, tmp_path / "out")
    with pytest.raises(ValueError, match="holds no corpus run"):
        run(FakeSource(), corpus, tmp_path / "out", resume=True)
    with pytest.raises(ValueError, match="limit must be 1 or more"):
        run(FakeSource(), corpus, tmp_path / "new", limit=0)


def test_progress_says_an_honest_time_left(corpus, tmp_path, monkeypatch):
    clock = iter(range(1000))
    monkeypatch.setattr(corpus_run, "perf_counter", lambda: float(next(clock)))
    updates = []
    run(FakeSource(), corpus, tmp_path / "out", progress=updates.append)
    assert [u.texts_done for u in updates] == sorted({u.texts_done for u in updates})
    assert updates[-1].texts_done == N_TEXTS - 1 and updates[-1].seconds_left == 0
    for update in updates:  # the window is the whole file: the tokens to go are known exactly
        assert update.seconds_left == pytest.approx(
            (updates[-1].tokens_done - update.tokens_done) / update.tokens_per_s
        )


def test_an_executor_handing_results_back_out_of_order_and_twice(corpus, tmp_path):
    source = FakeSource()

    class Shuffled:
        def run(self, batches):
            done = [(b, source.run_statistics([t for _, t in b], 10)) for b in batches]
            yield from reversed(done)
            yield done[0]  # a batch handed back twice is written once

    run(None, corpus, tmp_path / "out", executor=Shuffled(), model_info={"model": "fake"})
    run(FakeSource(), corpus, tmp_path / "whole")
    pd.testing.assert_frame_equal(rows(tmp_path / "out"), rows(tmp_path / "whole"))


def test_top_texts_head_rows_and_text(corpus, tmp_path):
    run(FakeSource(stacks=True), corpus, tmp_path / "out")
    corpus_run_ = CorpusRun.open(tmp_path / "out")
    rows_ = corpus_run_.head_rows(1, 2, stack="decoder", kind="cross")
    assert len(rows_) == N_TEXTS - 1 and set(rows_["kind"]) == {"cross"}
    top = corpus_run_.top_texts(1, 2, "entropy", k=3, stack="decoder", kind="cross")
    expected = rows_.nlargest(3, "entropy")
    assert list(top.columns) == ["text_id", "value", "n_tokens", "text"]
    assert list(top["value"]) == list(expected["entropy"]) and list(top["text_id"]) == list(expected["text_id"])
    assert list(top["text"]) == [corpus_run_.text(i) for i in top["text_id"]]
    low = corpus_run_.top_texts(1, 2, "entropy", k=2, largest=False, stack="decoder", kind="cross")
    assert list(low["value"]) == list(rows_.nsmallest(2, "entropy")["entropy"])
    assert corpus_run_.top_texts(0, 0, "prev_token_weight", stack="encoder").empty  # NaN never ranks
    assert corpus_run_.probe() is None


def test_the_time_left_prices_the_unread_file_by_what_was_read(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_run, "WINDOW_TEXTS", 4)  # the file is read a little at a time
    clock = iter(range(1000))
    monkeypatch.setattr(corpus_run, "perf_counter", lambda: float(next(clock)))
    path = tmp_path / "c.txt"
    path.write_text("".join(f"t{i:02d} b c d\n" for i in range(20)))  # equal lines: the price is exact
    updates = []
    report = run(FakeSource(), path, tmp_path / "out", progress=updates.append, batch_tokens=8)
    total = updates[-1].tokens_done
    assert len(updates) == 10 and total == 80
    for update in updates:
        assert update.seconds_left == pytest.approx((total - update.tokens_done) / update.tokens_per_s)
    assert updates[0].texts_total is None and report.texts_total == 20  # known once the file's end is read


def test_route_runs_group_consecutive_layers_that_share_a_route():
    assert route_runs([]) == []
    assert route_runs(["reference"]) == [("reference", 0, 0)]
    assert route_runs(["fused", "fused", "reference", "fused", "eager+reference"]) == [
        ("fused", 0, 1),
        ("reference", 2, 2),
        ("fused", 3, 3),
        ("eager+reference", 4, 4),
    ]
