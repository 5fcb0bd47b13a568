"""Low precision on the CPU: tiny random models of six families, saved in bfloat16, loaded in bfloat16 (and
float16) as a user's checkpoint is, against transformers' own eager attention in the same dtype.

The families: Llama, Qwen2, Gemma2 (soft-capped, sliding), GPT-2 (Conv1D), BERT (an encoder) through
transformers' AttentionInterface, and Falcon through the eager route (its own attention, read with
``output_attentions=True``). For each: the record's weights, entropy, max weight and pooled maps against the
eager weights, within the tolerance of tests/tolerances.py for the dtype (the capture softmaxes scores
computed in float32, eager attention rounds its scores to the model's dtype first); where our layers reproduce
the family (Llama, Qwen2, BERT), Parity, the Walkthrough, the GQA what-if and the KV prefill in the model's
dtype. Then every page opens with the sidebar's dtype at bfloat16, on the embedded model and on a bfloat16
Llama folder. A bfloat16 matmul is emulated on a CPU, so the models are tiny and the texts short.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
from streamlit.testing.v1 import AppTest

from attnviz.core.devices import Placement
from attnviz.core.head_stats import row_statistics
from attnviz.labs.kv.gqa import gqa_whatif
from attnviz.labs.walkthrough.steps import walk
from attnviz.models.hf.loading import load_hf_source
from attnviz.models.record import PARITY_TOLERANCES
from tests.grid_canvas import has_grid
from tests.tolerances import MEASURED, tolerance

ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py"))
TEXT = "The cat sat on the mat because it was warm, and the dog slept by the door until the sun went down. " * 4
N_TOKENS = 80  # past the grid's 64 cells a side: the pooled maps hold two tokens a bin
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
FAMILIES = {  # name: (config class, model class, sizes)
    "llama": ("LlamaConfig", "LlamaForCausalLM", {**SMALL, "num_key_value_heads": 2}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**SMALL, "num_key_value_heads": 2}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**SMALL, "num_key_value_heads": 2, "head_dim": 16}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 64, "n_layer": 2, "n_head": 4}),
    "bert": ("BertConfig", "BertModel", SMALL),
    "falcon": ("FalconConfig", "FalconForCausalLM", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}),
}  # fmt: skip
REPRODUCED = ("llama", "qwen2", "bert")  # the families our layers copy: Parity, Walkthrough, GQA what-if
CASES = [(name, "bfloat16") for name in FAMILIES] + [("llama", "float16"), ("bert", "float16")]


@pytest.fixture(scope="module")
def folders(smollm2, tmp_path_factory) -> dict[str, str]:
    """Each family as a tiny random model saved in bfloat16 with SmolLM2's tokenizer, as a checkpoint is stored."""
    root = tmp_path_factory.mktemp("bfloat16")
    tokenizer = smollm2.tokenizer
    ids = {"vocab_size": smollm2.config.vocab_size, "bos_token_id": tokenizer.bos_token_id}
    ids["eos_token_id"] = tokenizer.eos_token_id
    made = {}
    for name, (config_name, model_name, sizes) in FAMILIES.items():
        torch.manual_seed(0)
        config = getattr(transformers, config_name)(**ids, **sizes)
        model = getattr(transformers, model_name)(config)
        model.to(torch.bfloat16).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        made[name] = str(root / name)
    return made


def _eager(folder: str, source, dtype: str, ids: list[int]) -> list[torch.Tensor]:
    """Every layer's weights from transformers' eager attention on a fresh load in ``dtype``, [(n_head, T, T)]."""
    cls = transformers.AutoModelForCausalLM if source.can_generate else transformers.AutoModel
    model = cls.from_pretrained(folder, attn_implementation="eager", dtype=getattr(torch, dtype)).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    assert all(a.dtype == getattr(torch, dtype) for a in out.attentions)
    return [a[0].float() for a in out.attentions]


