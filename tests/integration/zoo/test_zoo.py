"""Every text architecture transformers has, as a tiny random model (tests/integration/zoo/build.py): exact or refused in one line.

Exact means: attnviz's record of a text (through the AttentionInterface route
or the eager route, whichever the loader chose) equals the weights
transformers' own eager attention returns on a fresh copy of the model, loaded
with ``attn_implementation="eager"``, to 1e-5, and so do the row statistics.
A multimodal checkpoint is built whole (its other parts tiny too) and saved
as its own class saves it; attnviz loads its text model alone, and the
reference is the wrapper's language model, loaded by transformers, on the
same token ids. An encoder-decoder is read on a source and a target: its
encoder's, decoder's and cross-attention's weights against the ones its own
eager attention returns on a fresh load. A type with no zoo model (one
transformers cannot build tiny) is refused by attnviz's loader in one line, or
has no folder to load at all.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnviz.core.capture import SINK_STAT
from attnviz.core.head_stats import row_statistics
from attnviz.errors import ConfigError, ModelUnavailableError
from attnviz.models.record import KINDS
from attnviz.models.source import Capability
from tests.integration.zoo.build import ATTNVIZ_REFUSALS, REASONS, architectures, build_zoo, text_part, zoo_dir

TEXT = "the cat sat on the mat because it was warm, and the dog slept by the door"
N_TOKENS = 12
TOLERANCE = 1e-5
TYPES = sorted(architectures())
RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def zoo() -> dict[str, dict]:
    return build_zoo(TYPES)


def _multimodal_reference(folder, auto: str, ids: list[int]) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """A multimodal checkpoint's reference: its whole wrapper loaded as transformers loads it, its language model
    run on the token ids ([(n_head, T, T)] per layer), and the wrapper's next-token logits on the ids alone where
    it takes them (None where it asks for its other inputs too)."""
    import transformers

    model = getattr(transformers, auto).from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    language, _ = text_part(model)
    with torch.no_grad():
        out = language(input_ids=torch.tensor([ids]), output_attentions=True)
        try:
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
        except Exception:  # the wrapper's own forward wants audio or images beside the text
            logits = None
    return [a[0].float() for a in out.attentions if a is not None], logits


def _reference(folder, source, ids: list[int]) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Every layer's weights from transformers' eager attention on a fresh load of the folder, [(n_head, T, T)],
    and the next-token logits after the last token (None for a model without an LM head)."""
    from transformers import AutoModel, AutoModelForCausalLM

    cls = (
        AutoModelForCausalLM
        if source.can_generate or type(source.model).__name__.endswith(("ForCausalLM", "LMHeadModel"))
        else AutoModel
    )
    model = cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    logits = out.logits[0, -1].float() if source.can_generate else None
    return [a[0].float() for a in out.attentions if a is not None], logits


TARGET = "die Katze sass auf der Matte"


def _check_seq2seq(folder, source, status: dict, model_type: str) -> None:
    """An encoder-decoder: every kind of attnviz's record (teacher-forced on TARGET) equals the weights transformers'
    own eager attention returns on a fresh load, to 1e-5, and the target's losses its logits'."""
    from transformers import AutoModelForSeq2SeqLM

    assert Capability.TARGET in source.capabilities and source.description.attention_kinds == KINDS
    pair = source.run_pair(TEXT, TARGET, N_TOKENS)
    ids = source.encode(TEXT, N_TOKENS).ids
    decoder_ids = [source.start_id, *pair.target_ids]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([ids]),
            decoder_input_ids=torch.tensor([decoder_ids]),
            output_attentions=True,
            use_cache=False,
        )
    theirs = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    worst = {}
    for kind, layers in theirs.items():
        record = pair.part(kind)
        assert record.n_layer == len(layers) >= 1
        worst[kind] = max(float((record.weights(i, None) - w[0].float()).abs().max()) for i, w in enumerate(layers))
    losses = torch.nn.functional.cross_entropy(
        out.logits[0, :-1].float(), torch.tensor(pair.target_ids), reduction="none"
    )
    assert torch.allclose(pair.losses, losses, atol=1e-4)
    assert max(worst.values()) <= TOLERANCE, worst
    # the views of one text read the encoder alone on the source: the same weights as the pair's encoder part
    alone = source.run(TEXT, N_TOKENS)
    assert all(torch.equal(alone.weights(i, None), pair.encoder.weights(i, None)) for i in range(alone.n_layer))
    assert source.pad_weights(["the cat", TEXT], N_TOKENS) == {"encoder": 0.0, "decoder": 0.0, "cross": 0.0}
    # its two caches: the estimate from its shapes and the lengths is what EncoderDecoderCache holds, to the byte
    from attnviz.labs.kv.encoder_decoder import seq2seq_cache_check

    try:
        cache_error = seq2seq_cache_check(source, TEXT, TARGET, N_TOKENS)["error (bytes)"].abs().max()
    except ModelUnavailableError as err:  # a model whose forward keeps no cache (one line, said on the KV page)
        assert "\n" not in str(err) and err.args[0].key == "model_errors.no_cache"
        cache_error = None
    assert cache_error in (None, 0)
    RESULTS[model_type] = {
        "route": "seq2seq",
        "causal": False,
        "max_abs_diff": max(worst.values()),
        "max_abs_diff_by_kind": worst,
        "class": status["class"],
        "layers": {kind: len(layers) for kind, layers in theirs.items()},
        "cache_checked": cache_error is not None,
        "special": None,
        "multimodal": False,
    }


