"""``open_in_app``: the dashboard served from this process on a model held in memory (a tiny Llama built from its
config, never saved), opened in a real Chromium; then given back as it was; a second call, a taken port and a
missing app each as a notebook user meets them."""

import html
import socket
import sys
import time
import urllib.request
from urllib.parse import urlsplit

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from attnviz.app import in_process
from attnviz.errors import AppStartError
from attnviz.i18n.catalogue import catalogue
from attnviz.models import registry
from attnviz.models.hf.bundled import minilm_dir
from attnviz.notebook.app import open_in_app, stop_app
from tests.integration.chromium import assert_no_exception
from tools.browser import ROOT, free_port, wait_for_grid, wait_until_idle

TEXT = "the cat sat on the mat because it was warm"
N_LAYER, N_HEAD = 2, 4


def tiny_llama(name: str, seed: int = 0) -> LlamaForCausalLM:
    """A small random Llama built in memory (MiniLM's tokenizer sizes its vocabulary), in training mode and on
    torch's own SDPA attention, as a notebook user holds a model they are fine-tuning."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=N_LAYER,
        num_attention_heads=N_HEAD,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config)
    model.config.name_or_path = name
    return model.train()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(minilm_dir())


@pytest.fixture
def model():
    return tiny_llama("tiny-notebook-llama")


@pytest.fixture(autouse=True)
def _stopped():
    """Every test starts and ends with no app running in this process."""
    stop_app()
    yield
    stop_app()


def forward(model, tokenizer) -> torch.Tensor:
    """The model's logits on the text, as the notebook would compute them (gradients on, its own mode)."""
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    return model(ids).logits.detach().clone()


def as_it_was(model) -> tuple:
    """What lending must leave unchanged: the attention implementation, each module's mode and hooks, each
    weight's requires_grad, the forward methods set on instances."""
    return (
        model.config._attn_implementation,
        tuple(m.training for m in model.modules()),
        tuple(p.requires_grad for p in model.parameters()),
        sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()),
        sum("forward" in vars(m) for m in model.modules()),
    )


def port_of(url: str) -> int:
    return urlsplit(url).port


def nothing_listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    assert (err.__cause__ is None and err.__suppress_context__) or err.__context__ is None, "a chained traceback"
    return text


@pytest.mark.browser
def test_the_page_shows_the_lent_model_and_its_heads(model, tokenizer, browser):
    """The URL opens the app on the notebook's model: the sidebar names it, the Heads page draws its layers x heads
    grid from it; stopped, the port is free and the model computes what it did before, bit for bit."""
    before, state = forward(model, tokenizer), as_it_was(model)
    port = free_port()
    start = time.perf_counter()
    handle = open_in_app(model, tokenizer, text=TEXT, port=port)
    assert port_of(handle.url) == port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as response:
        assert response.status == 200 and response.read() == b"ok"
    assert handle.running and f'href="{html.escape(handle.url)}"' in handle._repr_html_()

    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(handle.url.replace("/?", "/heads?"))
        canvas = wait_for_grid(page)
        first_map_s = time.perf_counter() - start
        wait_until_idle(page)
        assert_no_exception(page)
        label = catalogue("en")["open_in_app.lent_label"].format(name="tiny-notebook-llama")
        sidebar = page.locator('[data-testid="stSidebar"]')
        model_box = sidebar.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Model", exact=True))
        assert model_box.first.locator("input").input_value() == label
        caption = page.locator('[data-testid="stMain"]').get_by_text("tiny-notebook-llama", exact=True).first
        assert caption.is_visible()  # the page's own line about the record names the model
        assert sidebar.get_by_label(catalogue("en")["sidebar.text"], exact=True).input_value() == TEXT
        drawn = canvas.evaluate(
            "c => { for (let n = c; n; n = n.parentNode ?? n.host) if (n.__attnvizGrid) return n.__attnvizGrid.data;"
            " return null; }"
        )
        assert drawn is not None
        assert (drawn["n_layer"], drawn["n_col"]) == (N_LAYER, N_HEAD + 1)  # every head of each layer, and the mean
        assert drawn["rows"] == [f"L{layer}" for layer in range(N_LAYER)]
        assert not errors, errors
    finally:
        context.close()
    print(f"\nopen_in_app: call to the Heads page's first map {first_map_s:.2f} s", file=sys.stderr)

    handle.stop()
    assert not handle.running and "tiny-notebook-llama" in handle._repr_html_()
    assert nothing_listens(port) and in_process.port_free(port)
    assert registry.lent_choices() == {}
    assert as_it_was(model) == state
    assert torch.equal(forward(model, tokenizer), before)


