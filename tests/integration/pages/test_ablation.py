"""Head ablation against an independent computation, the CLI's contract, and the page through AppTest.

The reference is plain transformers (its own ``sdpa`` attention, not attnviz's) with a forward pre-hook on each
layer's output projection that rewrites the ablated heads' slice of its input: zero; the mean over the positions;
and, for a causal model, "first" as the slice at position 0 copied to every position (a causal head's output at
position 0 is the value of token 0, what attending only to the first token gives everywhere).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.proto.Metric_pb2 import Metric as MetricProto
from streamlit.testing.v1 import AppTest

from attnviz import cli
from attnviz.labs.heads_matter.ablation import ablation_sweep, sweep_baseline, sweep_piece
from attnviz.labs.heads_matter.effect import ablation_effect
from attnviz.labs.heads_matter.reductions import cosine_distance, kl_divergence, next_token_losses
from attnviz.models.hf.bundled import minilm_dir, prepared_folder
from attnviz.models.hf.loading import load_hf_source
from tests.cli import attnviz
from tests.integration.tiny_models import tiny

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat because it was tired, and then it slept."
TOLERANCE = 1e-5


def rewrite_hook(heads: list[int], n_head: int, mode: str):
    """A forward pre-hook on an output projection: its input (B, T, n_head * hd) with ``heads``' slices rewritten."""

    def hook(module, args):
        x = args[0]
        B, T, width = x.shape
        x = x.clone().view(B, T, n_head, width // n_head)  # (B, T, n_head, hd)
        for h in heads:
            if mode == "zero":
                x[:, :, h] = 0
            elif mode == "mean":
                x[:, :, h] = x[:, :, h].mean(dim=1, keepdim=True)
            else:
                x[:, :, h] = x[:, :1, h]  # causal: position 0's output is v_0
        return (x.view(B, T, width), *args[1:])

    return hook


def reference(model, projections, ids, heads, mode, n_head):
    hooks = []
    for layer, proj in enumerate(projections):
        mine = [h for at, h in heads if at == layer]
        if mine:
            hooks.append(proj.register_forward_pre_hook(rewrite_hook(mine, n_head, mode)))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), return_dict=True)
    finally:
        for hook in hooks:
            hook.remove()
    return out.logits[0] if hasattr(out, "logits") else out.last_hidden_state[0]


def decoder_parity(source, folder, heads):
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", dtype=torch.float32).eval()
    projections = [layer.self_attn.o_proj for layer in plain.model.layers]
    ids = source.encode(TEXT, 64).ids
    worst = {}
    before = reference(plain, projections, ids, [], "zero", source.n_head)
    for mode in ("zero", "mean", "first"):
        ours = ablation_effect(source, TEXT, 64, heads, mode)
        theirs = reference(plain, projections, ids, heads, mode, source.n_head)
        our_logits = source.ablated_outputs(TEXT, 64, [heads], mode).values[0]
        kl = kl_divergence(before, theirs)
        worst[mode] = max(
            float((our_logits - theirs).abs().max()),
            abs(ours.loss_before - float(next_token_losses(before, ids).mean())),
            abs(ours.loss_after - float(next_token_losses(theirs, ids).mean())),
            abs(ours.kl_mean - float(kl[:-1].mean())),
            max(abs(a - float(b)) for a, b in zip(ours.change, kl, strict=True)),
        )
        assert ours.kl_mean > 1e-4, (mode, ours.kl_mean)  # the ablation did something
    print("parity (max abs diff):", worst)
    assert max(worst.values()) < TOLERANCE, worst
    return worst


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory, smollm2):
    from transformers import LlamaConfig, LlamaForCausalLM

    return tiny(tmp_path_factory.mktemp("ablation") / "llama", smollm2, LlamaConfig, LlamaForCausalLM)


def test_tiny_llama_with_gqa_matches_hooks_on_o_proj(tiny_llama):
    source = load_hf_source(str(tiny_llama))
    decoder_parity(source, tiny_llama, [(0, 1), (1, 0), (1, 3)])


def test_smollm2_matches_hooks_on_o_proj(smollm2):
    decoder_parity(smollm2, prepared_folder("smollm2"), [(0, 3), (5, 1), (5, 2), (29, 8)])