@pytest.mark.parametrize("model_type", TYPES)
def test_every_architecture_is_exact_or_refused_in_one_line(zoo, model_type):
    from attnviz.models.hf.loading import load_hf_source

    status, folder = zoo[model_type], zoo_dir() / model_type
    if status["status"] == "refused":
        assert status["reason"] in REASONS
        RESULTS[model_type] = {"route": "refused", "reason": status["reason"]}
        if (folder / "config.json").is_file():  # attnviz's loader says why, in one line, before any weight
            with pytest.raises(ModelUnavailableError) as refused:
                load_hf_source(str(folder))
            assert "\n" not in str(refused.value) and status["reason"].split()[0] in str(refused.value)
        return
    try:
        source = load_hf_source(str(folder))
    except ModelUnavailableError as refused:
        key = refused.args[0].key
        assert key in ATTNVIZ_REFUSALS and "\n" not in str(refused), str(refused)
        RESULTS[model_type] = {"route": "refused by attnviz", "reason": ATTNVIZ_REFUSALS[key]}
        return
    if status.get("seq2seq"):
        _check_seq2seq(folder, source, status, model_type)
        return
    ids = source.encode(TEXT, N_TOKENS).ids
    record = source.run(TEXT, N_TOKENS)
    if status.get("multimodal"):
        assert source.text_model_of == (model_type, source.text_model_of[1]) and source.text_model_of[1]
        theirs, logits = _multimodal_reference(folder, status["multimodal"], ids)
        logits = logits if source.can_generate else None
    else:
        theirs, logits = _reference(folder, source, ids)
    T = len(ids)
    softmax_layers = [a for a in theirs if a.shape[-2:] == (T, T) and float(a.sum(dim=-1).max()) <= 1 + TOLERANCE]
    if len(softmax_layers) < len(theirs):  # a hybrid: its linear-attention layers return other tensors
        special = f"a hybrid: {len(softmax_layers)} of {len(theirs)} layers are softmax attention"
        theirs = softmax_layers
    else:
        special = None
    assert record.n_layer == len(theirs) >= 1 and record.q_len == T > 1
    worst = 0.0
    for layer, reference in enumerate(theirs):
        ours = record.weights(layer, None)  # (n_head, T, T)
        assert ours.shape == reference.shape
        share = record.layers[layer].rows.get(SINK_STAT)
        if share is not None and torch.allclose(reference.sum(dim=-1), torch.ones(()), atol=TOLERANCE):
            # its eager code returns the weights before the sink scales them (Granite-SWA): compare those
            worst = max(worst, float((ours / (1 - share[..., None]) - reference).abs().max()))
            special = "its eager attention returns the weights before the sink's scaling"
            reference = reference * (1 - share[..., None])  # what reaches the values, as attnviz records
        worst = max(worst, float((ours - reference).abs().max()))
        capture = record.layers[layer]
        stats = row_statistics(reference, record.keys(layer).dense())
        for name in ("entropy", "max_weight", "first_token_weight", "prev_token_weight", "self_weight"):
            finite = stats[name].isfinite()
            assert bool(finite.any()), name
            assert torch.allclose(capture.rows[name][finite], stats[name][finite], atol=TOLERANCE), name
        if SINK_STAT in capture.rows:  # rows sum to 1 minus the sink's share
            assert torch.allclose(reference.sum(dim=-1) + capture.rows[SINK_STAT], torch.ones(()), atol=TOLERANCE)
    assert worst <= TOLERANCE, worst
    if logits is not None:  # the pass that gave the weights gave the model's own output
        scale = getattr(source.config, "logit_scale", None)
        ours = record.outputs.next_token_logits
        if status.get("multimodal") and scale and not torch.allclose(ours, logits, atol=1e-4):
            special = "its wrapper leaves out its text model's logit_scale, which attnviz's text model applies"
            logits = logits * scale
        assert torch.allclose(ours, logits, atol=1e-4)
    RESULTS[model_type] = {
        "route": source.route,
        "causal": source.causal,
        "sinks": SINK_STAT in record.layers[0].rows,
        "max_abs_diff": worst,
        "class": status["class"],
        "special": special,
        "multimodal": bool(status.get("multimodal")),
    }
    assert not math.isnan(worst)


