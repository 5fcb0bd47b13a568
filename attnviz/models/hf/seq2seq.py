"""An encoder-decoder (T5, BART, Marian, mBART, Pegasus, M2M100, …) as an attention source with two stacks.

The encoder reads a source text; each decoder layer attends within the target, causally, then from the target
over the source (cross-attention). The model runs its own eager attention with ``output_attentions=True``, and
the record is built from the weights it returns (``encoder_attentions``, ``decoder_attentions``,
``cross_attentions``): T5's relative position bias, BART's scaling and every family's masks are the model's own,
so the record is exact by construction; tests hold it against an independent recomputation of the layers. Every
weight is held (O(S² + T² + T·S) per head), so a run is bounded before it starts (:func:`pair_bytes`).

The source is the encoder, as an :class:`~attnviz.models.hf.source.HFSource` of its own: every view that reads one
text (Tokens, Padding, Side by side, Rollout …) reads the encoder on the source text. :meth:`Seq2SeqSource.run_pair`
reads both texts; the target is given (teacher-forced) or the model's own greedy output.

Every pass on both texts is one call, :meth:`Seq2SeqSource.run_pair_hooked`, with hook functions at its points:
``attn.z`` at the heads of the kind the caller names (``kind="encoder"``, ``"decoder"`` or ``"cross"``), each
kind's weights (``attn.weights``: the capture, the padding check) and the ``logits``. Greedy generation, the
KV prefill, the weights check (:mod:`attnviz.models.hf.seq2seq_checks`) and the Ablation page's view
(:mod:`attnviz.models.hf.target_view`) are calls of it.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnviz import settings
from attnviz.core.capture import capture_weights, pool_bin
from attnviz.core.capture.cross import capture_cross
from attnviz.core.masks import KeyRanges
from attnviz.core.progress import Progress, or_none
from attnviz.core.token_display import display_tokens
from attnviz.core.tokenizer import Token
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Text, msg
from attnviz.models.hf import points, seq2seq_checks
from attnviz.models.hf.eager import eager_keys
from attnviz.models.hf.points import HookMap
from attnviz.models.hf.projections import OutputProjection
from attnviz.models.hf.source import HFSource, attention_modules
from attnviz.models.hf.target_view import TargetView
from attnviz.models.record import KINDS, AttentionRecord, EncoderDecoderRecord
from attnviz.models.source import (
    Capability,
    Encoding,
    ModelDescription,
    PassResult,
    Stack,
    running,
)
from attnviz.models.statistics import TextStatistics, pair_statistics

MAX_GENERATE = settings.MAX_TARGET_GENERATED
CROSS_MODULE = re.compile(r"encoder_attn|encdecattention|cross|src_attn", re.IGNORECASE)  # a decoder's cross-attention
OUT_NAMES = ("out_proj", "o", "o_proj", "out", "dense", "output")  # an attention module's output projection
# where the model's output holds each kind's weights, as its own eager attention returns them
ATTENTIONS = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}


def stack_config(config, stack: str):
    """The config holding ``stack``'s sizes ("encoder" or "decoder"): its section where the model keeps one per stack
    (T5Gemma; T5Gemma 2's encoder keeps its text model's in a ``text_config``), else the config itself."""
    section = getattr(config, stack, None)
    if section is None or not hasattr(section, "to_dict"):
        return config
    return getattr(section, "text_config", None) or section


def pair_bytes(shapes: dict[str, tuple[int, int]], n_source: int, n_target: int) -> int:
    """What one run holds: every weight of every kind, float32. ``shapes``: {kind: (n_layer, n_head)}."""
    sides = {"encoder": n_source * n_source, "decoder": n_target * n_target, "cross": n_target * n_source}
    return sum(n_layer * n_head * sides[kind] * 4 for kind, (n_layer, n_head) in shapes.items())


def pair_max_tokens(shapes: dict[str, tuple[int, int]]) -> int:
    """The longest source (and target) of equal length that fits the bound (:func:`attnviz.settings.cache_bytes`)."""
    per_token2 = pair_bytes(shapes, 1, 1)
    return max(1, math.isqrt(settings.cache_bytes() // max(1, per_token2)))


@dataclass(eq=False)
class Seq2SeqSource(HFSource):
    """An encoder-decoder: ``model`` is its encoder (what one-text views read), ``whole`` the model."""

    whole: torch.nn.Module | None = None
    shapes: tuple[tuple[str, int, int], ...] = ()  # (kind, n_layer, n_head) of each kind, read from a probe pass

    can_generate = False  # the Generation page's decoder-only steps; an encoder-decoder generates in run_pair

    @property
    def kind_shapes(self) -> dict[str, tuple[int, int]]:
        return {kind: (n_layer, n_head) for kind, n_layer, n_head in self.shapes}

    @property
    def config(self):
        return self.whole.config

    @functools.cached_property
    def description(self) -> ModelDescription:
        """Two stacks: the encoder's self-attention layers, the decoder's causal self- and cross-attention."""
        (n_enc, h_enc), (n_dec, h_dec) = self.kind_shapes["encoder"], self.kind_shapes["decoder"]
        _, n_kv_head, head_dim = self.decoder_kv_shape
        stacks = (
            Stack("encoder", ("self",), n_enc, h_enc, h_enc, self.head_dim, causal=False),
            Stack("decoder", ("self", "cross"), n_dec, h_dec, n_kv_head, head_dim, causal=True),
        )
        return ModelDescription(stacks, d_model=self.d_model, max_positions=self.max_positions)

    @functools.cached_property
    def capabilities(self) -> frozenset[Capability]:
        """Read from the pair pass's points (:attr:`pair_points`): a target, read with every kind's weights; heads
        of each kind ablated on it where ``attn.z`` is served (every output projection found)."""
        ablate = {Capability.ABLATE} if "attn.z" in self.pair_points else set()
        return frozenset({Capability.TARGET, *ablate})

    @property
    def n_layer(self) -> int:
        return self.kind_shapes["encoder"][0]

    @property
    def n_head(self) -> int:
        return self.kind_shapes["encoder"][1]

    @property
    def n_kv_head(self) -> int:
        return self.n_head

    @property
    def d_model(self) -> int:
        encoder = stack_config(self.config, "encoder")
        return int(getattr(encoder, "d_model", None) or encoder.hidden_size)

    @property
    def head_dim(self) -> int:
        encoder = stack_config(self.config, "encoder")
        return int(getattr(encoder, "d_kv", None) or getattr(encoder, "head_dim", None) or 0) or (
            self.d_model // self.n_head
        )

    @property
    def max_positions(self) -> int:
        encoder = stack_config(self.config, "encoder")
        for name in ("max_position_embeddings", "n_positions", "max_source_positions"):
            value = getattr(encoder, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return settings.MAX_TOKENS.high  # relative positions (T5): no limit of the model's own

    @property
    def ablation_modes(self) -> tuple[str, ...]:
        return ()

    @property
    def route_note(self) -> Text:
        return msg("sources.seq2seq_note", name=self.name, tokens=self.pair_max_tokens())

    @property
    def implementation(self) -> str:
        return f"transformers {type(self.whole).__name__}, its own eager attention (output_attentions=True)"

    def eager_bytes(self, n_tokens: int, batch: int = 1) -> int:
        return batch * pair_bytes({"encoder": self.kind_shapes["encoder"]}, n_tokens, 0)

    def pair_nbytes(self, n_source: int, n_target: int) -> int:
        """What a run on a source of ``n_source`` and a target of ``n_target`` tokens holds (:func:`pair_bytes`)."""
        return pair_bytes(self.kind_shapes, n_source, n_target)

    def pair_peak_nbytes(self, n_source: int, n_target: int) -> int:
        """What a run may add to the process at its peak: ``ADMISSION_RECORD_FACTOR`` x what it holds
        (:meth:`pair_nbytes`), one layer's scores and weights at once while the model computes them (the widest
        kind's), a block's activations (four of tokens x its feed-forward width) and the target's logits with their
        log-softmax (``benchmarks/seq2seq.py`` measures it)."""
        sides = {"encoder": n_source * n_source, "decoder": n_target * n_target, "cross": n_target * n_source}
        layer = max(n_head * sides[kind] for kind, (_, n_head) in self.kind_shapes.items())
        vocab = int(
            getattr(self.config, "vocab_size", 0) or getattr(stack_config(self.config, "decoder"), "vocab_size", 0) or 0
        )
        encoder = stack_config(self.config, "encoder")
        width = max(
            self.d_model,
            *(int(getattr(encoder, name, 0) or 0) for name in ("d_ff", "encoder_ffn_dim", "intermediate_size")),
        )
        held = settings.ADMISSION_RECORD_FACTOR * self.pair_nbytes(n_source, n_target)
        return math.ceil(held + 2 * layer * 4 + 4 * (n_source + n_target) * width * 4 + 2 * n_target * vocab * 4)

    def pair_max_tokens(self) -> int:
        return pair_max_tokens(self.kind_shapes)

    def check_pair(self, n_source: int, n_target: int) -> None:
        """ModelUnavailableError (with the longest texts that fit) when a run would pass the bound."""
        need = pair_bytes(self.kind_shapes, n_source, n_target)
        if need > settings.cache_bytes():
            raise ModelUnavailableError(
                msg(
                    "model_errors.seq2seq_too_long",
                    name=self.name,
                    source=n_source,
                    target=n_target,
                    need_mb=need / 2**20,
                    bound_mb=settings.cache_bytes() / 2**20,
                    fit=self.pair_max_tokens(),
                )
            )

    def encode_target(self, target: str, max_tokens: int) -> Encoding:
        """The target's token ids as the decoder predicts them (the tokenizer's target side, where it has one) and
        their display tokens, cut to ``max_tokens``, its last (end) token kept."""
        tok = self.tokenizer
        fast = bool(getattr(tok, "is_fast", False))
        asked = {"add_special_tokens": True, "return_special_tokens_mask": True, "return_offsets_mapping": fast}
        try:
            enc = tok(text_target=target, **asked)
        except (TypeError, ValueError):
            enc = tok(target, **asked)
        ids, special = list(enc["input_ids"]), list(enc["special_tokens_mask"])
        offsets = [tuple(o) for o in enc["offset_mapping"]] if fast else None
        n_input = len(ids)
        if n_input > max_tokens:
            keep = [*range(max_tokens - 1), n_input - 1] if max_tokens > 1 else [0]
            ids, special = [ids[i] for i in keep], [special[i] for i in keep]
            offsets = [offsets[i] for i in keep] if offsets else None
        return Encoding(ids=ids, tokens=display_tokens(target, ids, offsets, tok, special), n_input=n_input)

    def generated_target(self, ids: list[int]) -> Encoding:
        special = set(getattr(self.tokenizer, "all_special_ids", ()) or ())
        flags = [int(i in special) for i in ids]
        return Encoding(ids=ids, tokens=display_tokens("", ids, None, self.tokenizer, flags), n_input=len(ids))

    @property
    def start_id(self) -> int:
        """The decoder's first input token: the config's ``decoder_start_token_id``, else its pad or BOS."""
        for holder in (getattr(self.whole, "generation_config", None), self.config):
            for name in ("decoder_start_token_id", "pad_token_id", "bos_token_id"):
                value = getattr(holder, name, None) if holder is not None else None
                if isinstance(value, int):
                    return value
        return 0

    def greedy_target(self, source_ids: list[int], n_new: int) -> list[int]:
        """The model's own greedy continuation of the source, ``n_new`` tokens at most (fewer at its end token);
        each source's kept once (a page asks for it several times a run)."""
        if not 1 <= n_new <= MAX_GENERATE:
            raise ValueError(msg("model_errors.generate_range", n=n_new, most=MAX_GENERATE))
        return list(self._greedy(tuple(source_ids), n_new))

    @functools.lru_cache(maxsize=64)  # noqa: B019 (the source lives as long as the process's model cache holds it)
    def _greedy(self, source_ids: tuple[int, ...], n_new: int) -> tuple[int, ...]:
        input_ids = torch.tensor([source_ids], device=self.device)
        out = self.run_pair_hooked(
            input_ids,
            generate=True,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=n_new,
            min_new_tokens=1,
            do_sample=False,
            num_beams=1,
            decoder_start_token_id=self.start_id,
            **self._generation_cache(),
        ).output  # (1, 1 + n): the start token, then what it wrote
        return tuple(out[0, 1:].tolist())

    def _generation_cache(self) -> dict:
        """``generate``'s cache argument: none (its own) unless the decoder has more layers than the config's
        ``num_hidden_layers`` (T5's ``num_decoder_layers`` > ``num_layers``), which transformers sizes its cache by
        (an IndexError at the first extra layer); then caches that grow a layer at a time as the decoder fills them."""
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        n_decoder_layer = self.kind_shapes["decoder"][0]
        if n_decoder_layer <= (getattr(self.config, "num_hidden_layers", None) or n_decoder_layer):
            return {}
        return {"cache": EncoderDecoderCache(DynamicCache(), DynamicCache())}

    def target(self, text: str, target: str | None, max_tokens: int, n_generate: int = 0) -> Encoding:
        """The target the decoder reads on ``text``: ``target`` (teacher-forced), or with ``n_generate`` > 0 the
        model's own greedy output on the source."""
        if n_generate:
            source = self.encode(text, max_tokens)
            return self.generated_target(self.greedy_target(source.ids, n_generate))
        return self.encode_target(target or "", max_tokens)

    @functools.cached_property
    def output_projections_by_kind(self) -> dict[str, list[OutputProjection]] | None:
        """Each kind's attention layers' output projections, in order (a decoder's cross-attention found by its
        module's name: ``encoder_attn``, ``EncDecAttention``, ``crossattention`` …); None where they do not add up
        to the layers the probe pass counted, or a layer has no Linear output projection of n_head x head_dim."""
        found: dict[str, list[OutputProjection]] = {kind: [] for kind in KINDS}
        names = {id(m): name for name, m in self.whole.named_modules()}
        for module in attention_modules(self.whole):
            name = names[id(module)]
            kind = "cross" if CROSS_MODULE.search(name) else ("decoder" if "decoder" in name else "encoder")
            n_head = self.kind_shapes[kind][1]
            out = next(
                (getattr(module, n) for n in OUT_NAMES if isinstance(getattr(module, n, None), torch.nn.Linear)), None
            )
            if out is None or out.in_features % n_head:
                return None
            found[kind].append(OutputProjection(out, module, n_head, out.in_features // n_head))
        if any(len(found[kind]) != n_layer for kind, n_layer, _ in self.shapes):
            return None
        return found

    @functools.cached_property
    def _kind_maps(self) -> dict[str, HookMap]:
        """Each kind's :class:`HookMap` on the whole model (its heads' output projections: ``attn.z`` at
        ``kind=``), found once (none where the projections were not found)."""
        return {
            kind: HookMap(
                model=self.whole,
                interface=False,
                projections=tuple((p.module, p.n_head, p.head_dim) for p in layers),
                base=self.whole,
                logits=True,
            )
            for kind, layers in (self.output_projections_by_kind or {}).items()
        }

    @functools.cached_property
    def _pair_map(self) -> HookMap:
        """The whole model's map for a pass that names no kind: no head is rewritten in it."""
        return HookMap(model=self.whole, interface=False, base=self.whole, logits=True)

    @property
    def pair_points(self) -> frozenset[str]:
        """The hook points of the pair pass (:meth:`run_pair_hooked`): ``attn.z`` where every kind's output
        projections were found, each kind's weights (``attn.weights``) and the decoder's ``logits``."""
        return frozenset({"attn.weights", "logits", *({"attn.z"} if self._kind_maps else ())})

    def run_pair_hooked(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor | None = None,
        hooks: dict | None = None,
        *,
        kind: str | None = None,
        grad: bool = False,
        generate: bool = False,
        **forward,
    ) -> PassResult:
        """The whole model's one pass on the source ``input_ids`` (B, S) and the decoder's input
        ``decoder_input_ids`` (B, T), with ``hooks`` at its points (:func:`attnviz.models.hf.points.run`), under
        ``running``, with a graph when ``grad``. No KV cache is built unless ``use_cache=True`` is asked for;
        ``forward``: the model's other arguments.

        - ``attn.z``: ``fn(layer, z) -> z`` at the input of the output projections of ``kind``'s heads ("encoder",
          "decoder" or "cross", named by the caller), z (B, q_len, n_head, head_dim): cross-attention's q_len is T;
        - ``attn.weights``: ``fn(kind, layer, weights)``, each kind's (B, n_head, q_len, k_len) as the model's own
          eager attention returns them (the pass asks for them), encoder, decoder then cross, once the model ran;
        - ``logits``: ``fn(logits)``, the decoder's (B, T, vocab).

        ``generate``: the pass is the model's own ``generate`` on ``input_ids`` (``forward`` its arguments), its
        output the ids it wrote; ``attn.z`` then acts at every step. ValueError for a point the pass does not
        have, or ``attn.z`` with no kind.
        """
        hooks = dict(hooks or {})
        offered = self.pair_points & {"attn.z"} if generate else self.pair_points
        missing = set(hooks) - offered
        if missing:
            raise ValueError(f"{self.name}'s pass has no hook point {sorted(missing)[0]!r}; it has {sorted(offered)}")
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if "attn.z" in hooks and kind is None:
            raise ValueError(f"attn.z rewrites one kind's heads: name it, kind= one of {KINDS}")
        read_weights = hooks.pop("attn.weights", None)  # the points' run reads the logits (``logits``)
        if generate:
            call = functools.partial(self.whole.generate, input_ids=input_ids, **forward)
        else:
            # no cache unless asked: a whole target at once (FSMT applies its causal mask only without a cache)
            kwargs = {"return_dict": True, "use_cache": False, **forward}
            if read_weights is not None:
                kwargs["output_attentions"] = True
            call = functools.partial(self.whole, input_ids=input_ids, decoder_input_ids=decoder_input_ids, **kwargs)
        hook_map = self._kind_maps.get(kind, self._pair_map)
        with torch.enable_grad() if grad else torch.no_grad(), running(self.name, self.device):
            result = points.run(hook_map, call, hooks, batch=input_ids.shape[0])
            if read_weights is not None:
                for name in KINDS:
                    for layer, weights in enumerate(getattr(result.output, ATTENTIONS[name])):
                        read_weights(name, layer, weights)
        return result

    @property
    def decoder_kv_shape(self) -> tuple[int, int, int]:
        """(decoder layers, K/V heads, head_dim) of the decoder's caches: the config's ``num_key_value_heads``
        where it has one (T5Gemma's GQA), else one per query head."""
        n_layer, n_head = self.kind_shapes["decoder"]
        decoder = stack_config(self.config, "decoder")  # T5Gemma keeps its decoder's sizes in a section of its own
        n_kv_head = getattr(decoder, "num_key_value_heads", None) or n_head
        head_dim = getattr(decoder, "d_kv", None) or getattr(decoder, "head_dim", None) or self.head_dim
        return n_layer, int(n_kv_head), int(head_dim)

    @torch.no_grad()
    def prefill_pair_cache(
        self, text: str, target: str | None, max_tokens: int, batch: int = 1, n_generate: int = 0
    ) -> dict[str, list]:
        """A prefill of ``batch`` copies of the source and the target (:meth:`target`) with the model's own cache:
        {"self": [(keys, values)] per decoder layer, "cross": [...]}, each (batch, n_kv_head, length, head_dim), as
        transformers' ``EncoderDecoderCache`` holds them."""
        from attnviz.models.hf.kv import dynamic_cache_tensors, output_cache

        source = self.encode(text, max_tokens)
        decoder_ids = [self.start_id, *self.target(text, target, max_tokens, n_generate).ids]
        try:
            out = self.run_pair_hooked(
                torch.tensor([source.ids] * batch, device=self.device),
                torch.tensor([decoder_ids] * batch, device=self.device),
                use_cache=True,
            ).output
        except (ValueError, TypeError) as err:  # Switch Transformers' encoder refuses use_cache, naming itself whole
            raise ModelUnavailableError(msg("model_errors.no_cache", name=self.name)) from err
        cache = output_cache(out)
        if cache is None or not hasattr(cache, "self_attention_cache"):
            raise ModelUnavailableError(msg("model_errors.no_cache", name=self.name))
        return {
            "self": dynamic_cache_tensors(cache.self_attention_cache),
            "cross": dynamic_cache_tensors(cache.cross_attention_cache),
        }

    pad_weights = seq2seq_checks.pad_weights  # padding's weight on real queries, by kind: one pass
    weights_check = functools.cached_property(seq2seq_checks.weights_check)  # trained or not: one pass, once per load

    def ablation_view(self, kind: str, target: str | None, n_generate: int = 0) -> TargetView:
        """This model seen from one kind of its heads and one target, as the Ablation page reads a source: its
        layers and heads are the kind's, a text's tokens are the target's (what the loss is measured on)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        return TargetView(self, kind, target, n_generate)

    @torch.no_grad()
    def run_pair(
        self,
        text: str,
        target: str,
        max_tokens: int,
        *,
        n_generate: int = 0,
        progress: Progress | None = None,
    ) -> EncoderDecoderRecord:
        """Every kind of attention on ``text`` (the source) and ``target`` (teacher-forced), or, with
        ``n_generate`` > 0, on the model's own greedy output of at most that many tokens (``target`` unread).

        The decoder reads its start token and the whole target; position i predicts target token i (the last
        position, after the target's end, predicts nothing scored). Both texts are cut to ``max_tokens``.
        """
        source = self.encode(text, max_tokens)
        if not source.ids:
            raise ValueError(msg("kv_measure.no_tokens"))
        with running(self.name, self.device):
            target_enc = (
                self.generated_target(self.greedy_target(source.ids, n_generate))
                if n_generate
                else self.encode_target(target, max_tokens)
            )
            target_ids = target_enc.ids
            if not target_ids:
                raise ValueError(msg("model_errors.empty_target"))
            decoder_ids = [self.start_id, *target_ids]
            self.check_pair(len(source.ids), len(decoder_ids))
            step = or_none(progress)
            step.stage("progress.layer", sum(n for _, n, _ in self.shapes))
            S, T = len(source.ids), len(decoder_ids)
            capture, captured = self._capture_hook(S, T, step)
            logits = []
            self.run_pair_hooked(
                torch.tensor([source.ids], device=self.device),
                torch.tensor([decoder_ids], device=self.device),
                {"attn.weights": capture, "logits": logits.append},
                attention_mask=torch.ones(1, len(source.ids), dtype=torch.long, device=self.device),
            )
        labels = torch.tensor(target_ids)
        losses = F.cross_entropy(logits[0][0, :-1].float().cpu(), labels, reduction="none")  # (T - 1,)
        start = self.tokenizer.convert_ids_to_tokens([self.start_id])[0] or "<start>"
        target_tokens = [Token(start, 0, 0, special=True, raw=start), *target_enc.tokens]
        records = {
            kind: AttentionRecord(
                model_name=self.name,
                tokens=source.tokens if kind == "encoder" else target_tokens,
                layers=layers,
                n_kv_head=self.kind_shapes[kind][1],
                causal=kind == "decoder",
                implementation=self.implementation,
                n_input_tokens=source.n_input if kind == "encoder" else T,
                kind="cross" if kind == "cross" else "self",
                stack="encoder" if kind == "encoder" else "decoder",
                key_tokens=source.tokens if kind == "cross" else None,
            )
            for kind, layers in captured.items()
        }
        return EncoderDecoderRecord(
            **records,
            target_ids=target_ids,
            losses=losses,
            generated=bool(n_generate),
            target_text=self.tokenizer.decode(target_ids, skip_special_tokens=True),
        )

    def run_statistics(self, texts: list[str], max_tokens: int) -> list[TextStatistics]:
        """Each text's per-head statistics, text by text: the text the source, the model writing
        TARGET_GENERATED tokens of target, as ``attnviz heads`` reads an encoder-decoder (each kind's rows)."""
        return [
            pair_statistics(self.run_pair(text, "", max_tokens, n_generate=settings.TARGET_GENERATED)) for text in texts
        ]

    def _capture_hook(self, n_source: int, n_decoder: int, step) -> tuple:
        """The capture of a pair pass on a source of ``n_source`` and a decoder input of ``n_decoder`` tokens: an
        ``attn.weights`` hook that turns each layer's weights (1, n_head, q_len, k_len) into its capture as it is
        read, one ``step`` each, and what it keeps: {kind: [capture per layer]}."""
        b = pool_bin(max(n_source, n_decoder), sum(n_layer * n_head for _, n_layer, n_head in self.shapes))
        keys = {
            "encoder": lambda w: KeyRanges.full(n_source),
            "decoder": lambda w: eager_keys(w, True, 0, n_decoder),
            "cross": None,
        }
        head_dim_scale = 1.0 / math.sqrt(self.head_dim)

        captured: dict[str, list] = {kind: [] for kind in KINDS}

        def capture(kind: str, layer: int, weights: torch.Tensor) -> None:
            w = weights[0].float().cpu()  # (n_head, q_len, k_len)
            if keys[kind] is None:
                captured[kind].append(capture_cross(w, w.shape[-1], bin_size=b, scale=head_dim_scale))
            else:
                captured[kind].append(capture_weights(w, keys[kind](w), bin_size=b, scale=head_dim_scale))
            step.step()

        return capture, captured


def seq2seq_shapes(model: torch.nn.Module, vocab_size: int, name: str, n_probe: int = 8) -> tuple:
    """(kind, n_layer, n_head) of each kind, from a pass of the model's own eager attention on a few tokens.

    ModelUnavailableError, in one line, when a kind returns no weights (its eager code does not) or weights of
    another shape than (1, n_head, queries, keys), or rows that are not weights.
    """
    ids = (torch.arange(n_probe) + min(10, max(0, vocab_size - n_probe))) % max(1, vocab_size)
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(
            input_ids=ids[None].to(device),
            decoder_input_ids=ids[None, : n_probe // 2].to(device),
            output_attentions=True,
            return_dict=True,
        )
    sides = {"encoder": (n_probe, n_probe), "decoder": (n_probe // 2, n_probe // 2), "cross": (n_probe // 2, n_probe)}
    names = ATTENTIONS
    shapes = []
    for kind in KINDS:
        weights = [w for w in (getattr(out, names[kind], None) or ()) if w is not None]
        if not weights:
            raise ModelUnavailableError(msg("model_errors.seq2seq_no_weights", name=name, kind=names[kind]))
        odd = next(
            (
                tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__  # PEGASUS-X: {global, local}
                for w in weights
                if not isinstance(w, torch.Tensor) or w.ndim != 4 or tuple(w.shape[2:]) != sides[kind]
            ),
            None,
        )
        if odd is not None:
            raise ModelUnavailableError(msg("model_errors.not_square", name=name, shape=odd, T=n_probe))
        if float(min(w.float().min() for w in weights)) < -1e-6 or max(
            float((w.float().sum(dim=-1) - 1).abs().max()) for w in weights
        ) > max(1e-4, torch.finfo(weights[0].dtype).eps):
            raise ModelUnavailableError(
                msg("model_errors.not_weights", name=name, most=float(weights[0].sum(-1).max()))
            )
        shapes.append((kind, len(weights), int(weights[0].shape[1])))
    return tuple(shapes)


def seq2seq_source(model: torch.nn.Module, tokenizer, name: str, where: str, device: str) -> Seq2SeqSource:
    """An encoder-decoder ``model`` running its own eager attention, as a source (loaded from ``where``, or "" for
    one lent from memory): its kinds' shapes read by a probe pass (:func:`seq2seq_shapes`)."""
    config = model.config
    vocab = getattr(config, "vocab_size", None) or stack_config(config, "encoder").vocab_size  # EncoderDecoder's
    return Seq2SeqSource(
        name=name,
        source=where,
        model=model.get_encoder(),
        tokenizer=tokenizer,
        device=device,
        causal=False,
        can_generate=False,
        route="eager",
        whole=model,
        shapes=seq2seq_shapes(model, int(vocab), name),
    )
