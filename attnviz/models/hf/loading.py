"""Loading a Hugging Face model as an :class:`~attnviz.models.hf.source.HFSource`: a bundled model, a local folder or a
hub id, through attnviz's attention. Everything a user's folder can get wrong is refused here, before any
weight is read where it can be, in one line (:class:`~attnviz.errors.ModelUnavailableError`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from attnviz import settings
from attnviz.core.devices import Placement
from attnviz.core.files import printable, shown_path
from attnviz.core.memory_errors import is_out_of_memory, memory_errors, one_line
from attnviz.errors import ModelUnavailableError, first_line
from attnviz.i18n.message import msg
from attnviz.models.hf.attention import IMPLEMENTATION, register
from attnviz.models.hf.bundled import Progress
from attnviz.models.hf.paths import resolve_source
from attnviz.models.hf.placement import chosen_dtype, disk_note, load_arguments, main_device
from attnviz.models.hf.source import HFSource, attention_modules
from attnviz.models.hf.text_model import (
    checkpoint_keys,
    expected_keys,
    has_head,
    key_mapping,
    other_parts,
    text_config,
    usual_mapping,
)

LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
UNREAD_MODULES = ("pooler.",)
LIMIT_OF = {  # a config field, and the limit of settings.MODEL_LIMITS it is held to
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "num_key_value_heads": "heads",
    "hidden_size": "hidden",
    "vocab_size": "vocab",
    "max_position_embeddings": "positions",
}  # weights attnviz never reads: missing from a checkpoint, they do not matter


def _has_lm_head(config, where: str) -> bool:
    """Whether to load the model with its language-model head.

    The architectures list says so when it names a ``*ForCausalLM`` class. When
    it is missing, a checkpoint that holds ``lm_head`` weights has one.
    """
    names = config.architectures or []
    if names:
        return any(n.endswith(LM_SUFFIXES) for n in names)
    folder = Path(where)
    if not folder.is_dir():
        return False
    from safetensors import safe_open

    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            if any(name.startswith("lm_head.") for name in handle.keys()):  # noqa: SIM118 (a safetensors handle)
                return True
    return False


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def check_config(config, name: str) -> None:
    """ModelUnavailableError, naming the field and its value, for a config no model can run with.

    Checked before any weight is read: 0 layers, a negative head count or a width the heads do not
    divide would otherwise fail (or, worse, run on nothing) deep inside the first forward pass.
    """

    def field(attr: str):
        try:
            return getattr(config, attr, None)
        except Exception:  # a per-layer attribute of a heterogeneous config (Gemma 4's head_dim) has no one value
            return None

    def positive(attr: str, value) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelUnavailableError(
                msg("model_errors.config_whole_number", name=name, field=attr, value=repr(value))
            )
        most = settings.MODEL_LIMITS.get(LIMIT_OF.get(attr, ""))
        if most is not None and value > most:
            raise ModelUnavailableError(msg("model_errors.config_over", name=name, field=attr, value=value, most=most))
        return value

    positive("num_hidden_layers", field("num_hidden_layers"))
    if field("num_attention_heads") is None:
        raise ModelUnavailableError(
            msg("model_errors.no_attention", name=name, model_type=repr(getattr(config, "model_type", "?")))
        )
    n_head = positive("num_attention_heads", field("num_attention_heads"))
    d_model = positive("hidden_size", field("hidden_size"))
    positive("vocab_size", field("vocab_size"))
    n_kv_head = field("num_key_value_heads")
    if n_kv_head is not None:
        positive("num_key_value_heads", n_kv_head)
        if n_head % n_kv_head:
            raise ModelUnavailableError(
                msg(
                    "model_errors.kv_heads_divide",
                    name=name,
                    n_head=n_head,
                    n_kv_head=n_kv_head,
                    rest=n_head % n_kv_head,
                )
            )
    head_dim = field("head_dim")
    if head_dim is not None:
        positive("head_dim", head_dim)
    elif d_model % n_head:
        raise ModelUnavailableError(
            msg("model_errors.hidden_divide", name=name, d_model=d_model, n_head=n_head, rest=d_model % n_head)
        )
    positions = field("max_position_embeddings")
    if positions is not None and positions != -1:  # -1: no limit (XLNet's relative positions)
        positive("max_position_embeddings", positions)


def _text_model_first(folder: Path) -> None:
    """What a folder's config alone refuses (an encoder-decoder, a multimodal model without a text model of its
    own), said before its weights."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except Exception:  # an unreadable config is reported, in one line, where it is read for loading
        return
    text_config(config, folder.name)


