"""A model spread by a device map over the CPU and an offload folder on disk (``max_memory`` caps) gives what the
same model loaded plainly gives: ``heads`` and ``ablate`` on the command line, generation with and without the
cache, the KV page's prefill, parity, and the Heads page (every page opens); its placement says where each part
went.

On the CPU the offloaded layers run the same kernels on the same weights (accelerate's hooks read them in from disk
for each forward: for a safetensors checkpoint, from the checkpoint's own file), so everything is compared exactly.

The model is a random Llama whose decoder layers are large beside its (tied) embedding: accelerate keeps room
for the largest layer on the main device, so with a small model whose embedding dominates, every cap puts the
whole model on one side. The cap is computed from accelerate's own module sizes to leave half the layers on
the CPU and half on disk, and each test checks that the split really happened.
"""

import contextlib
import io
import json

import numpy as np
import pytest
import torch
from accelerate.utils import has_offloaded_params
from streamlit.testing.v1 import AppTest

from attnviz import cli
from attnviz.core.devices import Placement, torch_dtype
from attnviz.core.token_display import markdown_text
from attnviz.models.hf.loading import load_hf_source
from tests.cli import attnviz
from tests.integration.pages.test_app import PAGES, ROOT
from tests.plotly_json import decode, spec_of

TEXT = "The cat sat on the mat because it was tired, and the dog slept by the door."
N_LAYER = 8
ON_CPU = N_LAYER // 2  # decoder layers the cap leaves on the CPU; the rest go to disk
DTYPES = ("float32", "bfloat16")


