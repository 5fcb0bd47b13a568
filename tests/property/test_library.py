"""The library on generated input: attention against torch's SDPA, mask files from arbitrary bytes, config.json
from arbitrary dicts, token labels from arbitrary text. Each raises its documented error type or nothing."""

import contextlib
import html
import re
import unicodedata

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from attnviz.core.attention import fused_attention, scaled_dot_product_attention
from attnviz.core.token_display import MARKDOWN_SPECIAL, markdown_text, plain_text
from attnviz.core.tokenizer import tokenize
from attnviz.errors import ConfigError, MaskFileError
from attnviz.labs.kv.config import KVConfig, config_from_dict, parse_config_json
from attnviz.labs.kv.memory import estimate
from attnviz.labs.masks.doctor import diagnose, parse_expect, parse_lengths
from attnviz.labs.masks.reading import read_mask_bytes
from attnviz.models.embedded.config import EmbeddedConfig
from attnviz.models.embedded.model import EmbeddedModel
from tests.property import ran
from tests.property.strategies import any_char, text
from tests.property.test_cli import config_json, mask_file
from tests.tolerances import bound

# what a browser can send: text without lone surrogates (the CLI's surrogate-escaped argv is test_cli's)
visible_text = st.one_of(st.text(max_size=60), text.filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)))
EMBEDDED = EmbeddedModel(EmbeddedConfig())
TOLERANCE = bound("attention")  # float32, two routes (tests/tolerances.py)


@st.composite
def attention_inputs(draw):
    B, n_kv, rep = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    q_len, k_len, head_dim = draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 8))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    scale = draw(st.sampled_from([0.1, 1.0, 10.0]))
    q = torch.randn(B, n_kv * rep, q_len, head_dim, generator=gen) * scale  # (B, n_head, q_len, head_dim)
    k = torch.randn(B, n_kv, k_len, head_dim, generator=gen) * scale  # (B, n_kv_head, k_len, head_dim)
    v = torch.randn(B, n_kv, k_len, head_dim, generator=gen)  # (B, n_kv_head, k_len, head_dim)
    full = (B, n_kv * rep, q_len, k_len)
    kind = draw(st.sampled_from(["none", "bool", "float", "int", "odd"]))
    mask = None
    if kind != "none":
        dims = draw(st.integers(1, 4))
        shape = [1 if draw(st.booleans()) else n for n in full[4 - dims :]]
        if kind == "odd":
            shape = draw(st.lists(st.integers(0, 7), min_size=0, max_size=5))
        keep = torch.rand(shape, generator=gen) < 0.7
        mask = {
            "bool": keep,
            "odd": keep,
            "float": torch.where(keep, 0.0, draw(st.sampled_from([float("-inf"), -1e9, torch.finfo().min]))),
            "int": keep.to(draw(st.sampled_from([torch.int64, torch.uint8, torch.int8]))),
        }[kind]
    causal = draw(st.booleans()) and q_len <= k_len
    return q, k, v, mask, causal, full


def broadcasts(mask: torch.Tensor, full: tuple[int, ...]) -> bool:
    if not 1 <= mask.dim() <= 4:
        return False
    try:
        return torch.broadcast_shapes(mask.shape, full) == torch.Size(full)
    except RuntimeError:
        return False


