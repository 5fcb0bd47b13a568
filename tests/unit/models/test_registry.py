"""The registry: the one place that turns a spec into a concrete source; everything after asks the source."""

import pytest

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Message
from attnviz.models import registry
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.hf.bundled import BUNDLED
from attnviz.models.registry import (
    BUNDLED_CHOICES,
    CHOICES,
    EMBEDDED,
    SourceSpec,
    embedded_spec,
    largest_bundled_shape,
    open_source,
    preparation_note,
)
from attnviz.models.source import ModelShape


def test_the_sidebar_offers_the_embedded_and_the_bundled_models_titled_as_messages():
    assert list(CHOICES) == [EMBEDDED, "minilm", "smollm2"]
    assert isinstance(CHOICES[EMBEDDED], Message) and str(CHOICES[EMBEDDED]).startswith("Embedded default")
    assert SourceSpec("smollm2").title == CHOICES["smollm2"] and SourceSpec("/my/model").title == "/my/model"


def test_the_bundled_models_are_the_sidebars_after_the_embedded_one_with_their_shapes_known_before_loading():
    assert list(BUNDLED_CHOICES) == list(CHOICES)[1:] and all(CHOICES[k] == t for k, t in BUNDLED_CHOICES.items())
    assert largest_bundled_shape() == ModelShape(n_layer=30, n_head=9, n_kv_head=3, head_dim=64)  # SmolLM2's 270 heads


def test_the_embedded_spec_is_the_sidebars_sizes_under_another_seed():
    sized = EmbeddedConfig(n_layer=3, seed=4)
    assert embedded_spec("cpu") == SourceSpec(EMBEDDED, "cpu", EmbeddedConfig())  # the default sizes, spelled out
    assert embedded_spec("cuda", sized) == SourceSpec(EMBEDDED, "cuda", sized)
    assert embedded_spec("cpu", sized, seed=9) == SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(n_layer=3, seed=9))
    assert embedded_spec("cpu", None, seed=9).config == EmbeddedConfig(seed=9)


def test_the_embedded_spec_takes_the_sidebars_fields_and_refuses_sizes_that_do_not_fit():
    sized = embedded_spec("cpu", d_model=96, n_head=6, n_kv_head=None, n_layer=3, seed=5, causal=True)
    assert sized == SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(96, 6, None, 3, 5, True))
    assert embedded_spec("cpu", EmbeddedConfig(n_layer=3), n_head=2) == embedded_spec("cpu", n_layer=3, n_head=2)
    with pytest.raises(ValueError, match=r"d_model \(63\) must be an even number"):
        embedded_spec("cpu", d_model=63)


def test_a_spec_is_hashable_so_caches_key_on_it():
    spec = SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(n_layer=3))
    assert {spec: 1}[SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(n_layer=3))] == 1
    assert spec != SourceSpec(EMBEDDED, "cpu", EmbeddedConfig(n_layer=2))


def test_the_embedded_spec_opens_a_model_of_its_size_at_once():
    source = open_source(SourceSpec(EMBEDDED, config=EmbeddedConfig(d_model=32, n_head=4, n_kv_head=2, n_layer=3)))
    assert (source.n_layer, source.n_head, source.n_kv_head, source.head_dim) == (3, 4, 2, 8)
    assert source.random_weights and preparation_note(SourceSpec(EMBEDDED)) is None


def test_a_folder_that_is_not_there_is_one_clear_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match=r"^no model folder at .*nothing-here"):
        open_source(SourceSpec(str(tmp_path / "nothing-here")))


def test_the_largest_bundled_model_is_the_one_with_the_most_heads():
    assert registry.largest_bundled() == "smollm2" and largest_bundled_shape() == BUNDLED["smollm2"].shape
    assert all(b.shape.n_layer * b.shape.n_head < 270 for key, b in BUNDLED.items() if key != "smollm2")


def test_a_bundled_models_config_is_read_without_loading_it_and_agrees_with_its_shape():
    raw = registry.bundled_config("minilm")  # SmolLM2's, converted or read from its GGUF header: tests/integration
    assert raw["model_type"] == "bert" and (raw["num_hidden_layers"], raw["num_attention_heads"]) == (6, 12)
    assert raw["hidden_size"] // raw["num_attention_heads"] == BUNDLED["minilm"].shape.head_dim == 32
    with pytest.raises(KeyError):
        registry.bundled_config("default")


def test_a_chinese_example_moves_only_a_bundled_model_that_misreads_chinese():
    assert registry.misreads_chinese("minilm")  # its tokenizer reads most Chinese as [UNK] (tests/integration/models)
    assert not any(registry.misreads_chinese(key) for key in ("smollm2", EMBEDDED, "path", "/my/model", ""))
    assert registry.chinese_reader() == "smollm2" and not registry.misreads_chinese(registry.chinese_reader())


def test_a_config_over_the_limits_is_found_as_the_loader_finds_it():
    assert registry.oversized_config({"num_hidden_layers": 2, "hidden_size": 64}) is None
    too_big = registry.oversized_config({"text_config": {"num_hidden_layers": 10**9}})
    assert (too_big.field, too_big.value, too_big.limit) == ("num_hidden_layers", 10**9, "layers")


def test_transformers_cache_is_counted_by_its_own_modeling_code():
    llama = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "hidden_size": 32, "intermediate_size": 64, "vocab_size": 100}  # fmt: skip
    # 2 layers x (K and V) x batch 2 x 2 KV heads x 11 tokens x head_dim 8
    assert registry.transformers_cache_elements(llama, 2, 11, (None, None)) == 2 * 2 * 2 * 2 * 11 * 8