@pytest.fixture(scope="module")
def folder(smollm2, tmp_path_factory):
    """The checkpoint, stored in bfloat16 as most published ones are (SmolLM2's tokenizer)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=smollm2.config.vocab_size, hidden_size=128, intermediate_size=2048, num_hidden_layers=N_LAYER,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    where = tmp_path_factory.mktemp("offload")
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(where)
    smollm2.tokenizer.save_pretrained(where)
    return where


def cpu_cap(folder, dtype: str) -> int:
    """A CPU cap (bytes) under which accelerate's sequential map keeps the embedding and :data:`ON_CPU` decoder
    layers on the CPU and sends the rest to disk: the embedding, ON_CPU layers, the one layer's room accelerate
    keeps free on the main device, and half a layer to spare either way."""
    from accelerate import init_empty_weights
    from accelerate.utils import compute_module_sizes
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch_dtype(dtype))
    sizes = compute_module_sizes(model)
    layer = sizes["model.layers.0"]
    return sizes["model.embed_tokens"] + layer * (ON_CPU + 1) + layer // 2


def offload_arguments(folder, dtype: str, offload_folder) -> list[str]:
    return ["--device-map", "sequential", "--max-memory", f"cpu={cpu_cap(folder, dtype)}B",
            "--offload-folder", str(offload_folder)]  # fmt: skip


def where_layers_went(placement) -> dict[str, str]:
    """{device: the decoder layers' run on it} from a source's placement ("model.layers.0–3")."""
    return {device: part for part, device in placement if part.startswith("model.layers")}


@pytest.fixture(scope="module")
def pair(request, folder, tmp_path_factory):
    """(plain, offloaded, offload folder): the same checkpoint loaded onto the CPU, and spread over it and disk, in
    float32 unless a test asks for another dtype (``indirect``)."""
    dtype = getattr(request, "param", "float32")
    offload_folder = tmp_path_factory.mktemp(f"weights-{dtype}")
    plain = load_hf_source(str(folder), "cpu", placement=Placement(dtype))
    caps = (("cpu", cpu_cap(folder, dtype)),)
    offloaded = load_hf_source(str(folder), "cpu", placement=Placement(dtype, "sequential", caps, str(offload_folder)))
    return plain, offloaded, offload_folder


@pytest.mark.parametrize("pair", DTYPES, indirect=True)
def test_the_placement_says_which_layers_went_to_the_cpu_and_which_to_disk(pair):
    plain, offloaded, _ = pair
    assert plain.placement == ()
    assert where_layers_went(offloaded.placement) == {
        "cpu": f"model.layers.0–{ON_CPU - 1}",
        "disk": f"model.layers.{ON_CPU}–{N_LAYER - 1}",
    }
    assert ("model.embed_tokens", "cpu") in offloaded.placement
    assert offloaded.device == "cpu" and offloaded.dtype == plain.dtype
    on_disk = offloaded.model.model.layers[N_LAYER - 1].self_attn.q_proj
    assert on_disk.weight.device.type == "meta" and has_offloaded_params(on_disk)  # read in for each forward


@pytest.mark.parametrize("pair", DTYPES, indirect=True)
def test_the_record_equals_the_plain_loads(pair):
    plain, offloaded, _ = pair
    ours, theirs = offloaded.run(TEXT, 64), plain.run(TEXT, 64)
    assert ours.tokens == theirs.tokens
    for layer in range(N_LAYER):
        assert torch.equal(ours.weights(layer, None), theirs.weights(layer, None)), layer
    assert ours.statistics.equals(theirs.statistics)


@pytest.mark.parametrize("pair", ["float32"], indirect=True)
def test_generation_with_and_without_the_cache_equals_the_plain_loads(pair):
    plain, offloaded, _ = pair
    ours, theirs = offloaded.generate(TEXT, 4, 64), plain.generate(TEXT, 4, 64)
    assert ours.generated_ids == theirs.generated_ids and len(ours.generated_ids) == 4
    assert torch.equal(ours.record.weights(N_LAYER - 1, None), theirs.record.weights(N_LAYER - 1, None))
    for use_cache in (True, False):  # the KV page's decoders, on the split model: the plain load's tokens
        decoder = offloaded.greedy_decoder(TEXT, use_cache=use_cache)
        assert [decoder.step() for _ in range(3)] == theirs.generated_ids[:3], use_cache


@pytest.mark.parametrize("pair", DTYPES, indirect=True)
@pytest.mark.parametrize("implementation", ["transformers", "attnviz"])
def test_the_kv_pages_prefill_equals_the_plain_loads(pair, implementation):
    plain, offloaded, _ = pair
    ours = offloaded.prefill_kv(TEXT, 32, 2, implementation)
    theirs = plain.prefill_kv(TEXT, 32, 2, implementation)
    assert len(ours.layers) == N_LAYER
    for (k, v), (k_plain, v_plain) in zip(ours.layers, theirs.layers, strict=True):
        assert k.shape == (2, 2, 32, 32) and k.dtype == plain.dtype
        assert torch.equal(k, k_plain) and torch.equal(v, v_plain)


@pytest.mark.parametrize("pair", DTYPES, indirect=True)
def test_parity_on_the_split_model_equals_the_plain_loads(pair):
    """Our layers copy each real one's weights: an offloaded layer's are read in from disk for the copy."""
    plain, offloaded, _ = pair
    ours, theirs = offloaded.check_parity(TEXT, 32), plain.check_parity(TEXT, 32)
    assert ours.worst == theirs.worst and ours.matches


def in_process(*args) -> dict:
    """``python -m attnviz ARGS --json --quiet`` in this process (the plain load, whose JSON is compared)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main([*map(str, args), "--json", "--quiet"]) == 0
    return json.loads(printed.getvalue())


@pytest.mark.parametrize(
    "command",
    [
        ["heads", TEXT, "--max-tokens", 64],
        ["ablate", TEXT, "--heads", f"1.*,{N_LAYER - 1}.2", "--mode", "first"],  # reads values: a head's own
    ],
    ids=["heads", "ablate"],
)
def test_the_command_line_prints_what_the_plain_load_prints(folder, tmp_path, command):
    """The offloaded load as a user runs it (a child process), against the plain one."""
    common = [*command, "--model", folder, "--dtype", "float32"]
    proc = attnviz(*common, "--json", "--quiet", *offload_arguments(folder, "float32", tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == in_process(*common)


def test_every_page_opens_on_the_split_model_and_the_sidebar_says_where_each_part_went(folder, tmp_path):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    sidebar = {
        "model": "path", "model_path": str(folder), "dtype": "float32", "text": TEXT, "device_map": "sequential",
        "max_memory": f"cpu={cpu_cap(folder, 'float32')}B", "offload_folder": str(tmp_path),
    }  # fmt: skip
    for key, value in sidebar.items():
        at.session_state[key] = value
    at.run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    cpu, disk = markdown_text(f"model.layers.0–{ON_CPU - 1}"), markdown_text(f"model.layers.{ON_CPU}–{N_LAYER - 1}")
    split = f"{cpu} → cpu, {disk} → disk"  # the runs as the sidebar's Markdown writes them
    said = [c.value for c in at.sidebar.caption]
    assert any("runs in **float32**" in c and split in c for c in said), said
    large = decode(spec_of(at.get("plotly_chart")[0])["data"][0]["z"])  # the large view (the grid is no Plotly chart)
    plain = load_hf_source(str(folder), "cpu", placement=Placement("float32"))
    expected = plain.run(TEXT, at.session_state["max_tokens"]).weights(0, 0).numpy()
    drawn = ~np.isnan(large)  # the cells above the diagonal are left blank
    assert (drawn == np.tri(*expected.shape, dtype=bool)).all()
    assert np.abs(large[drawn] - expected[drawn]).max() <= 1e-6
    for page in PAGES:  # opening each, before any button: what a visitor sees first
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
