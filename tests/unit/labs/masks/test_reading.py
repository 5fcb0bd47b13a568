"""Reading a user's mask file: every format round-trips, and every hostile or broken file is one clear error."""

import io
import os
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import save as safetensors_save

from attnviz import settings
from attnviz.core.masks import causal_mask
from attnviz.errors import MaskFileError
from attnviz.labs.masks.reading import (
    CONVENTIONS,
    additive_bias,
    infer_convention,
    read_mask_bytes,
    read_mask_file,
    shown_name,
    to_keep,
)

INF = float("-inf")

CAUSAL = causal_mask(4)  # (4, 4) bool


def npy_bytes(array, **kwargs) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, **kwargs)
    return buffer.getvalue()


def pt_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def csv_bytes(mask: torch.Tensor) -> bytes:
    cell = (lambda v: repr(float(v))) if mask.dtype.is_floating_point else (lambda v: str(v).lower())
    return "".join(",".join(cell(v) for v in row) + "\n" for row in mask.tolist()).encode()


def file_bytes(suffix: str, mask: torch.Tensor) -> bytes:
    if suffix == ".npy":
        return npy_bytes(mask.numpy())
    if suffix == ".pt":
        return pt_bytes(mask)
    if suffix == ".safetensors":
        return safetensors_save({"mask": mask.contiguous()})
    return csv_bytes(mask)


def error_of(data: bytes, name: str) -> str:
    with pytest.raises(MaskFileError) as caught:
        read_mask_bytes(data, name)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


ADDITIVE = torch.zeros(4, 4).masked_fill(~CAUSAL, INF)

FINFO_MIN = torch.zeros(4, 4).masked_fill(~CAUSAL, torch.finfo(torch.float32).min)

MASKS = {"bool": CAUSAL, "bool_block": ~CAUSAL, "additive_inf": ADDITIVE, "additive_finfo_min": FINFO_MIN}


@pytest.mark.parametrize(
    "suffix,mask",
    [(suffix, mask) for suffix in (".npy", ".pt", ".safetensors", ".csv") for mask in MASKS.values()]
    + [(suffix, ADDITIVE.half()) for suffix in (".npy", ".pt", ".safetensors")],  # a CSV holds no dtype
    ids=[f"{s}-{name}" for s in ("npy", "pt", "safetensors", "csv") for name in MASKS]
    + [f"{s}-additive_fp16" for s in ("npy", "pt", "safetensors")],
)
def test_each_format_round_trips(suffix, mask):
    loaded = read_mask_bytes(file_bytes(suffix, mask), f"mask{suffix}")
    assert loaded.name == f"mask{suffix}"
    if mask.dtype == torch.bool:
        assert loaded.mask.dtype == torch.bool and torch.equal(loaded.mask, mask)
    else:
        assert loaded.mask.dtype.is_floating_point
        assert loaded.mask.dtype == (torch.float64 if suffix == ".csv" else mask.dtype)
        assert torch.equal(loaded.mask, mask.to(loaded.mask.dtype))
    assert loaded.notes == ()


@pytest.mark.parametrize("suffix", [".npy", ".pt", ".safetensors", ".csv"])
def test_integer_zero_one_is_read_as_bool_and_said_so(suffix):
    loaded = read_mask_bytes(file_bytes(suffix, CAUSAL.to(torch.int64)), f"m{suffix}")
    assert loaded.mask.dtype == torch.bool and torch.equal(loaded.mask, CAUSAL)
    assert any("integer 0/1" in str(note) for note in loaded.notes)


def test_uint8_and_big_endian_and_batched_masks():
    assert torch.equal(read_mask_bytes(npy_bytes(CAUSAL.numpy().astype(np.uint8)), "m.npy").mask, CAUSAL)
    big_endian = ADDITIVE.numpy().astype(">f4")
    assert torch.equal(read_mask_bytes(npy_bytes(big_endian), "m.npy").mask, ADDITIVE)
    batch = torch.stack([CAUSAL, ~CAUSAL])  # (2, 4, 4)
    assert torch.equal(read_mask_bytes(pt_bytes(batch), "m.pt").mask, batch)


def test_b_1_t_t_is_squeezed_and_broadcast_shapes_are_kept():
    loaded = read_mask_bytes(npy_bytes(CAUSAL[None, None].numpy()), "m.npy")  # (1, 1, 4, 4)
    assert loaded.mask.shape == (1, 4, 4) and "the head dim of (1, 1, 4, 4) squeezed" in str(loaded.notes[0])
    chunk = read_mask_bytes(npy_bytes(np.ones((3, 4), dtype=bool)), "m.npy")  # a chunk over a KV cache: rectangular
    assert chunk.mask.shape == (3, 4) and read_mask_bytes(b"1,1,1\n1,1,1\n", "m.csv").mask.shape == (2, 3)
    key_mask = read_mask_bytes(npy_bytes(np.ones((2, 1, 1, 4), dtype=bool)), "m.npy")  # padding_mask's shape
    assert key_mask.mask.shape == (2, 1, 4)
    key_mask = torch.tensor([[True, True, False]])[:, None, :]  # (1, 1, 3): broadcast over queries
    assert read_mask_bytes(pt_bytes(key_mask), "m.pt").mask.shape == (1, 1, 3)


