"""An encoder-decoder in the app: the sidebar's target, the Heads page's three kinds and alignment view, Ablation
by kind on the target's loss, Generation's steps over the source, the KV page's two caches, links; every other page
opens on it (the encoder on the source) without an error."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.labs.alignment import ranked_heads
from attnviz.models.registry import SourceSpec, open_source
from tests.grid_canvas import grid_data
from tests.integration.tiny_models import tiny_seq2seq
from tests.plotly_json import spec_of

ROOT = Path(__file__).resolve().parents[3]
SOURCE = "The cat sat on the mat."
TARGET = "Die Katze sass auf der Matte."
PAGES = [p.stem for p in sorted((ROOT / "pages").glob("*.py"))]


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return str(tiny_seq2seq(tmp_path_factory.mktemp("pages") / "t5", "t5"))


def app_on(folder: str, page: str, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for name, value in (query or {}).items():
        at.query_params[name] = value
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    at.session_state.model, at.session_state.model_path, at.session_state.text = "path", folder, SOURCE
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_heads_page_reads_each_kind_with_its_own_axes(t5):
    at = app_on(t5, "heads")
    at.radio(key="target_from").set_value("typed").run()
    at.text_area(key="target").input(TARGET).run()
    source = open_source(SourceSpec(t5, "cpu"))
    pair = source.run_pair(SOURCE, TARGET, 256)
    for kind, (rows, cols) in {"encoder": (9, 9), "decoder": (13, 13), "cross": (13, 9)}.items():
        at.radio(key="heads_kind").set_value(kind).run()
        assert not at.exception and not at.error
        large = spec_of(at.get("plotly_chart")[0])  # the head drawn large (the grid is the page's own canvas)
        picture = grid_data(at)
        assert (picture["th"], picture["tw"]) == (rows, cols)  # a tile a head: its queries by its keys
        heat = large["data"][0]
        assert (len(heat["y"]), len(heat["x"])) == (rows, cols)
        assert heat["x"][1] == ("1 The" if kind != "decoder" else "1 [CLS]")
        assert heat["y"][2] == ("2 cat" if kind == "encoder" else "2 Die")
        part = pair.part(kind)
        assert at.dataframe[-1].value.shape[0] == part.n_layer * part.n_head  # the statistics, a row a head
    # the alignment view: heads ranked most monotonic first, the top one mapped, its hard alignment listed
    ranking = ranked_heads(pair.cross)
    top = f"L{int(ranking.layer[0])} H{int(ranking['head'][0])}"
    assert at.multiselect(key="alignment_heads").value == [top]
    listed = next(d.value for d in at.dataframe if list(d.value.columns) == ["target token", "source token", "weight"])
    assert len(listed) == 13
    hard = pair.cross.layers[int(ranking.layer[0])].weights[int(ranking["head"][0])].argmax(dim=-1).tolist()
    assert [int(cell.split(" ", 1)[0]) for cell in listed.iloc[:, 1]] == hard
    alignment_map = next(spec_of(c) for c in at.get("plotly_chart") if "Mean cross-attention" in str(spec_of(c)))
    assert alignment_map["data"][1]["x"][3].split(" ", 1)[0] == str(hard[3])


def test_lines_for_cross_attention_join_target_and_source(t5):
    at = app_on(t5, "heads")
    at.radio(key="heads_kind").set_value("cross").run()
    at.radio(key="heads_grid_style").set_value("lines").run()
    assert not at.exception and not at.error
    spec = spec_of(at.get("plotly_chart")[0])
    assert any(trace.get("mode") == "lines" for trace in spec["data"])


def test_ablation_by_kind_measures_the_targets_loss(t5):
    at = app_on(t5, "ablation")
    at.radio(key="target_from").set_value("typed").run()
    at.text_area(key="target").input(TARGET).run()
    for kind in ("encoder", "decoder", "cross"):
        at.radio(key="ablation_kind").set_value(kind).run()
        at.multiselect(key="ablation_layers").set_value([1]).run()
        assert not at.exception and not at.error
        before, after = (float(m.value) for m in at.metric[:2])
        source = open_source(SourceSpec(t5, "cpu"))
        from attnviz.labs.heads_matter.effect import ablation_effect

        expected = ablation_effect(source.ablation_view(kind, TARGET), SOURCE, 256, [(1, h) for h in range(4)])
        assert before == pytest.approx(expected.loss_before, abs=1e-4)
        assert after == pytest.approx(expected.loss_after, abs=1e-4)


def test_generation_shows_each_step_over_the_source(t5):
    at = app_on(t5, "generation")
    at.slider(key="gen_seq2seq_new").set_value(5).run()
    assert not at.exception and not at.error
    heat = spec_of(at.get("plotly_chart")[0])["data"][0]
    assert len(heat["x"]) == 9 and 1 <= len(heat["y"]) <= 5  # source tokens across, one row a written token
    assert heat["y"][0].startswith("1 → ")


def test_the_kv_page_checks_both_caches_to_the_byte(t5):
    at = app_on(t5, "kv_cache")
    table = at.dataframe[-1].value
    assert table.iloc[:, -1].tolist() == [0, 0, 0]
    assert table.iloc[1, 1] == 9  # the cross-attention cache: one row per source token


def test_a_link_holds_the_target(t5):
    at = app_on(t5, "heads", {"target": TARGET})
    assert at.session_state.target == TARGET and at.session_state.target_from == "typed"
    assert at.query_params["target"] == TARGET
    at = app_on(t5, "heads", {"generate": "7"})
    assert at.session_state.n_generate == 7 and at.query_params["generate"] == "7"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["generate"] = "999"
    at.run()
    assert at.session_state.n_generate == 16
    assert any("generate" in c.value for c in at.sidebar.caption)  # named as ignored, on the link's first run


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_on_an_encoder_decoder(t5, page):
    at = app_on(t5, page)
    assert not at.exception and not at.error, [e.value for e in at.error]


def test_the_token_view_reads_a_target_token_over_the_source(t5):
    at = app_on(t5, "tokens")
    at.radio(key="target_from").set_value("typed").run()
    at.text_area(key="target").input(TARGET).run()
    at.radio(key="tokens_kind").set_value("cross").run()
    assert not at.exception and not at.error
    source = open_source(SourceSpec(t5, "cpu"))
    pair = source.run_pair(SOURCE, TARGET, 256)
    assert at.selectbox(key="tokens_token").options == [f"{i} {t.text}" for i, t in enumerate(pair.target_tokens)]
    every_head = spec_of(at.get("plotly_chart")[1])["data"][0]  # heads down, the source's tokens across
    token = at.selectbox(key="tokens_token").index
    import numpy as np

    from tests.plotly_json import decode

    z = np.asarray(decode(every_head["z"]), dtype=float)
    expected = pair.cross.weights(0, None, (token, token + 1), (0, pair.cross.k_len))[:, 0].numpy()
    assert z.shape == expected.shape == (4, 9)
    assert np.abs(z - expected * 254).max() <= 1  # drawn as 255 levels of weight
    at.radio(key="tokens_direction").set_value("attended_by").run()  # a source token: what each target token puts on it
    assert not at.exception
    assert at.selectbox(key="tokens_token").options == [f"{i} {t.text}" for i, t in enumerate(pair.source_tokens)]