def test_ablating_nothing_changes_nothing_exactly(smollm2):
    for mode in ("zero", "mean", "first"):
        result = ablation_effect(smollm2, TEXT, 64, [], mode)
        assert result.kl_mean == 0.0 and result.loss_before == result.loss_after
        assert set(result.change) == {0.0}


def test_minilm_hidden_change_matches_hooks_on_the_output_dense(minilm):
    from transformers import AutoModel

    plain = AutoModel.from_pretrained(minilm_dir(), attn_implementation="sdpa", dtype=torch.float32).eval()
    projections = [layer.attention.output.dense for layer in plain.encoder.layer]
    ids = minilm.encode(TEXT, 64).ids
    heads = [(0, 2), (3, 5), (5, 11)]
    before = reference(plain, projections, ids, [], "zero", minilm.n_head)
    for mode in ("zero", "mean"):
        ours = ablation_effect(minilm, TEXT, 64, heads, mode)
        theirs = reference(plain, projections, ids, heads, mode, minilm.n_head)
        expected = cosine_distance(before, theirs)
        assert ours.loss_before is None and ours.kl_mean is None
        assert ours.hidden_change > 1e-4
        assert abs(ours.hidden_change - float(expected.mean())) < TOLERANCE
        assert max(abs(a - float(b)) for a, b in zip(ours.change, expected, strict=True)) < TOLERANCE
    sweep = ablation_sweep(minilm, TEXT, 16, "zero")
    assert len(sweep.values) == minilm.n_layer and len(sweep.values[0]) == minilm.n_head
    alone = ablation_effect(minilm, TEXT, 16, [(3, 5)], "zero").hidden_change
    assert abs(sweep.values[3][5] - alone) < 1e-5  # a batched row equals the head ablated by itself


