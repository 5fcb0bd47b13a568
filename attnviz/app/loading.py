"""Models and results, loaded and cached once per process, with what the reader is told while they load.

Pages call :func:`current_source` / :func:`current_record` and get a source or a
record (or a message has already been shown and they stop), so no page deals
with models, caching or bad input itself.

Caching, deliberately:
- sources (models) live in ``st.cache_resource``: loaded once per process, shared read-only;
- records, batches, generations and parity results live in one :class:`~attnviz.app.cache.BoundedCache`
  per process, handed out by reference (no copy per rerun) and bounded in bytes
  (``ATTNVIZ_CACHE_MB``, default 2,048 MB; at most 32 entries). Their keys hold no language: the library's
  results are the same in every language, and their words are rendered as the page draws.
- an exact result a reader starts with a click (a sweep, patching every head) is computed once and shared too, but
  a session sees it only once it asked for it (:class:`SessionResults`): another reader's never appears unasked.

Admission, in the same place: a result not in the cache is computed only once its predicted memory fits the
server's budget for work in flight (:mod:`attnviz.app.queue_view`, ``ATTNVIZ_MEMORY_MB``); until then the visitor
sees their place in the queue. A cached result is handed back without asking, and the admission happens inside
the cache's single flight: a second session asking for a result being computed waits for it and is never queued.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attnviz import settings
from attnviz.app import hosted
from attnviz.app.cache import BoundedCache
from attnviz.app.progress import progress_bar
from attnviz.app.queue_view import admitted, request_id, stop_if_cancelled
from attnviz.app.running import working
from attnviz.app.state import Settings
from attnviz.app.weights_note import generation_note
from attnviz.app.widgets import show_bug, show_error
from attnviz.core.admission import Need
from attnviz.core.budget import device_nbytes, request_cost
from attnviz.core.capture import predicted_nbytes
from attnviz.core.device_speed import device_of
from attnviz.core.devices import dtype_name, free_device_memory
from attnviz.core.progress import Progress
from attnviz.core.token_display import markdown_text, typed_special
from attnviz.errors import AttnvizBugError, ModelUnavailableError
from attnviz.i18n.message import msg
from attnviz.i18n.translate import t, tr
from attnviz.models.record import LABEL_CHARS, AttentionRecord, cut_tokens
from attnviz.models.registry import SourceSpec, largest_bundled_shape, open_source, preparation_note, prepare_source
from attnviz.models.source import AttentionSource, Capability

_LOAD_LOCK = threading.Lock()


def release_source(source: AttentionSource) -> None:
    """A model the cache dropped: its memory goes back to the device it was on (the allocator's cached blocks
    too), once no session holds it."""
    device = str(getattr(source, "device", "cpu"))
    del source
    free_device_memory(device)


@st.cache_resource(max_entries=8, show_spinner=False, on_release=release_source)
def load_source(spec: SourceSpec) -> AttentionSource:
    """One model per spec, loaded once per process and shared read-only by every session.

    Streamlit computes each spec once, but two specs (MiniLM and SmolLM2 asked for at the same moment) load in two
    threads at once, and transformers' first import is not thread-safe (``cannot import name 'AutoConfig'``): loads
    take turns. Eight entries: five people on the embedded model's variants, MiniLM and SmolLM2 no longer push each
    other out and reload. Each load says so on the server's stderr (``attnviz: loaded … in 1.2 s``), so an operator,
    and the concurrency test, can count them.
    """
    with _LOAD_LOCK:
        start = time.perf_counter()
        source = open_source(spec)
    print(f"attnviz: loaded {spec.title} [{source.name}] in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return source


@st.cache_resource(show_spinner=False)
def process_results() -> BoundedCache:
    """The process's one cache of records and other large results (see the module docstring)."""
    return BoundedCache(max_bytes=settings.cache_bytes(), max_entries=settings.CACHE_ENTRIES)


# exact results a reader starts with a click: shown only in a session that asked for them (see SessionResults)
ASKED_KINDS = frozenset({"ablation_sweep", "ablation_confirmed", "patch_exact", "patch_confirmed", "patch_positions"})
_ASKED = "results_asked"  # this session's (kind, key) of ASKED_KINDS it computed or asked for


