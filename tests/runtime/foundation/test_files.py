"""Atomic writes (stand_runtime.files): links followed, devices and FIFOs written in place, folders
probed by a real file."""

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from stand_runtime.errors import StandError
from stand_runtime.files import check_writable, write_bytes_atomic, write_json_atomic, write_text_atomic


def test_replaces_a_regular_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "a.json"
    out.write_text("old")
    write_json_atomic(out, {"x": 1})
    assert out.read_text() == '{\n "x": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_name_at_the_file_system_limit_is_written(tmp_path):
    """The temporary beside it is named from a cut of the name (it used to add 14 bytes and fail)."""
    out = tmp_path / ("a" * 250 + ".json")
    write_text_atomic(out, "{}")
    check_writable(out)
    assert [p.name for p in tmp_path.iterdir()] == [out.name] and out.read_text() == "{}"


def test_a_kernel_file_is_refused_before_any_work():
    """/proc/version passed every check as a file written in place (root may write anything) and failed
    after the whole run; /proc/sys/... would have taken the results as a kernel setting."""
    with pytest.raises(StandError, match="a kernel interface file"):
        check_writable("/proc/version")


def test_bytes_are_written_as_they_are_and_a_missing_folder_is_one_line(tmp_path):
    out = tmp_path / "a.npz"
    write_bytes_atomic(out, b"\x00\xffdata")
    assert out.read_bytes() == b"\x00\xffdata"
    with pytest.raises(StandError, match="does not exist"):
        write_bytes_atomic(tmp_path / "missing" / "a.npz", b"x")


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
        with pytest.raises(StandError, match=r"^cannot write /proc/out.json: folder /proc takes no new files \("):
            check_writable("/proc/out.json")


def test_dev_stdout_is_appended_to_whatever_it_is(tmp_path):
    """/dev/stdout is a link into /proc: to a pipe, or to the file the shell redirected output to,
    which must keep what was printed before (no rename over it, no truncation)."""
    import subprocess
    import sys

    code = ("from stand_runtime.files import check_writable, write_text_atomic\n"
            "print('table', flush=True)\ncheck_writable('/dev/stdout')\nwrite_text_atomic('/dev/stdout', 'json\\n')\n")
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stdout == "table\njson\n", piped.stderr
    log = tmp_path / "log.txt"
    log.write_text("before\n")
    with open(log, "a") as out:
        done = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "before\ntable\njson\n" and log.is_file()


def test_dev_stdout_redirected_to_a_file_is_written_through_its_own_descriptor(tmp_path):
    """Output redirected with ``>`` (no O_APPEND): opened again, /dev/stdout would get a second offset
    and the lines printed after the JSON would overwrite it. Written through descriptor 1 (or 2 for
    /dev/stderr) everything stays in order."""
    import subprocess
    import sys

    from stand_runtime.files import standard_stream

    code = ("import sys\nfrom stand_runtime.files import write_text_atomic\n"
            "print('table')\nwrite_text_atomic('/dev/stdout', '{\"json\": 1}\\n')\nprint('after')\n"
            "print('err', file=sys.stderr)\nwrite_text_atomic('/dev/stderr', 'e-json\\n')\nprint('err after', file=sys.stderr)\n")
    log, errors = tmp_path / "log.txt", tmp_path / "err.txt"
    with open(log, "w") as out, open(errors, "w") as err:
        done = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=err)
    assert done.returncode == 0, errors.read_text()
    assert log.read_text() == 'table\n{"json": 1}\nafter\n'
    assert errors.read_text() == "err\ne-json\nerr after\n"
    assert standard_stream(tmp_path / "missing") is None and standard_stream(log) is None


def test_a_loop_of_links_is_one_line_error_and_stays(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for call in (check_writable, lambda p: write_text_atomic(p, "x")):
        with pytest.raises(StandError, match="Too many levels of symbolic links"):
            call(tmp_path / "a")
    assert (tmp_path / "a").is_symlink()


def test_a_replaced_file_keeps_its_mode_and_a_file_is_not_a_folder(tmp_path):
    out = tmp_path / "ro.json"
    out.write_text("old")
    out.chmod(0o600)
    write_text_atomic(out, "new")
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o600
    with pytest.raises(StandError, match=r"ro.json is not a folder"):
        check_writable(out / "x.json")


def test_json_results_are_strict_json_with_null_for_nan(tmp_path):
    """A trace bench whose groups have different sizes had no data at some trajectory and wrote a
    literal NaN, which strict parsers refuse: a non-finite float is written as null."""
    from stand_runtime.files import json_bytes, write_json_atomic

    data = {"tau": [1.5, float("nan")], "interval": (float("-inf"), 2.0), "nested": {"x": float("inf")}}
    assert json.loads(json_bytes(data)) == {"tau": [1.5, None], "interval": [None, 2.0], "nested": {"x": None}}
    path = write_json_atomic(tmp_path / "r.json", data)
    json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} written"))
