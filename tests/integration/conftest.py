"""The real-browser tests' fixtures (``browser``, ``page``), for every integration module."""

from tests.integration.chromium import browser, page  # noqa: F401 (pytest finds fixtures by name here)
