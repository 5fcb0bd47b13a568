"""The zoo builder's children (tests/integration/zoo/build.py): a child that runs out of time on a type it did not
start with hands that type to the next child; only a type that had a child's whole time to itself is too slow; a
child that dies names the type it died on; nothing half-saved stays for a loader to find. The children here are
stand-ins for ``python -m tests.integration.zoo.build``, acting on the folders as a real child does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

from tests.integration.zoo import build


def _start(root: Path, model_type: str) -> Path:
    """What a child does before it builds a type: an empty folder marked ``.building``, then a half-saved model."""
    folder = root / model_type
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".building").touch()
    (folder / "config.json").write_text("{}")
    return folder


def _finish(root: Path, model_type: str) -> None:
    folder = _start(root, model_type)
    (folder / "status.json").write_text(json.dumps({"status": "built", "class": "X"}))
    (folder / ".building").unlink()


def test_a_child_out_of_time_hands_its_type_on_and_a_dying_child_names_it(monkeypatch, tmp_path):
    calls = []

    def child(command, timeout, **_):
        todo = command[5:]
        calls.append(todo)
        if len(calls) == 1:  # builds a, runs out of time on b after a took most of it
            _finish(tmp_path, "a")
            _start(tmp_path, "b")
            raise subprocess.TimeoutExpired(command, timeout)
        if len(calls) == 2:  # b alone takes the whole time
            _start(tmp_path, "b")
            raise subprocess.TimeoutExpired(command, timeout)
        _start(tmp_path, "c")  # c kills its child
        return SimpleNamespace(returncode=-9, stderr=b"Traceback (most recent call last):\n  ...\nMemoryError\n")

    monkeypatch.setattr(subprocess, "run", child)
    build._build_missing(["a", "b", "c"], tmp_path)

    assert calls == [["a", "b", "c"], ["b", "c"], ["c"]]
    statuses = {t: json.loads((tmp_path / t / "status.json").read_text()) for t in "abc"}
    assert statuses["a"] == {"status": "built", "class": "X"}
    assert statuses["b"] == {"status": "refused", "reason": "too slow"}
    assert statuses["c"] == {
        "status": "refused",
        "reason": "does not build",
        "errors": ["the building child died on it (exit -9): MemoryError"],
    }
    for model_type in "bc":  # refused: only the status is left, no config for a loader to read
        assert sorted(p.name for p in (tmp_path / model_type).iterdir()) == ["status.json"]


def test_a_config_whose_own_defaults_do_not_validate_is_refused_not_a_dead_child(tmp_path):
    status = build.build_one("gemma4_assistant", "causal", tmp_path)
    assert status["status"] == "refused" and status["reason"] == "does not build"
    assert "hidden_size_per_layer_input" in status["errors"][0] and "\n" not in status["errors"][0]


def test_a_type_refused_for_memory_after_others_is_built_again_alone_and_its_fresh_verdict_stands(
    monkeypatch, tmp_path
):
    calls = []

    def child(command, timeout, **_):
        todo = command[5:]
        calls.append(todo)
        if len(calls) == 1:  # a fills the address space, b is refused for it
            _finish(tmp_path, "a")
            folder = _start(tmp_path, "b")
            status = {"status": "refused", "reason": "does not build", "errors": ["MemoryError: alloc failed"]}
            (folder / "status.json").write_text(json.dumps(status))
            _clear_building(folder)
            _finish(tmp_path, "c")
            return SimpleNamespace(returncode=0, stderr=b"")
        _finish(tmp_path, todo[0])  # alone, b builds
        return SimpleNamespace(returncode=0, stderr=b"")

    monkeypatch.setattr(subprocess, "run", child)
    build._build_missing(["a", "b", "c"], tmp_path)

    assert calls == [["a", "b", "c"], ["b"]]
    assert json.loads((tmp_path / "b" / "status.json").read_text()) == {
        "status": "built",
        "class": "X",
        "retried": True,
    }


def _clear_building(folder: Path) -> None:
    (folder / ".building").unlink()
    (folder / "config.json").unlink()
