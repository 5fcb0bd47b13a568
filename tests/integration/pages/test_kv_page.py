"""The KV cache page through AppTest: presets, pasted configs, the bundled models, and the checks on real models."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.labs.kv.memory import human_bytes
from tests.markdown import as_read
from tests.plotly_json import spec_of
from tests.unit.labs.kv.real_configs import JAMBA_V01

ROOT = Path(__file__).resolve().parents[3]


def page(model: str = "default") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    if model != "default":
        at.selectbox(key="model").set_value(model).run()
    at.switch_page("pages/kv_cache.py").run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_presets_give_exact_bytes_per_token_and_every_figure():
    at = page()
    assert at.selectbox(key="kv_preset").value == "gemma-2-9b"
    assert metrics(at)["bytes per token"] == "344,064"  # 42 x 8 x 256 x 2 x 2
    kinds = at.dataframe[0].value
    assert list(kinds["layer kind"]) == ["full", "sliding"] and list(kinds["layers"]) == [21, 21]
    assert list(kinds["tokens held per sequence"]) == [8192, 4096]
    assert len(at.get("plotly_chart")) == 3  # engines, memory against length, head groups; the checks' first tab
    at.radio(key="kv_tab").set_value("kv_ui.tab_whatif").run()
    assert len(at.get("plotly_chart")) == 4  # engines, memory against length, head groups, MHA -> GQA
    lengths = spec_of(at.get("plotly_chart")[1])["data"]
    configured = next(t for t in lengths if t["name"] == "as configured")
    assert configured["x"][-1] == 4 * 4096  # past the window, to show the sliding layers level off
    for key, per_token in [("llama-3-8b", "131,072"), ("deepseek-v3", "70,272"), ("falcon-7b", "8,192")]:
        at.selectbox(key="kv_preset").set_value(key).run()
        assert not at.exception and metrics(at)["bytes per token"] == per_token
    assert len(at.get("plotly_chart")) == 4 and not any("latent of" in i.value for i in at.info)
    at.selectbox(key="kv_preset").set_value("deepseek-v3").run()
    assert any("latent of 512 + 64" in i.value for i in at.info)  # MLA: no heads to group, no figure
    # what MLA stores, not its 128 query heads: 61 layers x (512 latent + 64 RoPE) x 2 bytes = 70,272 a token
    assert metrics(at)["layers · latent · RoPE dim"] == "61 · 512 · 64"
    assert "layers · KV heads · head_dim" not in metrics(at)
    assert len(at.get("plotly_chart")) == 3
    at.selectbox(key="kv_gpu").set_value(0).run()  # another size, typed
    at.number_input(key="kv_gpu_gb").set_value(24.0).run()
    assert not at.exception and any("do not fit in 24 GB" in c.value for c in at.caption)  # 671B weights


def test_the_minimum_and_transformers_figure_agree_or_the_page_says_why():
    """Gemma-2-9B at 8,192 tokens: transformers keeps window - 1 tokens of its 21 sliding layers, 172,032 B under
    the minimum, and the page says so beside the two figures; Llama-3-8B's agree, and no reason is shown."""
    at = page()
    said = next(m.value for m in at.markdown if "transformers' figure" in m.value)
    assert "differs from the minimum (2,113,929,216 B) by -172,032 B" in said
    assert "21 sliding-window layers" in said and "last 4,095 tokens" in said
    at.selectbox(key="kv_preset").set_value("llama-3-8b").run()
    assert not at.exception
    said = [m.value for m in at.markdown if "transformers' figure" in m.value]
    assert said == ["**The minimum and transformers' figure agree to the byte** (1,073,741,824 B, measured)."]
    assert not any("between steps" in m.value or "differs from the minimum" in m.value for m in at.markdown)
    at.selectbox(key="kv_block").set_value(256).run()  # 8,192 is whole blocks of 256: still the same bytes
    assert not at.exception and any("agree to the byte" in m.value for m in at.markdown)
    at.number_input(key="kv_seq_len").set_value(1000).run()  # 1,024 tokens of blocks against 1,000
    assert any("blocks of 256 tokens" in m.value for m in at.markdown)