def test_a_second_call_uses_the_running_app(model, tokenizer, monkeypatch):
    """A second call lends its model to the app already running (the same model object once), and its URL opens
    that model (with a text too long for a link, the session opens with it all the same); another port asked of
    the running app is refused in one line; stop gives both models back."""
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    other = tiny_llama("tiny-other-llama", seed=1)
    before = forward(other, tokenizer), forward(model, tokenizer)
    first = open_in_app(model, tokenizer, open_browser=True)
    assert opened == [first.url]
    again = open_in_app(model, tokenizer, text="a new text")
    assert "text=a+new+text" in again.url and in_process.opening() == {"model": first.key, "text": "a new text"}
    long_text = "the cat sat on the mat. " * 30
    second = open_in_app(other, tokenizer, text=long_text)
    assert "text=" not in second.url and in_process.opening() == {"model": second.key, "text": long_text}
    assert port_of(first.url) == port_of(again.url) == port_of(second.url)
    assert again.key == first.key and second.key != first.key
    assert set(registry.lent_choices()) == {first.key, second.key}
    assert registry.lent(second.key).name == "tiny-other-llama"
    busy = port_of(first.url) + 1
    with pytest.raises(AppStartError) as refused:
        open_in_app(other, tokenizer, port=busy)
    assert str(port_of(first.url)) in one_line(refused.value)
    second.stop()
    assert not first.running and nothing_listens(port_of(first.url))
    assert registry.lent_choices() == {}
    assert torch.equal(forward(other, tokenizer), before[0]) and torch.equal(forward(model, tokenizer), before[1])

    restarted = open_in_app(model, tokenizer)  # a fresh server in the same process: the Runtime was let go
    with urllib.request.urlopen(restarted.url.split("/?")[0] + "/_stcore/health", timeout=10) as response:
        assert response.status == 200
    assert restarted.key != first.key  # a key is never lent twice: the app's caches are keyed by it


def test_a_taken_port_is_said_in_one_line(model, tokenizer):
    """A port another program listens on: AppStartError naming it, no traceback, and the model never switched."""
    state = as_it_was(model)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(AppStartError) as refused:
            open_in_app(model, tokenizer, port=port)
    assert f"Port {port} is taken" in one_line(refused.value)
    assert in_process.running() is None and registry.lent_choices() == {}
    assert as_it_was(model) == state


def test_a_port_taken_after_the_check_is_said_in_one_line():
    """A port taken between the check and the bind (Streamlit's server exits on a port set by hand that is
    taken): the same one line, no traceback, no server left, a later server starts."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(AppStartError) as refused:
            in_process.InProcessServer(in_process.app_script(), port).start()
    assert f"Port {port} is taken" in one_line(refused.value)
    server = in_process.serve(free_port())
    try:
        with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=10) as response:
            assert response.status == 200
    finally:
        in_process.stop()


def test_no_app_in_the_installation_is_said_in_one_line(model, tokenizer, monkeypatch, tmp_path):
    """An installation without app.py beside the package (a wheel): one line saying what open_in_app needs."""
    import attnviz

    monkeypatch.setattr(attnviz, "__file__", str(tmp_path / "attnviz" / "__init__.py"))
    state = as_it_was(model)
    with pytest.raises(AppStartError) as refused:
        open_in_app(model, tokenizer)
    assert "pip install -e ." in one_line(refused.value)
    assert as_it_was(model) == state and registry.lent_choices() == {}


@pytest.mark.parametrize("port", [0, 70000, "8501", True])
def test_a_port_that_is_not_one_is_a_value_error(model, tokenizer, port):
    with pytest.raises(ValueError, match="port must be"):
        open_in_app(model, tokenizer, port=port)


KERNEL_CELLS = [
    # the notebook's own model, in its own kernel (whose event loop runs in the main thread)
    """
import torch
from transformers import AutoTokenizer
from attnviz.models.hf.bundled import minilm_dir
from attnviz.notebook.app import open_in_app
from tests.integration.notebook.test_open_in_app import TEXT, forward, tiny_llama
tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
model = tiny_llama("kernel-llama")
before = forward(model, tokenizer)
handle = open_in_app(model, tokenizer, text=TEXT, port={port})
handle
""",
    "handle.stop()\nprint('same after stop:', torch.equal(forward(model, tokenizer), before))",
]


def test_in_a_jupyter_kernel(tmp_path):
    """In a real ipykernel: the cell returns at once with the link, the app answers while the kernel sits idle
    between cells, and the next cell's stop() frees the port and gives the model back."""
    import nbformat
    from nbclient import NotebookClient

    port = free_port()
    cells = [
        nbformat.v4.new_code_cell(KERNEL_CELLS[0].replace("{port}", str(port))),
        nbformat.v4.new_code_cell(KERNEL_CELLS[1]),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    with client.setup_kernel():
        client.execute_cell(cells[0], 0)
        shown = cells[0].outputs[-1]["data"]
        assert f"127.0.0.1:{port}" in shown["text/html"] and "kernel-llama" in shown["text/plain"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as response:
            assert response.status == 200  # served while the kernel waits for its next cell
        client.execute_cell(cells[1], 1)
    printed = "".join(output.get("text", "") for output in cells[1].outputs)
    assert "same after stop: True" in printed
    assert nothing_listens(port)
