"""README.md and docs/: every link and image resolves, and every figure they state about the code is the code's.

The README is the front door and docs/ the house (STYLE §20): a figure about the code (a count of pages,
subcommands or architectures, a limit, the largest module) is read here from the code and compared with the
sentence that states it, so the text cannot drift from the tree. Measurements (seconds, MB) are not checked here:
docs/benchmarks.md names the benchmark that produced each. Nothing here imports torch, Streamlit or the CLI: the
code is read with ``ast`` and the catalogues with ``tomllib``, so the whole file runs in well under two seconds.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

from attnviz import settings
from attnviz.i18n.catalogue import catalogue
from tests.integration.zoo.build import committed_table  # the stdlib and attnviz's config names: no torch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKDOWN = [README, *DOCS, ROOT / "deploy" / "README.md"]  # every file whose links are checked
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@cache
def raw(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@cache
def prose(path: Path) -> str:
    """The file without its fenced code blocks (lines kept, so line numbers still match)."""
    out, fenced = [], False
    for line in raw(path).split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def flat(path: Path) -> str:
    """The file's text on one line: a figure may be stated across a line break."""
    return " ".join(raw(path).split())


def doc(name: str) -> Path:
    return ROOT / "docs" / name


# ---------------------------------------------------------------- links, images and anchors

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:img|a|source)\b[^>]*?\s(?:src|href)=\"([^\"]+)\"", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"<a\s[^>]*?(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links, code marks and emphasis dropped), lower case, every
    character that is not a letter, digit, space, hyphen or underscore removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_ marks, not the underscores inside a word
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a link may name in ``path``: its headings' slugs (GitHub numbers repeats -1, -2, …) and
    explicit ``<a id=…>`` / ``<a name=…>``."""
    seen: Counter[str] = Counter()
    found = set(HTML_ANCHOR.findall(prose(path)))
    for line in prose(path).split("\n"):
        if match := HEADING.match(line):
            base = slug(match.group(2))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image and every HTML src/href outside code."""
    out = []
    for number, line in enumerate(prose(path).split("\n"), 1):
        line = CODE_SPAN.sub("", line)
        out += [(number, target) for target in LINK.findall(line) + HTML_LINK.findall(line)]
    return out


def test_the_documents_exist_and_the_readme_fits_a_first_screen():
    """One screen: a picture, three sentences, two commands and a CLI line, the pages, the docs (STYLE §20)."""
    assert len(DOCS) >= 10, [rel(p) for p in DOCS]
    lines = raw(README).count("\n")
    assert lines <= 80, f"README.md has {lines} lines: reference belongs in docs/"
    assert "make run" in raw(README) and "make test" in raw(README) and "python -m attnviz " in raw(README)


def test_every_docs_file_is_linked_from_the_readme():
    linked = {(README.parent / unquote(t.split("#")[0])).resolve() for _, t in links(README) if t.startswith("docs/")}
    assert [rel(p) for p in DOCS if p.resolve() not in linked] == []


