"""``attnviz.cli.main`` on generated argv: every subcommand, hostile text, wild option values, generated
config.json and mask files. The rule: an exit status the CLI documents, never a traceback, no hang past the time
limit or memory past the cap, and on a non-zero exit exactly one line on stderr starting "attnviz".

Each argv runs in a child forked from this process (``forked.py``: tens of milliseconds, where a fresh
``python -m attnviz`` spends 3 s importing torch); the encoding cases that need a real interpreter (non-UTF-8
argv, PYTHONIOENCODING=ascii) live in tests/integration. Generated paths (FIFOs, devices, loops, long names,
huge files) are in test_cli_paths.py.
"""

import io
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from safetensors.torch import save as save_safetensors

from tests.property import forked, ran
from tests.property.strategies import int_option, text

TMP = Path(tempfile.mkdtemp(prefix="attnviz-property-cli-"))


def check(argv: list[str], codes: set[int]) -> int:
    """Run ``argv`` in a bounded forked child (a hang or blow-up fails) and assert the CLI's rule; its exit status."""
    bundled = {"minilm", "smollm2"} & set(argv)  # the first load converts SmolLM2's GGUF in a fresh cache: a minute
    return forked.check(argv, codes, timeout=300 if bundled else forked.TIMEOUT_S).code


def options(draw, spec: dict[str, st.SearchStrategy]) -> list[str]:
    """Some of ``spec``'s options, each with a generated value (None: a flag), in a generated order."""
    names = draw(st.lists(st.sampled_from(sorted(spec)), unique=True, max_size=len(spec)))
    argv = []
    for name in names:
        argv.append(name)
        if spec[name] is not None:
            argv.append(draw(spec[name]))
    return argv


# small valid sizes keep a valid run under ~0.3 s; the bounds and far beyond them fail fast
EMBEDDED_OPTIONS = {
    "--max-tokens": int_option(0, 1, 8, 8192),
    "--d-model": int_option(2, 8, 16, 1024),
    "--n-head": int_option(1, 2, 64),
    "--n-kv-head": int_option(0, 1, 2, 64),
    "--n-layer": int_option(1, 12),
    "--seed": int_option(0, 2**32 - 1),
    "--device": st.sampled_from(["cpu", "auto", "tpu", ""]),
    "--causal": None,
    "--json": None,
    "--quiet": None,
}


@st.composite
def per_text_argv(draw):
    command = draw(st.sampled_from(["heads", "scaling"]))
    spec = dict(EMBEDDED_OPTIONS)
    if command == "scaling":
        spec["--threshold"] = st.one_of(st.floats(), st.sampled_from(["0", "1", "0.5", "x"])).map(str)
    return [command, draw(text), *options(draw, spec)]


@settings(max_examples=150)
@given(per_text_argv())
@example(["heads", "<script>alert(1)</script> __init__ [UNK]", "--model", "minilm", "--json", "--quiet"])
@example(["heads", "猫坐在垫子上 \u202e <|endoftext|>", "--model", "smollm2", "--quiet", "--max-tokens", "16"])
@example(["heads", "x", "--seed", str(2**64), "--quiet"])
@example(["heads", "\udcff\udcfe", "--quiet"])
def test_heads_and_scaling_never_trace(argv):
    ran("cli heads/scaling")
    check(argv, {0, 2})


METRICS = st.one_of(
    st.sampled_from(["loss", "kl", "logit-diff: Mary, John", "logit-diff:a,b", "logit-diff", "logit-diff:,", "x"]),
    text.map(lambda s: f"logit-diff:{s}"),
    text,
)
HEADS = st.one_of(st.sampled_from(["all", "0.0", "0.*", "1.1,0.0", "9.9", "0.01", "", ","]), text)


