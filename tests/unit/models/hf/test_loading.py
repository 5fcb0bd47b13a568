"""What a user's model folder can get wrong is refused before any weight runs, in one line that names it."""

from types import SimpleNamespace

import pytest
import torch

from attnviz.errors import ModelUnavailableError
from attnviz.models.hf.loading import check_config, check_loading, check_tokenizer, check_tokenizer_files

GOOD = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "vocab_size": 100}


def config(**changes):
    return SimpleNamespace(**{**GOOD, **changes})


def test_a_usable_config_passes():
    check_config(config(), "tiny")
    check_config(config(num_key_value_heads=2, head_dim=16, max_position_embeddings=64), "tiny")


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"num_hidden_layers": 0}, "num_hidden_layers = 0"),
        ({"num_attention_heads": -1}, "num_attention_heads = -1"),
        ({"hidden_size": True}, "hidden_size = True"),
        ({"vocab_size": None}, "vocab_size = None"),
        ({"num_key_value_heads": 3}, "3"),
        ({"hidden_size": 30}, "30"),
        ({"max_position_embeddings": 0}, "max_position_embeddings = 0"),
    ],
)
def test_an_unusable_config_is_named_in_one_line(changes, said):
    with pytest.raises(ModelUnavailableError) as caught:
        check_config(config(**changes), "tiny")
    assert str(caught.value).startswith("tiny") and said in str(caught.value) and "\n" not in str(caught.value)


def test_weights_that_do_not_fit_the_config_are_refused_naming_the_first_tensor():
    check_loading({"mismatched_keys": [], "missing_keys": []}, "tiny")
    info = {"mismatched_keys": [("layers.1.q.weight", (8, 8), (4, 8)), ("layers.0.q.weight", (8, 8), (4, 8))]}
    with pytest.raises(ModelUnavailableError, match=r"layers\.0\.q\.weight.*\(8, 8\).*\(4, 8\)") as caught:
        check_loading(info, "tiny")
    assert "1 more" in str(caught.value)
    with pytest.raises(ModelUnavailableError, match=r"lm_head\.weight"):
        check_loading({"missing_keys": ["lm_head.weight"]}, "tiny")


def test_a_folder_needs_a_tokenizer_and_the_tokenizer_must_fit_the_embedding(tmp_path):
    with pytest.raises(ModelUnavailableError, match="tokenizer"):
        check_tokenizer_files(str(tmp_path), "tiny")
    (tmp_path / "tokenizer.json").write_text("{}")
    check_tokenizer_files(str(tmp_path), "tiny")
    model = SimpleNamespace(get_input_embeddings=lambda: torch.nn.Embedding(10, 4))

    class Tokenizer:
        def __init__(self, size, special=()):
            self.size, self.all_special_ids = size, list(special)

        def __len__(self):
            return self.size

    check_tokenizer(Tokenizer(10), model, "tiny")
    with pytest.raises(ModelUnavailableError, match="12"):
        check_tokenizer(Tokenizer(12), model, "tiny")
    with pytest.raises(ModelUnavailableError):
        check_tokenizer(Tokenizer(2, special=[0, 1]), model, "tiny")  # nothing but special tokens