def test_the_cli_json_keys_and_exit_codes_as_another_program_sees_them():
    done = attnviz("ablate", "the cat sat on the mat", "--heads", "0.1,1.2", "--mode", "mean", "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    value = json.loads(done.stdout)
    for key in ("model", "tokens", "heads", "mode", "loss_before", "loss_after", "kl_mean", "kl_per_position"):
        assert key in value
    assert value["heads"] == [[0, 1], [1, 2]] and value["mode"] == "mean"
    assert value["loss_before"] is None and value["kl_mean"] is None and value["hidden_change"] > 0  # no LM head
    done = attnviz("ablate", "the cat sat", "--heads", "9.0", "--quiet")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_the_cli_on_a_decoder_gives_losses_and_top_tokens(tiny_llama, capsys):
    argv = ["ablate", TEXT, "--model", str(tiny_llama), "--heads", "1.*", "--max-tokens", "12", "--json", "--quiet"]
    assert cli.main(argv) == 0
    value = json.loads(capsys.readouterr().out)
    assert len(value["tokens"]) == 12 and value["heads"] == [[1, 0], [1, 1], [1, 2], [1, 3]]
    assert value["loss_after"] > 0 and value["kl_mean"] > 0 and value["hidden_change"] is None
    assert len(value["kl_per_position"]) == 11  # positions 0 .. T-2, as kl_mean
    assert sum(value["kl_per_position"]) / 11 == pytest.approx(value["kl_mean"], abs=1e-6)
    assert len(value["top_before"]) == 5 and all(isinstance(t, str) and 0 <= p <= 1 for t, p in value["top_before"])
    assert cli.main(["ablate", TEXT, "--model", str(tiny_llama), "--heads", "2.0", "--quiet"]) == 2
    assert "layers are 0 to 1, heads 0 to 3" in capsys.readouterr().err


def test_the_page_on_the_embedded_model(monkeypatch):
    from attnviz.labs.heads_matter import schedule

    monkeypatch.setattr(schedule, "PASS_SECONDS", 1e9)  # rows a pass by bytes alone, however busy this machine is
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.text_area(key="text").input("The cat sat on the mat because it was tired.").run()
    at.switch_page("pages/ablation.py").run()
    assert not at.exception, at.exception
    intro = at.caption[0].value
    assert "At most 256 tokens are read here: the sidebar's limit (256), lower than this page's own (1,024" in intro
    at.multiselect(key="ablation_layers").set_value([0]).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert [m.value for m in at.metric]  # the hidden change shown
    # 2 x 4 heads: timing the sweep's first pass (16 rows) ran all eight, so the map and its ranking are there at once,
    # under the estimate's map (every head in one forward and one backward) and its agreement with them
    charts = [chart.key for chart in at.get("plotly_chart")]
    assert charts == ["ablation_change", "ablation_estimate_map", "ablation_sweep"]
    assert "ablation_sweep_start" not in [b.key for b in at.button]
    assert any("Spearman" in info.value for info in at.info)
    ranked = at.dataframe[-1].value
    assert len(ranked) == 8 and list(ranked.iloc[:, 2].astype(float)) == sorted(ranked.iloc[:, 2].astype(float))[::-1]
    at.number_input(key="max_tokens").set_value(1024).run()
    assert "1,024 tokens are read here: the sidebar's limit and this page's own are both 1,024" in at.caption[0].value


def test_the_page_sweep_stops_and_continues(monkeypatch):
    """A Stop click, as Streamlit delivers it: its callback marks the sweep stopped and the script is stopped at its
    next drawing, here as the second pass ends. What finished stays on the page; Continue completes it."""
    from attnviz.labs.heads_matter import ablation, schedule

    text = "The cat sat on the mat because it was tired, " * 3
    monkeypatch.setattr(schedule, "PASS_SECONDS", 1e9)  # 16 rows a pass (bytes alone), however busy this machine is
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input(text).run()
    at.number_input(key="n_layer").set_value(8).run()
    at.number_input(key="n_head").set_value(8).run()  # 64 heads: 16 a pass at 33 tokens
    at.switch_page("pages/ablation.py").run()
    assert not at.exception, at.exception
    caption = next(c.value for c in at.caption if "ablated alone" in c.value)
    # timing ran the first pass (layer 0's heads) and the last (resumed from layer 6): two of the four are left
    assert "this text's 33 tokens" in caption and "in 4 batched passes (16 a pass)" in caption, caption  # 33, not 256
    piece, calls = ablation.sweep_piece, []

    def stopped_by_a_click(*args):
        calls.append(1)
        values = piece(*args)
        if len(calls) == 1:  # the first pass ends; the click lands now, before the script draws again
            import streamlit as st

            st.session_state["ablation_sweep_state"]["status"] = "stopped"
            st.session_state["ablation_sweep_state"]["values"].update(values)
            st.rerun()
        return values

    monkeypatch.setattr(ablation, "sweep_piece", stopped_by_a_click)
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception, at.exception
    assert [w.value for w in at.warning][-1].startswith("Stopped after 48 of 64 heads"), [w.value for w in at.warning]
    charts = [chart.key for chart in at.get("plotly_chart")]
    assert len(at.dataframe[-1].value) == ablation.RANKED_K and charts == ["ablation_estimate_map", "ablation_sweep"]
    assert at.button(key="ablation_sweep_start").label.startswith("Continue (16 heads left, about ")
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception and not at.warning, (at.exception, [w.value for w in at.warning])
    assert len(calls) == 2 and "ablation_sweep_start" not in [b.key for b in at.button]  # the 16 left, no more
    assert len(at.get("plotly_chart")) == 2 and len(at.dataframe[-1].value) == 64  # the whole sweep: every head
    assert len(at.dataframe[0].value) == 64  # the estimate's table too, once the exact values exist
    # the estimate above, drawn again once the sweep ended: its agreement with it, and the exact column filled
    assert any("Spearman" in info.value for info in at.info), [info.value for info in at.info]
    assert at.dataframe[0].value.iloc[:, 3].notna().all()


def test_a_lower_loss_is_green_and_a_higher_one_red(tiny_llama):
    """st.metric colours a falling number red unless told that down is good (delta_color="inverse"): a loss."""
    source = load_hf_source(str(tiny_llama))
    deltas = {}
    for head in [(layer, head) for layer in range(2) for head in range(4)]:
        result = ablation_effect(source, TEXT, 64, [head], "zero")
        deltas[head] = result.loss_after - result.loss_before
    down, up = min(deltas, key=deltas.get), max(deltas, key=deltas.get)
    assert deltas[down] < 0 < deltas[up], deltas  # this random model has both
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.text_area(key="text").input(TEXT).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(tiny_llama)).run()
    at.switch_page("pages/ablation.py").run()
    for head, color in ((down, "green"), (up, "red")):
        at.multiselect(key="ablation_heads").set_value([head]).run()
        assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
        after = at.metric[1]
        assert after.delta.startswith("-" if color == "green" else "+"), after.delta
        assert after.proto.color == getattr(MetricProto, color.upper()), (color, after.proto)


