"""``attnviz logits``: its JSON keys, the heads' sum plus the rest against the model's logit, the figures equal to the
library's, negative positions, the default token, and one line with exit 2 for each input it cannot take."""

import json

import pytest
import torch

from attnviz import cli
from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution

CLEAN = "When Mary and John went to the store, John gave a drink to"
KEYS = {"model", "tokens", "position", "token", "logit", "heads", "rest", "scales"}
# The heads' sum plus the rest is the frozen-scale reading of the stream (float64); the model's logit is its final
# norm and a d_model-deep dot product in float32: they differ by about eps(float32) × √d_model × Σ|y_d u_d|, which
# Cauchy–Schwarz bounds by ‖y‖‖u‖ (y the final norm's output, u the LM head's row); a safety factor of 4 covers the
# norm's own rounding of y.
SAFETY = 4


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = cli.main(["logits", *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def logits_of(capsys, *argv) -> dict:
    code, out, err = run(capsys, CLEAN, "--model", "smollm2", "--json", "--quiet", *argv)
    assert code == 0, err
    return json.loads(out)


def sum_bound(smollm2, position: int, token_id: int) -> float:
    ids = torch.tensor([smollm2.encode(CLEAN, 64).ids])
    with torch.no_grad():
        y = smollm2.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, position].double()
    u = smollm2.model.lm_head.weight[token_id].double()
    d_model = y.shape[-1]
    return SAFETY * torch.finfo(torch.float32).eps * d_model**0.5 * float(y.norm() * u.norm())


def test_the_json_contract(capsys, smollm2):
    value = logits_of(capsys, "--token", " Mary")
    assert set(value) == KEYS
    assert value["tokens"][-1] == " to" and value["token"] == " Mary" and value["position"] == len(value["tokens"]) - 1
    assert value["tokens"][:2] == ["When", " Mary"]  # each token's own text, its leading space kept (issue 37)
    assert len(value["heads"]) == 30 and all(len(row) == 9 for row in value["heads"])
    total = sum(v for row in value["heads"] for v in row) + value["rest"]
    token_id = smollm2.token_ids(" Mary")[0]
    assert abs(total - value["logit"]) <= sum_bound(smollm2, value["position"], token_id)
    scales = value["scales"]
    assert set(scales) == {"join", "head_input", "logits", "final_norm"}
    assert scales["join"] == [{"value": 1.0, "verdict": "found"}] * 30
    assert scales["logits"] == {"value": 1.0, "verdict": "not applicable"}
    assert scales["final_norm"] == {"value": "RMSNorm", "gain": "w", "verdict": "found"}
    # the same figures as the library's, to the last bit: the same arithmetic in the same process
    found = direct_logit_attribution(smollm2, CLEAN, 64, " Mary")
    assert value["heads"] == found.per_head[-1].tolist() and value["rest"] == float(found.rest[-1])
    assert value["logit"] == float(found.logits[-1])


def test_a_negative_position_counts_from_the_end_and_the_default_token_is_the_top_prediction(capsys, smollm2):
    from_end = logits_of(capsys, "--position", "-3")
    n = len(from_end["tokens"])
    assert from_end["position"] == n - 3 and from_end == logits_of(capsys, "--position", str(n - 3))
    ids = torch.tensor([smollm2.encode(CLEAN, 64).ids])
    with torch.no_grad():
        top = int(smollm2.model(input_ids=ids).logits[0, n - 3].argmax())
    assert from_end["token"] == smollm2.token_texts([top])[0]
    code, out, _ = run(capsys, CLEAN, "--model", "smollm2", "--quiet", "--position", "-1")
    assert code == 0 and "top 10 heads by |contribution|" in out and "join (attention output into the stream)" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--model", "smollm2", "--token", "Marylebone"], "'Marylebone' is not one token: it encodes to 3"),
        (["--model", "smollm2", "--token", ""], "--token is empty"),
        (["--model", "smollm2", "--position", "14"], "position 14 is not in the text (0 to 13, or -14 to -1"),
        (["--model", "smollm2", "--position", "-15"], "position -15 is not in the text"),
        (["--model", "smollm2", "--position", "x"], "invalid int value"),
        (["--model", "no-such-model-here"], "no-such-model-here"),
        ([], "no LM head"),  # the embedded model
        (["--model", "minilm"], "no LM head"),
    ],
)
def test_bad_input_is_one_line(capsys, argv, words):
    code, out, err = run(capsys, CLEAN, "--quiet", *argv)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert words in err, err


def test_a_scale_that_could_not_be_told_is_one_line(capsys, monkeypatch):
    """A logit scale the pass could not tell (a soft cap) refuses: never taken as 1.0."""
    from attnviz.models.hf import read_outs
    from attnviz.models.readings import Reading

    monkeypatch.setattr(read_outs, "_logit_scale", lambda *_: Reading.not_determined())
    code, out, err = run(capsys, CLEAN, "--model", "smollm2", "--quiet")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "not its LM head's output times one scale" in err
