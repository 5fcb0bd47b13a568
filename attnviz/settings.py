"""Every default and limit in one place: the sidebar, the CLI and ``EmbeddedConfig`` read these.

A limit here is a promise: at every value a user can set, the capture stays
within the memory bound that ``benchmarks/`` measures (see docs/long-inputs.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from attnviz.i18n.message import msg

EXAMPLES = {
    "English: the cat": "The cat sat on the mat because it was tired.",
    "English: pronouns": "The trophy did not fit in the suitcase because it was too big.",
    "中文: 猫": "猫坐在垫子上，因为它累了。",
    "中文: 注意力": "注意力机制让每个词都能看到句子里的其他词。",
    "Mixed 中英 + emoji": "Attention 注意力 is all you need 👍🏽!",
}
DEFAULT_EXAMPLE = "English: the cat"
CHINESE_EXAMPLES = ("中文: 猫", "中文: 注意力")
STAT_DIGITS = 6  # a per-head statistic as `heads --json` prints it and a corpus run stores it: rounded to 6 places
UNKNOWN_SHARE_WARNING = 0.2  # warn when this share of a text's tokens or more are the tokenizer's unknown token
DEFAULT_TEXT = EXAMPLES[DEFAULT_EXAMPLE]


@dataclass(frozen=True)
class Bound:
    """An integer setting: its default and the inclusive range a user may choose from."""

    name: str
    default: int
    low: int
    high: int

    def check(self, value: int) -> int:
        """``value`` if it lies in range; ValueError naming the setting and the range otherwise."""
        if not self.low <= value <= self.high:
            raise ValueError(msg("bounds.out_of_range", name=self.name, value=value, low=self.low, high=self.high))
        return value


MAX_TOKENS = Bound("max_tokens", 256, 1, 8192)
D_MODEL = Bound("d_model", 64, 2, 1024)
N_HEAD = Bound("n_head", 4, 1, 64)
N_KV_HEAD = Bound("n_kv_head", 0, 0, 64)  # 0: as many as n_head (MHA)
N_LAYER = Bound("n_layer", 2, 1, 12)
SEED = Bound("seed", 0, 0, 2**32 - 1)
GENERATE_TOKENS = Bound("tokens to generate", 12, 1, 64)

# pages that hold every weight of a short input, or many rows of one, read at most this much
MAX_TARGET_GENERATED = 64  # the most target tokens an encoder-decoder may write itself (greedy) for a view
TARGET_GENERATED = 16  # ... and how many by default (the sidebar, the Generation page, heads without --target)
PARITY_TOKENS = 512  # parity compares every weight of every layer against the eager reference
PADDING_TOKENS = 384  # per sentence on the Padding page: each drawn whole, about 47 MB a SmolLM2 sentence
PADDING_SENTENCES = 8
GENERATION_CONTEXT = 2048  # prompt + generated tokens on the Generation page

# the command line prints a bug's traceback on stderr, before its one line, only when this is set to 1
TRACEBACK_ENV = "ATTNVIZ_TRACEBACK"

# the shared result cache of a server (records, batches, generations, parity): an LRU bounded in bytes
CACHE_MB_ENV = "ATTNVIZ_CACHE_MB"
CACHE_MB_DEFAULT = 2048
CACHE_ENTRIES = 32


def cache_bytes() -> int:
    """The result cache's bound in bytes (ATTNVIZ_CACHE_MB, default CACHE_MB_DEFAULT); also what one record
    from full weights (a model's eager attention) may hold."""
    return int(os.environ.get(CACHE_MB_ENV, CACHE_MB_DEFAULT)) * 2**20


# Admission (attnviz/core/admission.py): one process-wide budget, in MB, for the memory of the heavy work in flight
# (captures, scaling, generation, …); a request that does not fit waits in a FIFO queue. Without ATTNVIZ_MEMORY_MB
# the budget is the container's memory limit (cgroup v2 or v1), else the machine's RAM, less the result cache's bound
# (ATTNVIZ_CACHE_MB) and MODELS_RESERVE_MB: the process's base (Python, torch, Streamlit: ~0.6 GB) with every bundled
# model loaded (SmolLM2 0.54 GB float32, MiniLM 0.09 GB) and room for a browser session's page state
MEMORY_MB_ENV = "ATTNVIZ_MEMORY_MB"
MODELS_RESERVE_MB = 1536
# requests running at once: several torch jobs in one process share its cores and each one's thread team, so past
# one job per two cores they slow each other down far more than they gain (4 SmolLM2 captures at once on 2 cores:
# each 15x slower than alone). ATTNVIZ_MAX_RUNNING overrides (a whole number >= 1)
MAX_RUNNING_ENV = "ATTNVIZ_MAX_RUNNING"
CORES_PER_RUNNING = 2
# on a machine with accelerators the models run there: two requests a device keep it busy while the other moves
# its results to the host (their device memory is admitted separately, Admission.device_free)
RUNNING_PER_ACCELERATOR = 2
ADMISSION_POLL_S = 1.0  # a waiting visitor's place and estimate are redrawn this often (and a Cancel is seen)
# a capture's admitted bytes: this x its predicted record (capture.predicted_nbytes). Measured (SmolLM2, the app's
# capture with q and k, RSS above the process with the model loaded): 474 / 749 / 1,317 MB at 2,048 / 4,096 /
# 8,192 tokens, 1.40-1.42 x the record (the record itself, and what its forward holds while it runs)
ADMISSION_RECORD_FACTOR = 1.45


def max_running(cpu_count: int | None = None, accelerators: int = 0) -> int:
    """How many requests may run at once: ATTNVIZ_MAX_RUNNING where set; else, with ``accelerators`` (GPUs, MPS:
    the server counts them, :func:`attnviz.core.devices.accelerator_count`), :data:`RUNNING_PER_ACCELERATOR` per
    device; else one per :data:`CORES_PER_RUNNING` cores (at least one). ValueError naming the variable when it is
    not a whole number >= 1."""
    raw = os.environ.get(MAX_RUNNING_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(msg("admission.bad_max_running_env", env=MAX_RUNNING_ENV, value=raw[:40]))
        return int(raw)
    if accelerators > 0:
        return RUNNING_PER_ACCELERATOR * accelerators
    cores = os.cpu_count() if cpu_count is None else cpu_count
    return max(1, (cores or 1) // CORES_PER_RUNNING)


def memory_mb_override() -> int | None:
    """ATTNVIZ_MEMORY_MB as an integer number of MB (>= 0), or None where it is unset or empty; ValueError naming
    the variable when it is not such a number."""
    raw = os.environ.get(MEMORY_MB_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(msg("admission.bad_memory_env", env=MEMORY_MB_ENV, value=raw[:40]))
    return int(raw)


# head ablation (attnviz.models.ablation, attnviz.labs.heads_matter.ablation) and the kv-cache estimate's cache dtypes
# (attnviz.labs.kv.config): here, in a module without torch, so that the CLI's parser offers them as choices and
# names them in --help without importing torch
ABLATION_MODES = ("zero", "mean", "first")
ABLATION_TOKENS = 1024  # the most tokens one ablation reads: two passes, the logits at every position kept
SWEEP_TOKENS = 256  # the most tokens the single-head sweep reads: n_layer x n_head ablations
PATCH_TOKENS = 256  # the most tokens activation patching reads: n_layer x n_head patched runs, as the sweep
ESTIMATE_TOKENS = 256  # the most tokens attribution patching reads: a backward pass keeps every layer's activations
KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")

# the Scaling page recomputes every head under three scales: it reads at most this many tokens
SCALING_TOKENS = 2048
# the scaling lab's work: every head's T x T scores under three scales. SmolLM2 (30 x 9 heads) at 2,048 tokens is
# 1.13e9 cells, about 10 s on 2 cores; a model with more heads reads fewer tokens (the embedded model's largest
# setting, 12 x 64 heads: 1,214)
SCALING_MAX_CELLS = 30 * 9 * 2048**2
# the Mask lab runs the whole model once per mask, per perturbation and per gallery bug: it reads this many tokens
MASK_TOKENS = 128
SCALING_VIEW_TOKENS = 128  # one head under four scales, side by side, at full resolution

# the Training page and `python -m attnviz train-scale`: three runs (1/√d_k, no scale, 1/√d_model) of one
# attention layer on key-value retrieval; d_model = n_head × d_k, as in the tutorial
TRAIN_HEAD_DIM = Bound("d_k", 128, 8, 256)
TRAIN_N_HEAD = Bound("n_head", 4, 1, 8)
TRAIN_STEPS = Bound("steps", 300, 1, 2000)
TRAIN_PAIRS = Bound("pairs", 32, 2, 64)  # (key, value) pairs in one sequence
TRAIN_KEYS = Bound("keys", 128, 2, 1024)  # key vocabulary; a sequence draws `pairs` distinct keys
TRAIN_VALUES = Bound("values", 16, 2, 256)  # value vocabulary: the classes the model answers with
TRAIN_BATCH = Bound("batch", 32, 1, 256)
TRAIN_EVAL_SEQUENCES = 1024  # the held-out set the final loss and accuracy are measured on
TRAIN_OPTIMISERS = ("sgd", "adam")
TRAIN_OPTIMISER = "sgd"
TRAIN_LEARNING_RATE = {"sgd": 0.1, "adam": 3e-4}  # each optimiser's default
TRAIN_LEARNING_RATE_RANGE = (1e-5, 10.0)
TRAIN_LEARNING_RATES = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # the page's choices
# one request's work, all three runs together, in multiply-adds (forward and backward): 2.5x the default run
# (1.6 T, about 20 s on an idle 2-core CPU); at this limit every size took 43-47 s there (d_k 256 x 8 heads: 28 steps)
TRAIN_MAX_MACS = 4 * 10**12
TRAIN_CACHE_ENTRIES = 16  # finished trainings kept per server (each holds a few thousand floats)

# `python -m attnviz mask-doctor` and the Mask lab read a user's mask file: bounded in bytes before parsing, in shape
# after. 8 MiB holds a (2048, 2048) bool mask or a (1024, 1024) float32 one; the doctor keeps bool copies of at most
# MASK_MAX_CELLS cells (a (B, 1, T) key mask is expanded to (B, T, T)): a check at the limit, 64 x 512 x 512 with
# lengths, took 0.4 s and about 400 MB above the imports on 2 cores
MASK_MAX_BYTES = 8 * 2**20
MASK_MAX_SIDE = 2048  # T
MASK_MAX_BATCH = 64  # B
MASK_MAX_CELLS = 16 * 2**20  # B × T × T
MASK_BLOCK_THRESHOLD = -1e4  # an additive value at most this blocks: -1e9, finfo(float16/32).min, HF's old -10000
MASK_MAX_EXAMPLES = 10  # [q, k] examples per problem

# `python -m attnviz kv-cache` and attnviz.labs.kv.config: a config.json is bounded in bytes before it is parsed; the
# estimate is O(layers), so layers, sequences and lengths are bounded to keep every request's cost known
KV_CONFIG_MAX_BYTES = 2**20  # real config.json files are a few KB; multimodal ones stay well under 100 KB
# a model config's sizes, checked before anything is allocated, by `heads` (a model folder) and `kv-cache` alike:
# far above every released model (Llama 3.1 405B: 126 layers, 128 heads, hidden 16,384; Gemma 3: 262,144 tokens
# of vocabulary; Llama 4 Scout: 10 M positions), far below what a bogus config.json would make us allocate
MODEL_LIMITS = {
    "layers": 10_000, "heads": 4_096, "hidden": 131_072, "vocab": 4_194_304, "positions": 2**27,
    "intermediate": 2**20,  # an MLP's width (Llama 3.1 405B: 53,248)
}  # fmt: skip
# a local model folder, checked before transformers opens a file in it: its config.json and tokenizer files are
# read with these caps (a tokenizer.json of a 256k vocabulary is about 35 MB); its weights must hold at least
# MODEL_MIN_BYTES_PER_PARAM bytes per weight its config declares (a lower bound), or the config is refused: a
# 4-bit checkpoint holds 0.5, so 1/16 leaves room for families the bound counts loosely (ALBERT shares its layers)
MODEL_CONFIG_MAX_BYTES = 2**20
MODEL_TEXT_FILE_MAX_BYTES = 256 * 2**20
MODEL_FOLDER_MAX_ENTRIES = 10_000
MODEL_MIN_BYTES_PER_PARAM = 1 / 16
KV_MAX_LAYERS = MODEL_LIMITS["layers"]
KV_MAX_BATCH = 2**20
KV_MAX_SEQ_LEN = 2**30
KV_DEFAULT_SEQ_LEN = 4096  # the CLI's default, capped at the model's max_position_embeddings
KV_GROUP_SIZE = 32  # values per quantisation group (llama.cpp's q8_0 / q4_1 block), each with an fp16 scale
KV_VLLM_BLOCK_SIZE = 16  # vLLM's default --block-size
KV_VLLM_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's default --max-num-batched-tokens with chunked prefill
KV_LLAMACPP_N_UBATCH = 512  # llama.cpp's default -ub (physical batch), which sizes its SWA cache

# Hosted mode (attnviz/hosted.py): a server open to strangers. Switched on by ATTNVIZ_HOSTED=1 or
# `streamlit run app.py -- --hosted`; it offers only the bundled models and the folders the operator lists in
# ATTNVIZ_MODELS (comma-separated), and no path box.
HOSTED_ENV = "ATTNVIZ_HOSTED"
HOSTED_FLAG = "--hosted"
MODELS_ENV = "ATTNVIZ_MODELS"
# Replicas behind nginx (deploy/replicas.py): each replica's own name, and the cookie nginx sets on the websocket
# upgrade naming the replica that answered it (attnviz/app/replica.py)
REPLICA_ENV = "ATTNVIZ_REPLICA"
REPLICA_COOKIE = "attnviz_replica"
# One request's budget: tokens x layers x heads. It is SmolLM2's largest request (8,192 tokens x 30 layers x 9
# heads), measured at 2.3 GB peak and 80 s on 2 cores (benchmarks/capture.py); the record grows linearly in it and
# the time in it x tokens, so with tokens <= 8,192 no request within it costs more than that one. Over it: refused
# in hosted mode, asked to confirm locally.
REQUEST_HEAD_TOKENS = 8192 * 30 * 9
# the estimate shown with the budget, fitted on the capture benchmarks: peak ~ 1.15 GB (Python, torch, a model and
# its forward) + 1.24 x the record (capture.predicted_nbytes); time ~ 1e-8 s per attention cell (T x T x heads)
PEAK_BASE_BYTES = 1150 * 2**20
PEAK_RECORD_FACTOR = 1.24
SECONDS_PER_CELL = 1e-8
# Upload limits: Streamlit refuses a file over server.maxUploadSize (MB, .streamlit/config.toml) before it reaches
# the app; the library refuses it again by its own limit (MASK_MAX_BYTES, KV_CONFIG_MAX_BYTES)
UPLOAD_MAX_MB = 8
# Hosted mode: a session trains at most this many seconds per window (the Training page)
TRAIN_SESSION_SECONDS = 120
TRAIN_SESSION_WINDOW_S = 10 * 60
# the Training page's time estimate before it starts: 4 T multiply-adds took 43-47 s on 2 cores
TRAIN_SECONDS_PER_TMAC = 12.0

# the guided tour (attnviz.app.tour): the model every step runs (a pretrained one: the claims are about trained
# attention, and its byte-level vocabulary reads Chinese), the examples computed when a server starts (the reader's
# language picks one), and the most tokens of the reader's own text a step captures (a few seconds a pass here)
TOUR_MODEL = "smollm2"
TOUR_EXAMPLES = {"en": "English: the cat", "zh": "中文: 注意力"}
TOUR_TOKENS = 64
# "0" in this variable: a server does not compute the tour at start (a replica whose operator wants its CPU free
# for visitors at once; a test server whose timings the tour's minute of trainings would skew). Its steps then
# compute on a reader's first visit, each saying its price first.
TOUR_WARM_ENV = "ATTNVIZ_TOUR_WARM"
