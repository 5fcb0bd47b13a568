"""Where a model goes, checked before anything is loaded: the offload folder (the CLI's --offload-folder and the
sidebar's field share :class:`Placement`'s check), memory caps naming devices this machine lacks, a hub id that
cannot be fetched, and the note on how much of a model a device map left on disk. No model is loaded here."""

import os

import pytest
import torch

from attnviz import cli
from attnviz.core import devices
from attnviz.core.devices import Placement
from attnviz.i18n.message import render
from attnviz.models.hf import loading
from attnviz.models.hf.placement import disk_note


def run(capfd, *argv):
    code = cli.main(list(map(str, argv)))
    captured = capfd.readouterr()
    return code, captured.out, captured.err


def offload(capfd, tmp_path, folder):
    return run(capfd, "heads", "a", "--model", tmp_path, "--device-map", "auto", "--offload-folder", folder)


@pytest.fixture
def odd_files(tmp_path):
    file, fifo = tmp_path / "file", tmp_path / "fifo"
    file.write_text("x")
    os.mkfifo(fifo)
    return {"file": file, "fifo": fifo}


@pytest.mark.parametrize(
    ("folder", "line"),
    [
        ("", "the offload folder is empty"),
        ("   ", "the offload folder is empty"),
        ("/proc/self", "cannot offload weights to '/proc/self': it is under /proc"),
        ("/sys/kernel", "cannot offload weights to '/sys/kernel': it is under /sys"),
        ("/dev/shm/weights", "cannot offload weights to '/dev/shm/weights': it is under /dev"),
        ("file", "it is a file, not a folder"),
        ("fifo", "it is a special file, not a folder"),
        ("file/below", "is a file, not a folder"),
    ],
)
def test_an_offload_folder_that_cannot_hold_weights_is_one_line(capfd, tmp_path, odd_files, folder, line):
    folder = str(odd_files[folder.split("/")[0]]) + folder[4:] if folder.startswith(("file", "fifo")) else folder
    code, out, err = offload(capfd, tmp_path, folder)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("attnviz heads: error: ") and line in err and "Errno" not in err
    with pytest.raises(ValueError, match=line.split("'")[0]):  # the sidebar's Placement: the same check
        Placement("auto", "auto", (), folder)


def test_a_long_offload_folder_is_shortened_in_the_message(capfd, tmp_path):
    folder = "/proc/" + "a" * 6000
    code, _, err = offload(capfd, tmp_path, folder)
    assert code == 2 and err.count("\n") == 1 and len(err) < 300
    assert "(6,006 characters)" in err and "it is under /proc" in err