class SessionResults:
    """The process's results as one session sees them.

    A result is computed once per process and shared, but an exact result that takes a click (an ablation sweep,
    patching every head, the top heads confirmed: :data:`ASKED_KINDS`) is this session's only once it asked for it
    (its ``get_or_compute``): another reader on the same text would otherwise see it appear without asking, as if
    their own click had run it. Everything else (records, estimates) is what the page draws anyway, and shared."""

    def __init__(self, cache: BoundedCache, asked: set) -> None:
        self._cache, self._asked = cache, asked

    def _hidden(self, key) -> bool:
        return isinstance(key, tuple) and bool(key) and key[0] in ASKED_KINDS and key not in self._asked

    def lookup(self, key) -> tuple[bool, Any]:
        return (False, None) if self._hidden(key) else self._cache.lookup(key)

    def __contains__(self, key) -> bool:
        return not self._hidden(key) and key in self._cache

    def get_or_compute(self, key, compute: Callable[[], Any]) -> Any:
        value = self._cache.get_or_compute(key, compute)
        self._asked.add(key)
        return value

    def __getattr__(self, name: str) -> Any:  # the rest (max_bytes, clear) is the process cache's
        return getattr(self._cache, name)


class _ResultCache:
    """``result_cache()``: the process's results as this session sees them (:class:`SessionResults`); outside a
    session (a worker thread, a unit test) the process cache itself. ``result_cache.clear()`` drops the process
    cache, as ``st.cache_resource``'s own ``clear`` does."""

    def __call__(self) -> SessionResults | BoundedCache:
        if get_script_run_ctx(suppress_warning=True) is None:
            return process_results()
        return SessionResults(process_results(), st.session_state.setdefault(_ASKED, set()))

    def clear(self) -> None:
        process_results.clear()


result_cache = _ResultCache()


# results derived in a moment from one already held (a record's labels, one head's curve): no admission
LIGHT_KINDS = frozenset({"tokens", "head_roles", "head_similarity", "gradient"})
# jobs that read their texts one after another: they hold one capture's memory at a time
SEQUENTIAL_KINDS = frozenset({"role_stability", "sink_vs_length"})


def shape_need(
    n_layer: int,
    n_head: int,
    n_kv_head: int,
    head_dim: int,
    n_tokens: int,
    device: str | None = None,
    all_weights: bool = False,
) -> Need:
    """A capture's predicted bytes above the process's base (models loaded): ``ADMISSION_RECORD_FACTOR`` x its
    record (:mod:`attnviz.settings`); its seconds on ``device`` (:func:`attnviz.core.budget.request_cost`); and on
    an accelerator, the device memory it works in (:func:`attnviz.core.budget.device_nbytes`; ``all_weights``:
    the eager route, whose model returns every layer's weights at once)."""
    record = predicted_nbytes(n_layer, n_head, n_kv_head, head_dim, max(1, n_tokens))
    seconds = request_cost(n_layer, n_head, n_kv_head, head_dim, n_tokens, device=device).seconds
    on_device = device_nbytes(n_layer, n_head, n_kv_head, head_dim, max(1, n_tokens), all_weights)
    return Need(math.ceil(settings.ADMISSION_RECORD_FACTOR * record), seconds, on_device, device)


def capture_need(source: AttentionSource, text: str, max_tokens: int) -> Need:
    """The need of ``source``'s capture of ``text`` cut to ``max_tokens`` tokens (:func:`shape_need`)."""
    n_tokens = len(source.encode(text, max_tokens).tokens)
    shape = (source.n_layer, source.n_head, source.n_kv_head, source.head_dim, n_tokens)
    return shape_need(*shape, device=device_of(source), all_weights=Capability.KEEP_QK not in source.capabilities)


def largest_need() -> Need:
    """What the largest request any page allows may cost (the largest bundled model at the request budget, SmolLM2's
    8,192 tokens): the need of a job whose key says nothing about its size."""
    return shape_need(*largest_bundled_shape(), settings.MAX_TOKENS.high)


