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
from collections import Counter
from pathlib import Path

import pytest
import torch

from attnviz.core.capture import SINK_STAT
from attnviz.core.head_stats import row_statistics
from attnviz.errors import ConfigError, ModelUnavailableError
from attnviz.models.record import KINDS
from attnviz.models.source import Capability
from tests.integration.zoo.build import (
    ATTNVIZ_REFUSALS,
    EXACT_ROUTES,
    REASONS,
    architectures,
    build_zoo,
    built_row,
    committed_table,
    refused_row,
    text_part,
    zoo_dir,
)
from tests.tolerances import bound

TEXT = "the cat sat on the mat because it was warm, and the dog slept by the door"
N_TOKENS = 12
TOLERANCE = bound("attention")  # weights and row statistics, two float32 routes (tests/tolerances.py)
LOGITS = bound("logits")  # next-token logits and losses of a tiny model, two float32 passes
TYPES = sorted(architectures())
TABLE = committed_table()  # what the zoo gave when docs/models.md was last generated: each type is held to it
REGENERATE = (
    "if the change is meant, regenerate docs/models.md's table (python -m tests.integration.zoo.build --report)"
)


@pytest.fixture(scope="module")
def zoo(request) -> dict[str, dict]:
    """Each type's build status: every type when a test of the whole zoo runs, else those of the ids selected
    (``-k llama``: one model built, not 343)."""
    mine = [item for item in request.session.items if item.module is request.module]
    selected = {item.callspec.params["model_type"] for item in mine if hasattr(item, "callspec")}
    whole = any(not hasattr(item, "callspec") for item in mine)
    return build_zoo(TYPES if whole else sorted(selected))


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


def _check_seq2seq(folder, source, status: dict) -> dict:
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
    assert torch.allclose(pair.losses, losses, atol=LOGITS)
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
    return {
        "row": built_row(source, alone, pair),
        "causal": False,
        "max_abs_diff": max(worst.values()),
        "max_abs_diff_by_kind": worst,
        "class": status["class"],
        "layers": {kind: len(layers) for kind, layers in theirs.items()},
        "cache_checked": cache_error is not None,
        "special": None,
        "multimodal": False,
    }


def _check(status: dict, model_type: str) -> dict:
    """One type of the zoo checked: exact (its record against transformers' eager attention), or refused in one
    line for a reason of :data:`REASONS` or :data:`ATTNVIZ_REFUSALS`. The result's ``row`` is the (route, limits)
    that docs/models.md's table gives it when regenerated."""
    from attnviz.models.hf.loading import load_hf_source

    folder = zoo_dir() / model_type
    if status["status"] == "refused":
        assert status["reason"] in REASONS
        if (folder / "config.json").is_file():  # attnviz's loader says why, in one line, before any weight
            with pytest.raises(ModelUnavailableError) as refused:
                load_hf_source(str(folder))
            assert "\n" not in str(refused.value) and status["reason"].split()[0] in str(refused.value)
        return {"row": refused_row(status), "reason": status["reason"]}
    try:
        source = load_hf_source(str(folder))
    except ModelUnavailableError as refused:
        key = refused.args[0].key
        assert key in ATTNVIZ_REFUSALS and "\n" not in str(refused), str(refused)
        return {"row": refused_row(status, key), "reason": ATTNVIZ_REFUSALS[key]}
    if status.get("seq2seq"):
        return _check_seq2seq(folder, source, status)
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
    assert not math.isnan(worst) and worst <= TOLERANCE, worst
    if logits is not None:  # the pass that gave the weights gave the model's own output
        scale = getattr(source.config, "logit_scale", None)
        ours = record.outputs.next_token_logits
        if status.get("multimodal") and scale and not torch.allclose(ours, logits, atol=LOGITS):
            special = "its wrapper leaves out its text model's logit_scale, which attnviz's text model applies"
            logits = logits * scale
        assert torch.allclose(ours, logits, atol=LOGITS)
    return {
        "row": built_row(source, record),
        "causal": source.causal,
        "sinks": SINK_STAT in record.layers[0].rows,
        "max_abs_diff": worst,
        "class": status["class"],
        "special": special,
        "multimodal": bool(status.get("multimodal")),
    }


