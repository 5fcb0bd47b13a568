"""The run folder's pieces: parts written whole or not at all, and the streamed per-head statistics against numpy
on every row at once."""

import numpy as np
import pandas as pd
import pytest

from attnviz.labs.corpus import store
from attnviz.labs.corpus.store import HeadStats, RunStore, write_parquet


def test_a_part_is_there_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "part-000000000-000000001.parquet"
    frame = pd.DataFrame({"text_id": [0, 1], "x": [1.0, np.nan]})

    def killed(source, destination):
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(store.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_parquet(frame, path)
    assert not path.exists() and pd.read_parquet(tmp_path).empty  # the hidden temporary file is never read
    monkeypatch.undo()
    write_parquet(frame, path)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path), frame)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_streamed_statistics_equal_numpy_on_all_rows():
    rng = np.random.default_rng(0)
    parts = []
    for n_texts, n_heads in [(3, 4), (1, 4), (5, 6), (2, 6)]:  # later parts add heads never seen before
        rows = pd.DataFrame(
            {
                "text_id": np.repeat(np.arange(n_texts), n_heads),
                "layer": np.tile(np.arange(n_heads) // 2, n_texts).astype("int32"),
                "head": np.tile(np.arange(n_heads) % 2, n_texts).astype("int32"),
                "n_tokens": 5,
                "a": rng.normal(3.0, 2.0, n_texts * n_heads),
                "b": rng.normal(size=n_texts * n_heads),
                "flags": rng.choice(["", "sink", "sink, previous-token", "uniform"], n_texts * n_heads),
            }
        )
        rows.loc[rng.random(len(rows)) < 0.3, "b"] = np.nan  # NaN is skipped, never counted
        parts.append(rows)
    stats = HeadStats()
    for part in parts:
        stats.add(part)
    everything = pd.concat(parts)
    heads = stats.to_json()
    assert [(h["layer"], h["head"]) for h in heads] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    eps = np.finfo(np.float64).eps  # pairwise against two-pass: a few roundings a part, on values of a few units
    for head in heads:
        rows = everything[(everything.layer == head["layer"]) & (everything["head"] == head["head"])]
        assert head["n_texts"] == len(rows)
        raised = rows["flags"].str.split(", ").explode()  # on how many texts each flag was raised, counted by hand
        assert head["flags"] == {name: int(n) for name, n in raised[raised != ""].value_counts().sort_index().items()}
        for column in ("a", "b"):
            values = rows[column].dropna().to_numpy()
            if not len(values):
                assert set(head[column].values()) == {None}
                continue
            expected = [values.mean(), values.std(), values.min(), values.max()]
            got = [head[column][k] for k in ("mean", "std", "min", "max")]
            np.testing.assert_allclose(got, expected, rtol=0, atol=64 * eps * np.abs(values).max() * len(parts))


def test_resume_reads_the_parts_back(tmp_path):
    params = {"model": "m", "max_tokens": 4}
    run = RunStore.open(tmp_path / "out", params, resume=False)
    heads = pd.DataFrame({"text_id": [3, 7], "layer": [0, 0], "head": [0, 0], "n_tokens": [2, 4], "a": [1.0, 2.0]})
    texts = pd.DataFrame({"text_id": [3, 7], "text": ["x", "y"], "n_tokens": [2, 4], "n_input_tokens": [2, 9]})
    run.write_batch(heads, texts)
    again = RunStore.open(tmp_path / "out", {**params, "limit": 9}, resume=True)  # a larger --limit goes on
    assert again.is_done(3) and again.is_done(7) and not again.is_done(5)
    assert (again.texts_done, again.tokens_done) == (2, 6)
    assert again.stats.to_json() == run.stats.to_json()