def job_need(kind: str, key: tuple) -> Need | None:
    """A job's predicted need from its kind and cache key; None for light work (:data:`LIGHT_KINDS`).

    The pages' keys start with (spec, text or texts, tokens or lengths): the need is the capture of each text by
    that model at that many tokens, summed (a batch holds them all at once; :data:`SEQUENTIAL_KINDS` and several
    lengths run one after another, so their largest). A key of another shape gets :func:`largest_need`.
    """
    if kind in LIGHT_KINDS:
        return None
    if len(key) < 3 or not isinstance(key[0], SourceSpec):
        return largest_need()
    texts = (key[1],) if isinstance(key[1], str) else key[1]
    lengths = (key[2],) if isinstance(key[2], int) else key[2]
    if not isinstance(texts, tuple) or not isinstance(lengths, tuple) or not texts or not lengths:
        return largest_need()
    if not all(isinstance(text, str) for text in texts) or not all(isinstance(n, int) for n in lengths):
        return largest_need()
    source = load_source(key[0])  # loaded already: the page asked for it first
    needs = [capture_need(source, text, n) for text in texts for n in lengths]
    seconds = sum(need.seconds for need in needs)
    if kind in SEQUENTIAL_KINDS or len(lengths) > 1:  # several lengths: one after another
        return Need(max(n.nbytes for n in needs), seconds, max(n.device_nbytes for n in needs), needs[0].device)
    return Need(sum(n.nbytes for n in needs), seconds, sum(n.device_nbytes for n in needs), needs[0].device)


def _cached_admitted(kind: str, key: tuple, need: Need | None, around, run) -> Any:
    """(kind, key) from the cache, or ``run(handle)`` once its need (``need``, else :func:`job_need`) fits the
    server's memory budget, inside ``around()`` (a spinner or a progress bar, yielding ``handle``). A cached result
    asks nothing; the admission happens inside the cache's single flight."""
    cache = result_cache()
    # one element here whether the result is cached or not: a spinner or a progress bar (a miss) would otherwise
    # move everything after it one place down, and the browser would build each of those elements anew on the
    # next run (a hit): a chart or the grid's canvas drawn a second time for nothing
    slot = st.empty()
    found, value = cache.lookup((kind, key))
    if found:
        return value
    need = job_need(kind, key) if need is None else need
    rid = request_id(kind, key)
    stop_if_cancelled(rid)
    with slot.container(), around() as handle:

        def admitted_run():
            with admitted(need, rid):
                return run(handle)

        return cache.get_or_compute((kind, key), admitted_run)


def cached(kind: str, key: tuple, compute, spinner: str, need: Need | None = None):
    """A large result by (kind, key), computed once per process (while a spinner says what is happening, also
    while another session computes the same result, which this one then reads), once its need fits the server's
    memory budget."""
    return _cached_admitted(kind, key, need, lambda: working(spinner), lambda _: compute())


def cached_job(kind: str, key: tuple, job: Callable[[Progress], Any], title: str, need: Need | None = None) -> Any:
    """A large result by (kind, key), computed once per process by ``job(progress)`` under a progress bar
    titled ``title``: its stages, counts and the time left, as the job reports them. The reporter is no part
    of the key: a cached result is handed back without running anything. It runs once its need (``need``, else
    :func:`job_need`) fits the server's memory budget; until then the visitor sees their place in the queue."""
    return _cached_admitted(kind, key, need, lambda: working(title, progress_bar(title)), job)


def source_for(spec: SourceSpec) -> AttentionSource | None:
    """The loaded model, with progress while a one-time step runs; None after showing why it cannot load."""
    try:
        note = preparation_note(spec)
        if note:
            with st.status(tr(note), expanded=True) as status:
                bar = st.progress(0.0, text=t("sources.starting"))
                prepare_source(spec, progress=lambda fraction, message: bar.progress(fraction, text=tr(message)))
                status.update(
                    label=t("sources.ready", title=markdown_text(tr(spec.title))), state="complete", expanded=False
                )
        with working(t("sources.loading", title=markdown_text(tr(spec.title)))):
            source = load_source(spec)
        placement_caption(source)
        return source
    except ModelUnavailableError as err:
        show_error(err)  # the message quotes the user's path: data, not Markdown
        return None
    except AttnvizBugError as err:  # a probe pass at load, outside the page run_page guards
        show_bug(err)
        return None


