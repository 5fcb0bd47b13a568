"""The zoo: a tiny random model of every text architecture transformers has, enumerated from its auto mappings.

Each model is built once (2 layers, 4 heads, hidden 32, MiniLM's 30,522-token
tokenizer) into the test cache kept across runs (tests/persistent_cache.py), in
a folder keyed by what the zoo is built from (:func:`zoo_inputs`: transformers'
and torch's versions, this file, the text-model code it reads, the tokenizer's
files), by a child process (``python -m tests.integration.zoo.build TYPE ...``):
a default config of some architectures allocates gigabytes or loops in C code,
which a child can be stopped for. A type that cannot be built gets a one-line reason
instead of a folder, and the reason says whose limit it is (see :data:`REASONS`).

The sizes come from one generic rule (:func:`tiny_kwargs`), not a list per
architecture: every size field of the default config is matched by name.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from attnviz.core.files import file_lock
from attnviz.models.hf.text_model import other_parts
from tests import persistent_cache

KINDS = ("causal", "masked", "seq2seq", "multimodal")
# what the zoo is built from besides the packages: this file and the code it reads to split a multimodal config
BUILDER = (Path(__file__).resolve(), persistent_cache.REPO / "attnviz" / "models" / "hf" / "text_model.py")
TOKENIZER_FILES = ("tokenizer", "vocab", "special_tokens")  # MiniLM's files copied beside each model
BUILD_TIMEOUT_S = 120  # per child, for every type it still has to build; a busy machine, several times quiet
MEMORY_LIMIT = 3 * 2**30  # address space of a building child: a config that needs more is not tiny

# Why a type has no zoo model, by the first words of its reason: what transformers itself cannot run from text
REASONS = {
    "seq2seq does not build": "a seq2seq model whose tiny config by the zoo's rule does not run (sizes by hand)",
    "seq2seq without a config": "in the seq2seq mapping, but its config is a decoder's: no source to read",
    "multimodal": "a multimodal model whose whole tiny wrapper does not build; attnviz loads its text model",
    "no text input": "its forward takes no input_ids (audio, vision or other modalities)",
    "does not build": "the zoo's generic tiny sizes do not give a config of it that runs (it needs sizes by hand)",
    "too slow": "building it alone took over a building child's whole time limit",
    "round trip": "transformers does not load back what it saved of it (its own save and load lose weights)",
}

# what attnviz itself refuses of a model transformers builds, by message key: a model with no token-to-token
# attention to show, or a multimodal checkpoint whose text model attnviz cannot take out of it alone
ATTNVIZ_REFUSALS = {
    "model_errors.no_attention": "no attention heads: a state-space, recurrent or Fourier-mixing model",
    "model_errors.no_attentions": "its eager attention returns no weights (sparse or hashed attention)",
    "model_errors.not_square": "its weights are not (T, T) per head: local windows or pooled lengths",
    "model_errors.seq2seq_no_weights": "an encoder-decoder whose eager attention returns no weights of one kind",
    "model_errors.not_weights": "its eager attention returns scores, not weights (a transformers quirk)",
    "model_errors.multimodal_prefix_lm": "a multimodal prefix-LM: its wrapper's mask reads the prompt both ways",
    "model_errors.multimodal_no_class": "a multimodal model whose text model has no class of its own in transformers",
    "model_errors.multimodal_layout": "a multimodal model whose checkpoint stores its text model in a layout only "
    "its whole wrapper converts (fused experts, a native format's names)",
}
STANDARD = {  # the config's standard names (through its attribute_map) and their tiny sizes
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "vocab_size": 30528,  # MiniLM's 30,522 tokens, and room for a pad token a tokenizer class adds
    "max_position_embeddings": 512,
}
RULES = [  # a size field by its name, and the tiny size it gets when larger
    (r"kv_heads|key_value_heads|n_head_kv|num_kv", 2),
    (r"(^|_)(num_)?(hidden_)?layers$|^n_layers?$|num_.*layers|_layers$", 2),
    (r"heads$|^n_head$", 4),
    (r"experts_per_tok|top_k|topk|moe_k$", 2),
    (r"n_routed_experts|num_experts|num_local_experts|n_experts|moe_num_experts", 4),
    (r"intermediate|ffn|d_ff|^n_inner$|mlp_dim", 64),
    (r"lora_rank", 16),
    (r"vocab_size", 30528),
    (r"max_position_embeddings|n_positions|max_seq", 512),
    (r"rotary_dim|rope_dim|rope_head_dim", 4),
    (r"head_dim|nope_head_dim|v_head_dim", 8),
    (r"hidden_size|^d_model$|^n_embd$|embed_dim|^dim$|hidden_dim|embedding_size|model_dim|^width$", 32),
    (r"_token_id$", 3),
]


@functools.cache
def zoo_inputs() -> dict:
    """What the zoo is built from: its key in the test cache (once per process: nothing of it changes mid-run)."""
    from attnviz.models.hf.bundled import minilm_dir

    tokenizer = [f for f in sorted(minilm_dir().iterdir()) if f.name.startswith(TOKENIZER_FILES)]
    return {
        **persistent_cache.versions("transformers", "torch", "safetensors"),
        **persistent_cache.sources(*BUILDER, *tokenizer),
    }


def zoo_dir(inputs: dict | None = None) -> Path:
    """The zoo's folder in the test cache, for ``inputs`` (default: :func:`zoo_inputs`, this checkout's)."""
    return persistent_cache.entry_dir("zoo", inputs or zoo_inputs())


def architectures() -> dict[str, str]:
    """Every model type of transformers' causal-LM, masked-LM, seq2seq and multimodal-LM mappings, with its kind
    (first wins: a multimodal type of the causal-LM mapping is "causal")."""
    from transformers.models.auto import modeling_auto as auto

    kinds: dict[str, str] = {}
    for kind, mapping in zip(
        KINDS,
        (
            auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
            auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
            auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
            auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES,
        ),
        strict=True,
    ):
        for model_type in mapping:
            kinds.setdefault(model_type, kind)
    return kinds


def shrunk(fields: dict) -> dict:
    """The size fields of a config's ``fields`` that :data:`RULES` make smaller, at their tiny sizes."""
    kwargs = {}
    for name, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        for pattern, small in RULES:
            if re.search(pattern, name):
                if value > small:
                    kwargs[name] = small if not name.endswith("_token_id") else min(value, 3)
                break
    return kwargs


