"""Atomic writes (stand_runtime.files): links followed, devices and FIFOs written in place, folders
probed by a real file."""

import os
import stat
import threading
from pathlib import Path

import pytest

from stand_runtime.errors import StandError
from stand_runtime.files import check_writable, write_json_atomic, write_text_atomic


def test_replaces_a_regular_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "a.json"
    out.write_text("old")
    write_json_atomic(out, {"x": 1})
    assert out.read_text() == '{\n "x": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_symbolic_link_stays_and_its_target_is_written(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    check_writable(link)
    write_text_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"


def test_a_device_is_written_not_replaced():
    check_writable("/dev/null")
    write_text_atomic("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_device_is_one_line_error():
    with pytest.raises(StandError, match="cannot write /dev/full: No space left on device"):
        write_text_atomic("/dev/full", "x" * 10000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_check_writable_probes_the_folder(tmp_path):
    check_writable(tmp_path / "new.json")
    assert list(tmp_path.iterdir()) == []  # the probe is removed
    with pytest.raises(StandError, match="it is a folder"):
        check_writable(tmp_path)
    with pytest.raises(StandError, match="does not exist"):
        check_writable(tmp_path / "no" / "x.json")
    if Path("/proc/self").is_dir():  # permission bits say yes to root; the folder refuses new files
        with pytest.raises(StandError, match=r"^cannot write /proc/out.json: folder /proc: "):
            check_writable("/proc/out.json")