def test_pt_dict_with_one_tensor_or_a_mask_key():
    assert torch.equal(read_mask_bytes(pt_bytes({"anything": CAUSAL}), "m.pt").mask, CAUSAL)
    assert torch.equal(read_mask_bytes(pt_bytes({"mask": CAUSAL, "lengths": torch.ones(2)}), "m.pt").mask, CAUSAL)
    assert "expected one tensor" in error_of(pt_bytes({"a": CAUSAL, "b": CAUSAL}), "m.pt")
    assert "holds a list" in error_of(pt_bytes([CAUSAL]), "m.pt")


def test_safetensors_with_several_tensors_needs_one_named_mask():
    assert torch.equal(read_mask_bytes(safetensors_save({"x": CAUSAL}), "m.safetensors").mask, CAUSAL)
    both = safetensors_save({"mask": CAUSAL, "other": CAUSAL.clone()})
    assert torch.equal(read_mask_bytes(both, "m.safetensors").mask, CAUSAL)
    message = error_of(safetensors_save({"a": CAUSAL, "b": CAUSAL.clone()}), "m.safetensors")
    assert "expected one tensor, or a tensor named 'mask'" in message


def test_csv_reads_true_false_infinities_comments_and_a_bom():
    text = "\ufeff# a causal mask\nTrue, false\n\ntrue,TRUE\n"
    assert read_mask_bytes(text.encode(), "m.csv").mask.tolist() == [[True, False], [True, True]]
    assert read_mask_bytes(b"0 -inf\n0 0\n", "m.csv").mask.tolist() == [[0.0, INF], [0.0, 0.0]]
    assert "row 2 has 1 values but row 1 has 2" in error_of(b"0,1\n0\n", "m.csv")
    assert "row 1, column 2 holds 'x', not a number" in error_of(b"0,x\n0,0\n", "m.csv")
    assert "not a number" in error_of(b"true,0\n0,0\n", "m.csv")
    assert "not UTF-8" in error_of(b"\xff\xfe\x00", "m.csv")


def test_read_mask_file_matches_the_bytes(tmp_path):
    path = tmp_path / "mask.npy"
    path.write_bytes(npy_bytes(CAUSAL.numpy()))
    assert torch.equal(read_mask_file(path).mask, CAUSAL)
    with pytest.raises(MaskFileError, match="no such file"):
        read_mask_file(tmp_path / "missing.npy")
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(MaskFileError, match="is a folder, not a regular file"):
        read_mask_file(tmp_path / "folder.npy")