@settings(max_examples=80)
@given(text, text, METRICS, HEADS, st.lists(st.sampled_from(["--estimate", "--json", "--quiet"]), unique=True))
@example(
    "When Mary and John went, John gave it to",
    "When Mary and John went, Mary gave it to",
    "logit-diff: Mary, John",
    "5.*",
    ["--estimate", "--json", "--quiet"],
)
@example("a b", "a c", "loss", "all", ["--json"])
def test_patch_never_traces(clean, corrupt, metric, heads, flags):
    """``patch`` on the embedded model (no LM head: every metric exits 2 naming why) and, for examples, SmolLM2:
    hostile texts, metrics and head lists."""
    ran("cli patch")
    model = ["--model", "smollm2", "--max-tokens", "16"] if "Mary" in clean and "Mary" in metric else []
    check(["patch", clean, corrupt, "--metric", metric, "--heads", heads, *model, *flags], {0, 2})


CONFIG_VALUES = st.one_of(
    st.integers(-3, 70),
    st.sampled_from([0, 2**31, 2**63, 10**30, -(10**9)]),
    st.floats(),
    st.text(max_size=10),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-2, 4), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
CONFIG_KEYS = [
    "model_type",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "max_position_embeddings",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "text_config",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "multi_query",
    "n_head",
    "n_layer",
    "n_embd",
    "vocab_size",
    "intermediate_size",
]
MODEL_TYPES = st.sampled_from(["llama", "mistral", "gemma2", "gemma3_text", "deepseek_v3", "falcon", "gpt2", "qwen2"])


