"""The bounded reader: every file a user names is opened once, checked to be a regular file, and read with its cap.

A FIFO case runs in a child process with a time limit, so that a reader that waits on it fails the test
instead of hanging the suite.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from attnviz.core.files import (
    PATH_SHOWN_CHARS,
    TooLargeError,
    check_regular,
    kind_of,
    printable,
    read_bounded,
    shown_path,
)
from attnviz.errors import PathError

HANG_LIMIT_S = 60  # a quiet machine answers in well under a second; a hang is what this limit catches


def refusal(path, cap: int = 100) -> str:
    with pytest.raises(PathError) as caught:
        read_bounded(path, cap)
    text = str(caught.value)
    assert "\n" not in text and text.startswith("cannot read ")
    return text


def test_a_regular_file_is_read_whole_at_the_cap_and_refused_one_byte_over(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(TooLargeError) as caught:
        read_bounded(path, 99)
    assert caught.value.size == 100 and caught.value.most == 99
    assert str(caught.value) == f"cannot read '{path}': it is larger than the limit of 99 B"
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert read_bounded(empty, 100) == b""
    assert check_regular(path) == 100 and check_regular(path, 100) == 100


def test_a_fifo_is_refused_at_once_in_a_child_that_would_otherwise_wait(tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    code = textwrap.dedent(
        f"""
        from attnviz.core.files import read_bounded
        from attnviz.errors import PathError
        try:
            read_bounded({str(fifo)!r}, 100)
        except PathError as err:
            print(err)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_LIMIT_S)
    assert done.stdout.strip() == f"cannot read '{fifo}': it is a FIFO (named pipe), not a regular file", done.stderr
    assert kind_of(fifo) == "other"  # stat never blocks


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_devices_and_symlinks_to_them_are_refused_by_what_they_point_at(tmp_path, device):
    assert refusal(device) == f"cannot read '{device}': it is a character device, not a regular file"
    link = tmp_path / "config.json"
    link.symlink_to(device)
    assert refusal(link) == f"cannot read '{link}': it is a character device, not a regular file"


def test_a_folder_and_a_proc_file_are_not_regular_files(tmp_path):
    assert refusal(tmp_path) == f"cannot read '{tmp_path}': it is a folder, not a regular file"
    assert refusal("/proc/self/status").endswith("it is a /proc or /sys pseudo-file, not a regular file")
    link = tmp_path / "status.json"
    link.symlink_to("/proc/self/status")
    assert refusal(link).endswith("pseudo-file, not a regular file")


def test_os_errors_on_a_path_are_one_line_naming_the_reason(tmp_path):
    long = "/tmp/" + "a" * 300 + ".json"
    assert refusal(long).endswith(f"({len(long)} characters): the name is too long for the file system")
    huge = "/tmp/" + "b" * 100_000
    text = refusal(huge)
    assert "(100,005 characters): the name is too long" in text and len(text) < 200
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert refusal(loop) == f"cannot read '{loop}': too many levels of symbolic links (a link loop)"
    assert refusal(tmp_path / "missing.json").endswith(": no such file or folder")
    (tmp_path / "file").write_text("x")
    assert refusal(tmp_path / "file" / "below.json").endswith(": a part of the path is not a folder")
    assert refusal("a\x00b").endswith(": the name holds a NUL character")
    assert refusal("\ud800.json").endswith(": the name cannot be encoded for the file system")
    with pytest.raises(PathError, match="link loop"):
        kind_of(loop)
    assert kind_of(tmp_path / "missing") is None and kind_of(tmp_path) == "directory"


def as_nobody(check) -> str:
    """``check()`` (a str) in a forked child that has given up root for the user ``nobody`` (root reads any file, and
    CI runs as root), or the child's failure as a str. A fork, not a new interpreter: this one may live in a folder
    that ``nobody`` cannot enter (a venv under /root)."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest, whatever happens
        try:
            os.close(readable)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            out = check()
        except BaseException as err:  # pytest.raises' failure is a BaseException
            out = f"the child failed: {type(err).__name__}: {err}"
        os.write(writable, out.encode())
        os._exit(0)
    os.close(writable)
    with os.fdopen(readable, "rb") as pipe:
        out = pipe.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    return out


def test_permission_denied_is_one_line(tmp_path):
    if os.geteuid() == 0:  # a folder nobody may enter (pytest's tmp_path is in root's 0700 folders)
        folder = Path(tempfile.mkdtemp(prefix="attnviz-permission-"))
        folder.chmod(0o755)
    else:
        folder = tmp_path
    try:
        path = folder / "secret.json"
        path.write_text("{}")
        path.chmod(0)
        expected = f"cannot read '{path}': permission denied"
        refusal(folder / "missing.json")  # the messages' catalogue loaded before the fork
        assert (as_nobody(lambda: refusal(path)) if os.geteuid() == 0 else refusal(path)) == expected
    finally:
        if folder != tmp_path:
            shutil.rmtree(folder)


def test_printable_shows_control_characters_as_escapes_and_keeps_every_script():
    assert printable("a\nb\x1b[31mc\td\u202e") == "a\\nb\\x1b[31mc\\td\\u202e"
    assert printable("猫 Ünïcode 👍 /tmp/x y") == "猫 Ünïcode 👍 /tmp/x y"
    assert printable("\udc80") == "\\udc80"


def test_a_long_path_is_cut_in_the_middle_with_its_length():
    assert shown_path("/short\n") == "'/short\\n'"
    long = "/start/" + "x" * 300 + "/end.json"
    shown = str(shown_path(long))
    assert shown.startswith("'/start/") and shown.endswith(f"/end.json' ({len(long)} characters)")
    assert len(shown) < PATH_SHOWN_CHARS + 30