def test_a_pickled_npy_is_refused():
    objects = npy_bytes(np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    assert "pickled data" in error_of(objects, "evil.npy")
    import pickle

    assert "pickled data" in error_of(pickle.dumps([[True]]), "evil.npy")  # a plain pickle renamed .npy
    buffer = io.BytesIO()
    np.savez(buffer, mask=CAUSAL.numpy())
    assert ".npz" in error_of(buffer.getvalue(), "archive.npy")


class RunsCode:
    """Unpickling this runs a shell command: what weights_only=True must refuse."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Custom:
    pass


def test_a_pt_holding_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    message = error_of(pt_bytes(RunsCode(marker)), "evil.pt")
    assert "Python objects other than tensors" in message and "weights_only=True" in message
    assert not marker.exists()
    assert "Custom" in error_of(pt_bytes({"mask": Custom()}), "custom.pt")


def test_a_zip_bomb_pt_is_refused_before_loading(monkeypatch):
    monkeypatch.setattr(settings, "MASK_MAX_BYTES", 100_000)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data/0", bytes(1_000_000))  # 1 MB of zeros, a few KB compressed
    assert len(buffer.getvalue()) < 100_000
    assert "unpacks to" in error_of(buffer.getvalue(), "bomb.pt")


@pytest.mark.parametrize(
    "data,name,reason",
    [
        (npy_bytes(np.zeros((2, 2), dtype=np.complex64)), "m.npy", "complex values"),
        (pt_bytes(torch.zeros(2, 2, dtype=torch.complex64)), "m.pt", "complex values"),
        (npy_bytes(np.array([["a", "b"], ["c", "d"]])), "m.npy", "strings"),
        (npy_bytes(np.array([[0.0, np.nan], [0.0, 0.0]])), "m.npy", "NaN (first at [0, 1])"),
        (b"0,nan\n0,0\n", "m.csv", "NaN"),
        (pt_bytes(torch.tensor([[0.0, float("inf")], [0.0, 0.0]])), "m.pt", "+inf (first at [0, 1])"),
        (npy_bytes(np.array([[0, 2], [1, 1]])), "m.npy", "integer 2 at [0, 1]"),
        (pt_bytes(torch.tensor([[0, -10000], [0, 0]])), "m.pt", "integer -10000"),
        (npy_bytes(np.zeros(4, dtype=bool)), "m.npy", "1-D (4,)"),
        (npy_bytes(np.zeros((2, 3, 4, 4), dtype=bool)), "m.npy", "4-D (2, 3, 4, 4)"),
        (npy_bytes(np.zeros((1, 1, 1, 2, 2), dtype=bool)), "m.npy", "5-D"),
        (npy_bytes(np.zeros((0, 0), dtype=bool)), "m.npy", "empty"),
        (pt_bytes(torch.zeros(2, 0, 0)), "m.pt", "empty"),
        (pt_bytes(torch.zeros(3, 3).to_sparse()), "m.pt", "sparse_coo tensor"),
        (pt_bytes(CAUSAL)[:200], "m.pt", "not a torch.save archive"),
        (b"not a zip at all", "m.pt", "not a torch.save archive"),
        (npy_bytes(CAUSAL.numpy())[:-5], "m.npy", "truncated"),
        (b"\x93NUMPY garbage", "m.npy", "not a valid .npy file"),
        (b"\x00" * 16, "m.safetensors", "not a valid .safetensors file"),
        (safetensors_save({"mask": CAUSAL})[:-3], "m.safetensors", "not a valid .safetensors file"),
        (b"", "m.csv", "is empty"),
        (b"1,0\n1,1\n", "mask.txt", "unsupported extension (.txt)"),
        (b"1,0\n1,1\n", "mask", "unsupported extension (none)"),
    ],
)
def test_bad_files_raise_one_clear_line(data, name, reason):
    assert reason in error_of(data, name)


def test_size_limits_are_checked_before_parsing(monkeypatch, tmp_path):
    monkeypatch.setattr(settings, "MASK_MAX_BYTES", 1000)
    assert "a mask file may be at most" in error_of(b"\x00" * 1001, "big.npy")
    huge = tmp_path / "huge.npy"
    with huge.open("wb") as f:  # a sparse file: costs no disk
        f.truncate(50 * 2**20)
    with pytest.raises(MaskFileError, match=r"huge.npy is 50.0 MiB; a mask file may be at most"):
        read_mask_file(huge)


def test_shape_limits_are_checked_from_the_npy_header(monkeypatch):
    monkeypatch.setattr(settings, "MASK_MAX_SIDE", 8)
    assert "T (9) may be at most 8" in error_of(npy_bytes(np.zeros((9, 9), dtype=bool)), "m.npy")
    monkeypatch.setattr(settings, "MASK_MAX_BATCH", 2)
    assert "batch (3) may be at most 2" in error_of(pt_bytes(torch.zeros(3, 4, 4, dtype=torch.bool)), "m.pt")
    # a header that promises a huge array over a few bytes is refused before numpy allocates it
    header = npy_bytes(np.zeros((2, 2), dtype=bool)).replace(b"(2, 2)", b"(8, 8)")
    assert "truncated" in error_of(header, "m.npy")


def test_file_names_in_messages_are_one_safe_line():
    assert shown_name("dir/evil\u202e\n.npy") == "evil⟨U+202E⟩⟨U+000A⟩.npy"
    assert shown_name("x" * 200 + ".npy").endswith("…") and len(shown_name("x" * 200)) == 80
    assert "\n" not in error_of(b"", "bad\nname.txt")


def test_to_keep_reads_each_convention():
    assert CONVENTIONS == ("keep", "block", "additive")
    assert torch.equal(to_keep(CAUSAL, "keep"), CAUSAL)
    assert torch.equal(to_keep(~CAUSAL, "block"), CAUSAL)
    assert torch.equal(to_keep(ADDITIVE, "additive"), CAUSAL)
    with pytest.raises(ValueError, match="additive mask is floating point"):
        to_keep(CAUSAL, "additive")
    with pytest.raises(ValueError, match="reads a bool mask"):
        to_keep(ADDITIVE, "keep")
    with pytest.raises(ValueError, match="convention must be one of"):
        to_keep(CAUSAL, "inverse")


def test_additive_blocks_large_negatives_and_keeps_biases():
    values = torch.tensor(
        [INF, -1e9, torch.finfo(torch.float32).min, -10000.0, -9999.0, -3.0, 0.0, 1.0], dtype=torch.float32
    )
    assert to_keep(values, "additive").tolist() == [False, False, False, False, True, True, True, True]
    assert additive_bias(values).tolist() == [False, False, False, False, True, True, False, True]
    half = torch.tensor([torch.finfo(torch.float16).min, 0.0], dtype=torch.float16)
    assert to_keep(half, "additive").tolist() == [False, True]


def test_infer_convention_from_the_diagonal():
    assert infer_convention(ADDITIVE)[0] == "additive"
    assert infer_convention(CAUSAL)[0] == "keep"
    convention, reason = infer_convention(~CAUSAL)
    assert convention == "block" and "4 of 4 diagonal cells are False" in str(reason)
    padded = CAUSAL.clone()
    padded[3, 3] = False  # a pad row that does not see itself: the majority still says keep
    assert infer_convention(padded)[0] == "keep"
