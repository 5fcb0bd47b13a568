"""A view in JupyterLab itself, as a reader sees it: the server started once for the module (a free port, a token,
no browser, a temporary root folder holding one notebook and its own settings), the notebook opened in Chromium, its
cell run from the keyboard (Shift+Enter) and the cell's output drawn by the viewer's script; a screenshot kept."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.integration.notebook.executed import hover_large_maps, screenshot
from tools.browser import free_port

pytestmark = pytest.mark.browser

CELL = """import torch
from attnviz.notebook import head_view

torch.manual_seed(0)
tokens = ["The", " cat", " sat", " on", " the", " mat"]
attention = tuple(torch.softmax(torch.randn(1, 4, 6, 6), dim=-1) for _ in range(2))  # BertViz's outputs.attentions
head_view(attention, tokens)"""
START_S = 120  # JupyterLab answers in 5-10 s on a quiet 2-core machine


@pytest.fixture(scope="module")
def lab():
    """JupyterLab on a free loopback port with a token; yields the URL that opens the notebook, and its log."""
    root = Path(tempfile.mkdtemp(prefix="attnviz-lab-"))
    (root / "lab").mkdir()
    notebook = new_notebook(
        cells=[new_code_cell(CELL)],
        metadata={"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
    )
    nbformat.write(notebook, root / "lab" / "view.ipynb")
    port, token = free_port(), secrets.token_hex(16)
    env = {  # its settings, workspaces and runtime files in the temporary folder: none of the user's, none left
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(root / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(root / "workspaces"),
    }
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root / 'lab'}",
        "--ServerApp.allow_root=True",  # a container's user is often root; JupyterLab refuses it otherwise
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",  # no asking PyPI, from the server either
        "--LabApp.extension_manager=readonly",
    ]
    log = open(root / "lab.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start: {(root / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield f"{base}/lab/tree/view.ipynb?token={token}", root / "lab.log"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def state(page) -> str:
    """What JupyterLab shows of the cell and its kernel: said when a wait runs out."""
    return page.evaluate(
        """() => JSON.stringify({
            kernel: document.querySelector('.jp-Notebook-ExecutionIndicator')?.getAttribute('data-status'),
            prompt: document.querySelector('.jp-Notebook .jp-Cell .jp-InputPrompt')?.textContent,
            output: document.querySelector('.jp-Notebook .jp-Cell .jp-OutputArea')?.textContent?.slice(0, 300),
            dialog: document.querySelector('.jp-Dialog')?.textContent?.slice(0, 200),
        })"""
    )


STARTED = "() => /\\[(\\*|1)\\]/.test(document.querySelector('.jp-Notebook .jp-Cell .jp-InputPrompt')?.textContent)"


def run_cell(page, editor, tries: int = 3) -> None:
    """Click into the cell and press Shift+Enter, as a reader does, until its prompt says it runs ("[*]" or "[1]").
    On a loaded machine JupyterLab can still be wiring its keyboard shortcuts when the editor first takes focus,
    and the key press is then lost (a reader presses again): each try waits 20 s for the prompt."""
    for attempt in range(tries):
        editor.click()
        page.locator(".jp-Notebook .jp-Cell.jp-mod-active .cm-editor.cm-focused").wait_for(timeout=10_000)
        page.keyboard.press("Shift+Enter")
        try:
            page.wait_for_function(STARTED, timeout=20_000)
            return
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise


def test_a_cell_run_with_shift_enter_draws_its_view(lab, page):
    url, log = lab
    outside = []  # requests that would leave the machine
    page.on("request", lambda r: not r.url.startswith(("http://127.0.0.1", "data:", "blob:")) and outside.append(r.url))
    page.goto(url)
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    try:
        editor.wait_for(timeout=90_000)
        page.wait_for_function(  # the kernel started and idle: the cell would otherwise wait in its queue
            "() => document.querySelector('.jp-Notebook-ExecutionIndicator')?.getAttribute('data-status') === 'idle'",
            timeout=90_000,
        )
        run_cell(page, editor)
        page.wait_for_function(  # run: its prompt numbered, "[1]:" (the kernel imports torch first: seconds)
            "() => /\\[1\\]/.test(document.querySelector('.jp-Notebook .jp-Cell .jp-InputPrompt')?.textContent)",
            timeout=120_000,
        )
        page.wait_for_function(
            "() => document.querySelector('.jp-OutputArea-output .attnviz-nb')?.dataset.drawn === '1'", timeout=30_000
        )
    except PlaywrightTimeout as err:
        screenshot(page, "jupyterlab-failed")
        raise AssertionError(
            f"{err.message.splitlines()[0]}; JupyterLab shows {state(page)}; its log ends:\n"
            f"{log.read_text(errors='replace')[-1500:]}"
        ) from None
    view = page.locator(".jp-OutputArea-output .attnviz-nb")
    assert view.count() == 1
    assert view.locator(".attnviz-grid canvas").count() == 1 and view.locator("canvas.map").count() == 1
    payload = json.loads(page.locator(".jp-OutputArea-output script[type='application/json']").first.inner_text())
    assert payload["kinds"][0]["queries"][1].endswith("cat")
    assert hover_large_maps(page, [(view.first.get_attribute("id"), payload)]) == 1  # the tooltip, in the shot
    screenshot(page, "jupyterlab")
    assert outside == []