def test_a_folder_it_cannot_write_in_is_one_line(monkeypatch, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    asked = []
    monkeypatch.setattr(devices.os, "access", lambda path, mode: asked.append(path) or False)  # root writes anywhere
    with pytest.raises(ValueError, match=r"cannot offload weights to '.*weights': '.*locked' is not writable"):
        Placement("auto", "auto", (), str(locked / "weights"))
    assert asked == [str(locked)]  # the nearest folder that exists: weights/ would be made in it


def test_a_folder_to_be_made_is_accepted_and_not_made(tmp_path):
    folder = tmp_path / "new" / "weights"
    assert Placement("auto", "auto", (), str(folder)).offload_folder == str(folder)
    assert Placement("auto", "auto", (), str(tmp_path)).offload_folder == str(tmp_path)
    assert not (tmp_path / "new").exists()


def test_max_memory_naming_a_gpu_this_machine_lacks_is_our_line_only(capfd, monkeypatch, tmp_path):
    """Refused before accelerate is asked (which printed "Device 0 is not available" lines of its own first)."""
    monkeypatch.setattr(devices, "available_devices", lambda: ["cpu"])
    code, _, err = run(capfd, "heads", "a", "--model", tmp_path, "--device-map", "auto", "--max-memory", "0=1GiB")
    assert code == 2
    assert err == "attnviz heads: error: max memory names cuda:0, which this machine does not have (it has cpu)\n"
    with pytest.raises(ValueError, match="max memory names mps"):
        Placement("auto", "auto", (("cpu", 2**30), ("mps", 2**30)))
    assert Placement("auto", "auto", (("cpu", 2**30), ("disk", 2**40))).max_memory  # always present


@pytest.fixture
def no_download(monkeypatch):
    """transformers' config download (and its retries) must not be reached."""
    import transformers

    def refused(*args, **kwargs):
        raise AssertionError("a download was tried")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", refused)


@pytest.mark.slow  # imports transformers
def test_an_uncached_hub_id_offline_fails_at_once_in_one_line(capfd, monkeypatch, no_download):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(loading, "hub_unreachable", lambda *a, **k: pytest.fail("no probe when offline"))
    code, out, err = run(capfd, "heads", "a", "--model", "nobody/no-such-model-h7", "--quiet")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Retry" not in err
    assert err.startswith("attnviz heads: error: could not load 'nobody/no-such-model-h7': it is not a model folder")
    assert "the hub is off (HF_HUB_OFFLINE is set)" in err


@pytest.mark.slow  # imports transformers
def test_an_uncached_hub_id_with_no_network_fails_after_one_probe(capfd, monkeypatch, no_download):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    probes = []
    monkeypatch.setattr(loading, "hub_unreachable", lambda endpoint, *a: probes.append(endpoint) or "timed out")
    code, _, err = run(capfd, "heads", "a", "--model", "nobody/no-such-model-h7", "--quiet")
    assert code == 2 and err.count("\n") == 1 and probes == [constants.ENDPOINT]
    assert f"{constants.ENDPOINT} did not answer within 3 s (timed out)" in err


def test_the_probe_counts_any_answer_as_the_hub_being_there(monkeypatch):
    import urllib.error
    import urllib.request

    def answers_404(request, timeout):
        assert timeout == loading.HUB_PROBE_TIMEOUT_S and request.get_method() == "HEAD"
        raise urllib.error.HTTPError(request.full_url, 404, "Not Found", {}, None)

    monkeypatch.setattr(urllib.request, "urlopen", answers_404)
    assert loading.hub_unreachable("https://hub.example") is None

    def no_network(request, timeout):
        raise urllib.error.URLError(OSError(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert "Name or service not known" in loading.hub_unreachable("https://hub.example")


class Split(torch.nn.Module):
    """A model accelerate split: an embedding on the CPU, four layers of which the last three on disk."""

    def __init__(self, mapping):
        super().__init__()
        self.embed = torch.nn.Embedding(256, 16)  # 16 KiB in float32
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16, bias=False) for _ in range(4))  # 1 KiB each
        self.hf_device_map = mapping


def test_the_disk_note_counts_bytes_and_layers_on_disk():
    mapping = {"embed": "cpu", "layers.0": "cpu", "layers.1": "disk", "layers.2": "disk", "layers.3": "disk"}
    note = render(disk_note(Split(mapping), "tiny"))
    assert note.startswith("tiny: 3.0 KiB of its 20.0 KiB of weights (15%, 3 of 4 layers) are offloaded to disk")
    assert disk_note(Split({k: "cpu" for k in mapping}), "tiny") is None
    whole = render(disk_note(Split({"": "disk"}), "tiny"))
    assert whole.startswith("tiny: 20.0 KiB of its 20.0 KiB of weights (100%, the whole model) are offloaded")


def test_a_tied_weight_is_counted_once():
    model = Split({"embed": "cpu", "head": "disk", "layers.0": "cpu", "layers.1": "cpu", "layers.2": "cpu",
                   "layers.3": "cpu"})  # fmt: skip
    model.head = torch.nn.Linear(16, 256, bias=False)
    model.head.weight = model.embed.weight  # the LM head tied to the embedding: on disk only where it is first met
    assert render(disk_note(model, "tied")).startswith("tied: 0 B of its 20.0 KiB of weights (0%, 0 of 4 layers)")
