"""A corpus run's folder: what a run writes as it goes, and what the CLI, Ray and the page read back.

```text
DIR/run.json          the run's parameters; --resume refuses a folder whose run.json differs
DIR/heads.parquet/    one part file a batch, part-{first_text_id:09d}-{last_text_id:09d}.parquet: a row a text x head
DIR/texts.parquet/    the same part names: text_id, text, n_tokens, n_input_tokens
DIR/probe.parquet     induction and copying per head, written once per run
DIR/summary.json      the run's totals and every head's mean, std, min and max of each statistic
```

Every file is written to a hidden temporary name (pyarrow's dataset reader skips names starting with ".") and
``os.replace``'d, so a part is there whole or not at all. A batch's heads part is written before its texts part,
and a batch counts as done only when both are there: a run killed between the two leaves one part alone, which
:meth:`RunStore.open` removes, and the batch runs again. The summary's per-head statistics are streamed (Chan's
pairwise update of count, mean and the sum of squared deviations, a part at a time), and rebuilt from the parts
when a run is resumed, so they always describe exactly the rows on disk.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

RUN_FILE = "run.json"
HEADS_DIR = "heads.parquet"
TEXTS_DIR = "texts.parquet"
PROBE_FILE = "probe.parquet"
SUMMARY_FILE = "summary.json"
HEAD_KEYS = ("stack", "kind", "layer", "head")  # what names a head; stack and kind for encoder-decoders only
NOT_STATISTICS = frozenset({"text_id", "stack", "kind", "layer", "head", "n_tokens", "flags"})
RESUMABLE_CHANGES = frozenset({"limit"})  # run.json keys a resumed run may change: a larger --limit goes on


def part_name(first_text_id: int, last_text_id: int) -> str:
    return f"part-{first_text_id:09d}-{last_text_id:09d}.parquet"


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` to ``path``, whole or not at all (a hidden temporary file, then ``os.replace``)."""
    temporary = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(temporary, index=False)
    os.replace(temporary, path)


def write_json(value: dict, path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(value, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def statistic_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in NOT_STATISTICS]


def head_keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in HEAD_KEYS if k in frame.columns]


