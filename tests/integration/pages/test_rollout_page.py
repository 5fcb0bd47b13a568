"""The Rollout page driven through AppTest: the embedded default (every map) and SmolLM2 (flow behind its button)."""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz.labs import rollout
from tests.plotly_json import decode, spec_of

ROOT = Path(__file__).resolve().parents[3]
PAGE = "pages/rollout.py"
TEXT = "The cat sat on the mat because it was tired. The dog <b>barked</b> at the cat."


def app(model: str, text: str = TEXT) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.selectbox(key="model").set_value(model).run()
    at.text_area(key="text").input(text).run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def the_map(at: AppTest) -> dict:
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    return spec_of(charts[0])


def test_every_map_on_the_embedded_model():
    at = app("default")
    spec = the_map(at)
    z = decode(spec["data"][0]["z"])
    n = z.shape[0]
    assert z.shape == (n, n) and n > 4
    np.testing.assert_allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)  # rollout: each row sums to 1
    captions = " ".join(c.value for c in at.caption)
    assert "0.5·A + 0.5·I" in captions and f"Rollout uses the first {n}" in captions
    assert at.selectbox(key="rollout_colour").value == "auto" and "Colour chosen automatically" in captions
    # the scale tops at the largest value outside the first column
    assert spec["data"][0]["zmax"] == pytest.approx(np.nanmax(z[:, 1:]), rel=1e-6)

    at.selectbox(key="rollout_colour").set_value("log").run()
    assert not at.exception and not at.error
    log = the_map(at)
    assert log["data"][-1]["marker"]["colorbar"]["title"]["text"] == "rollout (log)"
    assert "Colour: log over four decades" in " ".join(c.value for c in at.caption)

    at.radio(key="rollout_kind").set_value("layer_mean").run()
    assert not at.exception and not at.error
    assert "mean over heads" in the_map(at)["layout"]["title"]["text"]

    at.selectbox(key="rollout_layer_2").set_value(0).run()
    at.radio(key="rollout_kind").set_value("flow").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    flow = decode(the_map(at)["data"][0]["z"])
    assert flow.shape == (n, n)  # the whole text: within the flow's bound, nothing cut or renormalised
    assert np.nanmax(flow) <= 1 + 1e-6
    captions = " ".join(c.value for c in at.caption)
    assert f"Flow uses the first {n} of the text's {n} tokens" in captions
    assert "Predicted" not in captions  # the estimate goes once the flow is drawn


@pytest.mark.parametrize("text", ["x", "   "])
def test_one_token_or_no_text_is_a_message(text):
    at = app("default", text)
    assert not at.get("plotly_chart") and at.info


def test_smollm2_flow_through_its_30_layers():
    at = app("smollm2")
    n = decode(the_map(at)["data"][0]["z"]).shape[0]
    at.radio(key="rollout_kind").set_value("flow").run()  # about a second's max-flows: a button on a busy machine
    assert not at.exception and not at.error, [e.value for e in at.error]
    if not at.get("plotly_chart"):
        assert "Predicted: about" in " ".join(c.value for c in at.caption)
        at.button(key="rollout_flow_run").click().run()
    flow = decode(the_map(at)["data"][0]["z"])
    assert flow.shape == (n, n) and np.isnan(flow[0, 1])  # the whole text; causal: no path to a later token
    np.testing.assert_allclose(flow[:, 0], 1.0, atol=1e-6)  # all of every row can reach the first token


def test_a_long_minilm_flow_waits_for_its_button_with_a_measured_estimate():
    at = app("minilm", TEXT + " " + TEXT)  # about 40 tokens through 6 layers of full attention: seconds of max-flow
    at.radio(key="rollout_kind").set_value("flow").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not at.get("plotly_chart")
    captions = " ".join(c.value for c in at.caption)
    assert "Predicted: about" in captions and "on this machine" in captions
    button = at.button(key="rollout_flow_run")
    assert button.label.startswith("Compute the flow (about ")


def numpy_rollout(reference: np.ndarray) -> np.ndarray:
    """Rollout in plain numpy from eager weights (n_layer, n_head, T, T): heads averaged, rows renormalised,
    0.5·A + 0.5·I, multiplied up."""
    joint = np.eye(reference.shape[-1])
    for layer in range(reference.shape[0]):
        a = reference[layer].mean(axis=0)
        a = a / a.sum(axis=-1, keepdims=True)
        joint = (0.5 * a + 0.5 * np.eye(a.shape[0])) @ joint
    return joint


@pytest.mark.parametrize("name", ["smollm2", "minilm"])
def test_rollout_of_a_bundled_model_matches_numpy_on_its_reference_weights(name, request):
    source = request.getfixturevalue(name)
    text = "The cat sat on the mat because it was tired."
    maps = rollout.rollout_maps(source.run(text, 32))
    reference = source.reference_weights(text, 32).double().numpy()
    assert maps.n_tokens == reference.shape[-1] and maps.n_layer == reference.shape[0]
    np.testing.assert_allclose(maps.rollout[-1].double().numpy(), numpy_rollout(reference), atol=1e-6)
