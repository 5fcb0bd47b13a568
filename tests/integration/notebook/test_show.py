"""``attnviz.notebook.show`` and ``capture`` on a model object in memory: the view draws the capture's own numbers (the
statistics of ``capture``, the weights of the record), each kind of an encoder-decoder, in the language asked for;
``Captured.show`` draws the same view with no second pass; bad arguments are one line; the model is left as it was."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from attnviz.i18n.translate import language
from attnviz.notebook import capture, show
from attnviz.notebook.payload import TOP
from tests.integration.tiny_models import tiny, tiny_seq2seq
from tests.unit.notebook.test_payload import HALF_LEVEL, decode

TEXT = "The cat sat on the mat because it was tired, and the dog slept by the door."


def payload_of(view) -> dict:
    text = view.data
    start = text.index('type="application/json"')
    return json.loads(text[text.index(">", start) + 1 : text.index("</script>", start)])


@pytest.fixture(scope="module")
def llama(smollm2, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tiny(tmp_path_factory.mktemp("llama"), smollm2, LlamaConfig, LlamaForCausalLM)
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def logits(model, tokenizer) -> torch.Tensor:
    with torch.no_grad():
        return model(**tokenizer(TEXT, return_tensors="pt")).logits.clone()


def test_the_view_draws_the_captures_numbers_and_leaves_the_model(llama):
    model, tokenizer = llama
    model.eval()
    before = logits(model, tokenizer)
    captured = capture(model, tokenizer, TEXT)
    payload = payload_of(show(model, tokenizer, TEXT, layer=1, head=2, html_action="return"))
    (kind,) = payload["kinds"]
    record = captured.record
    assert kind["selected"] == [1, 2] and kind["lines"] and kind["causal"]
    assert [q.split(" ", 1)[1] for q in kind["queries"]] == [t.text for t in record.tokens]
    stats = captured.statistics
    names = kind["stats"]["names"]
    for row in stats.itertuples(index=False):
        assert kind["stats"]["values"][f"{row.layer},{row.head}"] == [float(getattr(row, n)) for n in names]
    levels = decode(kind["maps"]).astype(np.float64)
    exact = torch.stack([record.weights(layer, None) for layer in range(record.n_layer)]).numpy()
    visible = levels != 65535
    assert np.abs(levels[visible] / TOP - exact[visible]).max() <= HALF_LEVEL
    assert torch.equal(logits(model, tokenizer), before)
    assert model.config._attn_implementation == "sdpa"


def test_captured_show_is_shows_view_without_a_second_pass(llama, monkeypatch):
    model, tokenizer = llama
    captured = capture(model, tokenizer, TEXT, max_tokens=12)
    ran = []
    monkeypatch.setattr(type(model), "forward", lambda *a, **k: ran.append(1))  # any pass would be seen
    again = payload_of(captured.show(html_action="return", view="model", gamma=0.5))
    monkeypatch.undo()
    direct = payload_of(show(model, tokenizer, TEXT, max_tokens=12, html_action="return", view="model", gamma=0.5))
    assert ran == []
    assert again == direct
    assert "12 tokens" in direct["note"] and "of the text's" in direct["note"]  # cut to max_tokens, and said so


def test_words_in_the_language_asked_for_and_the_kernels_language_kept(llama):
    model, tokenizer = llama
    before = language()
    payload = payload_of(show(model, tokenizer, TEXT, html_action="return", lang="zh"))
    assert payload["words"]["layer"] == "层" and language() == before


def test_an_encoder_decoder_shows_its_three_kinds(tmp_path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = tiny_seq2seq(tmp_path / "bart", "bart")
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    captured = capture(model, tokenizer, TEXT, target="A cat slept.")
    payload = payload_of(captured.show(html_action="return"))
    kinds = {k["id"]: k for k in payload["kinds"]}
    assert list(kinds) == ["encoder", "decoder", "cross"]
    assert len(kinds["cross"]["keys"]) == len(captured.record.source_tokens)
    assert len(kinds["cross"]["queries"]) == len(captured.record.target_tokens)
    assert kinds["decoder"]["causal"] and not kinds["encoder"]["causal"]
    assert set(captured.statistics["kind"]) == {"self", "causal", "cross"}
    cross = captured.record.cross.statistics
    rows = captured.statistics[captured.statistics["kind"] == "cross"]
    pd.testing.assert_frame_equal(rows[list(cross.columns)].reset_index(drop=True), cross, check_exact=True)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"text": "  "}, "text is empty"),
        ({"max_tokens": 0}, "max_tokens must be 1 to 256"),
        ({"max_tokens": 257}, "max_tokens must be 1 to 256"),
        ({"target": "x"}, "target and n_generate are for encoder-decoders"),
        ({"view": "grid"}, "view must be one of"),
        ({"gamma": 0.3}, "gamma must be one of"),
        ({"include_layers": [5]}, "layers must be among 0..1"),
    ],
)
def test_bad_arguments_are_one_line(llama, arguments, says):
    model, tokenizer = llama
    arguments = {"text": TEXT, **arguments}
    with pytest.raises(ValueError) as caught:
        show(model, tokenizer, arguments.pop("text"), html_action="return", **arguments)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert model.config._attn_implementation == "sdpa"