def placement_caption(source: AttentionSource) -> None:
    """Under the sidebar's device: the dtype the model runs in (what "auto" took) and, for a split model, where
    each part went."""
    dtype = dtype_name(getattr(source, "dtype", "float32"))
    runs = getattr(source, "placement", ())
    text = t("sources.runs_in", dtype=dtype, device=device_of(source))
    if runs:
        where = ", ".join(f"{markdown_text(part) or t('sources.whole_model')} → {device}" for part, device in runs)
        text += " " + t("sources.split", where=where)
    loaded = getattr(source, "load_note", None)  # a multimodal checkpoint's text model: said, not hidden
    if loaded is not None:
        text += " " + tr(loaded)
    stored = getattr(source, "stored_dtype", None)  # a checkpoint's own dtype (the embedded model has none)
    if stored is not None and stored != dtype:  # "float32" alone would hide a bfloat16 checkpoint, and why
        auto_on_cpu = st.session_state.get("dtype", "auto") == "auto" and device_of(source).startswith("cpu")
        text += " " + t("dtype_note.auto_cpu" if auto_on_cpu else "dtype_note.chosen", stored=stored, runs=dtype)
    st.sidebar.caption(text)


def current_source(settings_: Settings) -> AttentionSource | None:
    """The sidebar's model, loaded; None after telling the user why not."""
    if settings_.error or settings_.spec is None:
        show_error(settings_.error or msg("sources.choose_model"))
        return None
    return source_for(settings_.spec)


def require_source(settings_: Settings) -> AttentionSource:
    """The sidebar's model, loaded; otherwise the page stops after saying why."""
    source = current_source(settings_)
    if source is None:
        st.stop()
    return source


def require_qk(source: AttentionSource) -> None:
    """Stop a page that recomputes attention from q and k after saying why, where the model's route keeps none."""
    if Capability.KEEP_QK not in source.capabilities:
        st.info(tr(source.route_note))
        st.stop()


def require_text(settings_: Settings, hint: str | None = None) -> None:
    """Stop the page with ``hint`` (by default: type some text) while the sidebar's text is empty."""
    if not settings_.text.strip():
        st.info(hint or t("views.type_some_text"))
        st.stop()


def fits_the_cache(source: AttentionSource, settings_: Settings) -> bool:
    """Whether the capture's record fits this server's result cache; says why not, and what to do, when not.

    A record over the bound could not be kept, so every rerun would capture it again.
    """
    n_tokens = len(source.encode(settings_.text, settings_.max_tokens).tokens)
    dims = (source.n_layer, source.n_head, source.n_kv_head, source.head_dim)
    need, bound = predicted_nbytes(*dims, n_tokens), result_cache().max_bytes
    if need <= bound:
        return True
    fit = max((n for n in range(16, n_tokens, 16) if predicted_nbytes(*dims, n) <= bound), default=0)
    st.error(
        t(
            "ui_capture.too_large",
            n_tokens=n_tokens,
            need_mb=need / 2**20,
            bound_mb=bound / 2**20,
            env=settings.CACHE_MB_ENV,
            fit=fit,
        )
    )
    return False


def record_job(source: AttentionSource, settings_: Settings) -> Callable[[Progress | None], AttentionRecord]:
    """The capture of the sidebar's text, as a job of its progress reporter (:func:`record_for`'s, and the
    server's warm-up of the default text: :func:`attnviz.app.warm.default_record`)."""
    return lambda progress: source.run(settings_.text, settings_.max_tokens, progress=progress)


def record_for(source: AttentionSource, settings_: Settings) -> AttentionRecord:
    """The capture of the sidebar's text, from the shared cache."""
    return cached_job(
        "record",
        settings_.key(),
        record_job(source, settings_),
        t("sources.capturing"),
        need=capture_need(source, settings_.text, settings_.max_tokens),
    )


def has_text(settings_: Settings) -> bool:
    """Whether the sidebar holds a text; says to type one when not."""
    if not settings_.text.strip():
        st.info(t("sources.type_text"))
        return False
    return True