def _model_class(auto_class, config):
    """The class ``auto_class`` builds for ``config`` (ModelUnavailableError, one line, for none)."""
    from transformers.models.auto.auto_factory import _get_model_class

    try:
        return _get_model_class(config, auto_class._model_mapping)
    except (KeyError, ValueError) as err:
        raise ModelUnavailableError(
            msg("model_errors.unknown_architecture", model_type=repr(config.model_type))
        ) from err


def text_class(auto_class, config, outer):
    """The class ``auto_class`` builds for ``config``, None for none. A multimodal checkpoint's text config with no
    mapping of its own takes the class the outer config's mapping names when that class is built from such a
    config (Mllama: ``MllamaForCausalLM`` on a ``MllamaTextConfig``)."""
    from transformers.models.auto.auto_factory import _get_model_class

    for candidate in (config, outer):
        try:
            model_class = _get_model_class(candidate, auto_class._model_mapping)
        except (KeyError, ValueError):
            continue
        if candidate is config or getattr(model_class, "config_class", None) is type(config):
            return model_class
    return None


def _base_prefix(model_class, expected: list[str]) -> str:
    """The prefix of the base model's weights in ``model_class``'s names ("model."), "" for a base model."""
    prefix = getattr(model_class, "base_model_prefix", "") or ""
    return f"{prefix}." if prefix and any(key.startswith(f"{prefix}.") for key in expected) else ""


PROBE_TOKENS = 8


def _probe_ids(model: torch.nn.Module, vocab_size: int) -> torch.Tensor:
    start = min(10, max(0, vocab_size - PROBE_TOKENS))
    ids = (torch.arange(PROBE_TOKENS) + start) % max(1, vocab_size)
    return ids[None].to(main_device(model, "cpu"))  # (1, PROBE_TOKENS)


@torch.no_grad()
def probe_eager(model: torch.nn.Module, vocab_size: int, name: str) -> bool:
    """Run the model's own eager attention on a few tokens; whether it is causal (no weight above the diagonal).

    ModelUnavailableError, in one line, when it returns no weights, or weights that are not one
    (T, T) square per layer and head (Longformer's local windows, Funnel's pooled lengths).
    """
    out = model(input_ids=_probe_ids(model, vocab_size), output_attentions=True, return_dict=True)
    attentions = [a for a in (getattr(out, "attentions", None) or ()) if a is not None]
    if not attentions:
        raise ModelUnavailableError(msg("model_errors.no_attentions", name=name, cls=type(model).__name__))
    square = (1, attentions[0].shape[1], PROBE_TOKENS, PROBE_TOKENS)
    odd = next((tuple(a.shape) for a in attentions if a.ndim != 4 or tuple(a.shape) != square), None)
    if odd is not None:
        raise ModelUnavailableError(msg("model_errors.not_square", name=name, shape=odd, T=PROBE_TOKENS))
    sums = torch.stack([a.float().sum(dim=-1).amax() for a in attentions])
    slack = max(1e-4, torch.finfo(attentions[0].dtype).eps)  # bfloat16 weights, each rounded, sum to 1 within eps
    if float(min(a.float().min() for a in attentions)) < -1e-6 or float(sums.max()) > 1 + slack:
        raise ModelUnavailableError(msg("model_errors.not_weights", name=name, most=float(sums.max())))
    above = torch.ones(PROBE_TOKENS, PROBE_TOKENS, dtype=torch.bool).triu(1)
    return all(not bool((a[..., above.to(a.device)] != 0).any()) for a in attentions)


