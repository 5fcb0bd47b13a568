"""A Hugging Face encoder or decoder as an :class:`~attnviz.models.source.AttentionSource`.

The model is loaded with ``attn_implementation="attnviz"`` (see :mod:`attnviz.models.hf.attention`), so its real
layers call attnviz's attention: captured in bounded memory for :meth:`HFSource.run`, torch's fused kernel for
generation, the model's own eager code for the parity reference. It is shared read-only between sessions.

Whether a model is causal is read from what transformers loads, its attention modules' ``is_causal``, not from the
config's ``architectures`` list (which may name a base class such as ``LlamaModel``, or be missing).

Two routes, chosen at load time from the model's class (see :mod:`attnviz.models.hf.loading`):

- ``"interface"``: the architecture calls transformers' ``AttentionInterface``, so the capture sees q, k and v and
  keeps O(T) per head (the default);
- ``"eager"``: it does not (BLOOM, Falcon, DeBERTa-v2, MPNet, ...), so the model runs its own eager attention with
  ``output_attentions=True`` and the record is built from the full weights it returns
  (:func:`attnviz.core.capture.capture_weights`). That is O(T²) per head, so a run is bounded before it starts
  (:meth:`HFSource.eager_bytes`), and what needs q and k (logit parts, Scaling, the Mask lab's tests, parity) is
  not offered. The route's own code lives in :mod:`attnviz.models.hf.eager`.

Every pass is one call of :meth:`HFSource.run_hooked` over the model's hook points, found once
(:mod:`attnviz.models.hf.points`): the capture, the mask override and the reference are its ``attn`` point; the labs'
ablation, patching, attribution and resuming are hook functions at its other points (:mod:`attnviz.models.hf.ablated`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz import settings
from attnviz.core.capture import CaptureSession
from attnviz.core.masks import pad_row
from attnviz.core.progress import Progress, or_none
from attnviz.core.token_display import display_tokens, generated_tokens, markdown_text
from attnviz.core.value_norms import projection_factors
from attnviz.errors import GenerationUnsupportedError, ModelUnavailableError
from attnviz.i18n.message import Text, msg
from attnviz.models.ablation import ABLATION_MODES
from attnviz.models.hf import eager
from attnviz.models.hf.ablated import ablated_outputs, decoder_layers, head_pass, layer_cache
from attnviz.models.hf.ablated import unembedding as head_unembedding
from attnviz.models.hf.attention import IMPLEMENTATION, MaskOverride, ReferenceRun
from attnviz.models.hf.batch_statistics import padded_batch, run_statistics
from attnviz.models.hf.kv import HFDecoder, prefill_kv
from attnviz.models.hf.parity import available_bugs, bug_title, layer_inputs, real_layers, reproduce, supports
from attnviz.models.hf.placement import checkpoint_dtype, placement_runs
from attnviz.models.hf.points import HookMap, last_hidden, run
from attnviz.models.hf.projections import Projections, eager_output_projections, find_output_projections
from attnviz.models.hf.read_outs import find_read_outs
from attnviz.models.hf.rope import rope_frequencies
from attnviz.models.hf.weights import check_weights
from attnviz.models.record import AttentionRecord, BatchRecord, GenerationRecord, ModelOutputs, Parity
from attnviz.models.resume import CachedLayers
from attnviz.models.source import (
    AblatedOutputs,
    Capability,
    Encoding,
    LayerInput,
    ModelDescription,
    PassResult,
    RotaryFrequencies,
    check_layer,
    check_square_mask,
    one_stack,
    perturbed_ids,
    running,
)

ROUTES = ("interface", "eager")


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__.endswith("Attention") and hasattr(m, "is_causal")]


@dataclass(eq=False)
class HFSource:
    """A loaded Hugging Face model, read-only and shared between sessions."""

    name: str
    source: str
    model: torch.nn.Module
    tokenizer: object
    device: str
    causal: bool
    can_generate: bool
    route: str = "interface"
    text_model_of: tuple[str, tuple[str, ...]] | None = None  # a multimodal checkpoint's type and its other parts
    random_weights = False

    @property
    def config(self):
        return self.model.config

    @property
    def dtype(self) -> torch.dtype:
        """What the weights and activations are in: the checkpoint's own, or what the user chose."""
        return next(p.dtype for p in self.model.parameters() if p.is_floating_point())

    stored_dtype = functools.cached_property(checkpoint_dtype)  # the checkpoint's own, from its config file

    @property
    def placement(self) -> tuple[tuple[str, str], ...]:
        """Where a split model's parts went, consecutive layers merged ((part, device), ...); () on one device."""
        return tuple(placement_runs(self.model))

    @property
    def n_layer(self) -> int:
        return self.config.num_hidden_layers

    @property
    def n_head(self) -> int:
        return self.config.num_attention_heads

    @property
    def n_kv_head(self) -> int:
        """Key/value heads: the config's ``num_key_value_heads``, else what the attention modules were built with
        (Falcon's ``num_kv_heads``: 1 under ``multi_query``), else one per query head."""
        value = getattr(self.config, "num_key_value_heads", None)
        if value is None:
            heads = (getattr(m, "num_kv_heads", None) for m in self.model.modules())
            value = next((h for h in heads if isinstance(h, int) and not isinstance(h, bool)), None)
        return value or self.n_head

    @property
    def d_model(self) -> int:
        return self.config.hidden_size

    @property
    def head_dim(self) -> int:
        """The width of a query head: the config's ``head_dim``, else the first attention module's, else d/h."""
        try:
            value = getattr(self.config, "head_dim", None)
        except Exception:  # a per-layer attribute of a heterogeneous config (Gemma 4) has no one value
            value = next((m.head_dim for m in attention_modules(self.model) if hasattr(m, "head_dim")), None)
        return value or self.d_model // self.n_head

    @property
    def max_positions(self) -> int:
        """The longest input the model can read (BERT's learned positions stop at 512).

        RoBERTa-style embeddings count positions from ``padding_idx + 1``, so of
        their 514 position rows only 512 are usable.
        """
        limit = int(getattr(self.config, "max_position_embeddings", None) or settings.MAX_TOKENS.high)
        limit = limit if limit > 0 else settings.MAX_TOKENS.high  # -1: no limit (XLNet's relative positions)
        padding_idx = getattr(getattr(self.model.base_model, "embeddings", None), "padding_idx", None)
        return limit - (padding_idx + 1) if isinstance(padding_idx, int) else limit

    @property
    def supports_parity(self) -> bool:
        return self.route == "interface" and supports(self.config)

    @property
    def keeps_qk(self) -> bool:
        """Whether records keep q and k (logit parts, rescaled softmaxes): only the interface route sees them."""
        return self.route == "interface"

    @property
    def supports_mask_override(self) -> bool:
        """Whether :meth:`states_under_mask` can make every layer attend under a mask the user gave."""
        return self.route == "interface"

    @functools.cached_property
    def output_projections(self) -> Projections:
        """Every attention layer's output projection W_O (attnviz.models.hf.projections): found by data flow on
        a probe pass for the interface route, read from the modules' structure for the eager route."""
        if self.route == "eager":
            return eager_output_projections(
                self.model, self.n_head, self.d_model, getattr(self.config, "vocab_size", None)
            )
        return find_output_projections(self.model, self.n_head, getattr(self.config, "vocab_size", None))

    @functools.cached_property
    def _out_factors(self) -> dict:
        """{attention module: its projection's factors} for the capture's value norms; empty when not found."""
        if self.route != "interface" or not self.output_projections.found:
            return {}
        return {p.attention: projection_factors(p.blocks()) for p in self.output_projections.layers}

    @property
    def has_value_norms(self) -> bool:
        """Whether records keep each key's value norm per head (the interface route, with every W_O found)."""
        return bool(self._out_factors)

    @property
    def ablation_modes(self) -> tuple[str, ...]:
        """Head ablation rewrites the output projection's input: the interface route in attnviz's attention (every
        mode); the eager route by a hook on each projection found (attnviz.models.hf.projections), where "first"
        (which needs each head's values) is not offered."""
        if self.route == "interface" and self.output_projections.found:
            return ABLATION_MODES
        if self.route == "interface":  # something (a gate, a norm) sits between attention and W_O: zero stays exact
            return ("zero",)
        return ("zero", "mean") if self.output_projections.found else ()

    @functools.cached_property
    def description(self) -> ModelDescription:
        """One stack: a decoder or an encoder, of the config's shape."""
        shape = (self.n_layer, self.n_head, self.n_kv_head, self.head_dim, self.causal)
        return one_stack(*shape, d_model=self.d_model, max_positions=self.max_positions)

    @functools.cached_property
    def capabilities(self) -> frozenset[Capability]:
        """What it can do: which hook points it has (:meth:`attnviz.models.hf.points.HookMap.capabilities`)."""
        return self.hook_map.capabilities(self.causal)

    @property
    def load_note(self) -> Text | None:
        """What of the checkpoint was loaded, where it was not all of it (a multimodal checkpoint's text model)."""
        if self.text_model_of is None:
            return None
        outer, parts = self.text_model_of  # shown as Markdown: the config's words are escaped
        return msg(
            "sources.text_model_of",
            text_type=markdown_text(str(getattr(self.config, "model_type", "?"))),
            outer=markdown_text(outer),
            parts=", ".join(markdown_text(part.removesuffix("_config")) for part in parts),
        )

    @property
    def route_note(self) -> Text:
        """Which route ran, and what it cannot do, in one line for the pages."""
        if self.route == "eager":
            return msg("model_errors.route_eager", name=self.name, tokens=self.eager_max_tokens())
        return msg("model_errors.route_interface", name=self.name)

    @property
    def implementation(self) -> str:
        modules = attention_modules(self.model)
        layer = type(modules[0]).__name__ if modules else type(self.model).__name__
        if self.route == "eager":
            return f"transformers {type(self.model).__name__}, its own eager attention (output_attentions=True)"
        return f"transformers {layer} calling attnviz.capture (attn_implementation='{IMPLEMENTATION}')"

    def eager_bytes(self, n_tokens: int, batch: int = 1) -> int:
        """What the eager route holds for ``batch`` sequences of ``n_tokens``: every weight, n_layer·n_head·T²·4 B."""
        return eager.eager_bytes(self.n_layer, self.n_head, n_tokens, batch)

    def eager_max_tokens(self, batch: int = 1) -> int:
        """The longest input the eager route may read within the bound (:func:`attnviz.settings.cache_bytes`)."""
        return eager.eager_max_tokens(self.n_layer, self.n_head, batch)

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> Encoding:
        """Token ids cut to max_tokens (special tokens kept), display tokens, the uncut count.

        ``keep="start"`` keeps the beginning of the text, ``"end"`` its end (a
        generation prompt). The tokenizer is called without truncation: its
        truncation setting is state shared by every session using the model.
        """
        if max_tokens < 1:
            raise ValueError(msg("model_errors.at_least_one", name="max_tokens", value=max_tokens))
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
        return Encoding(ids=ids, tokens=display_tokens(text, ids, offsets, tok, special), n_input=n_input)

    @functools.cached_property
    def _takes_position_ids(self) -> bool:
        """Whether the model's forward takes ``position_ids`` (an encoder-decoder's encoder may not: FSMT's, T5's
        find positions from the padding mask or relative buckets)."""
        parameters = self._forward_parameters
        return "position_ids" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())

    @functools.cached_property
    def _forward_parameters(self) -> dict:
        """The model's forward's parameters, read once: what a pass may pass it."""
        return dict(inspect.signature(self.model.forward).parameters)

    @functools.cached_property
    def hook_map(self) -> HookMap:
        """The modules behind the model's hook points (attnviz.models.hf.points), found once per loaded model: the
        output projections found by data flow, the layer list, the attention modules our layers copy, the LM head."""
        projections = self.output_projections
        found = tuple((p.module, p.n_head, p.head_dim) for p in projections.layers) if projections.found else ()
        layers = self._layers
        head = self.model.get_output_embeddings() if self.can_generate else None
        return HookMap(
            model=self.model,
            interface=self.route == "interface",
            projections=found,
            layers=None if isinstance(layers, str) else tuple(layers),
            attention_in=tuple(real_layers(self)) if self.supports_parity else (),
            lm_head=head if isinstance(head, torch.nn.Module) else None,
            base=getattr(self.model, "base_model", self.model),
            logits=self.can_generate,
        )

    @property
    def hook_points(self) -> frozenset[str]:
        """The points :meth:`run_hooked` serves (:attr:`HookMap.points`): what this source can do."""
        return self.hook_map.points

    @functools.cached_property
    def _takes_use_cache(self) -> bool:
        """Whether the model's forward names ``use_cache`` (a pass then asks for no KV cache)."""
        return "use_cache" in self._forward_parameters

    def run_hooked(
        self,
        input_ids: Tensor,
        hooks: dict | None = None,
        *,
        resume: CachedLayers | None = None,
        start_at_layer: int = 0,
        stop_at_layer: int | None = None,
        grad: bool = False,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        hook_map: HookMap | None = None,
        **forward,
    ) -> PassResult:
        """The model's one pass on ``input_ids`` (B, T) with ``hooks`` at its hook points
        (:func:`attnviz.models.hf.points.run`), under ``running`` (whose error it is), with a graph when ``grad``.
        No KV cache is built unless ``use_cache=True`` is asked for; ``forward``: the model's other arguments;
        ``hook_map``: a map of more points than :attr:`hook_map` (:attr:`read_outs`' ``norm.final``)."""
        kwargs = {"return_dict": True, **forward}
        if "use_cache" not in kwargs and self._takes_use_cache:
            kwargs["use_cache"] = False
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if position_ids is not None and self._takes_position_ids:
            kwargs["position_ids"] = position_ids
        batch = input_ids.shape[0]
        with torch.enable_grad() if grad else torch.no_grad(), running(self.name, self.device):
            return run(
                hook_map or self.hook_map,
                lambda: self.model(input_ids=input_ids, **kwargs),
                hooks,
                resume=resume,
                start_at_layer=start_at_layer,
                stop_at_layer=stop_at_layer,
                batch=batch,
            )

    def _logits_to_keep(self) -> dict:
        return {"logits_to_keep": 1} if self.can_generate else {}

    def _capture(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        position_ids: Tensor | None,
        keep_qk: bool,
        progress: Progress | None = None,
        statistics_only: bool = False,
    ) -> tuple[CaptureSession, Tensor, Tensor | None]:
        """Run and capture a (batch, T) pass -> the session, last hidden (B, T, d_model), next-token logits (B, V).

        ``progress`` gets a stage of n_layer steps, one as each layer is captured (a hybrid's fewer attention layers
        end it early); ``statistics_only``: a statistics pass (:class:`CaptureSession`'s)."""
        batch, T = input_ids.shape
        progress = or_none(progress)
        progress.stage("progress.layer", self.n_layer)
        if self.route == "eager":
            return eager.capture(self, input_ids, attention_mask, position_ids, progress)
        session = CaptureSession(
            batch,
            T,
            self.n_layer * self.n_head,
            keep_qk,
            on_layer=progress.step,
            out_factors=self._out_factors,
            statistics_only=statistics_only,
        )
        result = self.run_hooked(
            input_ids,
            {"attn": session},
            attention_mask=attention_mask,
            position_ids=position_ids,
            **self._logits_to_keep(),
        )
        out, hidden = result.output, [last_hidden(result, self.name)]
        if not session.layers[0] and T:
            raise ModelUnavailableError(msg("model_errors.not_captured", name=self.name))
        logits = out.logits[:, -1].float().cpu() if self.can_generate and T else None
        return session, hidden[-1].float().cpu(), logits

    def _record(
        self, encoding: Encoding, layers, hidden: Tensor, logits: Tensor | None, tokens=None
    ) -> AttentionRecord:
        implementation = self.implementation
        if len(layers) != self.n_layer:  # a hybrid: its other layers mix tokens without softmax attention
            implementation += f"; {len(layers)} of its {self.n_layer} layers are softmax attention, numbered L0… here"
        return AttentionRecord(
            model_name=self.name,
            tokens=tokens if tokens is not None else encoding.tokens,
            layers=layers,
            n_kv_head=self.n_kv_head,
            causal=self.causal,
            implementation=implementation,
            n_input_tokens=encoding.n_input,
            outputs=ModelOutputs(hidden=hidden, next_token_logits=logits),
        )

    @torch.no_grad()
    def run(
        self, text: str, max_tokens: int, *, keep_qk: bool = True, progress: Progress | None = None
    ) -> AttentionRecord:
        encoding = self.encode(text, max_tokens)
        input_ids = torch.tensor([encoding.ids], dtype=torch.long, device=self.device)  # (1, T)
        session, hidden, logits = self._capture(input_ids, None, None, keep_qk, progress)
        return self._record(encoding, session.layers[0], hidden[0], None if logits is None else logits[0])

    def reference_weights(self, text: str, max_tokens: int) -> Tensor:
        """Every weight from the model's own eager attention: (n_layer, n_head, T, T). Short inputs only."""
        return self.reference_pass(self.encode(text, min(max_tokens, settings.PARITY_TOKENS)).ids)[0]

    @torch.no_grad()
    def reference_pass(self, ids: list[int], hooks: dict | None = None) -> tuple[Tensor, list]:
        """The model's own eager attention on ``ids``: weights (n_layer, n_head, T, T) and each layer's mask;
        ``hooks``: the pass's other hook functions (parity reads ``attn.in``).

        Every weight at once, so only for short inputs (parity, exactness checks).
        """
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        reference = ReferenceRun()
        mode = {"attn": reference} if self.route == "interface" else {}
        out = self.run_hooked(input_ids, {**mode, **(hooks or {})}, output_attentions=True, **self._logits_to_keep())
        weights = torch.stack([a[0].float().cpu() for a in out.output.attentions])  # each layer's from its own device
        return weights, [keys[0] for keys in reference.keys]

    @torch.no_grad()
    def run_batch(self, texts: list[str], max_tokens: int, side: str = "right") -> BatchRecord:
        """Several texts padded to one length on ``side``; the model's own padding mask keeps pads out."""
        batch = padded_batch(self, texts, max_tokens, side)
        mask = batch.key_mask.long().to(self.device)
        session, hidden, _ = self._capture(batch.input_ids, mask, batch.position_ids, True)
        records = [
            self._record(e, layers, hidden[b], None, tokens=pad_row(e.tokens, batch.length, batch.pad, side))
            for b, (e, layers) in enumerate(zip(batch.encodings, session.layers, strict=True))
        ]
        return BatchRecord(records=records, key_mask=batch.key_mask, side=side)

    run_statistics = run_statistics  # attnviz.models.hf.batch_statistics: one padded pass, each text's statistics

    @torch.no_grad()
    def generate(
        self, prompt: str, n_new: int, max_tokens: int, *, progress: Progress | None = None
    ) -> GenerationRecord:
        """Greedy decoding with the KV cache, then one captured pass over prompt + generated tokens.

        Row ``p`` of the record is the attention of the token *at* position p (the
        one being read), which is what predicts token p + 1. Decoding runs torch's
        fused kernel with the model's KV cache; the capture's rows equal the
        cached steps' rows (tested to 1e-5), and a single pass keeps memory bounded.
        """
        if not self.can_generate:
            raise GenerationUnsupportedError(msg("model_errors.no_lm_head", name=self.name))
        if n_new < 1:
            raise ValueError(msg("model_errors.new_tokens", n=n_new))
        encoding = self.encode(prompt, max(1, max_tokens - n_new), keep="end")
        ids = list(encoding.ids)
        generated: list[int] = []
        eos = self.tokenizer.eos_token_id
        progress = or_none(progress)
        # in one unit, a decode step's cost (one token through every layer): a captured layer reads every token
        context = len(ids) + n_new
        progress.plan(
            [("progress.token", n_new), ("progress.layer", self.n_layer, [context / self.n_layer] * self.n_layer)]
        )
        progress.stage("progress.token", n_new)
        with running(self.name, self.device):
            out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True, logits_to_keep=1)
            for step in range(n_new):
                next_id = int(out.logits[0, -1].argmax())
                generated.append(next_id)
                progress.step()
                if next_id == eos or step == n_new - 1:
                    break
                next_ids = torch.tensor([[next_id]], device=self.device)
                out = self.model(input_ids=next_ids, cache=out.cache, use_cache=True)
        new_tokens = generated_tokens(self.tokenizer, generated, set(self.tokenizer.all_special_ids))
        everything = Encoding(
            ids=ids + generated, tokens=encoding.tokens + new_tokens, n_input=len(ids) + len(generated)
        )
        input_ids = torch.tensor([everything.ids], dtype=torch.long, device=self.device)
        session, hidden, logits = self._capture(input_ids, None, None, keep_qk=True, progress=progress)
        record = self._record(everything, session.layers[0], hidden[0], logits[0])
        return GenerationRecord(
            record=record,
            n_prompt=len(ids),
            n_prompt_input=encoding.n_input,
            generated_ids=generated,
            text=self.tokenizer.decode(generated, skip_special_tokens=True),
        )

    @torch.no_grad()
    def states_under_mask(
        self, text: str, max_tokens: int, mask: Tensor, perturb_from: int | None = None, seed: int = 0
    ) -> Tensor:
        if not self.supports_mask_override:
            raise ModelUnavailableError(msg("model_errors.no_mask_override", name=self.name))
        ids = self.encode(text, min(max_tokens, settings.MASK_TOKENS)).ids
        check_square_mask(mask, len(ids))
        if perturb_from is not None:
            ids = perturbed_ids(ids, perturb_from, self.model.config.vocab_size, seed)
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        result = self.run_hooked(input_ids, {"attn": MaskOverride(mask)}, **self._logits_to_keep())
        return last_hidden(result, self.name)[0].float().cpu()  # (T, d_model)

    def parity_bugs(self) -> dict[str, Text]:
        return {name: bug_title(name) for name in available_bugs(self)} if self.supports_parity else {}

    def check_parity(self, text: str, max_tokens: int, bug: str | None = None) -> Parity:
        encoding = self.encode(text, min(max_tokens, settings.PARITY_TOKENS))
        parity = reproduce(self, encoding.ids, bug)
        parity.tokens = encoding.tokens
        return parity

    @torch.no_grad()
    def attention_layer(self, text: str, max_tokens: int, layer: int) -> LayerInput:
        """Layer ``layer`` as our MultiHeadAttention (a copy of its weights, see attnviz.models.hf.parity), the hidden states
        that really entered it (a forward pre-hook on the model's own pass) and the mask it applied.

        Reads at most settings.PARITY_TOKENS tokens: the mask comes from the reference pass, which holds every weight.
        """
        check_layer(layer, self.n_layer)
        return self.attention_layers(text, max_tokens, [layer])[0]

    def attention_layers(self, text: str, max_tokens: int, layers: Sequence[int] | None = None) -> list[LayerInput]:
        """:meth:`attention_layer` for several layers (default: all) from one pass of the model
        (:func:`attnviz.models.hf.parity.layer_inputs`)."""
        return layer_inputs(self, text, max_tokens, layers)

    def ablated_outputs(self, text: str, max_tokens: int, head_sets, mode: str, resume=None, head_reads=False):
        """One batch, a row per set of heads: every position's next-token logits (an LM) or last hidden states
        (:func:`attnviz.models.hf.ablated.ablated_outputs`); ``resume``: the text's :meth:`layer_cache`;
        ``head_reads``: what the LM head reads instead of the logits (where :meth:`unembedding` is not None)."""
        return ablated_outputs(self, text, max_tokens, head_sets, mode, resume, head_reads)

    def unembedding(self) -> tuple[Tensor, Tensor | None] | None:
        """The LM head's weight and bias when the logits are its product alone (checked once on a probe pass),
        on the CPU (:func:`attnviz.models.hf.ablated.unembedding`); else None."""
        return self._unembedding

    _unembedding = functools.cached_property(head_unembedding)  # checked once per loaded model
    weights_check = functools.cached_property(check_weights)  # whether they look trained: one pass, once per load
    read_outs = functools.cached_property(find_read_outs)  # what turns the stream into logits: read once per load

    @functools.cached_property
    def _layers(self) -> torch.nn.ModuleList | str:
        """The model's decoder-layer list (attnviz.models.resume), or why its passes cannot start mid-model."""
        return decoder_layers(self)

    def layer_cache(self, text: str, max_tokens: int, mode: str = "zero") -> tuple[AblatedOutputs, CachedLayers | str]:
        """The text with nothing ablated and each layer's output from that pass, checked by a pass from the middle
        layer, or why the model's passes cannot start mid-model (:func:`attnviz.models.hf.ablated.layer_cache`)."""
        return layer_cache(self, text, max_tokens, mode)

    def head_pass(self, encoding: Encoding, rows: int, edit, **options) -> tuple[Tensor, object]:
        """The model with each layer's head outputs edited (:func:`attnviz.models.hf.ablated.head_pass`)."""
        return head_pass(self, encoding, rows, edit, **options)

    def token_ids(self, text: str) -> list[int]:
        """``text``'s ids without special tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def head_blocks(self) -> Iterator[tuple[Tensor, Tensor | None]]:
        """Each attention layer's W_O^h (n_head, head_dim, d_model) and bias (d_model,) or None, float32 on its own
        device, a layer at a time as the caller reaches it: never all at once on the host (21 GB for a 70B model)."""
        for p in self.output_projections.layers:
            yield p.blocks(), p.bias()

    def rope_frequencies(self, head_dim: int) -> RotaryFrequencies | None:
        """The RoPE frequencies the model applies to heads of ``head_dim`` (attnviz.models.hf.rope); None: none."""
        return rope_frequencies(self.model, self.config, head_dim)

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id's text; a byte piece of a character (which decodes alone to U+FFFD) as its raw token in ⟨⟩."""
        texts = [self.tokenizer.decode([int(i)]) for i in ids]
        raws = self.tokenizer.convert_ids_to_tokens([int(i) for i in ids])
        return [f"⟨{raw}⟩" if "\ufffd" in text and raw else text for text, raw in zip(texts, raws, strict=True)]

    prefill_kv = prefill_kv  # attnviz.models.hf.kv.prefill_kv, this source its first argument

    def greedy_decoder(self, prompt: str, use_cache: bool = True) -> HFDecoder:
        return HFDecoder(self, prompt, use_cache)