def current_record(settings_: Settings, source: AttentionSource | None = None) -> AttentionRecord | None:
    """The record for the sidebar's settings (of ``source`` where the page loaded it already), or None after
    telling the user why not."""
    source = source or current_source(settings_)
    if source is None or not has_text(settings_):
        return None
    try:
        if not fits_the_cache(source, settings_) or not within_budget(settings_, source):
            return None
        record = record_for(source, settings_)
    except ModelUnavailableError as err:
        show_error(err)
        return None
    if not record.tokens:
        st.info(t("sources.no_tokens"))
        return None
    if len(record.tokens) == 1:
        st.info(t("sources.single_token"))
        return None
    note = st.session_state.pop("example_note", None)
    if note:
        st.info(tr(note))
    if Capability.KEEP_QK not in source.capabilities:  # the eager route: say so, and what it cannot do
        st.caption(tr(source.route_note))
    coverage_warning(record)
    typed = typed_special(record.tokens)
    if typed:
        st.info(t("hostile.typed_special", tokens=", ".join(markdown_text(text) for text in typed)))
    if record.truncated:
        why = (
            t("sources.raise_max_tokens")
            if len(record.tokens) >= settings_.max_tokens
            else t("sources.model_limit", n=len(record.tokens))
        )
        st.warning(t("sources.truncated", n_input=record.n_input_tokens, n=len(record.tokens), why=why))
    return record


def kind_picker(source: AttentionSource, key: str, label: str = "heads.kind") -> str | None:
    """The kind of attention a page reads, chosen by the reader where the source has several (an encoder-decoder's
    encoder, decoder and cross-attention); None for a source of one stack."""
    kinds = source.description.attention_kinds
    if len(kinds) < 2:
        return None
    return st.radio(t(label), kinds, key=key, horizontal=True, format_func=lambda k: t(f"heads.kind_{k}"))


def kind_record(settings_: Settings, source: AttentionSource, kind: str | None) -> AttentionRecord | None:
    """The record a page reads: the sidebar's text's (``kind`` None), else that kind of an encoder-decoder's."""
    return current_record(settings_, source) if kind is None else current_part(settings_, kind, source)


def target_inputs() -> tuple[str, int]:
    """The sidebar's target, drawn only for an encoder-decoder: (typed target, 0) or ("", tokens the model writes)."""
    with st.sidebar:
        st.header(t("sidebar.target_header"))
        ways = {"generated": t("sidebar.target_generated"), "typed": t("sidebar.target_typed")}
        st.radio(t("sidebar.target_from"), list(ways), format_func=ways.get, key="target_from", horizontal=True)
        if st.session_state.target_from == "typed":
            st.text_area(t("sidebar.target"), key="target", height=80)
            return st.session_state.target, 0
        st.number_input(t("sidebar.n_generate"), 1, settings.MAX_TARGET_GENERATED, key="n_generate")
        return "", int(st.session_state.n_generate)


def pair_need(source: AttentionSource, text: str, max_tokens: int, n_target: int) -> Need:
    """An encoder-decoder run's need: its peak (the source's ``pair_peak_nbytes``: every weight of every kind held,
    one layer's scores, the logits) and the time of its three kinds' captures."""
    n_source = len(source.encode(text, max_tokens).tokens)
    need = shape_need(source.n_layer, source.n_head, source.n_kv_head, source.head_dim, max(n_source, n_target))
    return Need(source.pair_peak_nbytes(n_source, n_target), 3 * need.seconds, 0, device_of(source))


def current_part(settings_: Settings, kind: str, source: AttentionSource | None = None) -> AttentionRecord | None:
    """One kind of an encoder-decoder's attention ("encoder", "decoder", "cross") on the sidebar's source text and
    target (of ``source`` where the page loaded it already), or None after telling the user why not."""
    source = source or current_source(settings_)
    if source is None or not has_text(settings_):
        return None
    target, n_generate = target_inputs()
    if not n_generate and not target.strip():
        st.info(t("sources.type_target"))
        return None
    n_target = n_generate + 1 if n_generate else len(source.encode_target(target, settings_.max_tokens).ids)
    try:
        pair = cached_job(
            "pair",
            (*settings_.key(), target, n_generate),
            lambda progress: source.run_pair(
                settings_.text, target, settings_.max_tokens, n_generate=n_generate, progress=progress
            ),
            t("sources.capturing"),
            need=pair_need(source, settings_.text, settings_.max_tokens, n_target),
        )
    except (ModelUnavailableError, ValueError) as err:
        show_error(err)
        return None
    if pair.generated:
        st.caption(t("sources.generated_target", text=markdown_text(pair.target_text)))
        generation_note(pair.target_ids, pair.target_text, pair.cross.tokens[1].text)  # nothing, or one token again
    record = pair.part(kind)
    if record.truncated:
        st.warning(t("sources.truncated", n_input=record.n_input_tokens, n=len(record.tokens), why=""))
    return record


