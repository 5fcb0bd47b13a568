"""An encoder-decoder seen from one kind of its heads and one target: what the Ablation page reads of it.

:meth:`attnviz.models.hf.seq2seq.Seq2SeqSource.ablation_view` makes one. Its layers and heads are the kind's
(encoder, decoder or cross), a text's tokens are the decoder's input on the target (so the lab's next-token loss is
the target's teacher-forced loss), and its ablation rewrites the input of that kind's output projections (the
``attn.z`` hook point of the model's one pass, :meth:`~attnviz.models.hf.seq2seq.Seq2SeqSource.run_pair_hooked`, at
``kind=`` this view's kind).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnviz.core.tokenizer import Token
from attnviz.errors import ModelUnavailableError
from attnviz.i18n.message import Text, msg
from attnviz.models.ablation import ablation_hooks
from attnviz.models.source import AblatedOutputs, Capability, Encoding, check_layer


@dataclass(eq=False)
class TargetView:
    """An encoder-decoder seen from one kind of its heads ("encoder", "decoder", "cross") and one target: what the
    Ablation page reads (:meth:`Seq2SeqSource.ablation_view`). ``encode`` gives the decoder's input on the target
    (its start token, then the target), so the lab's next-token loss is the target's teacher-forced loss;
    ``ablated_outputs`` runs the whole model on the source and that target with heads of this kind ablated.
    """

    whole: Any  # the Seq2SeqSource it views (not imported here: that module makes views, so imports this one)
    kind: str
    target_text: str | None
    n_generate: int = 0

    @property
    def name(self) -> str:
        return self.whole.name

    @property
    def n_layer(self) -> int:
        return self.whole.kind_shapes[self.kind][0]

    @property
    def n_head(self) -> int:
        return self.whole.kind_shapes[self.kind][1]

    @property
    def d_model(self) -> int:
        return self.whole.d_model

    @property
    def device(self):
        return self.whole.device

    @property
    def route_note(self) -> Text:
        return self.whole.route_note

    @property
    def capabilities(self) -> frozenset[Capability]:
        """Its heads ablated on the target; nothing else (a head's output is not read or differentiated here)."""
        return frozenset({Capability.ABLATE})

    @property
    def ablation_modes(self) -> tuple[str, ...]:
        """Zero and mean, by a hook on each output projection found (as the eager route ablates)."""
        return ("zero", "mean") if self.whole.output_projections_by_kind is not None else ()

    def encode(self, text: str, max_tokens: int, keep: str = "start") -> Encoding:
        target = self.whole.target(text, self.target_text, max_tokens, self.n_generate)
        start = self.whole.tokenizer.convert_ids_to_tokens([self.whole.start_id])[0] or "<start>"
        tokens = [Token(start, 0, 0, special=True, raw=start), *target.tokens]
        return Encoding(ids=[self.whole.start_id, *target.ids], tokens=tokens, n_input=target.n_input + 1)

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        return self.whole.token_texts(ids)

    @torch.no_grad()
    def ablated_outputs(
        self,
        text: str,
        max_tokens: int,
        head_sets: Sequence[Sequence[tuple[int, int]]],
        mode: str,
        resume: None = None,
        head_reads: bool = False,
    ) -> AblatedOutputs:
        """The decoder's logits (R, T, vocab) at every target position, row r with ``head_sets[r]`` of this kind
        ablated by ``mode``. A view neither resumes (it is not :class:`~attnviz.models.source.Resumes`) nor reads
        its LM head's input (not :class:`~attnviz.models.source.ReadsHead`): ``resume`` and ``head_reads`` must be
        left as they are."""
        if resume is not None or head_reads:
            raise ValueError("an encoder-decoder's view of one kind of heads neither resumes nor reads its LM head")
        if mode not in self.ablation_modes:
            raise ModelUnavailableError(msg("ablation_lib.unsupported", name=self.name, mode=mode))
        for heads in head_sets:
            for layer, _ in heads:
                check_layer(layer, self.n_layer)
        source = self.whole.encode(text, max_tokens)
        decoder = self.encode(text, max_tokens)
        rows = max(1, len(head_sets))
        input_ids = torch.tensor([source.ids] * rows, device=self.device)
        logits = []
        self.whole.run_pair_hooked(
            input_ids,
            torch.tensor([decoder.ids] * rows, device=self.device),
            {**ablation_hooks([list(h) for h in head_sets] or [[]], mode, self.n_head), "logits": logits.append},
            kind=self.kind,
            attention_mask=torch.ones_like(input_ids),
        )
        return AblatedOutputs(encoding=decoder, values=logits[0].float().cpu(), logits=True, layers_run=self.n_layer)
