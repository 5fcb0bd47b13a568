"""Every source behind one interface: the capture is exact, and each model's real mask is the one reported."""

import json
import subprocess
import sys

import pytest
import torch

from attnviz import cli
from attnviz.core.head_stats import STAT_COLUMNS, head_statistics
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.hf.bundled import BUNDLED
from attnviz.models.hf.loading import load_hf_source
from attnviz.models.record import Parity
from attnviz.models.registry import BUNDLED_CHOICES, largest_bundled_shape
from attnviz.models.source import AttentionSource, ModelShape
from tests.integration.tiny_models import tiny
from tests.tolerances import bound

TOL = bound("attention")
TEXT = "The trophy did not fit in the suitcase because it was too big. 注意力机制很有用。"


@pytest.fixture(scope="module")
def tiny_llama(smollm2, tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    return load_hf_source(str(tiny(tmp_path_factory.mktemp("llama"), smollm2, LlamaConfig, LlamaForCausalLM)))


def every_weight(record):
    return torch.stack([record.weights(layer, None) for layer in range(record.n_layer)])


@pytest.mark.parametrize("name", ["embedded", "minilm", "smollm2", "tiny_llama"])
def test_the_capture_equals_the_eager_path_for_every_source(name, request):
    """Every statistic and every full-resolution head, against every weight computed at once."""
    source = (
        EmbeddedModel(EmbeddedConfig(d_model=48, n_head=6, n_kv_head=3, n_layer=3, causal=True))
        if name == "embedded"
        else request.getfixturevalue(name)
    )
    assert isinstance(source, AttentionSource)
    record = source.run(TEXT, 128)
    reference = source.reference_weights(TEXT, 128)  # (n_layer, n_head, T, T)
    assert (every_weight(record) - reference).abs().max().item() <= TOL
    ours = record.statistics
    theirs = head_statistics(reference, record.mask(0))
    assert (ours[["layer", "head", "flags"]] == theirs[["layer", "head", "flags"]]).all().all()
    for column in STAT_COLUMNS:
        scale = theirs[column].abs().clip(lower=1) if column == "mean_distance" else 1  # tokens: relative
        assert ((ours[column] - theirs[column]).abs() / scale).max() <= TOL, column
    if source.n_kv_head < source.n_head:  # GQA: only the shared key heads are kept
        assert record.layers[0].k.shape[0] == source.n_kv_head < record.layers[0].q.shape[0]


@pytest.mark.parametrize("key", list(BUNDLED_CHOICES))
def test_a_bundled_models_shape_known_before_loading_is_the_loaded_ones(key, request):
    """What the app prices an unsized request by (attnviz.app.loading.largest_need) is the real model's shape."""
    source = request.getfixturevalue(key)
    assert BUNDLED[key].shape == ModelShape(source.n_layer, source.n_head, source.n_kv_head, source.head_dim)
    if key == "smollm2":
        assert largest_bundled_shape() == BUNDLED[key].shape


def test_a_decoder_whose_config_names_its_base_class_is_still_causal(smollm2, tmp_path):
    """architectures: ["LlamaModel"] once made an encoder of it: statistics over future keys, parity 0.99997."""
    from transformers import LlamaConfig, LlamaModel

    folder = tiny(tmp_path / "base", smollm2, LlamaConfig, LlamaModel, architectures=["LlamaModel"])
    source = load_hf_source(str(folder))
    assert source.causal and not source.can_generate
    record = source.run(TEXT, 64)
    assert str(record.mask_summary()) == "causal" and every_weight(record).triu(1).abs().max().item() == 0.0
    assert source.check_parity(TEXT, 64).worst <= TOL
    # and with no architectures at all
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures")
    (folder / "config.json").write_text(json.dumps(config))
    assert load_hf_source(str(folder)).causal


def test_a_sliding_window_shorter_than_the_text_is_applied_shown_and_compared(smollm2, tmp_path):
    """It was once compared and masked as plain causal: parity 1.0 with exit 0, keys outside the window not grey."""
    from transformers import MistralConfig, MistralForCausalLM

    folder = tiny(tmp_path / "mistral", smollm2, MistralConfig, MistralForCausalLM, sliding_window=4)
    source = load_hf_source(str(folder))
    record = source.run(TEXT, 64)
    assert str(record.mask_summary()) == "causal, sliding window of 4"
    weights, mask = every_weight(record), record.mask(0)
    assert mask.sum(-1).max().item() == 4 and not mask[10, :7].any()  # query 10 sees keys 7..10 only
    assert weights[..., ~mask].abs().max().item() == 0.0
    assert (weights - source.reference_weights(TEXT, 64)).abs().max().item() <= TOL
    proc = subprocess.run(
        [sys.executable, "-m", "attnviz", "heads", TEXT, "--model", str(folder), "--parity", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["parity_max_abs_diff"] <= TOL


def test_hybrid_local_and_global_layers_report_each_layers_mask(smollm2, tmp_path):
    """Gemma-2 alternates sliding-window and global layers, and soft-caps its logits: both are captured."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    folder = tiny(
        tmp_path / "gemma2",
        smollm2,
        Gemma2Config,
        Gemma2ForCausalLM,
        num_hidden_layers=4,
        head_dim=16,
        sliding_window=4,
    )
    source = load_hf_source(str(folder))
    record = source.run(TEXT, 64)
    assert [str(record.keys(layer).describe()) for layer in range(4)] == ["causal, sliding window of 4", "causal"] * 2
    assert (
        str(record.mask_summary())
        == "L0: causal, sliding window of 4; L1: causal; L2: causal, sliding window of 4; L3: causal"
    )
    assert record.layers[0].softcap == source.config.attn_logit_softcapping
    assert (every_weight(record) - source.reference_weights(TEXT, 64)).abs().max().item() <= TOL
    assert not source.supports_parity


def test_cli_parity_that_fails_exits_1_with_one_line(monkeypatch, capsys, minilm):
    bad = Parity(ours=torch.zeros(1, 1, 2, 2), theirs=torch.ones(1, 1, 2, 2), max_abs_diff=torch.ones(1, 1), keys=[])
    monkeypatch.setattr(type(minilm), "check_parity", lambda self, text, max_tokens: bad)
    monkeypatch.setattr("attnviz.cli.loading.open_source", lambda spec, progress=None: minilm)  # imported on use
    code = cli.main(["heads", "The cat sat.", "--model", "minilm", "--parity", "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out)["parity_max_abs_diff"] == 1.0
    assert err.strip().splitlines() == [
        "attnviz heads: parity: max |ours - model| = 1.000e+00 exceeds the tolerance 1e-05"
    ]


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_the_capture_changes_nothing_the_model_computes(name, request):
    """The captured pass's hidden states and logits equal a plain forward with the model's own eager attention."""
    from attnviz.models.hf.attention import reference

    source = request.getfixturevalue(name)
    record = source.run(TEXT, 128)
    ids = torch.tensor([source.encode(TEXT, 128).ids])
    with torch.no_grad(), reference():
        plain = source.model(input_ids=ids, output_hidden_states=True, return_dict=True)
    hidden = plain.hidden_states[-1][0]
    if source.can_generate:  # a decoder's last hidden state is normed before its LM head
        assert (record.outputs.next_token_logits - plain.logits[0, -1]).abs().max().item() <= 1e-4
    else:
        assert (record.outputs.hidden - hidden).abs().max().item() <= TOL
    assert record.outputs.hidden.shape == (len(ids[0]), source.d_model)


@pytest.mark.parametrize("name", ["embedded", "minilm", "smollm2", "tiny_llama"])
def test_every_source_has_one_pass_serving_its_points(name, request):
    """A source is its description, ``encode`` and one pass: ``run_hooked`` serves exactly its ``hook_points``
    (a point it lacks is refused), and its capture is that pass's ``attn`` point: the records agree."""
    source = EmbeddedModel(EmbeddedConfig()) if name == "embedded" else request.getfixturevalue(name)
    assert isinstance(source, AttentionSource)
    encoding = source.encode(TEXT, 32)
    inputs = [[t.text for t in encoding.tokens]] if name == "embedded" else torch.tensor([encoding.ids])
    seen: list[tuple[int, tuple]] = []
    result = source.run_hooked(inputs, {"attn.qkv": lambda layer, q, k, v: seen.append((layer, tuple(q.shape)))})
    assert [layer for layer, _ in seen] == list(range(source.n_layer))
    assert all(shape[0] == 1 and len(encoding.tokens) in shape for _, shape in seen)
    with pytest.raises(ValueError, match="no hook point"):
        source.run_hooked(inputs, {"no.such.point": lambda *a: None})
    logits: list[torch.Tensor] = []
    if "logits" in source.hook_points:  # an LM: the logits point reads the pass's own output
        result = source.run_hooked(inputs, {"logits": logits.append})
        assert len(logits) == 1 and logits[0] is result.output.logits
        assert logits[0].shape == (1, len(encoding.ids), source.model.config.vocab_size)
    else:
        with pytest.raises(ValueError, match="no hook point 'logits'"):
            source.run_hooked(inputs, {"logits": logits.append})
    assert ("logits" in source.hook_points) == (name in ("smollm2", "tiny_llama"))