@settings(max_examples=150)
@given(attention_inputs())
def test_attention_matches_torch_or_refuses_clearly(inputs):
    ran("library attention")
    q, k, v, mask, causal, full = inputs
    if mask is not None and not (mask.dtype == torch.bool or mask.dtype.is_floating_point):
        try:
            scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
        except TypeError:
            return
        raise AssertionError(f"an integer {mask.dtype} mask was accepted")
    if mask is not None and not broadcasts(mask, full):
        for path in (scaled_dot_product_attention, fused_attention):
            try:
                path(q, k, v, mask, is_causal=causal)
            except ValueError:
                continue
            raise AssertionError(f"{path.__name__} took a mask of shape {tuple(mask.shape)} for {full}")
        return
    output, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
    assert output.shape == q.shape and weights.shape == full
    assert torch.isfinite(output).all() and torch.isfinite(weights).all()
    # every row is a convex combination of the values: weights in [0, 1] summing to 1 (0 for a row with no key),
    # so each output lies between the smallest and largest value its row attends to, dimension by dimension
    rows = weights.sum(-1)  # (B, n_head, q_len)
    assert ((weights >= 0) & (weights <= 1 + TOLERANCE)).all()
    attended = rows > 0
    assert ((rows[attended] - 1).abs() <= TOLERANCE).all() and (output[~attended] == 0).all()
    rep = q.shape[1] // k.shape[1]
    values = v.repeat_interleave(rep, 1)[:, :, None]  # (B, n_head, 1, k_len, head_dim)
    seen_keys = (weights > 0)[..., None]  # (B, n_head, q_len, k_len, 1)
    low = torch.where(seen_keys, values, torch.inf).amin(-2)  # (B, n_head, q_len, head_dim)
    high = torch.where(seen_keys, values, -torch.inf).amax(-2)
    inside = (output >= low - TOLERANCE) & (output <= high + TOLERANCE)
    assert inside[attended].all(), "an output left the hull of the values it attends to"
    fused = fused_attention(q, k, v, mask, is_causal=causal)
    assert torch.allclose(fused, output, atol=TOLERANCE), (fused - output).abs().max()
    kx, vx = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)  # (B, n_head, k_len, head_dim)
    mask = None if mask is None else mask.expand(full)  # torch's SDPA reads no 1-D mask
    if causal:
        causal_keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        if mask is None:
            mask = causal_keep
        elif mask.dtype == torch.bool:
            mask = mask & causal_keep
        else:
            mask = mask.masked_fill(~causal_keep, float("-inf"))
    reference = F.scaled_dot_product_attention(q, kx, vx, attn_mask=mask)  # NaN on a row with no key
    seen = torch.isfinite(reference).all(-1) & (rows > 0)
    assert torch.allclose(output[seen], reference[seen], atol=TOLERANCE), (output[seen] - reference[seen]).abs().max()


@settings(max_examples=250)
@given(
    st.one_of(
        mask_file(), st.tuples(st.sampled_from([".npy", ".pt", ".safetensors", ".csv"]), st.binary(max_size=300))
    ),
    st.text(max_size=12),
)
def test_read_mask_bytes_raises_only_mask_file_error(upload, stem):
    ran("library read_mask_bytes")
    suffix, data = upload
    try:
        loaded = read_mask_bytes(data, stem + suffix)
    except MaskFileError:
        return
    assert loaded.mask.dim() in (2, 3) and (loaded.mask.dtype == torch.bool or loaded.mask.dtype.is_floating_point)
    for convention in ("keep", "block", None):
        with contextlib.suppress(ValueError):
            diagnose(loaded.mask, convention=None if loaded.mask.dtype.is_floating_point else convention)


@settings(max_examples=150)
@given(st.text(max_size=20), st.text(max_size=20))
def test_expect_and_lengths_parse_or_say_why(expect, lengths):
    ran("library parse_expect/parse_lengths")
    for parse, value in ((parse_expect, expect), (parse_lengths, lengths)):
        try:
            parse(value)
        except ValueError as err:
            assert str(err) and "\n" not in str(err)


@settings(max_examples=200)
@given(config_json(), st.integers(-2, 2**31), st.sampled_from(["bf16", "int4", "fp32", "x"]))
def test_config_json_gives_config_error_only(data, seq_len, dtype):
    ran("library kv config")
    try:
        cfg = config_from_dict(parse_config_json(data, "config.json"), name="config.json")
    except ConfigError as err:
        assert str(err) and "\n" not in str(err)
        return
    try:
        result = estimate(cfg, 1, seq_len, dtype)
    except ValueError:
        return
    assert result.total_bytes >= 0


BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # unquantised: no group scales, so the formula is plain


@st.composite
def kv_configs(draw) -> KVConfig:
    """Any cache geometry: MHA, GQA or MQA over full, sliding and linear layers, or MLA latents."""
    n_layer, n_kv_head = draw(st.integers(1, 96)), draw(st.integers(1, 16))
    n_head, head_dim = n_kv_head * draw(st.integers(1, 8)), draw(st.sampled_from([8, 64, 80, 128, 256]))
    if draw(st.integers(0, 3)) == 0:
        rank, rope = draw(st.integers(16, 1024)), draw(st.sampled_from([32, 64]))
        return KVConfig(
            "mla", n_layer, n_head, n_head, head_dim, n_head * head_dim, ("mla",) * n_layer, None, rank, rope
        )
    kinds = tuple(draw(st.lists(st.sampled_from(["full", "sliding", "linear"]), min_size=n_layer, max_size=n_layer)))
    window = draw(st.integers(1, 8192)) if "sliding" in kinds else None
    return KVConfig("gqa", n_layer, n_head, n_kv_head, head_dim, n_head * head_dim, kinds, window)