def nested_section(fields: dict) -> dict:
    """A nested config section (T5Gemma's ``encoder`` and ``decoder``, and their text configs) made tiny by the same
    rule: its sizes, a head of 8, 2 K/V heads, its ``layer_types`` cut to its layers."""
    fields = {k: nested_section(v) if isinstance(v, dict) and "hidden_size" in v else v for k, v in fields.items()}
    small = shrunk(fields)
    small.update({name: size for name, size in (("head_dim", 8), ("num_key_value_heads", 2)) if fields.get(name)})
    n_layer = small.get("num_hidden_layers", fields.get("num_hidden_layers"))
    if isinstance(fields.get("layer_types"), list) and n_layer:
        small["layer_types"] = fields["layer_types"][:n_layer]
    return {**fields, **small}


def tiny_kwargs(
    model_type: str,
    n_kv_head: int | None = 2,
    every_field: bool = True,
    n_layer: int = 2,
    derived_head_dim: bool = False,
) -> dict:
    """Config keyword arguments that make ``model_type`` tiny, read off its default config's field names."""
    from transformers import AutoConfig

    base = AutoConfig.for_model(model_type)
    alias = dict(getattr(base, "attribute_map", {}) or {})
    fields = base.to_dict()
    kwargs: dict = shrunk(fields) if every_field else {}
    for name, small in STANDARD.items():
        real = alias.get(name, name)
        if real in fields:
            kwargs[real] = small
    if n_layer != 2:  # a hybrid whose first attention layer comes later than the second
        kwargs[alias.get("num_hidden_layers", "num_hidden_layers")] = n_layer
        kwargs = {k: n_layer if v == 2 and re.search(RULES[1][0], k) else v for k, v in kwargs.items()}
    for name in ("num_key_value_heads", "head_dim"):
        real = alias.get(name, name)
        if real in fields and fields[real] is not None:
            kwargs[real] = {"num_key_value_heads": n_kv_head or 4, "head_dim": 8}[name]
    if derived_head_dim:  # MLA: head_dim follows the rope and latent sizes; one expert group for few experts
        kwargs.pop(alias.get("head_dim", "head_dim"), None)
        kwargs.update({name: 1 for name in ("n_group", "topk_group") if name in fields})
    for name, value in fields.items():  # special token ids must fall inside the tiny vocabulary
        if name.endswith("_token_id") and isinstance(value, int) and not isinstance(value, bool) and value >= 30522:
            kwargs[name] = 3
    return kwargs