_CHECKED: dict[str, dict | BaseException] = {}  # a memo, not a channel: whichever test needs a type's check runs it


def checked(zoo: dict[str, dict], model_type: str) -> dict:
    """:func:`_check` of ``model_type``, run once per session; its failure is raised again to every test asking."""
    if model_type not in _CHECKED:
        try:
            _CHECKED[model_type] = _check(zoo[model_type], model_type)
        except (Exception, pytest.fail.Exception) as err:  # the check's failure, or an error of attnviz or the model
            _CHECKED[model_type] = err
    found = _CHECKED[model_type]
    if isinstance(found, BaseException):
        raise found
    return found


def differs_from_table(model_type: str, row: tuple[str, str]) -> str | None:
    """Why ``row`` (route, limits) is not docs/models.md's row of ``model_type``, or None when it is."""
    if model_type not in TABLE:
        return f"{model_type} is not in docs/models.md's table (new in transformers?): {REGENERATE}"
    committed = TABLE[model_type]
    if committed == row:
        return None
    if committed[0] in EXACT_ROUTES and row[0] not in EXACT_ROUTES:
        return f"{model_type} was exact ({committed[0]}) by docs/models.md's table and is now {row[0]}: {row[1]}"
    return f"{model_type}: docs/models.md's table says {committed}, the zoo now gives {row}; {REGENERATE}"


@pytest.mark.parametrize("model_type", TYPES)
def test_every_architecture_is_what_the_committed_table_says(zoo, model_type):
    """Exact, or refused in one line, as docs/models.md's table has it: a type the table has as exact that is now
    refused, fails its check or is gone fails here, and so does any other change of route or limits."""
    problem = differs_from_table(model_type, checked(zoo, model_type)["row"])
    assert problem is None, f"{problem} (the builder's errors: {zoo[model_type].get('errors')})"


def test_the_zoo_covers_every_type_of_the_auto_mappings_and_the_table_counts_them(zoo):
    """The enumeration is transformers' own (not a hand list), every type of it and no other is in the committed
    table, each route has the table's count, and the zoo's report is written beside its models."""
    from transformers.models.auto import modeling_auto as auto

    expected = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    expected |= set(auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) | set(auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES)
    assert expected == set(zoo) == set(TYPES)
    assert set(TABLE) == set(TYPES), f"{sorted(set(TABLE) ^ set(TYPES))}: {REGENERATE}"
    rows, failed = {}, {}
    for model_type in TYPES:
        try:
            rows[model_type] = checked(zoo, model_type)["row"]
        except (Exception, pytest.fail.Exception) as err:
            failed[model_type] = f"{type(err).__name__}: {str(err)[:200]}"
    routes = Counter(route for route, _ in rows.values())
    assert not failed and routes == Counter(route for route, _ in TABLE.values()), (failed, routes)
    report = {"statuses": zoo, "results": {t: _CHECKED[t] for t in TYPES}}
    (zoo_dir() / "report.json").write_text(json.dumps(report, indent=1))


KV_BATCH, KV_TOKENS = 2, 11
KV_COMMITTED = json.loads((Path(__file__).with_name("kv_committed.json")).read_text())


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


def kv_expected() -> dict[str, str]:
    """What the zoo's KV check finds of each type it applies to, from what is committed (no build): "compared"
    (the figure against a real cache) for every decoder of docs/models.md's table whose zoo model is a causal LM
    (a multimodal checkpoint's text model, or a class of the causal-LM mapping), but those that kv_committed.json
    lists as keeping no cache or having no attention heads."""
    from transformers.models.auto import modeling_auto as auto

    kinds, expected = architectures(), {}
    for model_type, (route, limits) in TABLE.items():
        if route not in ("interface", "eager") or "encoder" in limits or model_type not in kinds:
            continue
        name = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, "") if kinds[model_type] == "causal" else ""
        if "of a multimodal checkpoint" in limits or name.endswith(CAUSAL_LM_CLASSES):
            expected[model_type] = "compared"
    for outcome in ("no cache", "no attention heads"):
        expected.update(dict.fromkeys(KV_COMMITTED[outcome], outcome))
    return expected


