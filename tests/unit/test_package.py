"""The package's declaration is true: the same pins as requirements.txt, the catalogues shipped, one command."""

import tomllib
from pathlib import Path

import attnviz

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pins(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def test_the_runtime_dependencies_are_requirements_txt_with_its_pins():
    assert PROJECT["project"]["dependencies"] == pins(ROOT / "requirements.txt")
    assert all("==" in pin for pin in PROJECT["project"]["dependencies"])  # torch above all: unpinned pulls CUDA
    constraints = set(pins(ROOT / "constraints.txt"))
    assert set(PROJECT["project"]["dependencies"]) <= constraints
    assert set(PROJECT["build-system"]["requires"]) <= constraints
    notebook = PROJECT["project"]["optional-dependencies"]["notebook"]  # `pip install attnviz[notebook]`
    assert notebook and all("==" in pin for pin in notebook) and set(notebook) <= constraints


def test_the_command_and_the_catalogues_are_declared():
    assert PROJECT["project"]["scripts"] == {"attnviz": "attnviz.cli:main"}
    data = PROJECT["tool"]["setuptools"]["package-data"]["attnviz.i18n"]
    i18n = ROOT / "attnviz" / "i18n"
    shipped = {p for pattern in data for p in i18n.glob(pattern)}
    assert {"en.toml", "zh.toml"} <= {p.name for p in shipped}
    assert shipped == set((i18n / "locales").rglob("*.toml"))  # every catalogue file, the per-area folders too
    assert Path(attnviz.__file__).resolve().parent == ROOT / "attnviz"  # the tests read this checkout's package
