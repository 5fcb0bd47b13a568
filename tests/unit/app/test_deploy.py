"""The Dockerfile, read as text (no Docker daemon in CI): non-root, a health check, pinned installs, hosted mode."""

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_image_runs_as_a_user_who_is_not_root():
    steps = instructions()
    users = [(i, arg) for i, (word, arg) in enumerate(steps) if word == "USER"]
    assert users and users[-1][1] not in ("root", "0")
    cmd = next(i for i, (word, _) in enumerate(steps) if word == "CMD")
    assert users[-1][0] < cmd
    # the user's home holds the converted SmolLM2: it is converted as that user, after USER
    convert = next(i for i, (word, arg) in enumerate(steps) if word == "RUN" and "prepared_folder('smollm2')" in arg)
    assert users[0][0] < convert


def test_the_health_check_asks_streamlits_health_endpoint():
    (check,) = [arg for word, arg in instructions() if word == "HEALTHCHECK"]
    assert "/_stcore/health" in check and "--interval=" in check and "--timeout=" in check
    port = re.search(r"127\.0\.0\.1:(\d+)/_stcore/health", check).group(1)
    cmd = json.loads(next(arg for word, arg in instructions() if word == "CMD"))
    assert f"--server.port={port}" in cmd
    assert ("EXPOSE", port) in instructions()


def test_every_install_is_pinned_and_nothing_downloads_a_browser():
    runs = [arg for word, arg in instructions() if word == "RUN"]
    text = " ".join(runs)
    assert "playwright" not in text and "apt-get install" not in text
    for command in (part for run in runs for part in run.split("&&")):
        words = shlex.split(command)
        if words[:2] != ["pip", "install"]:
            continue
        args = iter(words[2:])
        for arg in args:
            if arg in ("-r", "-c", "--index-url"):
                next(args)  # a pinned requirements file, or the index to read
            elif not arg.startswith("-"):
                assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][A-Za-z0-9_.+]*", arg), f"unpinned: {arg}"
    base = next(arg for word, arg in instructions() if word == "FROM")
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base  # an exact Python, the slim image
    for requirements in ("requirements.txt", "requirements-models.txt"):
        for line in (ROOT / requirements).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                assert "==" in line, line


def test_the_image_serves_hosted_mode_headless_offline():
    env = " ".join(arg for word, arg in instructions() if word == "ENV")
    assert "ATTNVIZ_HOSTED=1" in env and "HF_HUB_OFFLINE=1" in env
    cmd = json.loads(next(arg for word, arg in instructions() if word == "CMD"))
    assert cmd[:3] == ["streamlit", "run", "serve.py"]  # app.py, warmed at start
    assert 'st.App(str(Path(__file__).with_name("app.py"))' in (ROOT / "serve.py").read_text()
    assert "--server.headless=true" in cmd and "--browser.gatherUsageStats=false" in cmd


def test_what_the_image_copies_exists_and_the_rest_is_ignored():
    for word, arg in instructions():
        if word == "COPY":
            for source in [a for a in arg.split() if not a.startswith("--")][:-1]:
                assert (ROOT / source).exists(), source
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)
