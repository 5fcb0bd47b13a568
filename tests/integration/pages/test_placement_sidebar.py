"""The sidebar's dtype and device map: the page says which dtype a model runs in and where a split model went,
and a bad cap is one line."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from transformers import LlamaConfig, LlamaForCausalLM

from tests.grid_canvas import has_grid
from tests.integration.tiny_models import tiny

ROOT = Path(__file__).resolve().parents[3]


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.sidebar.caption)


@pytest.fixture(scope="module")
def llama(smollm2, tmp_path_factory) -> Path:
    return tiny(tmp_path_factory.mktemp("llama"), smollm2, LlamaConfig, LlamaForCausalLM)


def test_the_sidebar_says_what_dtype_auto_took_and_bfloat16_runs():
    at = app()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    assert "The model runs in **float32**, its inputs on **cpu**" in captions(at)
    at.selectbox(key="dtype").set_value("bfloat16").run()
    assert not at.exception and not at.error
    assert "The model runs in **bfloat16**" in captions(at)
    assert at.get("plotly_chart") and has_grid(at), "the Heads page draws its grid and charts in bfloat16"


def test_a_device_map_with_an_offload_folder_shows_where_the_model_went(llama, tmp_path):
    at = app()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(llama)).run()
    at.selectbox(key="device_map").set_value("sequential").run()
    at.text_input(key="max_memory").input("cpu=1MB").run()
    at.text_input(key="offload_folder").input(str(tmp_path / "offload")).run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception and not at.error
    assert "the whole model → disk" in captions(at)  # 1 MB of CPU holds no layer: everything went to disk
    assert at.get("plotly_chart") and has_grid(at)


def test_a_bad_memory_cap_is_one_line_in_the_sidebar(llama):
    at = app()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(llama)).run()
    at.selectbox(key="device_map").set_value("auto").run()
    at.text_input(key="max_memory").input("cpu=lots").run()
    assert not at.exception
    assert any("a memory size is a number with a unit" in e.value for e in at.error)


def charts_per_page(at: AppTest) -> dict[str, int | str]:
    """Every page opened in turn: its number of charts (the Heads grid's canvas counted with the Plotly charts), or
    the one line it says instead of failing."""
    found: dict[str, int | str] = {}
    for page in sorted(p.name for p in (ROOT / "pages").glob("*.py")):
        at.switch_page(f"pages/{page}").run()
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
        found[page] = len(at.get("plotly_chart")) + has_grid(at)
    return found


def test_every_page_on_a_model_offloaded_to_disk_draws_what_the_plain_load_draws(llama, tmp_path):
    at = app()
    at.selectbox(key="model").set_value("path").run()
    at.text_input(key="model_path").input(str(llama)).run()
    at.text_area(key="text").input("The cat sat on the mat. 猫坐着。").run()
    plain = charts_per_page(at)
    at.selectbox(key="device_map").set_value("sequential").run()
    at.text_input(key="max_memory").input("cpu=1MB").run()
    at.text_input(key="offload_folder").input(str(tmp_path / "offload")).run()
    offloaded = charts_per_page(at)
    assert "the whole model → disk" in captions(at)
    assert offloaded == plain and sum(plain.values()) > 20


def test_out_of_memory_in_a_page_is_one_line_and_the_next_run_works(monkeypatch):
    import torch

    from attnviz.models.embedded.model import EmbeddedModel

    real_run = EmbeddedModel.run

    def out_of_memory(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity ...")

    monkeypatch.setattr(EmbeddedModel, "run", out_of_memory)
    at = app()
    at.text_area(key="text").input("A text no other test captures, so that no cached record answers.").run()
    at.switch_page("pages/heads.py").run()
    assert not at.exception
    errors = [e.value.replace("\\", "") for e in at.error]  # the message is escaped as Markdown
    assert len(errors) == 1 and errors[0].startswith("out of memory on cuda:0: 3.00 GiB asked"), errors
    monkeypatch.setattr(EmbeddedModel, "run", real_run)
    at.run()
    assert not at.exception and not at.error and at.get("plotly_chart") and has_grid(at)


def test_a_model_offloaded_to_disk_keeps_value_norms_equal_to_the_plain_loads(llama, tmp_path):
    """The output projection is found by a probe pass on the model's main device, not on a parameter's (an
    offloaded parameter is on the meta device): value-weighted attention stays available, and equal."""
    import torch

    from attnviz.core.devices import Placement
    from attnviz.models.hf.loading import load_hf_source

    plain = load_hf_source(str(llama))
    offloaded = load_hf_source(str(llama), placement=Placement("auto", "sequential", (("cpu", 2**20),), str(tmp_path)))
    assert offloaded.placement == (("", "disk"),) and plain.placement == ()
    assert plain.has_value_norms and offloaded.has_value_norms
    a, b = plain.run("hello there world of cats", 32), offloaded.run("hello there world of cats", 32)
    assert all(torch.equal(x.value_norms, y.value_norms) for x, y in zip(a.layers, b.layers, strict=True))
