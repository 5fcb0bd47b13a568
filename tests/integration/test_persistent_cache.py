"""The test cache's two real artefacts built into an empty cache every run (a cold machine's path): one zoo model by
the zoo's own building child, and SmolLM2's conversion by attnviz's own converter; each is then taken from the cache
(nothing built again), and a changed input (another transformers version) misses."""

from __future__ import annotations

import json
import subprocess

import torch
from safetensors import safe_open

from attnviz.models.hf import bundled
from tests import persistent_cache as cache
from tests.integration.zoo.build import build_zoo, zoo_dir, zoo_inputs


def test_a_zoo_model_is_built_into_an_empty_cache_then_reused_and_another_transformers_misses(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    children = []
    real_run = subprocess.run

    def counted(command, *args, **kwargs):
        children.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counted)
    root = zoo_dir()
    assert root.parent == tmp_path / "zoo" and not root.exists()

    status = build_zoo(["gpt2"])["gpt2"]
    assert status["status"] == "built" and status["class"] == "GPT2LMHeadModel", status
    assert len(children) == 1 and children[0][3:5] == ["--into", str(root)]  # built by a child, into the cache
    assert (root / "gpt2" / "config.json").is_file() and (root / "gpt2" / "tokenizer.json").is_file()
    assert json.loads((root / "gpt2" / "status.json").read_text()) == status

    assert build_zoo(["gpt2"]) == {"gpt2": status} and len(children) == 1  # a hit: no child started

    other = zoo_dir({**zoo_inputs(), "transformers": "0.0.fake"})
    assert other.parent == root.parent and other != root and not other.exists()
    assert build_zoo(["gpt2"], root=other)["gpt2"]["status"] == "built" and len(children) == 2  # a miss


def test_smollm2_is_converted_into_an_empty_cache_then_reused_and_another_transformers_misses(
    monkeypatch, tmp_path, smollm2
):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    conversions = []
    real_convert = bundled.convert_gguf

    def counted(gguf, out=None, progress=None):
        conversions.append(out)
        return real_convert(gguf, out=out, progress=progress)

    monkeypatch.setattr(bundled, "convert_gguf", counted)
    inputs = cache.smollm2_inputs(bundled.smollm2_gguf())
    assert cache.lookup("smollm2", inputs) is None

    model, built = cache.smollm2_conversion()
    assert built and len(conversions) == 1 and model.parent.parent == tmp_path / "smollm2"
    assert bundled.is_converted(model) and cache.ready(model.parent)
    with safe_open(str(model / "model.safetensors"), framework="pt") as weights:  # the GGUF's weights, converted
        assert torch.equal(weights.get_tensor("model.embed_tokens.weight"), smollm2.model.model.embed_tokens.weight)

    assert cache.smollm2_conversion() == (model, False) and len(conversions) == 1  # a hit
    assert cache.lookup("smollm2", inputs) == model.parent
    assert cache.lookup("smollm2", {**inputs, "transformers": "0.0.fake"}) is None  # a miss
    assert cache.lookup("smollm2", {**inputs, "gguf": "0" * 64}) is None  # another GGUF file: a miss


def test_the_runs_smollm2_comes_from_the_test_cache(smollm2):
    """After the fixture, the test cache holds this checkout's conversion (converted there, or kept from the run's
    own on a cold machine where a command converted it first), and the run's folder is it or a link to it."""
    gguf = bundled.smollm2_gguf()
    entry = cache.lookup("smollm2", cache.smollm2_inputs(gguf))
    ran = bundled.converted_dir(gguf)
    assert entry is not None and bundled.is_converted(entry / "model") and bundled.is_converted(ran)
    assert ran.resolve() == (entry / "model").resolve() or not ran.is_symlink()
