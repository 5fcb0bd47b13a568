"""Two views agree, or the page says why (issue 36, item 7), through AppTest on the embedded model: the sweep's and
exact patching's predicted time beside the time they took, and the estimate beside the exact effect head by head.

Each test reads its own text: results are cached by text across the tests of one process."""

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]
BOUND = "beyond the stated bound"


def burn(seconds: float) -> None:
    """Keep this thread computing for ``seconds``: work the prediction did not count, CPU time and all."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def open_page(page: str, text: str, n_layer: int = 8, n_head: int = 8) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input(text).run()
    at.number_input(key="n_layer").set_value(n_layer).run()
    at.number_input(key="n_head").set_value(n_head).run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def notes(at: AppTest) -> list[str]:
    return [element.value for kind in ("caption", "info", "warning") for element in getattr(at, kind)]


def test_the_sweep_that_took_its_predicted_time_says_so(monkeypatch):
    from attnviz.labs.heads_matter import schedule

    monkeypatch.setattr(schedule, "PASS_SECONDS", 1e9)  # 16 rows a pass (bytes alone), however busy this machine is
    at = open_page("pages/ablation.py", "The dog ran in the park because it was happy, " * 3)
    at.button(key="ablation_sweep_start").click().run()  # 64 heads: two of the four passes were run by the timing
    assert not at.exception, at.exception
    said = notes(at)
    assert any(n.startswith("Predicted ") and "within the stated bound (a factor of 1.5" in n for n in said), said
    assert not any(BOUND in n for n in said), said
    # an encoder: its estimate is a norm and the sweep's a cosine distance, so they are compared by rank only
    assert any("compared by rank only" in n for n in said), said


def test_the_sweep_that_took_longer_says_by_how_much_and_why(monkeypatch):
    from attnviz.labs.heads_matter import ablation, schedule

    monkeypatch.setattr(schedule, "PASS_SECONDS", 1e9)
    at = open_page("pages/ablation.py", "The bird sang in the tree because it was spring, " * 3)
    piece = ablation.sweep_piece

    def slower(*args, **kwargs):  # after the timing priced the passes: each costs 0.7 s more than it said
        burn(0.7)
        return piece(*args, **kwargs)

    monkeypatch.setattr(ablation, "sweep_piece", slower)
    at.button(key="ablation_sweep_start").click().run()
    assert not at.exception, at.exception
    said = [info.value for info in at.info if BOUND in info.value]
    assert len(said) == 1, notes(at)
    assert "× longer" in said[0] and "The prediction itself was off, most of all for the passes from layer" in said[0]


def _fake_estimate(sign: float):
    """An estimate equal to the exact fractions times ``sign``: agreeing exactly, or flipped head by head."""
    from attnviz.labs.heads_matter import attribution, patching

    def estimate(source, pair, clean, corrupt):
        heads = [(layer, head) for layer in range(pair.n_layer) for head in range(pair.n_head)]
        exact = patching.patch_heads(source, pair, heads)
        values = [
            [sign * pair.fraction(exact[(layer, head)]) for head in range(pair.n_head)] for layer in range(pair.n_layer)
        ]
        return attribution.Estimate(values, 0.01, "faked", kind="patch")

    return estimate


def test_patching_every_head_shows_its_time_and_an_agreeing_estimate(monkeypatch):
    from attnviz.labs.heads_matter import attribution

    monkeypatch.setattr(attribution, "estimate_patching", _fake_estimate(1.0))
    at = open_page("pages/patching.py", "the cat sat on the warm mat")
    at.text_area(key="patch_corrupt").input("the dog sat on the warm mat").run()
    at.button(key="patch_start").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    said = notes(at)
    assert any(n.startswith("Head by head, the estimate agrees with the exact effect on all 64 heads") for n in said)
    assert any(n.startswith("Predicted ") and "within the stated bound" in n for n in said), said
    assert not any("disagree" in n or BOUND in n for n in said), said


def test_an_estimate_of_the_opposite_sign_is_flagged(monkeypatch):
    from attnviz.labs.heads_matter import attribution

    monkeypatch.setattr(attribution, "estimate_patching", _fake_estimate(-1.0))
    at = open_page("pages/patching.py", "the cat sat on the soft mat")
    at.text_area(key="patch_corrupt").input("the dog sat on the soft mat").run()
    at.button(key="patch_confirm").click().run()  # the top 10, exactly
    assert not at.exception, at.exception
    flagged = [w.value for w in at.warning if "disagree in sign" in w.value]
    assert len(flagged) == 1 and "on 10 heads the estimate did not flag" in flagged[0], [w.value for w in at.warning]


def test_the_ablation_pages_estimate_of_an_lm_is_compared_head_by_head(tmp_path, smollm2, monkeypatch):
    """An LM's estimate and the sweep both give each head's loss change: a flipped estimate is flagged head by head
    (its ranking by |effect| alone could not tell)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnviz.labs.heads_matter import ablation, attribution
    from tests.integration.tiny_models import tiny

    def flipped(source, text, max_tokens, mode="zero", graddrop=False):
        sweep = ablation.ablation_sweep(source, text, max_tokens, mode)
        return attribution.Estimate([[-v for v in row] for row in sweep.loss_change], 0.01, "faked", kind="loss")

    monkeypatch.setattr(attribution, "estimate_ablation", flipped)
    folder = tiny(tmp_path / "llama", smollm2, LlamaConfig, LlamaForCausalLM)  # 2 layers x 4 heads
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input("The cat sat on the mat because it was tired.").run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    at.switch_page("pages/ablation.py").run()
    assert not at.exception, at.exception
    flagged = [w.value for w in at.warning if "disagree in sign" in w.value]
    assert len(flagged) == 1 and flagged[0].startswith("**Estimate and exact disagree in sign** on "), notes(at)
    assert not any("compared by rank only" in n for n in notes(at))