def test_a_pasted_config_a_bad_one_and_the_bundled_models():
    at = page()
    at.radio(key="kv_source").set_value("upload").run()
    config = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    }
    at.text_area(key="kv_paste").input(json.dumps(config)).run()
    assert not at.exception and metrics(at)["bytes per token"] == "131,072"
    at.text_area(key="kv_paste").input("{not json").run()
    assert not at.exception and any("is not JSON" in e.value for e in at.error)
    at.text_area(key="kv_paste").input(json.dumps({"model_type": "llama", "hidden_size": 64})).run()
    assert not at.exception and any("num_hidden_layers" in as_read(e.value) for e in at.error)
    at.radio(key="kv_source").set_value("bundled").run()
    at.selectbox(key="kv_bundled").set_value("smollm2").run()
    assert not at.exception and metrics(at)["bytes per token"] == "23,040"
    at.radio(key="kv_source").set_value("folder").run()
    at.text_input(key="kv_folder").input("/nonexistent/model").run()
    assert not at.exception and any("cannot be used" in e.value for e in at.error)


def test_a_pasted_hybrid_gets_transformers_figure_in_one_run():
    """Jamba v0.1 at the page's 8,192 tokens: its 4 attention layers' K and V, measured without running its 28
    Mamba layers' scan over 8,192 tokens (minutes before; the run's 300 s limit would fail it)."""
    at = page()
    at.radio(key="kv_source").set_value("upload").run()
    at.text_area(key="kv_paste").input(json.dumps(JAMBA_V01)).run()
    assert not at.exception and metrics(at)["bytes per token"] == "16,384"
    engines = next(m.value for m in at.markdown if "DynamicCache" in m.value)
    cached = 4 * 2 * 8 * 128 * 2 * 8192  # 4 attention layers x K and V x 8 heads x 128 x 2 bytes x 8,192 tokens
    assert f"**transformers DynamicCache: {human_bytes(cached)}**" in engines


def test_the_measured_cache_of_smollm2_equals_the_estimate():
    at = page("smollm2")
    at.toggle(key="kv_measure").set_value(True).run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "error (bytes)" in d.value.columns)
    assert len(table) == 8 and (table["error (bytes)"] == 0).all()
    assert (table["measured (bytes)"] > 0).all()


@pytest.mark.parametrize("model", ["default", "minilm"])
def test_whatif_pools_a_real_mha_layer(model):
    at = page(model)
    assert not at.exception
    assert not any("js_mean" in d.value.columns for d in at.dataframe)  # a closed tab computes nothing
    at.radio(key="kv_tab").set_value("kv_ui.tab_whatif").run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "js_mean" in d.value.columns)
    assert table["js_mean"].iloc[0] == 0.0 and table["output_change"].iloc[0] == 0.0  # groups of 1: unchanged
    assert (table["js_mean"].iloc[1:] > 0).all() and table["kv_share"].iloc[-1] == pytest.approx(
        1 / table["n_kv_head"].iloc[0]
    )


def test_decode_timing_on_the_embedded_model():
    at = page()
    at.radio(key="kv_tab").set_value("kv_ui.tab_speed").run()
    at.toggle(key="kv_decode").set_value(True).run()
    assert not at.exception and any("needs a causal model" in i.value for i in at.info)  # an encoder: no decoding
    at.checkbox(key="causal").check().run()
    assert not at.exception
    fig = spec_of(next(c for c in at.get("plotly_chart") if "with the cache" in json.dumps(spec_of(c))))
    assert [len(t["y"]) for t in fig["data"]] == [32, 32]
    assert any("Speed-up with the cache" in c.value for c in at.caption)
