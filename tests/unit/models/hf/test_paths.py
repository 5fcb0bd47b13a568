"""Where a model comes from: safetensors only, pickles refused unless allowed, bad paths said in one line."""

import pytest

from attnviz.errors import ModelUnavailableError
from attnviz.models.hf.paths import PATH_SHOWN_CHARS, check_weights, resolve_source, shown_path


def folder(tmp_path, *files):
    tmp_path.joinpath("config.json").write_text("{}")
    for name in files:
        tmp_path.joinpath(name).write_bytes(b"x")
    return tmp_path


def test_a_folder_with_safetensors_loads_them(tmp_path):
    where, name, safetensors = resolve_source(str(folder(tmp_path, "model.safetensors", "pytorch_model.bin")))
    assert where == str(tmp_path.resolve()) and name == tmp_path.name and safetensors


def test_pickled_weights_load_only_when_allowed(tmp_path):
    folder(tmp_path, "pytorch_model.bin")
    with pytest.raises(ModelUnavailableError, match=r"pytorch_model\.bin"):
        check_weights(tmp_path, allow_pickle=False)
    assert check_weights(tmp_path, allow_pickle=True) is False  # load the pickle, not safetensors


def test_a_folder_without_weights_or_config_is_refused(tmp_path):
    with pytest.raises(ModelUnavailableError, match="has no model weights"):
        check_weights(folder(tmp_path), allow_pickle=True)
    (tmp_path / "config.json").unlink()
    with pytest.raises(ModelUnavailableError, match="Hugging Face"):
        resolve_source(str(tmp_path))


@pytest.mark.parametrize("source", ["./missing", "/no/such/dir", "~/missing-model", "a/b/c", "  "])
def test_a_path_that_is_not_there_is_not_taken_for_a_hub_id(source):
    with pytest.raises(ModelUnavailableError, match="no model folder"):
        resolve_source(source)


def test_a_hub_id_is_passed_on_and_a_path_the_file_system_refuses_is_one_line():
    assert resolve_source("org/model") == ("org/model", "org/model", True)
    with pytest.raises(ModelUnavailableError) as caught:
        resolve_source("/tmp/" + "a" * 300)  # longer than a file name may be
    assert "\n" not in str(caught.value) and "(305 characters): the name is too long" in str(caught.value)


def test_a_long_path_is_shown_cut_with_its_length():
    long = "/" + "x" * 200
    assert shown_path("/short") == "'/short'"
    assert len(str(shown_path(long))) < PATH_SHOWN_CHARS + 60 and "201" in str(shown_path(long))