@pytest.mark.parametrize("path", MARKDOWN, ids=rel)
def test_every_relative_link_and_image_resolves(path):
    """A file or folder that exists in the repository; a ``#anchor`` that is a heading of the target."""
    broken = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:: not ours to check
            continue
        file_part, _, anchor = unquote(target).partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{rel(path)}:{number}: {target}"
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{where} (no heading #{anchor} in {rel(resolved)})")
    assert not broken, "\n".join(broken)


def test_the_slugs_are_githubs():
    assert slug("MHA → GQA on a real layer") == "mha--gqa-on-a-real-layer"
    assert slug("Head ablation (the Ablation page, `ablate`)") == "head-ablation-the-ablation-page-ablate"
    assert slug("English / 中文") == "english--中文"
    assert slug("`train-scale`") == "train-scale"
    assert slug("Admission: how many run at once") == "admission-how-many-run-at-once"


# ---------------------------------------------------------------- paths and names the text cites

CODE_TEXT = re.compile(r"`([^`\n]+)`")
MODULE_RUN = re.compile(r"python -m ((?:benchmarks|tools|tests|attnviz)(?:\.\w+)*)(?![.\w<])")
# where a path the docs cite is one of ours: the repository's own folders, and attnviz's subpackages (cited as
# `models/hf/source.py` inside attnviz/)
OURS = {
    ROOT: {"attnviz", "tests", "pages", "benchmarks", "tools", "deploy", "assets", "docs", ".streamlit", ".ci"},
    ROOT / "attnviz": {p.name for p in (ROOT / "attnviz").iterdir() if p.is_dir() and p.name != "__pycache__"},
}


def cited(pattern: re.Pattern) -> list[tuple[Path, str]]:
    return [(path, m) for path in MARKDOWN for m in pattern.findall(raw(path))]


def module_file(dotted: str) -> Path | None:
    """The file of a module of this repository (``attnviz.core.masks`` -> attnviz/core/masks.py), or None."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):  # a package first, as Python imports
        if candidate.is_file():
            return candidate
    return None


@cache
def top_level_names(path: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level (``__getattr__`` allows any)."""
    names: set[str] = set()
    nodes = list(ast.parse(raw(path)).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):  # conditional definitions and imports
            nodes += [*node.body, *node.orelse, *getattr(node, "finalbody", []), *getattr(node, "handlers", [])]
        elif isinstance(node, ast.ExceptHandler):
            nodes += node.body
    return frozenset(names | ({"*"} if "__getattr__" in names else set()))


def resolves(dotted: str) -> bool:
    """``attnviz.a.b.name``: the longest prefix is a module of the repository, and what follows it (a function, a
    class, a constant, a submodule) is defined or imported there."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        if (found := module_file(".".join(parts[:cut]))) is not None:
            rest = parts[cut:]
            return not rest or rest[0] in top_level_names(found) or "*" in top_level_names(found)
    return False


@pytest.mark.slow
def test_every_module_function_and_class_the_docs_name_exists():
    """``attnviz.core.capture.capture_weights``-style names, and the library's import lines, resolve in the tree
    as it is (modules move: the text follows them)."""
    missing = []
    for path, text in cited(CODE_TEXT):
        for dotted in re.findall(r"\battnviz(?:\.[A-Za-z_]\w*)+", text):
            if not resolves(dotted):
                missing.append(f"{rel(path)}: `{dotted}`")
    for path in MARKDOWN:
        for module, names in re.findall(r"^from (attnviz[\w.]*) import (.+)$", raw(path), re.MULTILINE):
            for name in (n.strip() for n in names.split(",")):
                if not resolves(f"{module}.{name}"):
                    missing.append(f"{rel(path)}: from {module} import {name}")
    assert not missing, "\n".join(missing)


def test_every_path_and_python_module_the_docs_name_exists():
    """`tests/integration/pages/test_app.py`, `attnviz/models/hf/projections.py` (or `models/hf/…` inside
    attnviz/), `python -m benchmarks.pages`: each exists. Paths of other projects (vllm/…, src/…), placeholders
    (`pages/<name>.py`) and what a run writes (`build/…`) are not checked."""
    missing = []
    for path, text in cited(CODE_TEXT):
        for word in (w.strip("()[]{},;:'\"") for w in text.split()):
            if not re.fullmatch(r"[\w.-]+(?:/[\w.-]+)*/?", word) or not ("/" in word or word.startswith("test_")):
                continue
            if "/" not in word:  # a bare test file: somewhere under tests/
                if word.endswith(".py") and not list((ROOT / "tests").rglob(word)):
                    missing.append(f"{rel(path)}: `{word}`")
                continue
            first = word.split("/")[0]
            bases = [base for base in (ROOT, ROOT / "attnviz") if first in OURS.get(base, ())]
            if bases and not any((base / word).exists() for base in bases):
                missing.append(f"{rel(path)}: `{word}`")
    for path, dotted in cited(MODULE_RUN):
        base = ROOT.joinpath(*dotted.split("."))  # a package wins over a module of the same name, as in Python
        if not (
            (base / "__main__.py").is_file() if (base / "__init__.py").is_file() else base.with_suffix(".py").is_file()
        ):
            missing.append(f"{rel(path)}: python -m {dotted}")
    assert not missing, "\n".join(missing)


# ---------------------------------------------------------------- figures about the code


def largest_modules() -> list[tuple[int, str]]:
    files = [*(ROOT / "attnviz").rglob("*.py"), *(ROOT / "pages").rglob("*.py"), ROOT / "app.py", ROOT / "serve.py"]
    return sorted(((raw(f).count("\n"), rel(f)) for f in files), reverse=True)


def test_no_module_is_over_the_size_the_architecture_states():
    """'none (…) is over 600 lines' is measured, not remembered."""
    stated = re.search(r"none \([^)]*\) is over ([\d,]+) lines", flat(doc("architecture.md")))
    assert stated, "docs/architecture.md states the largest module's bound"
    bound = int(stated.group(1).replace(",", ""))
    assert [f"{path}: {n}" for n, path in largest_modules() if n > bound] == []


@cache
def menu() -> dict[str, dict[str, str]]:
    """attnviz/app/navigation.py's SECTIONS (section -> page file name -> icon), read without importing Streamlit."""
    tree = ast.parse(raw(ROOT / "attnviz" / "app" / "navigation.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SECTIONS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("attnviz/app/navigation.py has no SECTIONS")


def test_the_pages_the_docs_list_are_the_menus():
    """Every page of the menu, in order, in the README's table and as a heading of docs/pages.md; the counts."""
    english = catalogue("en")
    sections = [english[f"nav_sections.{section}"] for section in menu()]
    titles = [english[f"nav.{name}"] for pages in menu().values() for name in pages]
    in_menu_order = [
        title
        for section, pages in menu().items()
        for title in [english[f"nav_sections.{section}"]] + [english[f"nav.{name}"] for name in pages]
    ]
    files = {p.stem for p in (ROOT / "pages").glob("*.py") if p.stem != "__init__"}
    assert files == {name for pages in menu().values() for name in pages}
    n_pages, n_sections = re.search(r"(\d+) pages in (\d+) sections", flat(README)).groups()
    assert (int(n_pages), int(n_sections)) == (len(titles), len(sections))
    rows = re.findall(r"^\| (?:\[([^\]]+)\]\(docs/pages\.md#[^)]+\)|\*\*([^*]+)\*\*) \|", raw(README), re.MULTILINE)
    assert [page or section for page, section in rows] == in_menu_order
    stated = re.search(r"The menu has (\w+) sections", flat(doc("pages.md"))).group(1)
    assert WORDS[stated] == len(sections)
    headings = re.findall(r"^#{2,3} (.+)$", prose(doc("pages.md")), re.MULTILINE)
    assert [h for h in headings if h in in_menu_order] == in_menu_order


@cache
def subcommands() -> list[str]:
    """Every ``add_parser("name", …)`` of the command line, read from its source (importing it loads torch)."""
    found = []
    package = ROOT / "attnviz" / "cli"
    for path in sorted(package.rglob("*.py")) if package.is_dir() else [ROOT / "attnviz" / "cli.py"]:
        for node in ast.walk(ast.parse(raw(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_parser" and node.args:
                found.append(ast.literal_eval(node.args[0]))
    return found


def test_the_command_line_reference_has_every_subcommand_and_no_other():
    assert len(subcommands()) >= 8, subcommands()
    stated = re.search(r"It has (\d+) subcommands", flat(doc("cli.md"))).group(1)
    assert int(stated) == len(subcommands())
    documented = re.findall(r"^## `([\w-]+)`$", raw(doc("cli.md")), re.MULTILINE)
    assert sorted(documented) == sorted(subcommands())


def zoo_table() -> list[tuple[str, str, str]]:
    """docs/models.md's generated table, read by the zoo's own parser: (architecture, route, limits) per row."""
    rows = [(model_type, route, limits) for model_type, (route, limits) in committed_table(doc("models.md")).items()]
    assert len(rows) > 200
    return rows


def unstated(expected: dict[Path, list[str]]) -> list[str]:
    """The phrases a file should state and does not (its text on one line)."""
    return [
        f"{rel(path)} should say {phrase!r}"
        for path, phrases in expected.items()
        for phrase in phrases
        if phrase not in flat(path)
    ]


def test_the_zoos_figures_are_its_tables():
    """The counts in the text are the generated table's, and the table is of the transformers installed."""
    rows = zoo_table()
    routes = Counter(route for _, route, _ in rows)
    reasons = [limits for _, route, limits in rows if route == "refused"]
    total, version = re.search(r"\((\d+) in transformers (\d+\.\d+),", flat(doc("models.md"))).groups()
    assert int(total) == len(rows) == len({t for t, _, _ in rows})
    assert importlib.metadata.version("transformers").startswith(version + "."), "regenerate the zoo's table"
    built = routes["interface"] + routes["eager"] + routes["seq2seq"]
    decoders = sum(1 for _, route, limits in rows if route in ("interface", "eager") and "encoder" not in limits)

    def count(words: str) -> int:
        return sum(words in reason for reason in reasons)

    expected = {
        doc("models.md"): [
            f"**{built} exact** ({routes['interface']} interface, {routes['eager']} eager, {routes['seq2seq']} "
            "encoder-decoders",
            f"{routes['refused by attnviz']} refused by attnviz",
            f"{sum(1 for _, route, limits in rows if route == 'refused by attnviz' and 'encoder-decoder' in limits)} "
            "encoder-decoders refused by attnviz",
            f"{count('a seq2seq model whose tiny config')} seq2seq models whose tiny config",
            f"{count('in the seq2seq mapping')} in the seq2seq mapping with a decoder's config",
            f"{count('a multimodal model whose whole tiny wrapper')} multimodal models whose whole tiny wrapper",
            f"{sum(1 for _, route, limits in rows if route == 'refused by attnviz' and 'multimodal' in limits)} "
            "multimodal models whose text model",
            f"{sum(1 for _, route, limits in rows if 'multimodal checkpoint' in limits)} of them the",
            f"{count('generic tiny sizes')} for which the generic sizes",
            f"{count('time limit')} too slow to build, {count('does not load back')} that transformers does not load back",
            f"… {routes['eager']} of the zoo's architectures",
        ],
        doc("pages.md"): [f"of the zoo's {routes['interface']} interface-route"],
        doc("kv-cache.md"): [f"every decoder of the zoo ({decoders})**"],
    }
    assert not unstated(expected), "\n".join(unstated(expected))
    assert len(reasons) == sum(
        count(words)
        for words in (
            "a seq2seq model whose tiny config",
            "in the seq2seq mapping",
            "a multimodal model whose whole",
            "generic tiny sizes",
            "time limit",
            "does not load back",
        )
    ), "a reason the text does not count"


def test_the_kv_presets_are_counted():
    from attnviz.labs.kv.presets import PRESETS

    expected = {README: [f"{len(PRESETS)} real models' configs"], doc("pages.md"): [f"{len(PRESETS)} presets of real"]}
    assert not unstated(expected), "\n".join(unstated(expected))


def superscript(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))


def test_the_limits_the_docs_state_are_the_settings():
    """Each limit is written where it is explained; here each sentence is compared with attnviz/settings.py."""
    s, limits = settings, settings.MODEL_LIMITS
    mib = 2**20
    expected = {
        "long-inputs.md": [
            f"| Max tokens | {s.MAX_TOKENS.low}–{s.MAX_TOKENS.high:,} ",
            f"d_model ≤ {s.D_MODEL.high:,}, n_head ≤ {s.N_HEAD.high}, n_layer ≤ {s.N_LAYER.high} |",
            f"| Parity | first {s.PARITY_TOKENS} tokens |",
            f"| Padding page | {s.PADDING_SENTENCES} sentences of ≤ {s.PADDING_TOKENS} tokens |",
            f"prompt + new tokens ≤ {s.GENERATION_CONTEXT:,}, ≤ {s.GENERATE_TOKENS.high} new |",
            f"tokens × layers × heads ≤ {s.REQUEST_HEAD_TOKENS:,} ",
            f"mask ≤ {s.MASK_MAX_BYTES // mib} MiB, config.json ≤ {s.KV_CONFIG_MAX_BYTES // mib} MiB |",
            f"| {s.TRAIN_SESSION_SECONDS} s per session per {s.TRAIN_SESSION_WINDOW_S // 60} minutes |",
            f"{s.CACHE_MB_DEFAULT:,} MB by default, set `{s.CACHE_MB_ENV}` to change it, and at most "
            f"{s.CACHE_ENTRIES} entries",
        ],
        "hosting.md": [
            f"tokens × layers × heads: **{s.REQUEST_HEAD_TOKENS:,}**",
            f"at most {s.TRAIN_SESSION_SECONDS} s of training per {s.TRAIN_SESSION_WINDOW_S // 60} minutes",
            f"{s.UPLOAD_MAX_MB} MiB for a mask (Mask lab), {s.KV_CONFIG_MAX_BYTES // mib} MiB for a config.json",
        ],
        "models.md": [
            f"(layers {limits['layers']:,}, heads {limits['heads']:,}, hidden {limits['hidden']:,}, "
            f"vocabulary {limits['vocab']:,}, positions 2{superscript(limits['positions'].bit_length() - 1)}:",
            f"over the cache bound (`{s.CACHE_MB_ENV}`, {s.CACHE_MB_DEFAULT // 1024} GB)",
        ],
        "cli.md": [
            f"`--max-tokens` goes to {s.MAX_TOKENS.high:,}",
            f"`--seed` {s.SEED.low}–{s.SEED.high:,}",
            f"Steps go from {s.TRAIN_STEPS.low} to {s.TRAIN_STEPS.high:,}",
            f"({limits['layers']:,} layers, {limits['heads']:,} heads, hidden {limits['hidden']:,}, vocabulary "
            f"{limits['vocab']:,}, MLP {limits['intermediate']:,})",
            f"the request budget ({s.MAX_TOKENS.high:,} × 30 × 9 = {s.REQUEST_HEAD_TOKENS:,} head-tokens",
            f"over {s.MASK_MAX_BYTES // mib} MiB or {s.MASK_MAX_SIDE:,} tokens a side",
        ],
    }
    assert limits["positions"] == 2 ** (limits["positions"].bit_length() - 1)  # stated as a power of two
    missing = unstated({doc(name): phrases for name, phrases in expected.items()})
    assert not missing, "\n".join(missing)


def test_the_property_suites_floor_is_the_one_enforced():
    from tests.property import MIN_EXAMPLES

    expected = {
        doc("development.md"): [f"fails under {MIN_EXAMPLES:,} (`MIN_EXAMPLES`)"],
        doc("hosting.md"): [f"Over {MIN_EXAMPLES:,} cases a run (the session fails under that floor)"],
    }
    assert not unstated(expected), "\n".join(unstated(expected))


def test_the_make_targets_documented_are_the_makefiles():
    phony = re.search(r"^\.PHONY:(.*)$", raw(ROOT / "Makefile"), re.MULTILINE).group(1).split()
    documented = re.findall(r"^\| `make ([\w-]+)` \|", raw(doc("development.md")), re.MULTILINE)
    assert sorted(documented) == sorted(phony)


def test_the_test_folders_documented_are_the_trees():
    text = flat(doc("development.md"))
    named = set(re.findall(r"`tests/integration/(\w+)/`", text))
    on_disk = {p.name for p in (ROOT / "tests" / "integration").iterdir() if (p / "__init__.py").is_file()}
    assert named == on_disk


def test_the_example_source_lists_every_member_of_the_protocol():
    """docs/architecture.md's ``MySource`` has every attribute and method of ``AttentionSource``, and no other."""
    tree = ast.parse(raw(ROOT / "attnviz" / "models" / "source.py"))
    protocol = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AttentionSource")
    members = {n.target.id for n in protocol.body if isinstance(n, ast.AnnAssign)}
    members |= {n.name for n in protocol.body if isinstance(n, ast.FunctionDef)}
    block = re.search(r"```python\n([^`]*?class MySource.*?)```", raw(doc("architecture.md")), re.DOTALL).group(1)
    example = next(n for n in ast.parse(block).body if isinstance(n, ast.ClassDef))
    listed = {n.name for n in example.body if isinstance(n, ast.FunctionDef)}
    for node in example.body:
        if isinstance(node, ast.Assign):
            listed |= {n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    assert sorted(listed) == sorted(members)