CAUSAL_LM_CLASSES = ("ForCausalLM", "LMHeadModel")
KV_EXPECTED = kv_expected()


def _check_kv(status: dict, model_type: str) -> dict:
    """transformers' figure on the KV page against the bytes of a real DynamicCache after a prefill, to the byte;
    a model without attention heads is refused by the estimator in one line."""
    from attnviz.labs.kv.config import load_config
    from attnviz.labs.kv.engines import engine_estimates
    from attnviz.models.hf.loading import load_hf_source

    folder = zoo_dir() / model_type
    assert status["status"] == "built", f"{model_type} has no zoo model: {status.get('reason')}"
    multimodal = bool(status.get("multimodal"))
    if multimodal:
        assert load_hf_source(str(folder)).causal, f"{model_type}'s text model is not a decoder"
    else:
        # (GPT-NeoX's config says is_decoder false, yet it is a causal LM with a cache: the class decides)
        assert status["class"].endswith(CAUSAL_LM_CLASSES), status["class"]
    real = _real_cache_bytes(folder, multimodal)
    if real is None:
        return {"outcome": "no cache", "real": None}
    if real == 0:  # a state-space or recurrent model: no attention, no KV; the estimator says so in one line
        with pytest.raises(ConfigError, match="num_attention_heads"):
            load_config(str(folder))
        return {"outcome": "no attention heads", "real": 0, "estimate": "refused: no attention heads"}
    shown = engine_estimates(load_config(str(folder)), KV_BATCH, KV_TOKENS, "fp32")[-1]
    assert shown.total_bytes == real, (shown.total_bytes, real)
    return {"outcome": "compared", "real": real, "estimate": shown.total_bytes}


_KV_CHECKED: dict[str, dict | BaseException] = {}


def kv_checked(zoo: dict[str, dict], model_type: str) -> dict:
    """:func:`_check_kv` of ``model_type``, run once per session, as :func:`checked`."""
    if model_type not in _KV_CHECKED:
        try:
            _KV_CHECKED[model_type] = _check_kv(zoo[model_type], model_type)
        except (Exception, pytest.fail.Exception) as err:
            _KV_CHECKED[model_type] = err
    found = _KV_CHECKED[model_type]
    if isinstance(found, BaseException):
        raise found
    return found


@pytest.mark.parametrize("model_type", sorted(KV_EXPECTED))
def test_the_kv_estimate_of_every_decoder_is_what_its_real_cache_holds(zoo, model_type):
    """transformers' figure on the KV page equals the bytes of a real DynamicCache after a prefill, to the byte, for
    every decoder of the committed table; the few that keep no cache or have no heads are committed by name."""
    outcome = kv_checked(zoo, model_type)["outcome"]
    assert outcome == KV_EXPECTED[model_type], (
        f"{model_type}: {outcome}, committed {KV_EXPECTED[model_type]} (docs/models.md's table and "
        "tests/integration/zoo/kv_committed.json)"
    )


def test_the_kv_comparison_is_reported(zoo):
    """Every committed decoder's outcome is its committed one, and the report is written beside the zoo."""
    found, failed = {}, {}
    for model_type in sorted(KV_EXPECTED):
        try:
            found[model_type] = kv_checked(zoo, model_type)["outcome"]
        except (Exception, pytest.fail.Exception) as err:
            failed[model_type] = f"{type(err).__name__}: {str(err)[:200]}"
    assert not failed and found == KV_EXPECTED, (failed, {t: o for t, o in found.items() if o != KV_EXPECTED[t]})
    (zoo_dir() / "kv_report.json").write_text(json.dumps({t: _KV_CHECKED[t] for t in found}, indent=1))
