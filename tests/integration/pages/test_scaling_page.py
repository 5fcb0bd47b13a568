"""The scaling lab end to end: the CLI's contract, the Parity page's bugs, the Scaling page with every model."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.cli import attnviz
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The trophy did not fit in the suitcase because it was too big. 注意力机制很有用。"


def run(*args):
    return attnviz(*args)


@pytest.mark.parametrize("model", ["default", "minilm", "smollm2"])
def test_scaling_json_keeps_its_contract_and_agrees_with_heads(model):
    scaled = run("scaling", TEXT, "--model", model, "--json", "--quiet")
    heads = run("heads", TEXT, "--model", model, "--json", "--quiet")
    assert scaled.returncode == 0 and heads.returncode == 0, scaled.stderr + heads.stderr
    out, stats = json.loads(scaled.stdout), json.loads(heads.stdout)
    assert set(out) == {"head_dim", "d_model", "scales", "heads"}
    assert isinstance(out["head_dim"], int) and isinstance(out["d_model"], int)
    assert out["scales"]["none"] == 1.0
    assert out["scales"]["sqrt_dk"] == pytest.approx(out["head_dim"] ** -0.5)
    assert out["scales"]["sqrt_dmodel"] == pytest.approx(out["d_model"] ** -0.5)
    assert [(h["layer"], h["head"]) for h in out["heads"]] == [(s["layer"], s["head"]) for s in stats["stats"]]
    for head, stat in zip(out["heads"], stats["stats"], strict=True):
        assert set(head) == {"layer", "head", "entropy", "entropy_norm", "saturated_share"}
        assert head["entropy"]["sqrt_dk"] == pytest.approx(stat["entropy"], abs=2e-6)  # both rounded to 6 places
        assert 0.0 <= head["saturated_share"]["none"] <= 1.0


def test_scaling_errors_are_one_line():
    proc = run("scaling", "hi", "--threshold", "1.5")
    assert proc.returncode == 2 and proc.stderr.strip() == "attnviz scaling: error: --threshold (1.5) must be in (0, 1]"


@pytest.mark.parametrize(
    "name,bugs",
    [("minilm", {"sqrt_dmodel", "no_scale"}), ("smollm2", {"sqrt_dmodel", "no_scale", "no_rope", "kv_tiled"})],
)
def test_every_known_bug_breaks_parity(name, bugs, request):
    source = request.getfixturevalue(name)
    assert set(source.parity_bugs()) == bugs
    assert source.check_parity(TEXT, 64).worst == 0.0
    for bug in bugs:
        broken = source.check_parity(TEXT, 64, bug)
        assert broken.worst > 1e-2 and not broken.matches and broken.bug == bug, bug
    with pytest.raises(ValueError, match="does not apply"):
        source.check_parity(TEXT, 64, "kv_tiled" if name == "minilm" else "nonsense")


def app(model: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(TEXT).run()
    return at


@pytest.mark.parametrize("model", ["default", "minilm", "smollm2"])
def test_scaling_page_with_every_model(model):
    at = app(model)
    at.switch_page("pages/scaling.py").run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    charts = at.get("plotly_chart")
    assert len(charts) == 8  # overview, one head under four scales, two variance charts, the gradient
    overview = spec_of(charts[0])
    assert [t["type"] for t in overview["data"]] == ["heatmap"] * 3
    assert any("heads collapse" in c.value for c in at.caption)
    # the slider redraws the fourth panel: at 1x it is the correct scale's picture
    correct, yours = (decode(spec_of(charts[i])["data"][0]["z"]) for i in (1, 4))
    assert (abs(correct - yours) < 1e-6)[~(correct != correct)].all()
    at.select_slider(key="scaling_multiple").set_value(8.0).run()
    yours = decode(spec_of(at.get("plotly_chart")[4])["data"][0]["z"])
    assert abs(yours - correct)[~(correct != correct)].max() > 1e-2


def test_parity_page_shows_the_check_failing():
    at = app("smollm2")
    at.switch_page("pages/parity.py").run()
    assert any("Every head of every layer matches" in s.value for s in at.success)
    at.radio(key="parity_bug").set_value("no_rope").run()
    assert not at.exception
    assert any("RoPE dropped" in e.value and "caught" in e.value for e in at.error)
    assert float(at.metric[0].value) > 1e-2