def _check_runs(model, kind: str) -> None:
    import torch

    ids = torch.arange(10, 17)[None]  # (1, 7)
    with torch.no_grad():
        model(input_ids=ids, output_attentions=True)


def _save(model, folder: Path) -> None:
    """The model and MiniLM's tokenizer files, in ``folder``."""
    from attnviz.models.hf.bundled import minilm_dir

    model.save_pretrained(folder)
    for file in minilm_dir().iterdir():
        if file.name.startswith(TOKENIZER_FILES):
            shutil.copy(file, folder / file.name)


def _clear(folder: Path) -> None:
    """Nothing half-built for a loader to find."""
    for file in folder.iterdir():
        if file.name != ".building":
            shutil.rmtree(file) if file.is_dir() else file.unlink()


def text_part(model):
    """A multimodal wrapper's language model (the module its text passes through), and its LM head or None."""
    for owner in (model, getattr(model, "model", None)):
        for name in ("language_model", "text_model", "llm"):
            part = getattr(owner, name, None) if owner is not None else None
            if part is not None:
                inner = getattr(part, "model", None)
                if inner is not None and hasattr(part, "lm_head"):  # a *ForCausalLM kept whole
                    return inner, part.lm_head
                return part, getattr(model, "lm_head", None)
    return model.base_model, getattr(model, "lm_head", None)  # a text class built from the whole config


