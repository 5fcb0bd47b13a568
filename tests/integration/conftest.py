"""Fixtures for every integration module: the real-browser ones (``browser``, ``page``, ``server``) and ``count_trainings``."""

import pytest

from attnviz.labs.training import runs as training
from tests.integration.chromium import browser, page, server  # noqa: F401 (pytest finds fixtures by name here)


@pytest.fixture
def count_trainings(monkeypatch):
    """How often the Training page really trains (``train_live`` looks ``training.train_scale`` up on each call)."""
    calls = []
    real = training.train_scale

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "train_scale", counted)
    return calls