def test_the_sweep_in_float32_and_bfloat16_on_a_tiny_llama(tiny_llama):
    """bfloat16 on a tiny model only (a slow CPU): the same map within bfloat16's rounding, reduced in float64."""
    float32 = load_hf_source(str(tiny_llama))
    bfloat16 = load_hf_source(str(tiny_llama))
    bfloat16.model.to(torch.bfloat16)
    for text, n in ((TEXT, 64), ("Hi", 1), ("word " * 400, 10_000)):  # typical, 1 token, the longest (256)
        a = ablation_sweep(float32, text, n, "mean")
        b = ablation_sweep(bfloat16, text, n, "mean")
        assert a.n_tokens == b.n_tokens == min(len(float32.encode(text, 10_000).tokens), 256, n)
        if a.n_tokens == 1:
            assert a.ranked() == b.ranked() == []
            continue
        x, y = np.array(a.values, dtype=float), np.array(b.values, dtype=float)
        assert (x > 0).all() and np.abs(x - y).max() < 0.1 * x.max() + 1e-3, (x, y)  # bfloat16: 8 bits of mantissa
        alone = ablation_effect(float32, text, n, [(1, 2)], "mean").kl_mean
        assert abs(a.values[1][2] - alone) < 1e-6  # a batched row equals the head ablated by itself


def test_smollm2_sweep_pieces_equal_each_head_alone(smollm2):
    """SmolLM2's sweep is minutes (benchmarks/estimates.py --smollm2 runs it); its baseline and one piece, at a
    typical text and at one token, against the head ablated by itself."""
    baseline = sweep_baseline(smollm2, TEXT, 256, "zero")
    assert baseline.n_tokens == len(smollm2.encode(TEXT, 256).tokens) and baseline.pass_seconds > 0
    # 16 x 17 tokens: timed as a pass from the first layer, and one from the last (the sweep is resumed mid-model)
    assert len(baseline.heads) == 270 and len(baseline.first) == 2 * baseline.rows and baseline.last_seconds > 0
    assert baseline.resume is not None and baseline.resume_note is None
    for layer, head in [(0, 0), (29, 8)]:
        value = baseline.first[(layer, head)]
        assert abs(value - ablation_effect(smollm2, TEXT, 256, [(layer, head)], "zero").kl_mean) < 1e-6
    one = sweep_baseline(smollm2, "Hello", 1, "zero")
    assert one.n_tokens == 1 and all(v is None for v in sweep_piece(smollm2, "Hello", one, [(29, 8)]).values())


def test_the_eager_route_ablates_by_a_hook_on_the_projection(tmp_path, smollm2):
    from transformers import BloomConfig, BloomForCausalLM

    folder = tiny(tmp_path / "bloom", smollm2, BloomConfig, BloomForCausalLM)
    source = load_hf_source(str(folder))
    assert source.route == "eager" and source.ablation_modes == ("zero", "mean")
    plain = BloomForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    projections = [block.self_attention.dense for block in plain.transformer.h]
    ids = source.encode(TEXT, 64).ids
    heads = [(0, 1), (1, 2)]
    for mode in ("zero", "mean"):
        ours = source.ablated_outputs(TEXT, 64, [heads], mode).values[0]
        theirs = reference(plain, projections, ids, heads, mode, source.n_head)
        assert float((ours - theirs).abs().max()) < TOLERANCE
    assert ablation_effect(source, TEXT, 64, [], "zero").kl_mean == 0.0