class HeadStats:
    """Per head, for each statistic: count of values (NaN skipped), mean, sum of squared deviations, min, max;
    the texts seen, and on how many of them each flag was raised. Parts are added one at a time (Chan et al.'s pairwise update), in bounded memory: arrays of
    heads x statistics, the heads in the order they first appear."""

    def __init__(self) -> None:
        self.keys: list[str] | None = None
        self.columns: list[str] = []
        self.heads: dict[tuple, int] = {}
        self.n_texts = np.zeros(0, dtype=np.int64)
        self.count = self.mean = self.m2 = np.zeros((0, 0))
        self.min = self.max = np.zeros((0, 0))
        self.flags: dict[str, np.ndarray] = {}  # flag -> on how many texts each head had it

    def _grow(self, n_heads: int) -> None:
        extra = n_heads - len(self.n_texts)
        if extra <= 0:
            return
        pad = np.zeros((extra, len(self.columns)))
        blank = np.full((extra, len(self.columns)), np.nan)
        self.n_texts = np.concatenate([self.n_texts, np.zeros(extra, dtype=np.int64)])
        self.flags = {name: np.concatenate([n, np.zeros(extra, dtype=np.int64)]) for name, n in self.flags.items()}
        self.count, self.mean, self.m2 = (np.concatenate([a, pad]) for a in (self.count, self.mean, self.m2))
        self.min, self.max = (np.concatenate([a, blank]) for a in (self.min, self.max))

    def add(self, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        if self.keys is None:
            self.keys, self.columns = head_keys(frame), statistic_columns(frame)
            self.count = self.mean = self.m2 = np.zeros((0, len(self.columns)))
            self.min = self.max = np.zeros((0, len(self.columns)))
        keys = zip(*(frame[k].tolist() for k in self.keys), strict=True)
        index = np.fromiter((self.heads.setdefault(k, len(self.heads)) for k in keys), dtype=np.int64, count=len(frame))
        n_heads = len(self.heads)
        self._grow(n_heads)
        self.n_texts += np.bincount(index, minlength=n_heads)
        if "flags" in frame.columns:  # "sink, previous-token": one count a flag, so the page never reads the rows
            each = frame["flags"].fillna("").astype(str).str.split(", ").explode()
            each = each[each != ""]
            for name, rows in each.groupby(each).groups.items():
                counts = self.flags.setdefault(name, np.zeros(n_heads, dtype=np.int64))
                counts += np.bincount(index[np.asarray(rows)], minlength=n_heads)
        values = frame[self.columns].to_numpy(np.float64)  # (rows, statistics)
        for j in range(len(self.columns)):
            x = values[:, j]
            valid = ~np.isnan(x)
            at, x = index[valid], x[valid]
            n_b = np.bincount(at, minlength=n_heads).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_b = np.bincount(at, x, minlength=n_heads) / n_b
                m2_b = np.bincount(at, (x - mean_b[at]) ** 2, minlength=n_heads)
                n_a, mean_a = self.count[:, j], self.mean[:, j]
                n = n_a + n_b
                delta = np.where(n_b > 0, mean_b, 0.0) - mean_a
                self.mean[:, j] = np.where(n > 0, mean_a + delta * n_b / np.maximum(n, 1.0), 0.0)
                self.m2[:, j] += m2_b + delta**2 * n_a * n_b / np.maximum(n, 1.0)
            self.count[:, j] = n
            np.fmin.at(self.min[:, j], at, x)
            np.fmax.at(self.max[:, j], at, x)

    def to_json(self) -> list[dict]:
        """A list of heads: their keys, ``n_texts``, and each statistic's mean, std (population), min and max
        (null where every value was NaN)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(self.count > 0, self.mean, np.nan)
            std = np.sqrt(np.maximum(self.m2, 0.0) / self.count)
        heads = []
        for key, position in self.heads.items():
            head = {name: _plain(value) for name, value in zip(self.keys, key, strict=True)}
            head["n_texts"] = int(self.n_texts[position])
            head["flags"] = {name: int(n[position]) for name, n in sorted(self.flags.items()) if n[position]}
            for j, column in enumerate(self.columns):
                values = (mean[position, j], std[position, j], self.min[position, j], self.max[position, j])
                head[column] = {
                    k: _number(float(v)) for k, v in zip(("mean", "std", "min", "max"), values, strict=True)
                }
            heads.append(head)
        return heads


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def differing_key(old: dict, new: dict) -> str | None:
    """The first run.json key whose value differs between ``old`` and ``new`` (those a resume may change aside)."""
    for key in sorted(set(old) | set(new)):
        if key not in RESUMABLE_CHANGES and old.get(key) != new.get(key):
            return key
    return None


@dataclass
class RunStore:
    """A run folder opened for writing: the parts done (their text ids), the streamed statistics and totals."""

    out_dir: Path
    params: dict
    done_ids: np.ndarray  # sorted text ids already in parts
    stats: HeadStats
    texts_done: int = 0
    tokens_done: int = 0
    seconds_before: float = 0.0  # earlier sessions' seconds, from the summary they wrote
    routes_before: list = field(default_factory=list)  # and the routes their layers took
    _probe_rows: list | None = None

    @classmethod
    def open(cls, out_dir: str | os.PathLike, params: dict, resume: bool) -> RunStore:
        """The folder ``out_dir`` for a run of ``params``: a new run (the folder absent or empty), or with
        ``resume`` the same run continued. ValueError (one line) for a folder that holds something else."""
        out_dir = Path(out_dir)
        if out_dir.exists() and not out_dir.is_dir():
            raise ValueError(f"{out_dir} is a file, not a folder")
        fresh = not out_dir.exists() or not any(out_dir.iterdir())
        if fresh:
            (out_dir / HEADS_DIR).mkdir(parents=True, exist_ok=True)
            (out_dir / TEXTS_DIR).mkdir(exist_ok=True)
            write_json(params, out_dir / RUN_FILE)
            return cls(out_dir, params, np.zeros(0, dtype=np.int64), HeadStats())
        if not resume:
            raise ValueError(f"{out_dir} is not empty; pass --resume to go on with the run there, or give a new folder")
        run_file = out_dir / RUN_FILE
        if not run_file.is_file():
            raise ValueError(f"{out_dir} holds no corpus run (no {RUN_FILE}); give an empty or new folder")
        old = json.loads(run_file.read_text(encoding="utf-8"))
        key = differing_key(old, params)
        if key is not None:
            raise ValueError(
                f"{out_dir} holds a different run: its {key} is {old.get(key)!r}, not {params.get(key)!r}; "
                "give a new folder to start this one"
            )
        if old != params:
            write_json(params, run_file)
        store = cls(out_dir, params, np.zeros(0, dtype=np.int64), HeadStats())
        store._reload()
        return store

    def _reload(self) -> None:
        """Parts on disk: a heads part without its texts part (or the reverse) removed, the rest read back a part
        at a time into the done ids, the totals and the statistics."""
        heads_dir, texts_dir = self.out_dir / HEADS_DIR, self.out_dir / TEXTS_DIR
        heads_dir.mkdir(exist_ok=True)
        texts_dir.mkdir(exist_ok=True)
        for folder in (heads_dir, texts_dir):
            for stray in folder.glob(".*.tmp"):
                stray.unlink()
        heads, texts = set(_parts(heads_dir)), set(_parts(texts_dir))
        for name in heads ^ texts:
            (heads_dir / name if name in heads else texts_dir / name).unlink()
        ids = []
        for name in sorted(heads & texts):
            done = pd.read_parquet(texts_dir / name, columns=["text_id", "n_tokens"])
            ids.append(done["text_id"].to_numpy(np.int64))
            self.texts_done += len(done)
            self.tokens_done += int(done["n_tokens"].sum())
            self.stats.add(pd.read_parquet(heads_dir / name))
        self.done_ids = np.sort(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.int64)
        summary = self.out_dir / SUMMARY_FILE
        if summary.is_file():
            before = json.loads(summary.read_text(encoding="utf-8"))
            self.seconds_before = float(before.get("seconds") or 0.0)
            self.routes_before = list(before.get("routes") or [])

    def is_done(self, text_id: int) -> bool:
        position = np.searchsorted(self.done_ids, text_id)
        return bool(position < len(self.done_ids) and self.done_ids[position] == text_id)

    def write_batch(self, heads: pd.DataFrame, texts: pd.DataFrame) -> None:
        """One batch's rows: its heads part, then its texts part (which marks it done), then the statistics."""
        ids = texts["text_id"]
        name = part_name(int(ids.min()), int(ids.max()))
        write_parquet(heads, self.out_dir / HEADS_DIR / name)
        write_parquet(texts, self.out_dir / TEXTS_DIR / name)
        self.stats.add(heads)
        self.texts_done += len(texts)
        self.tokens_done += int(texts["n_tokens"].sum())

    def write_probe(self, probe: pd.DataFrame) -> None:
        write_parquet(probe, self.out_dir / PROBE_FILE)
        self._probe_rows = _records(probe)

    def has_probe(self) -> bool:
        return (self.out_dir / PROBE_FILE).is_file()

    def write_summary(self, summary: dict) -> None:
        """``summary`` (the run's totals) with ``heads`` (the statistics) and ``probe`` (its rows, if written)."""
        probe = self.out_dir / PROBE_FILE
        if self._probe_rows is None and probe.is_file():
            self._probe_rows = _records(pd.read_parquet(probe))
        write_json({**summary, "heads": self.stats.to_json(), "probe": self._probe_rows}, self.out_dir / SUMMARY_FILE)


def _parts(folder: Path) -> Iterator[str]:
    return (p.name for p in folder.glob("part-*.parquet"))


def _records(frame: pd.DataFrame) -> list[dict]:
    return [
        {k: _number(v) if isinstance(v, float) else _plain(v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]


class CorpusRun:
    """A corpus run's folder, read: its summary, its rows (a part at a time where a question allows) and texts."""

    def __init__(self, out_dir: Path, summary: dict) -> None:
        self.out_dir = out_dir
        self.summary = summary

    @classmethod
    def open(cls, out_dir: str | os.PathLike) -> CorpusRun:
        out_dir = Path(out_dir)
        summary = out_dir / SUMMARY_FILE
        if not summary.is_file():
            raise ValueError(f"{out_dir} holds no corpus run (no {SUMMARY_FILE})")
        return cls(out_dir, json.loads(summary.read_text(encoding="utf-8")))

    def _parts(self, folder: str) -> list[Path]:
        return sorted((self.out_dir / folder).glob("part-*.parquet"))

    def heads(self, columns: list[str] | None = None) -> pd.DataFrame:
        """Every row (text x head), or only ``columns``; the whole table, so for a run that fits in memory."""
        parts = self._parts(HEADS_DIR)
        if not parts:
            return pd.DataFrame(columns=columns or ["text_id", "layer", "head", "n_tokens"])
        return pd.concat([pd.read_parquet(p, columns=columns) for p in parts], ignore_index=True)

    def head_rows(self, layer: int, head: int, stack: str | None = None, kind: str | None = None) -> pd.DataFrame:
        """One head's row on every text, read a part at a time."""
        filters = _head_filters(layer, head, stack, kind)
        rows = [pd.read_parquet(p, filters=filters) for p in self._parts(HEADS_DIR)]
        rows = [r for r in rows if not r.empty]
        return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()

    def top_texts(
        self,
        layer: int,
        head: int,
        stat: str,
        k: int = 10,
        largest: bool = True,
        stack: str | None = None,
        kind: str | None = None,
    ) -> pd.DataFrame:
        """The ``k`` texts where one head's ``stat`` is largest (or smallest): text_id, value, n_tokens, text.
        NaN values never rank. A part at a time: at most ``k`` candidates held."""
        best: list[tuple[float, int, int]] = []
        sign = 1.0 if largest else -1.0
        filters = _head_filters(layer, head, stack, kind)
        for part in self._parts(HEADS_DIR):
            rows = pd.read_parquet(part, columns=["text_id", "n_tokens", stat], filters=filters).dropna(subset=[stat])
            for text_id, n_tokens, value in rows.itertuples(index=False):
                item = (sign * float(value), -int(text_id), int(n_tokens))  # ties: the lower text id first
                if len(best) < k:
                    heapq.heappush(best, item)
                elif item > best[0]:
                    heapq.heapreplace(best, item)
        best.sort(reverse=True)
        ids = [-t for _, t, _ in best]
        texts = self.texts(ids)
        return pd.DataFrame(
            {
                "text_id": pd.Series(ids, dtype="int64"),
                "value": pd.Series([sign * v for v, _, _ in best], dtype="float64"),
                "n_tokens": pd.Series([n for _, _, n in best], dtype="int64"),
                "text": pd.Series([texts.get(i, "") for i in ids], dtype="object"),
            }
        )

    def texts(self, text_ids: list[int]) -> dict[int, str]:
        """The texts of ``text_ids`` that the run holds, by id."""
        if not text_ids:
            return {}
        found: dict[int, str] = {}
        for part in self._parts(TEXTS_DIR):
            rows = pd.read_parquet(part, columns=["text_id", "text"], filters=[("text_id", "in", list(text_ids))])
            found.update(zip(rows["text_id"].astype(int), rows["text"], strict=True))
        return found

    def text(self, text_id: int) -> str:
        """One text by its id; KeyError when the run does not hold it."""
        return self.texts([text_id])[int(text_id)]

    def probe(self) -> pd.DataFrame | None:
        path = self.out_dir / PROBE_FILE
        return pd.read_parquet(path) if path.is_file() else None


def _head_filters(layer: int, head: int, stack: str | None, kind: str | None) -> list[tuple]:
    filters = [("layer", "==", int(layer)), ("head", "==", int(head))]
    if stack is not None:
        filters.append(("stack", "==", stack))
    if kind is not None:
        filters.append(("kind", "==", kind))
    return filters