@torch.no_grad()
def probe_interface(model: torch.nn.Module, vocab_size: int) -> bool:
    """Whether every layer's call of attnviz's attention is one it can honour (a capture of a few tokens)."""
    from attnviz.core.capture import CaptureSession
    from attnviz.models.hf.attention import UnsupportedAttentionError, capturing

    try:
        with capturing(CaptureSession(1, PROBE_TOKENS, 1, keep_qk=False)):
            model(input_ids=_probe_ids(model, vocab_size), return_dict=True)
    except UnsupportedAttentionError:
        return False
    return True


def check_tokenizer_files(where: str, name: str) -> None:
    """A local folder must hold a tokenizer: without one, every token would be [UNK]."""
    folder = Path(where)
    if folder.is_dir() and not any((folder / file).is_file() for file in TOKENIZER_FILES):
        raise ModelUnavailableError(msg("model_errors.no_tokenizer", name=name, files=", ".join(TOKENIZER_FILES[:4])))


def check_tokenizer(tokenizer, model: torch.nn.Module, name: str) -> None:
    """A tokenizer with no vocabulary, or ids past the model's embedding, gives meaningless attention: refuse it."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    size = len(tokenizer)
    if size - len(special) < 1:
        raise ModelUnavailableError(msg("model_errors.empty_vocabulary", name=name, size=size))
    embedding = model.get_input_embeddings()
    rows = getattr(embedding, "num_embeddings", None)
    if isinstance(rows, int) and size > rows:
        raise ModelUnavailableError(msg("model_errors.vocabulary_too_large", name=name, size=size, rows=rows))


class _QuietLoadReport(logging.Filter):
    """Drop transformers' multi-line LOAD REPORT for loads in this thread: the loader reports problems itself."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(self.local, "loading", False) and "LOAD REPORT" in record.getMessage())


_QUIET_REPORT = _QuietLoadReport()


@contextmanager
def _quiet_load_report() -> Iterator[None]:
    report_logger = logging.getLogger("transformers.modeling_utils")
    if _QUIET_REPORT not in report_logger.filters:
        report_logger.addFilter(_QUIET_REPORT)
    _QUIET_REPORT.local.loading = True
    try:
        yield
    finally:
        _QUIET_REPORT.local.loading = False


def check_loading(info: dict, name: str, multimodal: bool = False) -> None:
    """Refuse weights that do not fit the model: a mismatched or missing tensor would run with random values.

    For a multimodal checkpoint's text model, a missing tensor means the checkpoint stores the text model in a
    layout of its own that only its whole wrapper converts (fused experts, a native format's names)."""
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched:
        key, stored, expected = mismatched[0]
        more = msg("model_errors.and_more", n=len(mismatched) - 1) if len(mismatched) > 1 else ""
        raise ModelUnavailableError(
            msg(
                "model_errors.mismatched",
                name=name,
                key=key,
                stored=tuple(stored),
                expected=tuple(expected),
                more=more,
            )
        )
    # a base model's pooler (BERT-style) is never read by attnviz: a masked-LM checkpoint has none to load
    missing = sorted(key for key in info.get("missing_keys") or () if not key.startswith(UNREAD_MODULES))
    if missing:
        more = msg("model_errors.and_more", n=len(missing) - 1) if len(missing) > 1 else ""
        key = "model_errors.multimodal_layout" if multimodal else "model_errors.missing"
        raise ModelUnavailableError(msg(key, name=name, key=missing[0], more=more))


def report_disk(model: torch.nn.Module, name: str, report: Progress) -> None:
    """Say through ``report`` (its own line, message key ``placement.on_disk``) how much of the model a device map
    left on disk, read back for every pass; nothing when none of it is there."""
    note = disk_note(model, name)
    if note is not None:
        report(1.0, note)


def _stacks(config) -> list:
    """An encoder-decoder's configs to check: its ``encoder`` and ``decoder`` sections where it has them as configs
    of their own (T5Gemma), else the config itself."""
    from attnviz.models.hf.seq2seq import stack_config

    return [stack_config(config, "encoder"), stack_config(config, "decoder")]