def wrapper_class(kind: str, config):
    """The auto class a multimodal model is built with: the multimodal-LM mapping's (the wrapper a real checkpoint
    is saved as: Llama 4's causal-LM mapping names its text class), else its kind's."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForMultimodalLM, AutoModelForSeq2SeqLM

    if type(config) in AutoModelForMultimodalLM._model_mapping:
        return AutoModelForMultimodalLM
    return {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM, "seq2seq": AutoModelForSeq2SeqLM}[kind]


MULTIMODAL_LIMIT = 20_000_000  # parameters of a whole tiny wrapper, its other parts included


def build_multimodal(model_type: str, kind: str, default, folder: Path) -> dict:
    """A multimodal model's whole tiny wrapper (every part made tiny by the generic rule), saved as its own class
    saves it, so that attnviz's loader finds the text model among the other parts' weights as in a real
    checkpoint. Its text model must run on token ids alone (that is what attnviz reads)."""
    import torch
    from transformers import AutoConfig

    from attnviz.errors import first_line
    from attnviz.models.hf.text_model import TEXT_SECTIONS

    cls = wrapper_class(kind, default)
    sections = [s for s in (*TEXT_SECTIONS, *other_parts(default)) if getattr(default, s, None) is not None]
    errors = []
    # 8 layers: a hybrid whose first attention layer comes later; mrope: Qwen2-VL-style rotary sections that must sum
    # to half the tiny head (4), where the default's [16, 24, 24] sums to 64
    for n_kv_head, n_layer, mrope in ((2, 2, False), (None, 2, False), (2, 8, False), (2, 2, True)):
        try:
            kwargs = {}
            for section in sections:
                sub = getattr(default, section)
                text = section in TEXT_SECTIONS
                kwargs[section] = tiny_kwargs(sub.model_type, n_kv_head if text else None, True, n_layer if text else 2)
                rope = getattr(sub, "rope_parameters", None)
                if mrope and text and isinstance(rope, dict):
                    kwargs[section]["rope_parameters"] = {**rope, "mrope_section": [1, 1, 2]}
            config = AutoConfig.for_model(model_type, **kwargs)
            torch.manual_seed(0)
            model = cls.from_config(config, attn_implementation="eager").eval()
            if sum(p.numel() for p in model.parameters()) > MULTIMODAL_LIMIT:
                raise ValueError("still over 20 M parameters")
            if not other_parts(model.config):
                raise ValueError(f"{type(model).__name__} keeps the text model alone")
            language, _ = text_part(model)
            with torch.no_grad():
                language(input_ids=torch.arange(10, 17)[None], output_attentions=True)
        except Exception as err:
            errors.append(f"{type(err).__name__}: {first_line(err)}"[:200])
            continue
        _save(model, folder)
        reloaded, _ = text_part(cls.from_pretrained(folder, attn_implementation="eager"))
        saved = language.state_dict()
        if any(not torch.equal(saved[k], v) for k, v in reloaded.state_dict().items() if k in saved):
            _clear(folder)  # the zoo's reference would be a model with other weights (ShieldGemma 2)
            return {"status": "refused", "reason": "round trip"}
        return {"status": "built", "class": type(model).__name__, "multimodal": cls.__name__}
    _clear(folder)
    return {"status": "refused", "reason": "multimodal", "errors": errors}


def build_seq2seq(model_type: str, folder: Path) -> dict:
    """An encoder-decoder's tiny model (its seq2seq-LM class), by the generic sizes, that runs a source and a target
    with every weight returned."""
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, PretrainedConfig

    from attnviz.errors import first_line

    default = AutoConfig.for_model(model_type)
    errors = []
    for n_kv_head, every_field in ((None, True), (2, True), (None, False)):
        try:
            kwargs = tiny_kwargs(model_type, n_kv_head, every_field)
            for section in ("encoder", "decoder"):  # T5Gemma's: a config of its own for each stack
                if isinstance(getattr(default, section, None), PretrainedConfig):
                    kwargs[section] = nested_section(getattr(default, section).to_dict())
            config = AutoConfig.for_model(model_type, **kwargs)
            torch.manual_seed(0)
            model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()
            if sum(p.numel() for p in model.parameters()) > 20_000_000:
                raise ValueError("still over 20 M parameters")
            with torch.no_grad():
                model(input_ids=torch.arange(10, 17)[None], decoder_input_ids=torch.arange(10, 14)[None])
        except Exception as err:
            errors.append(f"{type(err).__name__}: {first_line(err)}"[:200])
            continue
        _save(model, folder)
        return {"status": "built", "class": type(model).__name__, "seq2seq": True}
    _clear(folder)
    return {"status": "refused", "reason": "seq2seq does not build", "errors": errors}


def build_one(model_type: str, kind: str, folder: Path) -> dict:
    """Build and save one tiny model, trying the generic sizes with GQA, then MHA, then the standard fields only."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from attnviz.errors import first_line

    try:
        default = AutoConfig.for_model(model_type)
    except Exception as err:  # its own defaults do not validate (Gemma 4's assistant)
        return {
            "status": "refused",
            "reason": "does not build",
            "errors": [f"{type(err).__name__}: {first_line(err)}"[:200]],
        }
    if other_parts(default):
        return build_multimodal(model_type, kind, default, folder)
    if getattr(default, "is_encoder_decoder", False):
        return build_seq2seq(model_type, folder)
    if kind == "seq2seq":  # a seq2seq model whose config does not say so: nothing for attnviz's loader to read
        return {"status": "refused", "reason": "seq2seq without a config"}
    cls = {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM}.get(kind, AutoModel)  # multimodal: base
    errors = []
    variants = ((2, True, 2, False), (None, True, 2, False), (2, False, 2, False), (None, False, 2, False))
    variants += ((2, True, 8, False), (None, True, 2, True))
    for n_kv_head, every_field, n_layer, derived in variants:
        try:
            kwargs = tiny_kwargs(model_type, n_kv_head, every_field, n_layer, derived)
            config = AutoConfig.for_model(model_type, **kwargs)
            torch.manual_seed(0)
            model = cls.from_config(config, attn_implementation="eager").eval()
            if sum(p.numel() for p in model.parameters()) > 20_000_000:
                raise ValueError("still over 20 M parameters")
            _check_runs(model, kind)
        except Exception as err:
            errors.append(f"{type(err).__name__}: {first_line(err)}"[:200])
            continue
        _save(model, folder)
        return {"status": "built", "class": type(model).__name__}
    _clear(folder)
    text_input = "input_ids" in str(errors) or "pixel_values" in str(errors) or "input_features" in str(errors)
    return {"status": "refused", "reason": "no text input" if text_input else "does not build", "errors": errors}


def _write_status(folder: Path, status: dict) -> None:
    """A type's ``status.json``, its marker: written last (after its model's files) and whole, by a rename."""
    (folder / ".status.json").write_text(json.dumps(status))
    (folder / ".status.json").replace(folder / "status.json")


