"""`pip install` of the package gives a working `attnviz` command from any directory, with its catalogues.

The wheel is built from this checkout and installed, without its dependencies, into a fresh virtual environment
whose only other path is the project environment's site-packages (the pinned torch, transformers …): the
command then runs from the installed package, not from the checkout.
"""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 600  # a wheel build and a venv take ~20 s on an idle 2-core machine; CI machines are busy


def run(args, **kwargs):
    # without the caller's PYTHONPATH: a checkout on it (with the .egg-info the wheel's build leaves there) would
    # look to the fresh environment's pip like attnviz installed already, and it would install no command
    kwargs.setdefault("env", {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False, **kwargs)


def test_the_wheel_installs_a_working_command(tmp_path):
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path, ROOT])
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(tmp_path.glob("attnviz-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "attnviz/i18n/locales/zh.toml" in names and "attnviz/app/sidebar.py" in names
    assert not any(name.startswith(("tests/", "pages/", "benchmarks/")) for name in names)

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", venv]).returncode == 0
    python = venv / "bin" / "python"
    installed = run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel])
    assert installed.returncode == 0, installed.stderr[-2000:]
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    out = run([venv / "bin" / "attnviz", "heads", "The cat sat.", "--json", "--quiet"], cwd=elsewhere, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout)
    assert record["tokens"] == ["The", "cat", "sat", "."] and len(record["stats"]) == 2 * 4  # 2 layers x 4 heads
    where = run([python, "-c", "import attnviz; print(attnviz.__file__)"], cwd=elsewhere, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv)  # the installed package, not this checkout
    presets = "from attnviz.labs.kv.presets import ORDER, PRESETS; print(list(PRESETS) == list(ORDER))"
    assert run([python, "-c", presets], cwd=elsewhere, env=env).stdout.strip() == "True"  # the package data
    same = run([python, "-m", "attnviz", "heads", "The cat sat.", "--json", "--quiet"], cwd=elsewhere, env=env)
    assert json.loads(same.stdout) == record
