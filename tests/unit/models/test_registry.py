"""The registry: the one place that turns a spec into a concrete source; everything after asks the source."""

import pytest

from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Message
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.registry import CHOICES, EMBEDDED, SourceSpec, open_source, preparation_note


def test_the_sidebar_offers_the_embedded_and_the_bundled_models_titled_as_messages():
    assert list(CHOICES) == [EMBEDDED, "minilm", "smollm2"]
    assert isinstance(CHOICES[EMBEDDED], Message) and str(CHOICES[EMBEDDED]).startswith("Embedded default")
    assert SourceSpec("smollm2").title == CHOICES["smollm2"] and SourceSpec("/my/model").title == "/my/model"


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
