"""attnviz's notebook views beside BertViz's, in one run: ``python -m benchmarks.notebook [--runs 3] [--json]``.

What a notebook user pays, on SmolLM2 (the bundled checkpoint, loaded with transformers as a notebook user loads
it, eager attention so that ``output_attentions`` works), for a 20-token and a 2,000-token text:

- ``bertviz.head_view``: ``outputs = model(ids, output_attentions=True)``, then BertViz's
  ``head_view(outputs.attentions, tokens, html_action="return")``;
- ``attnviz.head_view``: the same forward, then ``attnviz.notebook.head_view`` with the same arguments;
- ``attnviz.show``: ``attnviz.notebook.show(model, tokenizer, text, html_action="return")`` (attnviz's bounded
  capture on the model as it is; no ``output_attentions``);
- at 20 tokens also both ``model_view`` calls (every head at once).

1. The time from a cell's run to its chart: the Python call (the model's forward included) plus, in Debian's
   Chromium with every request that would leave the machine refused, the time from the output's page being asked
   for until the animation frame after the chart is drawn (attnviz: the ``attnviz:notebook-drawn`` event on its
   element, which then carries ``data-drawn="1"``; BertViz: its ``#vis`` SVG is on the page, which its
   ``renderVis()`` appends and fills in one synchronous call once require.js has loaded d3 and jQuery). BertViz's
   output loads require.js, d3 and jQuery from cdnjs: here they are local files (the output's URLs rewritten to
   file:// paths), the versions BertViz names where npm has them: requirejs 2.3.6, d3 5.7.0, and jQuery 2.1.0
   (BertViz asks for 2.0.0, which was never published on npm; BertViz uses jQuery for its drop-downs only).
   Each time is the median of ``--runs`` runs (and the best); each case's first call, at the shortest length, is
   timed apart (a kernel's first call pays imports); the machine's load is recorded at each run. attnviz's
   ``head_view`` refuses given weights over its result cache's bound (``ATTNVIZ_CACHE_MB``, 2 GiB: SmolLM2's at
   2,000 tokens are 4 GiB) and says to use ``show``: ``--given-cache-mb 6144`` measures it again under that bound.
2. The bytes of one output (its HTML) and of a saved notebook holding that one cell and its output (nbformat 4's
   JSON, as Jupyter writes it).
3. Memory at 8,192 tokens, each in a fresh process: ``attnviz.notebook.show``'s peak RSS above the loaded model
   (as ``capture(...).show(...)``, which is what ``show`` does, so that the record it keeps can be weighed),
   against ``output_attentions``, whose tensors alone are n_layer x n_head x T^2 x 4 bytes: computed, and run only
   within ``ATTENTIONS_BOUND`` (else reported as refused).

A case whose output or tensors exceed the bounds below is not run: its figures are computed and it says so
(BertViz at 2,000 tokens writes every weight as JSON text, twice: about 30 GB of HTML).

Reproduce: ``make setup browser``, then ``.venv/bin/pip install --no-deps -r benchmarks/requirements-bertviz.txt``
(BertViz itself, without its dependencies: boto3, requests, sentencepiece and the rest are for its neuron view and
model downloads, not for ``head_view``/``model_view``, which import torch and IPython.display only; IPython comes
with the notebook extra, ``pip install -e .[notebook]``). BertViz's JavaScript: ``--js DIR`` holding
``require.js``, ``d3.min.js`` and ``jquery.min.js``; without it the benchmark runs ``npm pack requirejs@2.3.6
d3@5.7.0 jquery@2.1.0`` into ``~/.cache/attnviz/bertviz-js`` once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from attnviz.labs.cost.capture_bench import benchmark_text
from attnviz.labs.cost.peak_memory import run_child, status_bytes

LENGTHS = (20, 2000)
MEMORY_TOKENS = 8192
HEAD_CASES = ("bertviz.head_view", "attnviz.head_view", "attnviz.show")
MODEL_CASES = ("bertviz.model_view", "attnviz.model_view")  # at the shortest length only
OUTPUT_BOUND = 256 * 2**20  # one output's HTML: more is not a notebook cell a browser or Jupyter can hold
ATTENTIONS_BOUND = 6 * 2**30  # output_attentions' tensors in this process (24 GiB machine, shared)
JS_PACKAGES = {  # npm package -> (file in its tarball, the name the page loads)
    "requirejs@2.3.6": ("package/require.js", "require.js"),
    "d3@5.7.0": ("package/dist/d3.min.js", "d3.min.js"),
    "jquery@2.1.0": ("package/dist/jquery.min.js", "jquery.min.js"),
}
CDN = "https://cdnjs.cloudflare.com/ajax/libs/"
CDN_FILES = {  # BertViz's URLs (require.js appends ".js" to a module path) -> the local file
    f"{CDN}require.js/2.3.6/require.min.js": "require.js",
    f"{CDN}d3/5.7.0/d3.min": "d3.min",
    f"{CDN}jquery/2.0.0/jquery.min": "jquery.min",
}
# before any of the page's scripts: the animation frame after the chart is drawn (attnviz's event or data-drawn,
# BertViz's SVG: a MutationObserver's callback runs after the script that appended it has finished)
OBSERVE = """
window.__bench = {};
const mark = () => {
  if (window.__bench.marked !== undefined) return;
  window.__bench.marked = performance.now();
  requestAnimationFrame(() => { window.__bench.drawn = performance.now(); });
};
document.addEventListener('attnviz:notebook-drawn', mark, true);
new MutationObserver(() => {
  if (document.querySelector('.attnviz-nb[data-drawn="1"]') || document.querySelector('[id^="bertviz-"] #vis svg'))
    mark();
}).observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-drawn']});
"""


def _ipython_display() -> None:
    """BertViz imports ``IPython.display`` at its top; where IPython is not installed its ``html_action="return"``
    path needs only the ``data`` of ``HTML`` and ``Javascript``: three stand-ins (tools/bertviz_side_by_side.py)."""
    try:
        import IPython.display  # noqa: F401
    except ImportError:
        from tools.bertviz_side_by_side import _ipython_stand_in

        _ipython_stand_in()


def bertviz_js(folder: Path | None) -> Path:
    """The folder of BertViz's three scripts: ``folder`` as given, or npm's tarballs unpacked once into the cache."""
    if folder is not None:
        return folder.resolve()
    cache = Path.home() / ".cache" / "attnviz" / "bertviz-js"
    if all((cache / name).is_file() for _, name in JS_PACKAGES.values()):
        return cache
    if shutil.which("npm") is None:
        raise SystemExit("BertViz's scripts: pass --js DIR (require.js, d3.min.js, jquery.min.js) or install npm")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", *JS_PACKAGES], cwd=tmp, check=True, capture_output=True)
        for package, (member, name) in JS_PACKAGES.items():
            tarball = Path(tmp) / (package.replace("@", "-") + ".tgz")
            with tarfile.open(tarball) as tar:
                (cache / name).write_bytes(tar.extractfile(member).read())
    return cache


def local_bertviz(html: str, js: Path) -> str:
    """BertViz's output with its CDN URLs pointing at the local copies."""
    for url, name in CDN_FILES.items():
        if url not in html:
            raise ValueError(f"BertViz's output no longer loads {url}: update CDN_FILES")
        html = html.replace(url, (js / name).as_uri())
    return html


