"""Where the estimate is wrong, on the Ablation page (AppTest, a small random Llama: 2 layers × 4 heads, whose sweep
the timing pass completes): once the exact values exist the table follows them, not the estimate, marks each head
the estimate got wrong, and says in one sentence what each flag caught; each ranking says what it measures."""

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]


def test_the_ablation_table_sorts_by_exact_and_marks_the_wrong_heads(tmp_path, smollm2, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnviz.labs.heads_matter import ablation, attribution
    from attnviz.labs.heads_matter.agreement import by_size
    from tests.integration.tiny_models import tiny

    chosen: dict = {}

    def wrong(source, text, max_tokens, mode="zero", graddrop=False):
        """The exact loss changes, with the 2nd largest flipped and the 3rd five times too large (so the estimate
        ranks it first); the 3rd flagged cancelling (a catch), the 4th saturated (a right head named)."""
        sweep = ablation.ablation_sweep(source, text, max_tokens, mode)
        order = [(layer, head) for layer, head, _ in by_size(sweep.loss_change)]
        chosen.update(order=order, exact=sweep.loss_change)
        factor = {order[1]: -1.0, order[2]: 5.0}
        values = [
            [v * factor.get((layer, h), 1.0) for h, v in enumerate(row)] for layer, row in enumerate(sweep.loss_change)
        ]
        return attribution.Estimate(values, 0.01, "faked", [order[3]], [order[2]], "loss")

    monkeypatch.setattr(attribution, "estimate_ablation", wrong)
    folder = tiny(tmp_path / "llama", smollm2, LlamaConfig, LlamaForCausalLM)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input("The dog slept by the door until the rain stopped.").run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    at.switch_page("pages/ablation.py").run()
    assert not at.exception, at.exception

    tables = [df.value for df in at.dataframe if "estimate wrong?" in list(df.value.columns)]
    assert len(tables) == 1, [list(df.value.columns) for df in at.dataframe]
    shown: pd.DataFrame = tables[0]
    assert list(shown.columns) == [
        "layer",
        "head",
        "estimate, Δ loss (nats)",
        "exact, Δ loss (nats)",
        "estimate wrong?",
    ]
    order = chosen["order"]
    assert [(int(r.layer), int(r.head)) for r in shown.itertuples()] == order  # the exact order, not the estimate's
    marks = dict(zip(zip(shown["layer"], shown["head"], strict=True), shown["estimate wrong?"], strict=True))
    assert marks[order[1]] == "sign wrong" and marks[order[2]] == "over 2× off"
    assert {head for head, mark in marks.items() if mark} == {order[1], order[2]}

    said = [info.value for info in at.info if info.value.startswith("Against the exact values of 8 heads")]
    assert len(said) == 1, [info.value for info in at.info]
    assert "the estimate is wrong on 2 (1 in sign, 1 over 2× off" in said[0]
    assert (
        "saturated 0 (right heads it also named: 1), cancelling 1 (right heads named: 0); 1 no flag named." in said[0]
    )
    captions = [caption.value for caption in at.caption]
    assert any(c.startswith("Ranked by Δ loss (nats): which heads this text's loss depends on") for c in captions)
    assert any(
        c.startswith("Ranked by mean KL (nats): which heads change the next-token distributions") for c in captions
    )


def test_graddrop_on_the_page_ranks_by_its_score_and_its_flag_is_checked(tmp_path, smollm2):
    """The real estimate with GradDrop ticked: its score is a column, its flag is counted in the sentence, and the
    rows still follow the exact values once the sweep ran."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnviz.labs.heads_matter import ablation
    from attnviz.labs.heads_matter.agreement import by_size
    from attnviz.models.hf.loading import load_hf_source
    from tests.integration.tiny_models import tiny

    text = "The bird sang in the tree because it was spring."
    folder = tiny(tmp_path / "llama", smollm2, LlamaConfig, LlamaForCausalLM, initializer_range=0.2)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.text_area(key="text").input(text).run()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(folder)).run()
    at.switch_page("pages/ablation.py").run()
    at.checkbox(key="ablation_graddrop").check().run()
    assert not at.exception, at.exception
    assert any(c.value.startswith("GradDrop ran: 2 more backward passes") for c in at.caption)
    (shown,) = [df.value for df in at.dataframe if "GradDrop score (size)" in list(df.value.columns)]
    exact = ablation.ablation_sweep(load_hf_source(str(folder)), text, 64, "zero").loss_change
    assert [(int(r.layer), int(r.head)) for r in shown.itertuples()] == [(la, h) for la, h, _ in by_size(exact, 10)]
    (said,) = [info.value for info in at.info if info.value.startswith("Against the exact values of 8 heads")]
    assert "GradDrop " in said.split("the flags caught:")[1]