def test_the_zoo_covers_every_type_of_the_auto_mappings(zoo):
    """The enumeration is transformers' own (not a hand list), and the zoo's report is written for docs/models.md."""
    from transformers.models.auto import modeling_auto as auto

    expected = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    expected |= set(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) | set(auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES)
    assert expected == set(zoo) and len(zoo) >= 300
    built = [t for t, s in zoo.items() if s["status"] == "built"]
    assert len(built) >= 100  # most architectures are tiny-buildable
    (zoo_dir() / "report.json").write_text(json.dumps({"statuses": zoo, "results": RESULTS}, indent=1))


KV_BATCH, KV_TOKENS = 2, 11
KV_RESULTS: dict[str, dict] = {}


def _real_cache_bytes(folder, multimodal: bool) -> int | None:
    """K, V (and indexer-key) bytes of the cache transformers returns after a float32 prefill; None: no cache.
    A multimodal checkpoint's cache is its text model's (loaded alone, as attnviz loads it: text fills no other)."""
    from transformers import AutoModelForCausalLM

    from attnviz.models.hf.cache_layout import CACHE_TENSORS
    from attnviz.models.hf.kv import output_cache
    from attnviz.models.hf.loading import load_hf_source

    if multimodal:
        model = load_hf_source(str(folder)).model
        model.set_attn_implementation("eager")
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        ids = torch.arange(10, 10 + KV_TOKENS).repeat(KV_BATCH, 1)  # (2, 11)
        cache = output_cache(model(input_ids=ids, use_cache=True))
    if cache is None or not hasattr(cache, "layers"):
        return None
    tensors = [getattr(layer, name, None) for layer in cache.layers for name in CACHE_TENSORS]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _decoders() -> list[str]:
    """The causal-LM mapping's types, the seq2seq and the multimodal-LM mappings' (a multimodal checkpoint's text
    model is a decoder; an encoder-decoder's cache is its own, checked by tests/integration/models/test_seq2seq.py)."""
    return [t for t, kind in architectures().items() if kind in ("causal", "seq2seq", "multimodal")]


@pytest.mark.parametrize("model_type", sorted(_decoders()))
def test_the_kv_estimate_of_every_decoder_is_what_its_real_cache_holds(zoo, model_type):
    """transformers' figure on the KV page equals the bytes of a real DynamicCache after a prefill, to the byte."""
    from attnviz.labs.kv.config import load_config
    from attnviz.labs.kv.engines import engine_estimates

    status, folder = zoo[model_type], zoo_dir() / model_type
    if status["status"] != "built":
        return  # nothing built: test_every_architecture_... says why
    config = json.loads((folder / "config.json").read_text())
    multimodal = bool(status.get("multimodal"))
    if multimodal:
        from attnviz.models.hf.loading import load_hf_source

        try:
            if not load_hf_source(str(folder)).causal:  # an encoder's text model: no cache
                return
        except ModelUnavailableError:  # refused in one line: test_every_architecture_... says why
            return
    elif not status["class"].endswith(("ForCausalLM", "LMHeadModel")) or not config.get("is_decoder", True):
        return
    real = _real_cache_bytes(folder, multimodal)
    if real is None:  # a model that keeps no cache (GPT-1, RWKV, an encoder run with an LM head)
        KV_RESULTS[model_type] = {"real": None}
        return
    if real == 0:  # a state-space or recurrent model: no attention, no KV; the estimator says so in one line
        with pytest.raises(ConfigError, match="num_attention_heads"):
            load_config(str(folder))
        KV_RESULTS[model_type] = {"real": 0, "estimate": "refused: no attention heads"}
        return
    shown = engine_estimates(load_config(str(folder)), KV_BATCH, KV_TOKENS, "fp32")[-1]
    assert shown.total_bytes == real, (shown.total_bytes, real)
    KV_RESULTS[model_type] = {"real": real, "estimate": shown.total_bytes}


def test_the_kv_comparison_is_reported(zoo):
    compared = [t for t, r in KV_RESULTS.items() if r.get("real") is not None]
    assert len(compared) >= 80
    (zoo_dir() / "kv_report.json").write_text(json.dumps(KV_RESULTS, indent=1))
