"""Hosted mode's switches and allowlist, the request budget, the training cap and the upload limits."""

import math
import tomllib
from pathlib import Path

import pytest

from attnviz import settings
from attnviz.app.hosted import TrainingLedger, allowed_model, is_hosted, operator_models
from attnviz.errors import ConfigError, MaskFileError, TrainingCapError
from attnviz.labs.kv.config import parse_config_json
from attnviz.labs.masks.reading import read_mask_bytes

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("argv", "env", "hosted"),
    [
        ([], {}, False),
        (["--hosted"], {}, True),
        (["--allow-pickle", "--hosted"], {}, True),
        ([], {"ATTNVIZ_HOSTED": "1"}, True),
        ([], {"ATTNVIZ_HOSTED": " True "}, True),
        ([], {"ATTNVIZ_HOSTED": "0"}, False),
        ([], {"ATTNVIZ_HOSTED": ""}, False),
        (["--hostedness"], {"ATTNVIZ_HOSTED": "no"}, False),
    ],
)
def test_hosted_mode_is_switched_on_by_the_flag_or_the_environment(argv, env, hosted):
    assert is_hosted(argv, env) is hosted


def test_the_operator_lists_model_folders_and_only_exact_keys_are_allowed():
    models = operator_models({"ATTNVIZ_MODELS": " /models/a, /models/b/ ,,org/name"})
    assert models == {"/models/a": "a", "/models/b/": "b", "org/name": "name"}
    assert operator_models({}) == {}
    assert allowed_model("/models/a", models)
    # a path that resolves to an allowed folder, or the server's own files, is not an allowed key
    for asked in ("/models/a/", "/models/a/../a", "/etc/shadow", "models/a", "", None, ["/models/a"]):
        assert not allowed_model(asked, models), asked


def test_a_session_trains_at_most_its_cap_per_window():
    ledger = TrainingLedger(cap_s=120, window_s=600)
    ledger.check(100, now=0)
    ledger.charge(100, now=100)
    ledger.check(20, now=101)  # exactly the cap
    with pytest.raises(TrainingCapError) as refused:
        ledger.check(45, now=101)
    # the 100 s training leaves the window 600 s after it ended
    assert refused.value.used_s == 100 and refused.value.wait_s == pytest.approx(599)
    assert "100 s" in str(refused.value) and "120 s" in str(refused.value)
    ledger.check(45, now=701)
    assert ledger.used(701) == 0 and ledger.spent == []


def test_a_training_longer_than_the_cap_is_refused_at_once():
    with pytest.raises(TrainingCapError) as refused:
        TrainingLedger(cap_s=10, window_s=600).check(11, now=0)
    assert refused.value.wait_s == math.inf


def test_uploads_over_the_limits_are_refused_with_the_limit():
    with pytest.raises(MaskFileError, match=r"a mask file may be at most 8(\.0)? MiB"):
        read_mask_bytes(b"0" * (settings.MASK_MAX_BYTES + 1), "big.csv")
    with pytest.raises(ConfigError, match="over the 1,048,576-byte limit"):
        parse_config_json(b" " * (settings.KV_CONFIG_MAX_BYTES + 1), "config.json")


def test_streamlit_stops_uploads_over_the_largest_library_limit():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    max_mb = config["server"]["maxUploadSize"]
    assert max_mb == settings.UPLOAD_MAX_MB
    # Streamlit's MB is 2**20 bytes: every file the library accepts gets through, little more does
    assert max(settings.MASK_MAX_BYTES, settings.KV_CONFIG_MAX_BYTES) == max_mb * 2**20
    assert config["browser"]["gatherUsageStats"] is False


def test_the_sidebar_offers_a_path_only_off_a_hosted_server_and_names_every_choice(monkeypatch):
    from attnviz.app.hosted import model_label, model_options

    monkeypatch.setenv("ATTNVIZ_MODELS", "/models/ours")
    monkeypatch.delenv("ATTNVIZ_HOSTED", raising=False)
    assert list(model_options()) == ["default", "minilm", "smollm2", "/models/ours", "path"]
    assert model_label("/models/ours") == "ours" and model_label("path") == "Local folder or hub id…"
    assert model_label("default").startswith("Embedded default")  # a message, said in the reader's words
    monkeypatch.setenv("ATTNVIZ_HOSTED", "1")
    assert list(model_options()) == ["default", "minilm", "smollm2", "/models/ours"]