@st.composite
def config_json(draw) -> bytes:
    """A config.json: a plausible one with some fields broken, or garbage."""
    plausible = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64}
    raw = dict(plausible) if draw(st.booleans()) else {}
    raw.update(draw(st.dictionaries(st.sampled_from(CONFIG_KEYS), CONFIG_VALUES, max_size=6)))
    if draw(st.booleans()):
        raw["model_type"] = draw(MODEL_TYPES)
    if draw(st.booleans()):
        raw["text_config"] = dict(raw)
    kind = draw(st.sampled_from(["object", "object", "object", "other", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    value = raw if kind == "object" else draw(st.one_of(st.lists(st.integers()), st.text(), st.integers()))
    return json.dumps(value, allow_nan=True).encode()


def write(name: str, data: bytes) -> Path:
    folder = Path(tempfile.mkdtemp(dir=TMP))
    path = folder / name
    path.write_bytes(data)
    return path


@settings(max_examples=150)
@given(
    config_json(),
    st.sampled_from(["file", "folder", "missing"]),
    st.fixed_dictionaries(
        {},
        optional={
            "--seq-len": int_option(0, 1, 4096, 2**30),
            "--batch": int_option(0, 1, 2**20),
            "--block-size": int_option(0, 1, 16),
            "--dtype": st.sampled_from(["fp32", "bf16", "int4", "fp64", ""]),
            "--json": st.none(),
        },
    ),
)
def test_kv_cache_never_traces(data, where, opts):
    ran("cli kv-cache")
    path = write("config.json", data)
    target = {"file": path, "folder": path.parent, "missing": path.parent / "nope.json"}[where]
    argv = ["kv-cache", str(target)]
    for name, value in opts.items():
        argv += [name] if value is None else [name, value]
    check(argv, {0, 2})


DTYPES = [np.bool_, np.int8, np.uint8, np.int64, np.float16, np.float32, np.float64, np.complex64]


@st.composite
def mask_file(draw) -> tuple[str, bytes]:
    """A mask upload: an array of an odd shape or dtype in one of the four formats, or bytes named like one."""
    suffix = draw(st.sampled_from([".npy", ".pt", ".safetensors", ".csv", ".txt", ".NPY", ""]))
    if draw(st.integers(0, 4)) == 0:
        return suffix, draw(st.binary(max_size=200))
    shape = tuple(draw(st.lists(st.integers(0, 6), max_size=4)))
    dtype = draw(st.sampled_from(DTYPES))
    values = draw(st.sampled_from(["zeros", "ones", "tril", "random", "neginf", "nan", "big"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    array = {
        "zeros": np.zeros(shape),
        "ones": np.ones(shape),
        "tril": np.broadcast_to(np.tril(np.ones((shape[-1],) * 2)), shape[:-2] + (shape[-1],) * 2)
        if len(shape) >= 2
        else np.ones(shape),
        "random": rng.integers(-2, 2, size=shape).astype(float),
        "neginf": np.where(rng.random(shape) < 0.5, 0.0, -np.inf),
        "nan": np.full(shape, np.nan),
        "big": np.full(shape, -1e30),
    }[values]
    with np.errstate(all="ignore"):
        array = np.ascontiguousarray(array.astype(dtype))
    buffer = io.BytesIO()
    fmt = suffix.lower()
    if fmt == ".pt":
        torch.save(torch.from_numpy(array.copy()), buffer)
    elif fmt == ".safetensors" and dtype is not np.complex64:
        buffer.write(save_safetensors({"mask": torch.from_numpy(array.copy())}))
    elif fmt == ".csv":
        rows = array.reshape(array.shape[0] if array.ndim > 1 else 1, -1) if array.size else np.zeros((0, 0))
        np.savetxt(buffer, rows, delimiter=",")
    else:
        np.save(buffer, array)
    data = buffer.getvalue()
    if data and draw(st.booleans()):  # truncate or flip a byte: a damaged file
        cut = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:cut] if draw(st.booleans()) else data[:cut] + bytes([data[cut] ^ 0xFF]) + data[cut + 1 :]
    return suffix, data


@settings(max_examples=180)
@given(
    mask_file(),
    st.fixed_dictionaries(
        {},
        optional={
            "--expect": st.one_of(
                st.sampled_from(["causal", "padding", "causal+padding", "sliding:2", "prefix:1", "sliding:0"]),
                st.sampled_from(["sliding:", "prefix:-1", "sliding:99999999999999999999", "x"]),
                st.text(max_size=10),
            ),
            "--lengths": st.one_of(
                st.lists(st.integers(-2, 8), min_size=1, max_size=4).map(lambda xs: ",".join(map(str, xs))),
                st.text(max_size=10),
                st.just(str(10**30)),
            ),
            "--side": st.sampled_from(["right", "left", "middle"]),
            "--convention": st.sampled_from(["keep", "block", "additive"]),
            "--json": st.none(),
        },
    ),
)
def test_mask_doctor_never_traces(upload, opts):
    ran("cli mask-doctor")
    suffix, data = upload
    argv = ["mask-doctor", str(write("mask" + suffix, data))]
    for name, value in opts.items():
        argv += [name] if value is None else [name, value]
    check(argv, {0, 1, 2})


@settings(max_examples=60)
@given(
    st.fixed_dictionaries(
        {"--steps": st.one_of(st.sampled_from(["0", "-1", "2001", str(2**64), "1.5", "", "x"]))},
        optional={"--seed": int_option(0, 2**32 - 1), "--json": st.none()},
    )
)
def test_train_scale_bad_arguments_fail_fast(opts):
    """Only steps that must be refused: a valid run trains for 14 s or more."""
    ran("cli train-scale")
    argv = ["train-scale"]
    for name, value in opts.items():
        argv += [name] if value is None else [name, value]
    assert check(argv, {2}) == 2


@settings(max_examples=12)
@given(st.lists(st.one_of(st.integers(-3, 2).map(str), st.sampled_from(["x", "1.5", ""])), min_size=1, max_size=3))
def test_bench_small_or_bad_sizes(tokens):
    """The sdpa suite only, at sizes it finishes in about a second (the capture suite takes 30 s at any size)."""
    ran("cli bench")
    check(["bench", "--suite", "sdpa", "--no-memory", "--json", "--sdpa-tokens", *tokens], {0, 2})


@settings(max_examples=60)
@given(st.lists(st.one_of(text, st.sampled_from(["--help", "--version", "heads", "kv-cache", "-x"])), max_size=4))
def test_any_argv_at_top_level(argv):
    """Whatever comes first: a subcommand, an option or garbage. Bare ``python -m attnviz`` is one usage line and
    exit 2, like any other argv it cannot run."""
    assume(not argv or argv[0] not in ("heads", "scaling"))  # the per-text commands, generated above
    ran("cli top level")
    code = check(argv, {0, 2})
    if not argv:
        assert code == 2