def formula(cfg: KVConfig, batch: int, seq_len: int, dtype: str) -> int:
    """The KV cache by hand: K and V rows of every KV head (one latent row under MLA) for each token a layer holds."""
    total = 0
    for kind in cfg.layer_kinds:
        per_token = {
            "full": 2 * cfg.n_kv_head * cfg.head_dim,
            "sliding": 2 * cfg.n_kv_head * cfg.head_dim,
            "linear": 0,
            "mla": (cfg.kv_lora_rank or 0) + (cfg.qk_rope_head_dim or 0),
        }[kind]
        held = min(seq_len, cfg.window) if kind == "sliding" else seq_len
        total += batch * held * per_token * BYTES[dtype]
    return total


@settings(max_examples=200)
@given(kv_configs(), st.integers(1, 2**20), st.integers(1, 64), st.sampled_from(list(BYTES)))
def test_a_kv_estimate_is_the_formula_and_never_shrinks_as_the_text_grows(cfg, seq_len, batch, dtype):
    ran("library kv estimate")
    result = estimate(cfg, batch, seq_len, dtype)
    assert result.total_bytes == formula(cfg, batch, seq_len, dtype) == sum(result.per_layer)
    assert result.bytes_per_token == formula(cfg, 1, 1, dtype)  # one token, every layer, before any window
    longer = estimate(cfg, batch, seq_len + 1, dtype).total_bytes
    assert longer >= result.total_bytes
    if all(kind in ("full", "mla") for kind in cfg.layer_kinds):
        assert longer > result.total_bytes  # no window, no linear layer: every token costs
    assert estimate(cfg, 2 * batch, seq_len, dtype).total_bytes == 2 * result.total_bytes


@settings(max_examples=200)
@given(st.text(any_char, max_size=80) | text)
def test_markdown_text_renders_no_markup(value):
    ran("library markdown_text/plain_text")
    escaped = markdown_text(value)
    assert re.sub(r"\\.", "", escaped, flags=re.S).strip(MARKDOWN_SPECIAL) == re.sub(r"\\.", "", escaped, flags=re.S)
    bare = re.sub(r"\\.", "", escaped, flags=re.S)
    assert not set(bare) & set(MARKDOWN_SPECIAL), escaped
    rendered = MarkdownIt("commonmark").renderInline(escaped)
    assert not re.search(r"<(?!br\s*/?>)[a-z/]", rendered), rendered  # no tag but a line break
    assert "<" not in plain_text(value) and ">" not in plain_text(value)
    assert html.unescape(plain_text(value)) == value


@settings(max_examples=40)
@given(st.sampled_from([":smile:", ":sunglasses:", ":cat:", ":material/home:", ":red[x]"]), st.text(max_size=10))
def test_markdown_text_hides_streamlit_shortcodes(code, around):
    """Streamlit's Markdown also reads :emoji: shortcodes, :material/icon: and :color[text]."""
    ran("library markdown_text shortcodes")
    bare = re.sub(r"\\.", "", markdown_text(around + code + around), flags=re.S)
    assert not re.search(r":[a-z]+(/[a-z]+)?:", bare), markdown_text(around + code + around)


INVISIBLE = {"Cc", "Zl", "Zp", "Cs"}
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_labels(tokens, value: str) -> None:
    for token in tokens:
        assert token.text.strip(), (value, token)
        assert 0 <= token.start <= token.end <= len(value), (value, token)
        bad = [ch for ch in token.text if unicodedata.category(ch) in INVISIBLE or ch in BIDI]
        assert not bad, (value, token.text, [f"U+{ord(c):04X}" for c in bad])


@settings(max_examples=150)
@given(st.text(any_char, max_size=80) | text)
def test_embedded_tokenizer_keeps_every_character(value):
    ran("library embedded tokenizer")
    tokens = tokenize(value)
    assert all(value[token.start : token.end] == token.text != "" for token in tokens)


@settings(max_examples=40)
@given(visible_text)
def test_embedded_labels_are_visible(value):
    ran("library embedded labels")
    record = EMBEDDED.run(value, 24)
    assert len(record.tokens) == record.q_len
    if not value.strip():
        assert record.q_len == 0  # blank text: no tokens, so no label to show
    check_labels(record.tokens, value)


@settings(max_examples=40)
@given(visible_text)
def test_minilm_labels_one_per_token(minilm, value):
    ran("library minilm labels")
    encoding = minilm.encode(value, 64)
    assert len(encoding.tokens) == len(encoding.ids) >= 2  # [CLS] ... [SEP]
    check_labels(encoding.tokens, value)


@settings(max_examples=40)
@given(visible_text)
def test_smollm2_labels_one_per_token(smollm2, value):
    ran("library smollm2 labels")
    encoding = smollm2.encode(value, 64)
    assert len(encoding.tokens) == len(encoding.ids)
    check_labels(encoding.tokens, value)