def _child(root: Path, types: list[str]) -> None:
    """Build each type not built yet under ``root``, writing ``status.json`` in its folder (``.building`` while it
    builds)."""
    import warnings

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    warnings.filterwarnings("ignore")
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    kinds = architectures()
    for model_type in types:
        folder = root / model_type
        if (folder / "status.json").is_file():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / ".building").touch()
        start = time.perf_counter()
        status = build_one(model_type, kinds[model_type], folder)
        status["build_s"] = round(time.perf_counter() - start, 2)
        _write_status(folder, status)
        (folder / ".building").unlink()


def build_zoo(types: list[str] | None = None, root: Path | None = None) -> dict[str, dict]:
    """Every zoo model of ``types`` built (once: kept in :func:`zoo_dir`, or ``root``), and each type's status. A
    new zoo folder prunes the test cache's older ones (the last two used are kept)."""
    kinds = architectures()
    types = list(kinds) if types is None else types
    root = root or zoo_dir()
    new = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    persistent_cache.mark_used(root)
    if new:
        persistent_cache.prune(root.parent)
    with file_lock(root / ".lock"):  # pytest-xdist workers share the cache: one builds, the others wait
        _build_missing(types, root)
    return {t: json.loads((root / t / "status.json").read_text()) for t in types}


def _last_line(stderr: bytes) -> str:
    """The last non-empty line a child wrote on stderr (its exception), or ''."""
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _build_missing(types: list[str], root: Path) -> None:
    """Build, in child processes, every type of ``types`` without a ``status.json`` under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    fresh = set()  # the types a child started with: they had a fresh child's address space to themselves
    while True:
        todo = [t for t in types if not (root / t / "status.json").is_file()]
        if not todo:
            break
        fresh.add(todo[0])
        try:
            child = subprocess.run(
                [sys.executable, "-m", "tests.integration.zoo.build", "--into", str(root), *todo],
                env=env,
                timeout=BUILD_TIMEOUT_S,
                capture_output=True,
                check=False,
            )
            died = f"the building child died on it (exit {child.returncode}): {_last_line(child.stderr)}"[:200]
        except subprocess.TimeoutExpired:
            died = None
        for model_type in todo:  # the type it was on when it died or ran out of time
            folder = root / model_type
            if (folder / ".building").exists():
                _clear(folder)  # nothing half-saved for a loader to find
                if died is not None:
                    status = {"status": "refused", "reason": "does not build", "errors": [died]}
                elif model_type == todo[0]:  # it had the child's whole time to itself
                    status = {"status": "refused", "reason": "too slow"}
                else:  # the time ran out on the types before it: the next child starts with it
                    status = None
                if status is not None:
                    _write_status(folder, status)
                (folder / ".building").unlink()
                break
        else:
            if any(not (root / t / "status.json").is_file() for t in todo):
                raise RuntimeError(f"the zoo builder stopped before {todo[0]} without a reason")
    _retry_alone([t for t in types if t not in fresh], root, env)


def _out_of_space(status: dict) -> bool:
    """A refusal for want of address space: a child's limit is shared by every type it built before this one, so
    the same type can fit in a fresh child (issue 36: Llama 4 was refused once, in a long child, and built alone)."""
    errors = " ".join(status.get("errors", []))
    return status["status"] == "refused" and any(
        s in errors for s in ("MemoryError", "alloc", "Cannot all", "mmap", "out of memory")
    )


def _retry_alone(types: list[str], root: Path, env: dict[str, str]) -> None:
    """Build again, each in a child of its own, the types of ``types`` refused for want of address space (the caller
    passes only types that were not the first of their child); the fresh child's verdict stands (a type that needs
    more than the limit alone is not tiny)."""
    for model_type in types:
        status_file = root / model_type / "status.json"
        status = json.loads(status_file.read_text())
        if not _out_of_space(status) or status.get("retried"):
            continue
        status_file.unlink()
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [sys.executable, "-m", "tests.integration.zoo.build", "--into", str(root), model_type],
                env=env,
                timeout=BUILD_TIMEOUT_S,
                capture_output=True,
                check=False,
            )
        retried = json.loads(status_file.read_text()) if status_file.is_file() else status
        if retried["status"] != "built":  # nothing half-saved from the retry for a loader to find
            _clear(root / model_type)
            (root / model_type / ".building").unlink(missing_ok=True)
        _write_status(root / model_type, {**retried, "retried": True})


DOCS_TABLE = Path(__file__).resolve().parents[3] / "docs" / "models.md"
EXACT_ROUTES = ("interface", "eager", "seq2seq")  # a type on one of these is exact by the zoo's check
REPORT_TEXT, REPORT_TARGET = "the cat sat on the mat because it was warm", "die Katze sass"


def committed_table(path: Path = DOCS_TABLE) -> dict[str, tuple[str, str]]:
    """docs/models.md's generated table (:func:`report`): (route, limits) per architecture."""
    rows = re.findall(r"^\| `([^`]+)` \| ([a-z0-9 ]+) \| (.*) \|$", path.read_text(), re.MULTILINE)
    return {model_type: (route, limits) for model_type, route, limits in rows}


