"""Which families our layers reproduce, and which known bugs apply to a model's layers."""

from types import SimpleNamespace

from attnviz.i18n.message import Message
from attnviz.models.hf.parity import BERT_STYLE, BUGS, LLAMA_STYLE, available_bugs, bug_title, supports


def model(model_type: str, n_head: int, n_kv_head: int):
    return SimpleNamespace(config=SimpleNamespace(model_type=model_type), n_head=n_head, n_kv_head=n_kv_head)


def test_rope_bugs_only_for_rotary_decoders_and_kv_sharing_only_for_gqa():
    assert list(available_bugs(model("llama", 9, 3))) == ["sqrt_dmodel", "no_scale", "no_rope", "kv_tiled"]
    assert list(available_bugs(model("llama", 8, 8))) == ["sqrt_dmodel", "no_scale", "no_rope"]
    assert list(available_bugs(model("bert", 12, 12))) == ["sqrt_dmodel", "no_scale"]
    assert available_bugs(model("bert", 12, 12))["no_scale"] == BUGS["no_scale"]  # the CLI's English


def test_the_families_our_layers_reproduce():
    assert all(supports(SimpleNamespace(model_type=t)) for t in BERT_STYLE | LLAMA_STYLE)
    assert not supports(SimpleNamespace(model_type="gpt2"))


def test_every_bug_has_a_title_to_show_in_either_language():
    for name in BUGS:
        title = bug_title(name)
        assert isinstance(title, Message) and str(title) and title.render("zh") != str(title)