def load_smollm2(implementation: str):
    """SmolLM2 from its bundled folder, float32, as a notebook user loads it with transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.models.registry import bundled_folder

    folder = bundled_folder("smollm2")
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=implementation, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder)


def text_of(tokenizer, n: int) -> tuple[str, list[int]]:
    """A text of exactly ``n`` tokens (the benchmark paragraph's first ``n``, decoded back) and its ids."""
    ids = tokenizer(benchmark_text(n))["input_ids"][:n]
    text = tokenizer.decode(ids)
    again = tokenizer(text)["input_ids"]
    return text, again[:n]


def attention_bytes(model, n: int) -> int:
    """What ``output_attentions`` holds for ``n`` tokens: one float32 weight per layer, head, query and key."""
    return model.config.num_hidden_layers * model.config.num_attention_heads * n * n * 4


def call(case: str, model, tokenizer, text: str, ids: list[int]) -> str:
    """One notebook cell's work for ``case``; returns the output's HTML."""
    import torch

    if case == "attnviz.show":
        from attnviz.notebook import show

        return show(model, tokenizer, text, max_tokens=len(ids), html_action="return").data
    with torch.no_grad():
        outputs = model(torch.tensor([ids]), output_attentions=True)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    library, view = case.split(".")
    if library == "bertviz":
        import bertviz
    else:
        import attnviz.notebook as bertviz  # the switch a BertViz user makes: one import
    return getattr(bertviz, view)(outputs.attentions, tokens, html_action="return").data


def bertviz_output_bytes(case: str, model, tokenizer, short: tuple[str, list[int]], n: int) -> int:
    """BertViz's output at ``n`` tokens predicted from its output for the ``short`` text: its bytes per weight there
    (the weights are nearly all of it: each as JSON text, twice, since BertViz's template names its marker
    ``PYTHON_PARAMS`` in a comment too, which the replace fills as well) times the weights at ``n``."""
    html = call(case, model, tokenizer, *short)
    return int(len(html.encode()) / attention_bytes(model, len(short[1])) * attention_bytes(model, n))


def saved_notebook(source: str, html: str) -> str:
    """A saved notebook (nbformat 4, written as Jupyter writes it) of one code cell and its HTML output."""
    lines = html.splitlines(keepends=True)
    cell = {
        "cell_type": "code",
        "execution_count": 1,
        "id": "bench",
        "metadata": {},
        "outputs": [
            {
                "data": {"text/html": lines, "text/plain": ["<IPython.core.display.HTML object>"]},
                "execution_count": 1,
                "metadata": {},
                "output_type": "execute_result",
            }
        ],
        "source": source.splitlines(keepends=True),
    }
    kernel = {"display_name": "Python 3", "language": "python", "name": "python3"}
    notebook = {"cells": [cell], "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


FORWARD = "outputs = model(ids, output_attentions=True)\n"
SOURCES = {  # each case's cell, as a user types it
    "bertviz.head_view": FORWARD + "bertviz.head_view(outputs.attentions, tokens)",
    "bertviz.model_view": FORWARD + "bertviz.model_view(outputs.attentions, tokens)",
    "attnviz.head_view": FORWARD + "attnviz.notebook.head_view(outputs.attentions, tokens)",
    "attnviz.model_view": FORWARD + "attnviz.notebook.model_view(outputs.attentions, tokens)",
    "attnviz.show": "attnviz.notebook.show(model, tokenizer, text)",
}


def draw(browser, page_file: Path, timeout_ms: int = 600_000) -> dict:
    """One page load in a new context, every request but file:// refused: ms until the frame after the chart is
    drawn (after the browser asks for the page), the requests refused, the page's errors."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    refused: list[str] = []

    def route(r) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    context.add_init_script(OBSERVE)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: refused.append(r.url) if not r.url.startswith("file:") else None)
    try:
        page.goto(page_file.as_uri(), wait_until="commit", timeout=timeout_ms)
        page.wait_for_function("() => window.__bench.drawn !== undefined", timeout=timeout_ms, polling=50)
        found = page.evaluate("() => ({drawn: window.__bench.drawn, marked: window.__bench.marked})")
    finally:
        context.close()
    return {"draw_ms": found["drawn"], "refused": sorted(set(refused)), "errors": errors}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _refusal(case: str, model, tokenizer, n: int, short: tuple[str, list[int]], row: dict) -> str | None:
    """Why ``case`` is not run at ``n`` tokens (its figures over the bounds), or None; BertViz's predicted output
    bytes go into ``row``."""
    if case.startswith("attnviz.show"):
        return None
    tensors = attention_bytes(model, n)
    if tensors > ATTENTIONS_BOUND:
        return f"output_attentions would hold {tensors / 1e9:.2f} GB > {ATTENTIONS_BOUND / 2**30:.0f} GiB"
    if case.startswith("bertviz"):
        predicted = row["predicted_output_bytes"] = bertviz_output_bytes(case, model, tokenizer, short, n)
        if predicted > OUTPUT_BOUND:
            return f"its output would be about {predicted / 1e9:.1f} GB of HTML > {OUTPUT_BOUND / 2**20:.0f} MiB"
    return None


def timed(browser, case: str, model, tokenizer, text: str, ids: list[int], runs: int, js: Path, out: Path) -> dict:
    """``runs`` timings of one case: the Python call, then its output drawn in Chromium; medians and bytes."""
    python_s, draw_ms, load, refused, errors = [], [], [], set(), []
    for run in range(runs):
        load.append(os.getloadavg()[0])
        start = time.perf_counter()
        html = call(case, model, tokenizer, text, ids)
        python_s.append(time.perf_counter() - start)
        page = html if case.startswith("attnviz") else local_bertviz(html, js)
        page_file = out / f"{case}-{len(ids)}-{run}.html"
        page_file.write_text(f"<!doctype html><html><body>{page}</body></html>", encoding="utf-8")
        seen = draw(browser, page_file)
        draw_ms.append(seen["draw_ms"])
        refused.update(seen["refused"])
        errors += seen["errors"]
    python_med, draw_med = statistics.median(python_s), statistics.median(draw_ms) / 1000
    return {
        "python_s": python_s,
        "draw_ms": draw_ms,
        "python_s_median": python_med,
        "draw_s_median": draw_med,
        "total_s_median": python_med + draw_med,
        "output_bytes": len(html.encode()),
        "notebook_bytes": len(saved_notebook(SOURCES[case], html).encode()),
        "refused_requests": sorted(refused),
        "page_errors": errors,
        "load_1min": load,
    }


def measure(
    lengths: tuple[int, ...], runs: int, js: Path, threads: int, out: Path, only: tuple[str, ...], given_mb: int
) -> dict:
    """Every case at every length: Python seconds, draw ms, bytes. attnviz's ``head_view`` refuses given weights over
    its result cache's bound (ATTNVIZ_CACHE_MB): with ``given_mb``, such a case is measured again under that bound."""
    import torch

    from attnviz.models.given import GivenWeightsError
    from attnviz.settings import CACHE_MB_ENV
    from tools.browser import chromium_browser

    torch.set_num_threads(threads)
    _ipython_display()
    model, tokenizer = load_smollm2("eager")
    short = text_of(tokenizer, min(lengths))
    rows = []
    with chromium_browser() as browser:
        for n in lengths:
            text, ids = text_of(tokenizer, n)
            cases = [c for c in HEAD_CASES + (MODEL_CASES if n == min(lengths) else ()) if c in only]
            for case in cases:
                row = {"case": case, "tokens": len(ids), "tensor_bytes": None}
                if not case.startswith("attnviz.show"):
                    row["tensor_bytes"] = attention_bytes(model, len(ids))
                refused = _refusal(case, model, tokenizer, n, short, row)
                if refused:
                    rows.append({**row, "refused": refused})
                    continue
                if n == min(lengths):  # the kernel's first call of this case pays imports: timed apart
                    start = time.perf_counter()
                    call(case, model, tokenizer, text, ids)
                    row["first_call_s"] = time.perf_counter() - start
                try:
                    rows.append({**row, **timed(browser, case, model, tokenizer, text, ids, runs, js, out)})
                    continue
                except GivenWeightsError as error:
                    rows.append({**row, "refused": f"attnviz refuses: {error}"})
                if not given_mb:
                    continue
                before = os.environ.get(CACHE_MB_ENV)
                os.environ[CACHE_MB_ENV] = str(given_mb)
                try:
                    found = timed(browser, case, model, tokenizer, text, ids, runs, js, out)
                finally:
                    if before is None:
                        del os.environ[CACHE_MB_ENV]
                    else:
                        os.environ[CACHE_MB_ENV] = before
                rows.append({**row, "cache_mb": given_mb, **found})
    return {"rows": rows}


def memory_child(case: str, tokens: int, threads: int) -> dict:
    """In this fresh process: SmolLM2 loaded, then ``case`` at ``tokens``; RSS after the load and the peak."""
    import torch

    torch.set_num_threads(threads)
    model, tokenizer = load_smollm2("sdpa" if case == "attnviz.show" else "eager")
    text, ids = text_of(tokenizer, tokens)
    loaded = status_bytes("VmRSS")
    start = time.perf_counter()
    if case == "attnviz.show":
        from attnviz.notebook import capture

        captured = capture(model, tokenizer, text, max_tokens=tokens)  # show() is this and .show(): the record kept
        html = captured.show(html_action="return").data
        seconds = time.perf_counter() - start
        extra = {"output_bytes": len(html.encode()), "record_bytes": captured.record.nbytes}
    else:
        with torch.no_grad():
            attentions = model(torch.tensor([ids]), output_attentions=True).attentions
        seconds = time.perf_counter() - start
        extra = {"record_bytes": sum(a.numel() * a.element_size() for a in attentions)}
    return {"case": case, "tokens": len(ids), "seconds": seconds, "rss_loaded": loaded,
            "peak_rss": status_bytes("VmHWM"), **extra}  # fmt: skip


def memory(tokens: int, threads: int) -> list[dict]:
    """attnviz.show at ``tokens`` in a fresh process; output_attentions run only within ATTENTIONS_BOUND."""
    rows = []
    for case in ("attnviz.show", "output_attentions"):
        row = {"case": case, "tokens": tokens, "load_1min": os.getloadavg()[0]}
        if case == "output_attentions":
            from transformers import AutoConfig

            from attnviz.models.registry import bundled_folder

            config = AutoConfig.from_pretrained(bundled_folder("smollm2"))
            need = config.num_hidden_layers * config.num_attention_heads * tokens * tokens * 4
            row["tensor_bytes"] = need
            if need > ATTENTIONS_BOUND:
                rows.append({**row, "refused": f"{need / 1e9:.1f} GB > {ATTENTIONS_BOUND / 2**30:.0f} GiB"})
                continue
        args = ["-m", "benchmarks.notebook", "--memory-child", case, str(tokens), "--threads", str(threads)]
        proc = run_child(args, 3600, fixed_malloc=False)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            rows.append({**row, "failed": lines[-1] if lines else f"exit {proc.returncode}"})
            continue
        rows.append({**row, **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.2f} MB"


def table(result: dict) -> str:
    lines = [f"SmolLM2-135M float32, {result['threads']} thread(s), medians of {result['runs']} runs"]
    head = f"{'case':<28}{'tokens':>7}{'1st call':>9}{'python (best)':>16}{'browser':>9}{'total':>9}{'output':>12}"
    lines.append(head + f"{'notebook':>12}{'tensors':>12}")
    for r in result["rows"]:
        if "refused" in r:
            lines.append(f"{r['case']:<28}{r['tokens']:>7}  not run: {r['refused']}")
            continue
        case = r["case"] + (f" ({r['cache_mb']} MB)" if "cache_mb" in r else "")
        first = f"{r['first_call_s']:.2f}s" if "first_call_s" in r else "-"
        lines.append(
            f"{case:<28}{r['tokens']:>7}{first:>9}{r['python_s_median']:>8.2f}s ({min(r['python_s']):5.2f})"
            f"{r['draw_s_median']:>8.2f}s"
            f"{r['total_s_median']:>8.2f}s{_mb(r['output_bytes']):>12}{_mb(r['notebook_bytes']):>12}"
            f"{_mb(r['tensor_bytes']):>12}"
        )
        if r["refused_requests"] or r["page_errors"]:
            lines.append(f"    refused requests {r['refused_requests']}; page errors {r['page_errors']}")
    for r in result.get("memory", []):
        head = f"memory {r['case']:<20}{r['tokens']:>6} tokens: "
        if "refused" in r or "failed" in r:
            lines.append(head + f"tensors {_mb(r.get('tensor_bytes'))}: not run: {r.get('refused') or r['failed']}")
            continue
        lines.append(
            head + f"{r['seconds']:.1f} s, peak RSS {_mb(r['peak_rss'])} ({_mb(r['peak_rss'] - r['rss_loaded'])} "
            f"above the loaded model), kept {_mb(r['record_bytes'])}"
            + (f", output {_mb(r['output_bytes'])}" if "output_bytes" in r else "")
        )
    lines.append(f"attnviz's viewer (script and style) in each output above: {_mb(result['viewer_bytes'])}")
    lines.append(f"uptime before: {result['uptime_before']}")
    lines.append(f"uptime after:  {result['uptime_after']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--memory-tokens", type=int, default=MEMORY_TOKENS, help="0: skip the memory cases")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--js", type=Path, help="a folder with require.js, d3.min.js and jquery.min.js")
    parser.add_argument("--keep", type=Path, help="keep the pages here (default: a temporary folder)")
    parser.add_argument("--cases", nargs="+", choices=HEAD_CASES + MODEL_CASES, default=HEAD_CASES + MODEL_CASES)
    parser.add_argument(
        "--given-cache-mb", type=int, default=0, help="measure a head_view attnviz refuses again under this bound"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--memory-child", nargs=2, metavar=("CASE", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]), args.threads)))
        return
    from attnviz.notebook.assets import viewer_css, viewer_script

    js = bertviz_js(args.js)
    result = {"runs": args.runs, "threads": args.threads, "uptime_before": uptime(), "js": str(js)}
    # what every attnviz output of html_action="return" (and a kernel's first shown view) carries
    result["viewer_bytes"] = len(viewer_css().encode()) + len(viewer_script().encode())
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        result.update(
            measure(tuple(args.tokens), args.runs, js, args.threads, out, tuple(args.cases), args.given_cache_mb)
        )
    if args.memory_tokens:
        result["memory"] = memory(args.memory_tokens, args.threads)
    result["uptime_after"] = uptime()
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    sys.exit(main())