def refused_row(status: dict, key: str | None = None, message: str = "") -> tuple[str, str]:
    """The table's (route, limits) of a type the zoo did not build, or (``key``: its message key) attnviz refused."""
    if status["status"] != "built":
        return "refused", REASONS[status["reason"]]
    reason = ATTNVIZ_REFUSALS.get(key, message)
    return "refused by attnviz", f"an encoder-decoder: {reason}" if status.get("seq2seq") else reason


def built_row(source, record, pair=None) -> tuple[str, str]:
    """The table's (route, limits) of a type attnviz reads: ``record`` a run of one text, ``pair`` (an
    encoder-decoder's) a run of a source and a target."""
    limits = []
    if pair is not None:
        shapes = ", ".join(
            f"{kind} {pair.part(kind).n_layer}x{pair.part(kind).n_head}" for kind in ("encoder", "decoder", "cross")
        )
        limits.append(f"encoder-decoder ({shapes}); full weights: at most ~{source.pair_max_tokens():,} tokens each")
        return "seq2seq", "; ".join(limits)
    if source.text_model_of is not None:
        limits.append(f"the text model ({source.config.model_type}) of a multimodal checkpoint")
    if source.route == "eager":
        fit = source.eager_max_tokens()
        limits.append(f"full weights: at most ~{fit:,} tokens; no q/k (no logit parts, Scaling, Mask lab, parity)")
    elif not source.supports_parity:
        limits.append("no step-by-step parity")
    if record.has_sinks:
        limits.append("learned sinks")
    if record.n_layer != source.n_layer:
        limits.append(f"hybrid: {record.n_layer} of {source.n_layer} layers attend")
    if not source.causal:
        limits.append("encoder")
    return source.route, "; ".join(limits) or "—"


def report() -> str:
    """docs/models.md's table: every architecture, the route attnviz takes and what it cannot do (or why not)."""
    import warnings

    from transformers.utils import logging as hf_logging

    from attnviz.errors import ModelUnavailableError
    from attnviz.models.hf.loading import load_hf_source

    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    statuses, rows = build_zoo(), []
    for model_type, status in sorted(statuses.items()):
        if status["status"] != "built":
            rows.append((model_type, *refused_row(status)))
            continue
        try:
            source = load_hf_source(str(zoo_dir() / model_type))
            record = source.run(REPORT_TEXT, 12)
        except ModelUnavailableError as err:
            rows.append((model_type, *refused_row(status, err.args[0].key, str(err))))
            continue
        pair = source.run_pair(REPORT_TEXT, REPORT_TARGET, 12) if len(source.description.stacks) > 1 else None
        rows.append((model_type, *built_row(source, record, pair)))
    lines = ["| architecture | route | limits |", "|---|---|---|"]
    lines += [f"| `{t}` | {route} | {limits} |" for t, route, limits in rows]
    counts: dict[str, int] = {}
    for _, route, _ in rows:
        counts[route] = counts.get(route, 0) + 1
    return "\n".join([*lines, "", ", ".join(f"{route}: {n}" for route, n in sorted(counts.items()))])


if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:
        print(report())
    elif sys.argv[1:2] == ["--into"]:  # a building child (build_zoo's)
        _child(Path(sys.argv[2]), sys.argv[3:])
    else:
        _child(zoo_dir(), sys.argv[1:])