def _pooled(weights: torch.Tensor, mask: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and mean over the visible cells of each b x b bin, NaN where none: (n_head, T, T) -> (n_head, P, P)."""
    n_head, T, _ = weights.shape
    P, pad = math.ceil(T / b), math.ceil(T / b) * b - T
    cells = F.pad(weights, (0, pad, 0, pad)).view(n_head, P, b, P, b)
    count = F.pad(mask.float(), (0, pad, 0, pad)).view(P, b, P, b).sum(dim=(1, 3))  # (P, P)
    empty = (count == 0).expand(n_head, P, P)
    top = cells.amax(dim=(2, 4)).masked_fill(empty, math.nan)
    return top, (cells.sum(dim=(2, 4)) / count).masked_fill(empty, math.nan)


def _worst(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest |ours - reference| where the reference is defined (a row that sees one key has no statistic)."""
    defined = reference.isfinite()
    assert bool(defined.any())
    return float((ours[defined] - reference[defined]).abs().max())


@pytest.mark.parametrize(("name", "dtype"), CASES)
def test_the_statistics_equal_eager_attention_in_the_same_dtype(folders, name, dtype):
    source = load_hf_source(folders[name], placement=Placement(dtype))
    assert source.dtype == getattr(torch, dtype) and source.route == ("eager" if name == "falcon" else "interface")
    record = source.run(TEXT, N_TOKENS)
    ids = source.encode(TEXT, N_TOKENS).ids
    theirs = _eager(folders[name], source, dtype, ids)
    assert record.q_len == len(ids) == N_TOKENS and record.n_layer == len(theirs)
    worst = dict.fromkeys(("weights", "entropy", "max_weight", "pooled"), 0.0)
    for layer, reference in enumerate(theirs):
        capture, mask = record.layers[layer], record.keys(layer).dense()
        assert capture.bin_size == 2
        worst["weights"] = max(worst["weights"], _worst(record.weights(layer, None), reference))
        stats = row_statistics(reference, mask)
        for stat in ("entropy", "max_weight"):
            worst[stat] = max(worst[stat], _worst(capture.rows[stat], stats[stat]))
        top, mean = _pooled(reference, mask, capture.bin_size)
        assert torch.equal(capture.pooled_max.isnan(), top.isnan())  # the same empty bins
        worst["pooled"] = max(worst["pooled"], _worst(capture.pooled_max, top), _worst(capture.pooled_mean, mean))
    MEASURED[(name, dtype)] = worst
    for quantity, value in worst.items():
        assert value <= tolerance("cpu", dtype, quantity), (name, dtype, quantity, value)


@pytest.mark.parametrize(("name", "dtype"), [(n, "bfloat16") for n in REPRODUCED] + [("bert", "float16")])
def test_parity_walkthrough_and_the_gqa_whatif_run_in_the_models_dtype(folders, name, dtype):
    source = load_hf_source(folders[name], placement=Placement(dtype))
    parity = source.check_parity(TEXT, 24)
    assert parity.tolerance == PARITY_TOLERANCES[dtype] and parity.matches, parity.worst
    assert parity.worst <= tolerance("cpu", dtype, "parity"), parity.worst
    MEASURED.setdefault((name, dtype), {})["parity"] = parity.worst
    layer = source.attention_layer(TEXT, 24, 1)
    assert layer.attention.w_q.weight.dtype == layer.hidden.dtype == getattr(torch, dtype)
    walked = walk(layer)  # the same functions as the forward, in the same dtype: exact
    assert walked.output_diff == 0.0 and walked.weights_diff == 0.0
    assert walked.step("softmax").tensors["weights"].dtype == getattr(torch, dtype)
    whatif = gqa_whatif(layer)
    unchanged = whatif[whatif["group"] == 1]
    assert (unchanged["js_nats"] == 0).all() and (unchanged["output_rel_change"] == 0).all()
    assert (whatif["js_nats"] >= 0).all() and (whatif["js_max_nats"] <= math.log(2)).all()
    per_token = 2 * layer.attention.n_kv_head * layer.attention.head_dim * 2  # K and V, two bytes a value
    assert (whatif["kv_bytes_per_token_before"] == per_token).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_kv_prefill_of_our_layers_holds_transformers_cache_in_the_models_dtype(folders, dtype):
    source = load_hf_source(folders["llama"], placement=Placement(dtype))
    ours = source.prefill_kv(TEXT, 12, 2, "attnviz")
    theirs = source.prefill_kv(TEXT, 12, 2, "transformers")
    for (k, v), (k_ref, v_ref) in zip(ours.layers, theirs.layers, strict=True):
        assert k.dtype == v.dtype == k_ref.dtype == getattr(torch, dtype) and k.shape == k_ref.shape == (2, 2, 12, 16)
        # the same projection and the same RoPE in the same dtype
        assert float((k - k_ref).abs().max()) <= tolerance("cpu", dtype, "kv")
        assert float((v - v_ref).abs().max()) <= tolerance("cpu", dtype, "kv")
    with pytest.raises(ValueError, match=r"cannot be filled in torch\.float32"):
        source.prefill_kv(TEXT, 12, 1, "transformers", torch.float32)


def test_value_norms_of_a_bfloat16_model_are_accumulated_in_float32(folders):
    source = load_hf_source(folders["llama"], placement=Placement("bfloat16"))
    record = source.run(TEXT, 16)
    attn = source.model.model.layers[0].self_attn
    grabbed = {}
    hook = attn.v_proj.register_forward_hook(lambda m, a, out: grabbed.__setitem__("v", out))
    try:
        source.reference_pass(source.encode(TEXT, 16).ids)
    finally:
        hook.remove()
    v = grabbed["v"][0].double().view(16, 2, 16).transpose(0, 1)  # (n_kv_head, T, head_dim), the model's bfloat16
    blocks = attn.o_proj.weight.double().T.reshape(4, 16, 64)  # (n_head, head_dim, d_model)
    expected = torch.linalg.vector_norm(v.repeat_interleave(2, dim=0) @ blocks, dim=-1)  # (n_head, T)
    norms = record.value_norms(0)
    assert norms.dtype == torch.float32
    assert float(((norms.double() - expected).abs() / expected).max()) <= 1e-5


def _app(model: str, folder: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="dtype").set_value("bfloat16").run()
    if folder is not None:
        at.selectbox(key="model").set_value(model).run()
        at.text_input(key="model_path").input(folder).run()
    at.text_area(key="text").input("The cat sat on the mat. 猫坐着。").run()
    assert not at.exception, at.exception
    return at


def _every_page(at: AppTest) -> dict[str, AppTest]:
    """Open every page in turn (the session's model stays loaded); each page's charts and metrics, by page name."""
    drawn = {}
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
        drawn[Path(page).stem] = (len(at.get("plotly_chart")), {m.label: m.value for m in at.metric})
        if Path(page).stem in ("heads", "walkthrough", "padding"):  # pages that load the model say what it runs in
            assert any("runs in **bfloat16**" in c.value for c in at.sidebar.caption), page
        assert has_grid(at) or Path(page).stem != "heads"  # the Heads grid: its own canvas, no Plotly chart
    return drawn


def test_every_page_opens_on_the_embedded_model_in_bfloat16():
    drawn = _every_page(_app("default"))
    assert drawn["heads"][0] >= 2 and drawn["head_roles"][0] >= 1


def test_every_page_opens_on_a_bfloat16_llama_folder(folders):
    drawn = _every_page(_app("path", folders["llama"]))
    assert drawn["heads"][0] >= 2 and drawn["walkthrough"][0] >= 9 and drawn["generation"][0] >= 1
    charts, metrics = drawn["parity"]
    assert charts == 3 and float(metrics["max |ours − model|"]) == 0.0 and metrics["tolerance"] == "8e-03"
