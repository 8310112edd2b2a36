"""Prompt sources: HumanEval from its package, JSONL files, one-line errors for bad input."""

import json

import pytest

from stand_runtime import StandError
from treeopt.data.datasets import load_prompts
from conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"


def test_humaneval_from_installed_package():
    prompts = load_prompts("humaneval")
    assert len(prompts) == 164 and prompts[0].id == "HumanEval/0"
    assert "def has_close_elements" in prompts[0].text
    assert [p.id for p in load_prompts(samples=2, offset=30)] == ["HumanEval/30", "HumanEval/31"]
    shuffled = load_prompts(samples=5, shuffle_seed=1)
    assert shuffled == load_prompts(samples=5, shuffle_seed=1) and shuffled != load_prompts(samples=5)
    assert load_prompts(field="prompt", samples=1) == load_prompts(samples=1)
    with pytest.raises(StandError, match="does not apply to humaneval"):  # not ignored silently
        load_prompts(field="question", samples=1)


@pytest.mark.skipif(not (SHARED / "gsm8k_test.jsonl").is_file(), reason="shared benchmark data not present")
def test_real_jsonl_with_answers():
    prompts = load_prompts(str(SHARED / "gsm8k_test.jsonl"), samples=3)
    assert prompts[0].answer == "18" and "Janet" in prompts[0].text


def test_jsonl_field_detection_and_explicit_field(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "q1", "x": "a"}) + "\n\n" + json.dumps({"question": "q2", "x": "b"}) + "\n")
    assert [p.text for p in load_prompts(str(path))] == ["q1", "q2"]
    assert [p.text for p in load_prompts(str(path), field="x")] == ["a", "b"]


@pytest.mark.parametrize(
    "content, kwargs, message",
    [
        ("", {}, "is empty"),
        ("\n\n", {}, "is empty"),
        ('{"text": "hi"}\n', {}, "has none of the fields"),
        ('{"prompt": "hi"}\n\n{"other": 1}\n', {}, "line 3 has no text field 'prompt'"),
        ('{"problem": ""}\n', {}, r"d\.jsonl line 1: field 'problem' is empty$"),
        ('{"prompt": "hi"}\n\n{"prompt": " \\n"}\n', {}, r"line 3: field 'prompt' is empty \(only whitespace\)"),
        ('{"prompt": "hi", "q": ""}\n', {"field": "q"}, "line 1: field 'q' is empty"),
        ('{"prompt": "hi", "q": 3}\n', {"field": "q"}, r"line 1: field 'q' is not text \(its type is int\)"),
        ('{"prompt": "hi"}\n', {"field": "nope"}, "has no text field 'nope'"),
        ('{"prompt": "hi"}\n{oops\n', {}, ":2: not valid JSON"),
        ('{"prompt": "hi"}\n', {"samples": 5}, "5 requested"),
    ],
)
def test_bad_jsonl_is_a_one_line_error(tmp_path, content, kwargs, message):
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(StandError, match=message) as info:
        load_prompts(str(path), **kwargs)
    assert "\n" not in str(info.value)


def test_missing_file_and_unknown_dataset():
    with pytest.raises(StandError, match="dataset file not found"):
        load_prompts("/nowhere/data.jsonl")
    with pytest.raises(StandError, match="unknown dataset 'no-such-dataset'"):
        load_prompts("no-such-dataset")


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    import gzip

    content = '{"prompt": "hi"}\r\n\n{"prompt": "caf'.encode() + b"\xe9" + b'"}\n'
    for name, write in [("d.jsonl", lambda p: p.write_bytes(content)),
                        ("d.jsonl.gz", lambda p: p.write_bytes(gzip.compress(content)))]:
        path = tmp_path / name
        write(path)
        with pytest.raises(StandError, match=r"line 3 is not UTF-8 \(byte 0xe9 at column 16\)$") as info:
            load_prompts(str(path))
        assert "\n" not in str(info.value)


def test_a_truncated_gzip_file_is_named_not_taken_for_an_interrupt(tmp_path):
    """gzip raises EOFError at a truncated stream, which click reported as "aborted" (exit 130)."""
    import gzip

    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"prompt": "hi"}\n{"prompt": "there"}\n')[:30])
    with pytest.raises(StandError, match=r"cannot read dataset .*d\.jsonl\.gz: the compressed file ends early") as info:
        load_prompts(str(path))
    assert "\n" not in str(info.value)
