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
        ({"num_attention_heads": None}, "no attention heads"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers = 1,000,000,000, over attnviz's limit of 10,000"),
        ({"vocab_size": 10**8}, "vocab_size = 100,000,000, over"),
        ({"max_position_embeddings": 2**40}, "max_position_embeddings = 1,099,511,627,776, over"),
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


@pytest.mark.parametrize(
    ("field", "kv_field", "limit"),
    [
        ("num_hidden_layers", "num_hidden_layers", "layers"),
        ("num_attention_heads", "num_attention_heads", "heads"),
        ("hidden_size", "hidden_size", "hidden"),
        ("vocab_size", "vocab_size", "vocab"),
        ("max_position_embeddings", "max_position_embeddings", "positions"),
    ],
)
def test_heads_and_kv_cache_hold_a_config_to_the_same_limits(field, kv_field, limit):
    from attnviz import settings
    from attnviz.errors import ConfigError
    from attnviz.labs.kv.config import config_from_dict

    most = settings.MODEL_LIMITS[limit]
    at_limit = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "vocab_size": 100}
    over = {**at_limit, field: most + 1}
    if field == "num_attention_heads":
        over["hidden_size"] = (most + 1) * 8
    if field == "hidden_size":
        over["num_attention_heads"] = 1
    with pytest.raises(ModelUnavailableError, match=f"{most:,}"):
        check_config(SimpleNamespace(**over), "tiny")
    with pytest.raises(ConfigError, match=f"{most:,}"):
        config_from_dict({**over, "model_type": "custom"})
