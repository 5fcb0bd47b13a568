"""Hostile text in token labels and messages: invisible characters made visible, Markdown escaped."""

from attnviz.core.token_display import markdown_text, markdown_tokens, shown_text, typed_special, visible_text
from attnviz.core.tokenizer import Token
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from attnviz.models.record import GenerationRecord


def test_bidi_zero_width_bom_and_controls_are_shown_as_code_points():
    assert visible_text("\u202e(1/2)") == "⟨U+202E⟩(1/2)"
    assert visible_text("a\u200bb\ufeff\x1f") == "a⟨U+200B⟩b⟨U+FEFF⟩⟨U+001F⟩"
    assert visible_text("\u2028\u2066x\u2069") == "⟨U+2028⟩⟨U+2066⟩x⟨U+2069⟩"


def test_emoji_keep_the_joiners_that_build_them_and_spaces_stay_as_before():
    family = "👨\u200d👩\u200d👧"
    assert visible_text(family) == family
    assert visible_text("❤\ufe0f") == "❤\ufe0f"
    assert shown_text("  ") == "␣" and shown_text("\n") == "⏎" and shown_text(" cat ") == "cat"
    assert shown_text("\u200b") == "⟨U+200B⟩"


def test_the_embedded_model_labels_invisible_tokens_but_embeds_what_was_typed():
    model = EmbeddedModel(EmbeddedConfig())
    tokens = model.encode("\u202e(1/2) a\u200bb", 50).tokens
    assert [t.text for t in tokens][:2] == ["⟨U+202E⟩", "("]
    assert tokens[0].raw == "\u202e"
    record = model.run("\u202e(1/2) a\u200bb", 50)
    assert record.labels()[0] == "0 ⟨U+202E⟩"
    # the display form is not what the model reads: a typed "⟨U+202E⟩" is other text, with other attention
    other = model.run("⟨U+202E⟩(1/2) a\u200bb", 50)
    assert other.tokens[0].text != record.tokens[0].text


def test_markdown_escapes_streamlit_colon_syntax():
    assert markdown_text(":smile: :red[x]") == r"\:smile\: \:red\[x\]"
    tokens = [Token("__init__", 0, 8), Token("**x**", 9, 14)]
    assert markdown_tokens(tokens, 1) == r"\_\_init\_\_ …"
    assert markdown_tokens(tokens, 64) == r"\_\_init\_\_ · \*\*x\*\*"


def test_typed_special_tokens_are_listed_once():
    tokens = [
        Token("[UNK]", 0, 5, raw="[UNK]", typed_special=True),
        Token("a", 6, 7),
        Token("[UNK]", 8, 13, raw="[UNK]", typed_special=True),
    ]
    assert typed_special(tokens) == ["[UNK]"]


def test_generation_truncation_reason_says_when_max_tokens_leaves_no_room():
    def gen(n_prompt, n_input, n_generated):
        return GenerationRecord(
            record=None, n_prompt=n_prompt, generated_ids=[1] * n_generated, text="", n_prompt_input=n_input
        )

    assert gen(10, 10, 12).prompt_cut(context=256, n_new=12) is None
    fits = gen(4, 20, 12)
    assert fits.prompt_cut(context=16, n_new=12) == "room" and not fits.past_context(16)
    cramped = gen(1, 20, 12)  # Max tokens 8 < 12 to generate: one prompt token read all the same
    assert cramped.prompt_cut(context=8, n_new=12) == "no_room" and cramped.past_context(8)