LONG_TOKENS_LISTED = 20  # cut tokens listed whole under the chart


def unknown_share(tokens) -> tuple[int, int]:
    """(unknown, real): how many of the text's own tokens (specials and pads left out) are the unknown token."""
    real = [token for token in tokens if not token.special and not token.pad]
    return sum(token.unknown for token in real), len(real)


def unknown_warning(tokens, model_name: str) -> bool:
    """Warn when the model's tokenizer read much of the text as its unknown token, and name a model that reads it;
    True when it warned. For every page that reads a text, the record's tokens or a batch's together."""
    if mostly_unknown(tokens):
        unknown, n = unknown_share(tokens)
        st.warning(t("views.unknown_tokens", model=markdown_text(model_name), unknown=unknown, n=n))
        return True
    return False


def mostly_unknown(tokens) -> bool:
    """Whether the model's tokenizer read ``tokens``' text as its unknown token at least as often as the warning
    asks (:data:`attnviz.settings.UNKNOWN_SHARE_WARNING`)."""
    unknown, n = unknown_share(tokens)
    return bool(n) and unknown / n >= settings.UNKNOWN_SHARE_WARNING


def readable_lines(source: AttentionSource, text: str, max_tokens: int) -> str:
    """``text`` without the lines ``source`` reads mostly as its unknown token (a page's Chinese example line on
    MiniLM), while at least two lines are left; else ``text`` as it is."""
    lines = text.splitlines()
    kept = [line for line in lines if not mostly_unknown(source.encode(line, max_tokens).tokens)]
    return "\n".join(kept) if len(kept) >= 2 else text


def coverage_warning(record: AttentionRecord) -> None:
    """Warn when the model's tokenizer read much of the text as its unknown token (:func:`unknown_warning`), and
    list the tokens too long for an axis label."""
    unknown_warning(record.tokens, record.model_name)
    cut = cut_tokens(record.tokens)
    if cut:
        if len(cut) > 1:
            st.caption(t("views.long_tokens_cut", n=len(cut), chars=LABEL_CHARS))
        else:
            st.caption(t("views.long_token_cut", chars=LABEL_CHARS))
        with st.expander(t("views.long_tokens")):
            for i, text in cut[:LONG_TOKENS_LISTED]:
                st.text(f"{i}: {text}")
            if len(cut) > LONG_TOKENS_LISTED:
                st.caption(t("views.and_more", n=len(cut) - LONG_TOKENS_LISTED))


BUDGET_CONFIRMED = "budget_confirmed"  # the settings' keys this session chose to run over the budget


def within_budget(settings_: Settings, source: AttentionSource) -> bool:
    """Whether to capture the sidebar's text with ``source``: tokens x layers x heads within the request budget.

    Over it, a hosted server refuses with the numbers and what to change; a local one says the same and offers a
    button that runs it anyway (remembered for these settings in this session).
    """
    n_tokens = len(source.encode(settings_.text, settings_.max_tokens).tokens)
    cost = request_cost(
        source.n_layer, source.n_head, source.n_kv_head, source.head_dim, n_tokens, device=device_of(source)
    )
    if not cost.over:
        return True
    gb, seconds = f"{cost.peak_gb:,.1f}", f"{cost.seconds:,.0f}"
    why = t(
        "hosted.over_budget",
        tokens=f"{cost.tokens:,}",
        n_layer=cost.n_layer,
        n_head=cost.n_head,
        head_tokens=f"{cost.head_tokens:,}",
        budget=f"{cost.budget:,}",
        gb=gb,
        seconds=seconds,
    )
    change = t("hosted.budget_change", max_tokens=f"{cost.max_tokens:,}", layer_heads=f"{cost.max_layer_heads:,}")
    if hosted.is_hosted():
        st.error(f"{why} {change}")  # numbers only: nothing in it is the user's
        return False
    confirmed = st.session_state.setdefault(BUDGET_CONFIRMED, set())
    if settings_.key() in confirmed:
        st.caption(t("hosted.over_budget_confirmed", gb=gb, seconds=seconds))
        return True
    st.warning(f"{why} {change} {t('hosted.local_confirm')}")
    if st.button(t("hosted.run_anyway", gb=gb, seconds=seconds), key="budget_run_anyway"):
        confirmed.add(settings_.key())
        return True
    return False
