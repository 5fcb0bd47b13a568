"""The text model of a multimodal checkpoint, loaded alone and run on text like any decoder.

Three checkpoints, each a whole tiny wrapper saved as its own class saves it (the zoo's builder): Gemma 3 (an
image-text-to-text model: ``language_model.model.…`` beside a vision tower), Mllama (whose text config has no auto
class of its own: ``MllamaForCausalLM`` is found through the outer config) and Qwen2-Audio (an audio-to-text
model). Each is compared with the wrapper transformers loads, its language model run on the same token ids:
within tests/tolerances.py's bound for the dtype (attnviz's capture against eager attention). A
sharded checkpoint, a pickle one (its names unread before loading) and one spread by a device map over the CPU and
disk give exactly what the plain load gives;
``heads`` on the command line keeps its JSON contract; the sidebar says what was loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest
from transformers import AutoConfig

from attnviz.core.devices import Placement
from attnviz.models.hf.loading import load_hf_source
from tests.cli import attnviz
from tests.grid_canvas import has_grid
from tests.integration.tiny_models import tiny
from tests.integration.zoo.build import build_multimodal, text_part
from tests.tolerances import tolerance

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was warm, and the dog slept by the door."
N_TOKENS = 16
KINDS = {"gemma3": "causal", "mllama": "causal", "qwen2_audio": "seq2seq"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multimodal")
    made = {}
    for model_type, kind in KINDS.items():
        (root / model_type).mkdir()
        status = build_multimodal(model_type, kind, AutoConfig.for_model(model_type), root / model_type)
        assert status["status"] == "built", status
        made[model_type] = root / model_type
    return made


def reference(folder: Path, dtype: str, ids: list[int]) -> list[torch.Tensor]:
    """The wrapper as transformers loads it, in ``dtype``: its language model's eager weights on ``ids``."""
    config = AutoConfig.from_pretrained(folder)
    auto = (
        "AutoModelForImageTextToText"
        if type(config) in transformers.AutoModelForImageTextToText._model_mapping
        else None
    )
    auto = auto or ("AutoModelForSeq2SeqLM" if KINDS[folder.name] == "seq2seq" else "AutoModelForCausalLM")
    model = getattr(transformers, auto).from_pretrained(
        folder, attn_implementation="eager", dtype=getattr(torch, dtype)
    )
    language, _ = text_part(model.eval())
    with torch.no_grad():
        out = language(input_ids=torch.tensor([ids]), output_attentions=True)
    return [a[0].float() for a in out.attentions if a is not None]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model_type", sorted(KINDS))
def test_the_text_model_runs_as_the_wrapper_runs_it(folders, model_type, dtype):
    source = load_hf_source(str(folders[model_type]), placement=Placement(dtype))
    assert source.text_model_of == (model_type, source.text_model_of[1]) and source.text_model_of[1]
    assert source.dtype == getattr(torch, dtype) and source.can_generate
    assert type(source.model).__name__.endswith("ForCausalLM")  # the text class: no vision or audio part loaded
    assert not any(name.startswith(("vision", "audio", "multi_modal")) for name, _ in source.model.named_modules())
    record = source.run(TEXT, N_TOKENS)
    theirs = reference(folders[model_type], dtype, source.encode(TEXT, N_TOKENS).ids)
    assert record.n_layer == len(theirs) >= 1 and record.q_len == N_TOKENS
    worst = max(float((record.weights(layer, None) - ref).abs().max()) for layer, ref in enumerate(theirs))
    assert worst <= tolerance("cpu", dtype, "weights"), worst  # attnviz's capture against eager attention


def test_a_sharded_and_an_offloaded_checkpoint_give_what_the_plain_load_gives(folders, tmp_path):
    from transformers import AutoModelForImageTextToText

    plain = load_hf_source(str(folders["gemma3"])).run(TEXT, N_TOKENS)
    sharded = tmp_path / "sharded"
    AutoModelForImageTextToText.from_pretrained(folders["gemma3"]).save_pretrained(sharded, max_shard_size="100KB")
    for file in folders["gemma3"].glob("*"):
        if file.name.startswith(("tokenizer", "vocab", "special_tokens")):
            (sharded / file.name).write_bytes(file.read_bytes())
    assert len(list(sharded.glob("*.safetensors"))) > 2
    offload = Placement(device_map="sequential", max_memory=(("cpu", 200_000),), offload_folder=str(tmp_path / "o"))
    for where, placement in ((sharded, Placement()), (folders["gemma3"], offload)):
        source = load_hf_source(str(where), placement=placement)
        if placement.device_map:
            assert "disk" in {device for _, device in source.placement}, source.placement
        record = source.run(TEXT, N_TOKENS)
        for layer in range(plain.n_layer):
            assert torch.equal(record.weights(layer, None), plain.weights(layer, None))
        assert torch.equal(record.outputs.next_token_logits, plain.outputs.next_token_logits)


def test_a_pickle_checkpoint_loads_its_text_model_through_the_usual_layouts(folders, tmp_path):
    """Its names are not read before loading (a pickle is opened only by the load the user allowed): the renaming
    covers the hub's layout, which the checkpoint has; the text model is the one the safetensors gave."""
    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for file in folders["gemma3"].iterdir():
        if file.suffix != ".safetensors":
            (pickled / file.name).write_bytes(file.read_bytes())
    torch.save(load_file(folders["gemma3"] / "model.safetensors"), pickled / "pytorch_model.bin")
    plain = load_hf_source(str(folders["gemma3"])).run(TEXT, N_TOKENS)
    record = load_hf_source(str(pickled), allow_pickle=True).run(TEXT, N_TOKENS)
    for layer in range(plain.n_layer):
        assert torch.equal(record.weights(layer, None), plain.weights(layer, None))
    worst = float((record.outputs.next_token_logits - plain.outputs.next_token_logits).abs().max())
    assert worst <= 1e-6, worst  # the LM head's product over weights laid out otherwise in memory


def test_heads_on_the_command_line_keeps_its_contract(folders, smollm2, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = tiny(tmp_path / "llama", smollm2, LlamaConfig, LlamaForCausalLM)
    theirs = attnviz("heads", TEXT, "--model", llama, "--json")
    ours = attnviz("heads", TEXT, "--model", folders["gemma3"], "--json")
    assert ours.returncode == 0 and theirs.returncode == 0, ours.stderr
    a, b = json.loads(ours.stdout), json.loads(theirs.stdout)
    assert set(a) == set(b) and set(a["stats"][0]) == set(b["stats"][0])  # no key of its own
    assert a["causal"] and a["n_layer"] == 2 and len(a["stats"]) == a["n_layer"] * a["n_head"]


def test_the_sidebar_says_it_loaded_the_text_model_alone(folders):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folders["gemma3"])).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception and not at.error
    shown = "\n".join(c.value for c in at.sidebar.caption)
    assert "the text model (**gemma3\\_text**) of a multimodal **gemma3** checkpoint; the rest (vision)" in shown
    assert at.get("plotly_chart") and has_grid(at)