def _load_seq2seq(where, name: str, config, device: str, placement: Placement, safetensors, report) -> HFSource:
    """An encoder-decoder, on its own eager attention (:mod:`attnviz.models.hf.seq2seq`)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from attnviz.models.hf.seq2seq import seq2seq_source

    loader = _model_class(AutoModelForSeq2SeqLM, config)
    dtype = chosen_dtype(placement, device, config, where)
    with _quiet_load_report():
        model, info = loader.from_pretrained(
            where,
            attn_implementation="eager",
            **load_arguments(placement, device, dtype),
            trust_remote_code=False,
            use_safetensors=safetensors,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
    check_loading(info, name)
    tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=False)
    check_tokenizer(tokenizer, model, name)
    model.eval().requires_grad_(False)
    device = main_device(model, device)
    try:
        source = seq2seq_source(model, tokenizer, name, where, device)
    except ModelUnavailableError:
        raise
    except Exception as err:
        if is_out_of_memory(err):
            raise one_line(err, device) from err
        raise ModelUnavailableError(
            msg("model_errors.could_not_run", name=name, error=first_line(err), n=PROBE_TOKENS)
        ) from err
    report(1.0, msg("model_errors.loaded", name=name))
    report_disk(model, name, report)
    return source


def load_hf_source(
    source: str,
    device: str = "cpu",
    allow_pickle: bool = False,
    progress: Progress | None = None,
    placement: Placement | None = None,
) -> HFSource:
    """Load a bundled model ("minilm", "smollm2"), a local folder or a hub id, read-only, through attnviz's attention,
    in ``placement``'s dtype, straight onto ``device`` or spread by its device map (:mod:`.placement`).

    Everything a user's folder can get wrong is refused here, in one line (ModelUnavailableError): an unusable
    config, no tokenizer, weights whose shapes do not fit; running out of memory is one line too (OutOfMemoryError).
    """
    placement = placement or Placement()
    with memory_errors(device):
        return _load(source, device, allow_pickle, progress, placement)


HUB_PROBE_TIMEOUT_S = 3.0  # one try: transformers' own downloads retry for most of a minute without a network


def hub_unreachable(endpoint: str, timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why ``endpoint`` gave no answer within ``timeout`` seconds (one line), None when it answered at all."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # an answer, whatever its status: the hub is there
    except (OSError, ValueError) as err:
        return first_line(getattr(err, "reason", None) or err) or type(err).__name__
    return None


def check_hub_id(repo_id: str, name: str) -> None:
    """For a hub id that is not in the local Hugging Face cache: ModelUnavailableError at once, in one line, when
    the hub is off (``HF_HUB_OFFLINE``) or does not answer one short probe, before transformers' downloads would
    retry it for most of a minute. An id the cache holds, or one the hub answers for, goes on to be loaded."""
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return
    except Exception:  # not a valid hub id: transformers says so, at once and in one line, as it always has
        return
    cache = shown_path(constants.HF_HUB_CACHE)
    if constants.HF_HUB_OFFLINE:
        raise ModelUnavailableError(msg("model_hub.offline", name=name, cache=cache))
    reason = hub_unreachable(constants.ENDPOINT)
    if reason is not None:
        raise ModelUnavailableError(
            msg(
                "model_hub.unreachable",
                name=name,
                cache=cache,
                endpoint=constants.ENDPOINT,
                seconds=HUB_PROBE_TIMEOUT_S,
                reason=reason,
            )
        )


def _load(source: str, device: str, allow_pickle: bool, progress: Progress | None, placement: Placement) -> HFSource:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    register()
    where, name, safetensors = resolve_source(source, progress, allow_pickle, before_weights=_text_model_first)
    if where == source and not Path(where).is_dir():  # a hub id (a folder or a bundled model resolves to a path)
        check_hub_id(where, repr(printable(source)))
    report = progress or (lambda fraction, message: None)
    report(0.9, msg("model_errors.loading", name=name))
    try:
        outer = AutoConfig.from_pretrained(where, trust_remote_code=False)
        config = text_config(outer, name)  # a multimodal checkpoint's text model, else the config itself
        parts = other_parts(outer)
        if getattr(config, "is_encoder_decoder", False) and not parts:
            for stack in _stacks(config):  # T5Gemma keeps each stack's sizes in a config of its own
                check_config(stack, name)
            check_tokenizer_files(where, name)
            return _load_seq2seq(where, name, config, device, placement, safetensors, report)
        check_config(config, name)
        check_tokenizer_files(where, name)
        keys = checkpoint_keys(where) if parts else None
        if parts:  # the text model alone: its own class, its weights found under the checkpoint's prefixes
            lm_class = text_class(AutoModelForCausalLM, config, outer)
            with_lm_head = lm_class is not None and has_head(keys, config)
            loader = lm_class if with_lm_head else text_class(AutoModel, config, outer)
            if loader is None:  # a text config that only its wrapper builds (Kosmos-2's)
                raise ModelUnavailableError(
                    msg("model_errors.multimodal_no_class", name=name, text_type=repr(config.model_type))
                )
            expected = expected_keys(loader, config)
            base = _base_prefix(loader, expected)
            found = key_mapping(keys, expected, base) if keys is not None else usual_mapping(base)
            text_only = {"config": config, "key_mapping": found}
        else:
            with_lm_head = _has_lm_head(config, where) and type(config) in AutoModelForCausalLM._model_mapping
            auto_class = AutoModelForCausalLM if with_lm_head else AutoModel
            loader = _model_class(auto_class, config)
            text_only = {}
        # from the class, before any weight is read: loading an architecture that ignores the AttentionInterface
        # with attnviz's name fails inside its own code (Falcon: a KeyError)
        route = "interface" if getattr(loader, "_supports_attention_backend", False) else "eager"
        dtype = chosen_dtype(placement, device, config, where)
        with _quiet_load_report():
            model, info = (loader if parts else auto_class).from_pretrained(
                where,
                attn_implementation=IMPLEMENTATION if route == "interface" else "eager",
                **load_arguments(placement, device, dtype),
                **text_only,
                trust_remote_code=False,
                use_safetensors=safetensors,
                ignore_mismatched_sizes=True,  # so that the mismatch is ours to report, in one line
                output_loading_info=True,
            )
        check_loading(info, name, multimodal=bool(parts))
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=False)
        check_tokenizer(tokenizer, model, name)
    except ModelUnavailableError:
        raise
    except Exception as err:  # corrupt files, unknown architectures, missing deps: all user-fixable
        if is_out_of_memory(err):
            raise one_line(err, device) from err
        raise ModelUnavailableError(
            msg("model_errors.could_not_load", source=repr(source), error=first_line(err))
        ) from err
    model.eval().requires_grad_(False)
    device = main_device(model, device)
    modules = attention_modules(model)
    try:
        if route == "interface" and not probe_interface(model, int(config.vocab_size)):
            model.set_attn_implementation("eager")  # it hands attention what only its own code honours
            route = "eager"
        if route == "eager":
            causal = probe_eager(model, int(config.vocab_size), name)
    except ModelUnavailableError:
        raise
    except Exception as err:  # the model's own code failed on a few tokens: nothing on a page would run
        if is_out_of_memory(err):
            raise one_line(err, device) from err
        raise ModelUnavailableError(
            msg("model_errors.could_not_run", name=name, error=first_line(err), n=PROBE_TOKENS)
        ) from err
    if route == "interface":
        causal = any(m.is_causal for m in modules) if modules else bool(getattr(config, "is_decoder", False))
    report(1.0, msg("model_errors.loaded", name=name))
    report_disk(model, name, report)
    return HFSource(
        name=name,
        source=source,
        model=model,
        tokenizer=tokenizer,
        device=device,
        causal=causal,
        can_generate=with_lm_head and causal,
        route=route,
        text_model_of=(str(getattr(outer, "model_type", "?")), tuple(parts)) if parts else None,
    )
