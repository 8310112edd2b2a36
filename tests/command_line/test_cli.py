"""The treeopt CLI: bad input gives a one-line error and exit code 2, and writes nothing."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from treeopt_cli import loading
from stand_runtime import Method, load_tree
from treeopt.optimize.calibration import Calibration
from treeopt.optimize.candidate import candidate_tree
from conftest import ROOT

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def one_line_error(output: str, message: str) -> None:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    if len(lines) > 1 and message.startswith(("Invalid value for", "No such option")):  # click's usage error: typer's test runner
        assert "Error: " + message in output, output  # prints it with the usage; `treeopt` as one line (tested)
        return
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], output


@pytest.fixture()
def calibration_file(tmp_path):
    tree = candidate_tree(30)
    calibration = Calibration(tree, np.zeros(tree.num_nodes + 1))
    calibration.add_prompt("p", np.concatenate([[0.0], np.linspace(0.5, 0.01, tree.num_nodes)]), 1.0, 10)
    calibration.metadata = {"model": "smollm2-135m", "settings": {}}
    return calibration.save(tmp_path / "cal.json")


def test_version_and_help():
    code, output = run("--version")
    assert code == 0 and output.startswith("treeopt ")
    code, output = run("--help")
    assert code == 0 and "calibrate" in output and "export" in output


def test_export_writes_a_valid_tree_and_rejects_bad_input(tmp_path, calibration_file):
    out = tmp_path / "tree.json"
    code, output = run("export", str(calibration_file), "--nodes", "12", "--out", str(out))
    assert code == 0, output
    assert load_tree(out).tree.num_nodes == 12
    code, output = run("export", str(calibration_file), "--nodes", "31", "--out", str(tmp_path / "big.json"))
    assert code == 2
    one_line_error(output, "--nodes 31 is larger than the candidate tree (30 nodes)")
    code, output = run("export", str(calibration_file), "--nodes", "many", "--out", str(tmp_path / "x.json"))
    one_line_error(output, "--nodes must be auto or an integer >= 1 in digits 0-9")
    code, output = run("export", str(calibration_file), "--out", str(tmp_path / "missing" / "t.json"))
    one_line_error(output, "does not exist")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(calibration_file.read_text()[:100])
    code, output = run("export", str(corrupt), "--out", str(tmp_path / "c.json"))
    one_line_error(output, "corrupt calibration file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.json", "corrupt.json", "tree.json"]  # nothing half-written


def test_export_names_an_interrupted_calibration(tmp_path):
    """A user test: a calibrate --traces cut short exported a tree with no word that it held 16 of 130 groups."""
    tree = candidate_tree(30)
    for meta, left in (({"source": "traces", "groups": 1, "groups_total": 3}, "holds 1 of 3 trace groups"),
                       ({"model": "m", "samples": 12}, "holds 1 of 12 prompts"), ({"model": "m", "samples": 1}, None)):
        calibration = Calibration(tree, np.zeros(tree.num_nodes + 1))
        calibration.add_prompt("p", np.concatenate([[0.0], np.linspace(0.5, 0.01, tree.num_nodes)]), 1.0, 10)
        calibration.metadata = meta
        code, output = run("export", str(calibration.save(tmp_path / "cal.json")), "--nodes", "5", "--out", str(tmp_path / "t.json"))
        assert code == 0 and (left is None) == ("interrupted run" not in output), output
        assert left is None or left in output


@pytest.mark.parametrize(
    "content, extra, message",
    [
        ("", [], "is empty"),
        ('{"text": "x"}\n', [], "has none of the fields"),
        ('{"prompt": "x"}\n', ["--field", "question"], "has no text field 'question'"),
        ('{"problem": ""}\n', [], "line 1: field 'problem' is empty"),
    ],
)
def test_calibrate_bad_dataset_fails_before_loading_the_model(tmp_path, content, extra, message):
    data = tmp_path / "d.jsonl"
    data.write_text(content)
    out = tmp_path / "cal.json"
    code, output = run("calibrate", "--dataset", str(data), "--samples", "1", "--out", str(out), *extra)
    assert code == 2
    one_line_error(output, message)
    assert not out.exists()


def test_calibrate_unknown_dataset_and_unwritable_output(tmp_path):
    code, output = run("calibrate", "--dataset", "no-such-dataset", "--out", str(tmp_path / "c.json"))
    one_line_error(output, "unknown dataset 'no-such-dataset'")
    code, output = run("calibrate", "--out", str(tmp_path / "nowhere" / "c.json"))
    one_line_error(output, "does not exist")
    code, output = run("calibrate", "--method", "guess", "--out", str(tmp_path / "c.json"))
    one_line_error(output, "unknown calibration method 'guess'")


def test_show_and_candidate(tmp_path, calibration_file):
    out = tmp_path / "cand.json"
    code, output = run("candidate", "--nodes", "40", "--out", str(out))
    assert code == 0 and load_tree(out).tree.num_nodes == 40
    code, output = run("show", "heuristic-80", str(out), str(calibration_file))
    assert code == 0 and "80 nodes, max depth 6" in output and "τ̂" in output and "fan-out" in output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "stand-tree", "version": 1, "paths": [[1]]}))
    code, output = run("show", str(bad))
    one_line_error(output, "has no elder sibling [0]")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    code, output = run("show", str(empty))  # shown, with the reason generate refuses it
    assert code == 0 and "0 nodes" in output and "no draft nodes" in " ".join(output.split())
    code, output = run("generate", "--tree", str(empty), "hi")
    one_line_error(output, "has no draft nodes: use method 'ar'")


def test_the_shipped_calibration_exports_and_shows_by_name(tmp_path):
    out = tmp_path / "t16.json"
    code, output = run("export", "stand-smollm2-humaneval", "--nodes", "16", "--out", str(out))
    assert code == 0, output
    assert load_tree(out).tree.num_nodes == 16
    code, output = run("show", "stand-smollm2-humaneval")
    assert code == 0 and "625 nodes" in output


def test_export_and_show_name_what_they_were_given(tmp_path):
    """From a user test: each message says what is wrong with the argument as written."""
    for args, message in ((["export", "stand-smollm2-humaneval", "--nodes", "-3"], "--nodes must be auto or an integer >= 1"),
                          (["export", "stand-smollm2-humaneval", "--nodes", "0"], "--nodes must be auto or an integer >= 1"),
                          (["export", str(ROOT / "trees" / "stand-smollm2-humaneval.acceptance.json")],
                           "is an acceptance seed (of the value-sized trees, dynamic-auto), not a calibration"),
                          (["show", "dynamic-auto"], "STAND's dynamic trees (dynamic, dynamic-N, dynamic-auto, dynamic-auto-N, in lower case)")):
        code, output = run(*args, "--out", str(tmp_path / "x.json")) if args[0] == "export" else run(*args)
        assert code == 2
        one_line_error(output, message)


def test_family_files_show_and_tree_files_are_not_calibrations(tmp_path, calibration_file):
    family, tree = tmp_path / "f.family.json", tmp_path / "t.json"
    assert run("export", str(calibration_file), "--format", "family", "--out", str(family))[0] == 0
    code, output = run("show", str(family))
    assert code == 0 and "τ̂" in output and "a tree family of" in " ".join(output.split())
    code, output = run("show", "stand-smollm2-humaneval")  # the bundled calibration's name, shared by its family
    assert code == 0 and "625 nodes" in output and "a tree family of" not in " ".join(output.split())
    assert run("export", str(calibration_file), "--nodes", "5", "--out", str(tree))[0] == 0
    code, output = run("export", str(tree), "--out", str(tmp_path / "x.json"))
    one_line_error(output, "is a tree file, not a calibration")
    odd = tmp_path / "odd.json"
    odd.write_text('{"format": ["stand-tree"]}')  # a format that is no name: corrupt, not a TypeError
    code, output = run("export", str(odd), "--out", str(tmp_path / "x.json"))
    one_line_error(output, "not a stand-calibration file")


def test_bench_offset_defaults_to_zero_for_a_dataset_file(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1 + 1?", "answer": "2"}\n{"question": "2 + 2?", "answer": "4"}\n')
    code, output = run("bench", "--dataset", str(data), "--field", "question", "--samples", "5")
    one_line_error(output, "has 2 prompts after offset 0, 5 requested")


def test_show_draws_profiles_and_trees_as_png(tmp_path, calibration_file):
    pytest.importorskip("matplotlib")
    profiles, trees = tmp_path / "profiles.png", tmp_path / "trees.png"
    code, output = run("show", "heuristic-80", str(calibration_file), "--png", str(profiles), "--tree-png", str(trees))
    assert code == 0, output
    for picture in (profiles, trees):
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000
    # a plot is written as every file is: through a link to its target, a device in place, a failure one line
    link, real = tmp_path / "link.png", tmp_path / "real.png"
    link.symlink_to(real)
    code, output = run("show", "heuristic-80", "--png", str(link))
    assert code == 0 and link.is_symlink() and real.read_bytes()[:4] == b"\x89PNG", output
    if Path("/dev/full").is_char_device():
        code, output = run("show", "heuristic-80", "--png", "/dev/full")
        assert Path("/dev/full").is_char_device()  # written in place, not replaced by a file
        assert code != 0 and output.strip().splitlines()[-1] == "error: cannot write /dev/full: No space left on device"
    (tmp_path / ".q.png.tmp.png").mkdir()  # the old fixed temporary name
    code, output = run("show", "heuristic-80", "--png", str(tmp_path / "q.png"))
    assert code == 0 and (tmp_path / "q.png").read_bytes()[:4] == b"\x89PNG", output


def test_bench_unknown_method_lists_valid_ones():
    code, output = run("bench", "--methods", "ar,medusa")
    one_line_error(output, "unknown method 'medusa' (valid: stand, stand-det, pld, recycle, suffix, ar, stand+rejected, stand-det+rejected, "
                   "stand+noprior, stand-det+noprior, stand+rejected+noprior, stand-det+rejected+noprior)")


def test_method_help_lists_every_method():
    """The help of every command that takes a method lists each accepted one (from the one list)."""
    from stand_runtime.drafters import METHODS

    for command, option in (("generate", "--method"), ("search", "--methods"), ("bench", "--methods")):
        code, output = run(command, "--help")
        assert code == 0, output
        text = output.split("  " + option, 1)[1].split("\n  --", 1)[0].split("[default:")[0]
        assert set(METHODS) <= set(re.findall(r"[\w-]+", text)), (command, text)


def test_search_says_when_tree_does_not_apply_to_a_method(tmp_path, monkeypatch):
    """recycle drafts into a static tree only: under --tree dynamic-auto it runs on its own tree, said on
    stderr in one line (as bench says it), not silently; a method that takes the tree gets no note."""
    from stand_runtime import StandError

    def stop(*args):
        raise StandError("stopped before loading the model")

    monkeypatch.setattr(loading, "load_model", stop)
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"problem": "3 1 4", "answer": "1"}) + "\n")
    for tree, methods, notes in (("dynamic-auto", "ar,stand,recycle", ["recycle"]), ("heuristic-80", "stand,recycle", []),
                                 (None, "stand,recycle", [])):
        result = runner.invoke(app, ["search", "--dataset", str(data), "--samples", "1", "--methods", methods,
                                     *(["--tree", tree] if tree else [])])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.startswith("note:")]
        assert lines == [f"note: {name} runs on its own tree heuristic-80: --tree {tree} does not apply to it"
                         for name in notes], result.stderr


def test_generate_feed_rejected_needs_a_store_method():
    code, output = run("generate", "--method", "pld", "--feed-rejected", "hello")
    one_line_error(output, "feed_rejected applies to stand and stand-det, not 'pld'")


@pytest.fixture()
def tiny_cli(monkeypatch):
    """The CLI on the tiny model with the digits tokenizer (no model loading)."""
    from conftest import DigitsTokenizer, tiny_model

    monkeypatch.setattr(loading, "load_model", lambda *args: (tiny_model(), DigitsTokenizer()))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seed", "99999999999999999999", "hi"], "Invalid value for '--seed'"),
        (["--seed", "-3", "hi"], "Invalid value for '--seed'"),
        (["--max-new-tokens", "0", "hi"], "Invalid value for '--max-new-tokens'"),
        (["--method", "ar", "--tree", "heuristic-80", "hi"], "method 'ar' drafts no static tree"),
        (["--top-p", "0", "hi"], "--top-p must be in (0, 1], got 0.0"),
        (["--top-p", "1.5", "hi"], "--top-p must be in (0, 1], got 1.5"),  # one style at both ends
        (["--top-p", "nan", "hi"], "--top-p must be a finite number, got nan"),
        (["--temperature", "nan", "hi"], "--temperature must be a finite number, got nan"),
        (["--temperature", "-1", "hi"], "--temperature must be >= 0"),
        (["--temperature", "1e46", "hi"], "--temperature must be <= 1e+06"),
        (["--top-p", "1e-100", "hi"], "--top-p must be >= 1.1754943508222875e-38"),
        ([], "give a prompt or --prompt-file"),
    ],
)
def test_generate_bad_options_fail_before_the_model_loads(monkeypatch, args, message):
    def no_loading(*args):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(loading, "load_model", no_loading)
    code, output = run("generate", *args)
    assert code == 2
    one_line_error(output, message)


def test_generate_renders_every_method_and_writes_json(tiny_cli, tmp_path):
    for method in ("recycle", "pld", "ar", "stand"):
        out = tmp_path / f"{method}.json"
        code, output = run("generate", "--method", method, "--temperature", "0", "--max-new-tokens", "4",
                           "--json", str(out), "3 1 4 1 5 3 1 4 1 5")
        assert code == 0, output
        data = json.loads(out.read_text())
        assert data["method"] == method and data["stats"]["new_tokens"] == 4
        assert "stopped at --max-new-tokens 4" in output
        if method == "stand":  # its default tree is the value-sized dynamic tree, said before decoding
            assert data["tree"] == "dynamic-auto" and "tree dynamic-auto: each step drafts the best-first" in output
    assert "matrix rows filled" in run("generate", "--method", "recycle", "--max-new-tokens", "2", "3 1 4")[1]


def test_generate_reads_the_prompt_from_a_file_or_stdin(tiny_cli, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("3 1 4 1 5")
    code, output = run("generate", "--prompt-file", str(prompt), "--max-new-tokens", "2", "--temperature", "0")
    assert code == 0 and "new tokens" in output, output
    result = runner.invoke(app, ["generate", "--prompt-file", "-", "--max-new-tokens", "2"], input="3 1 4 1 5")
    assert result.exit_code == 0, result.output
    code, output = run("generate", "--max-new-tokens", "2", str(prompt))
    assert "is an existing file but is used as the prompt text" in " ".join(output.split())  # wrapped by path length


def test_progress_in_a_file_prints_a_few_lines(monkeypatch):
    """A progress bar written to a file or pipe (FORCE_COLOR makes rich redraw there) stays short."""
    import io

    from rich.console import Console

    from treeopt_cli import render as cli_render

    monkeypatch.setenv("FORCE_COLOR", "1")
    buffer = io.StringIO()
    console = Console(file=buffer, markup=False)
    with cli_render.progress(console) as bar:
        task = bar.add_task("decoding", total=1000)
        for _ in range(1000):
            bar.advance(task)
    lines = buffer.getvalue().splitlines()
    assert 5 <= len(lines) <= 11 and lines[-1] == "decoding 1000/1000", lines


@pytest.mark.model
def test_stream_ending_inside_a_multibyte_character_keeps_the_text(default_model):
    import io

    from rich.console import Console

    from treeopt_cli import render as cli_render

    _, tokenizer = default_model
    ids = tokenizer("ok 😀")["input_ids"]
    assert tokenizer.decode(ids[:2]).endswith("\ufffd")  # the emoji takes more than one token
    buffer = io.StringIO()
    stream = cli_render.TextStream(tokenizer, Console(file=buffer))
    stream(ids[:1])
    stream(ids[1:2])
    stream.end()
    assert buffer.getvalue().startswith("ok ") and buffer.getvalue().endswith("\n")
    buffer = io.StringIO()
    stream = cli_render.TextStream(tokenizer, Console(file=buffer))
    stream(ids)
    stream.end()
    assert buffer.getvalue() == "ok 😀\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--max-new-tokens", "abc", "hi"], "Invalid value for '--max-new-tokens'"),
        (["generate", "--seed", "1.5", "hi"], "Invalid value for '--seed'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["show"], "Missing argument"),
    ],
)
def test_usage_errors_are_one_line_too(monkeypatch, capsys, argv, message):
    import cli

    monkeypatch.setattr("sys.argv", ["treeopt", *argv])
    with pytest.raises(SystemExit) as exit_info:
        cli.run()
    assert exit_info.value.code == 2
    one_line_error(capsys.readouterr().err, message)


def test_outputs_never_overwrite_inputs(tmp_path, monkeypatch, calibration_file):
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model loaded")))
    tree = tmp_path / "t.json"
    tree.write_text(load_tree("heuristic-80").tree and '[[0], [1], [0, 0]]')
    prompt = tmp_path / "p.txt"
    prompt.write_text("hello")
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "x"}\n')
    originals = {p: p.read_bytes() for p in (tree, prompt, data, calibration_file)}
    cases = [
        (["generate", "--prompt-file", str(prompt), "--json", str(prompt)], "--json"),
        (["generate", "--tree", str(tree), "--json", str(tree), "hi"], "is the --tree file itself"),
        (["show", str(tree), "--png", str(tree)], "is one of the FILES given: it would be overwritten"),
        (["calibrate", "--candidate", str(tree), "--out", str(tree)], "is the --candidate file itself"),
        (["calibrate", "--dataset", str(data), "--out", str(data), "--samples", "1"], "is the --dataset file itself"),
        (["bench", "--dataset", str(data), "--json", str(data), "--samples", "1", "--offset", "0"], "is the --dataset file itself"),
        (["bench", "--json", str(tmp_path / "b.out"), "--png", str(tmp_path / "b.out")], "are the same file"),
        (["bench", "--json", str(tmp_path / "b-reliability.png"), "--png", str(tmp_path / "b.png")],
         "--png's reliability diagram and --json are the same file"),
        (["bench-traces", str(data), "--json", str(data)], "is the TRACES file itself"),
        (["bench-vllm", "--dataset", str(data), "--json", str(data)], "is the --dataset file itself"),
        (["export", str(calibration_file), "--out", str(calibration_file)], "is the CALIBRATION file itself"),
    ]
    for args, message in cases:
        code, output = run(*args)
        assert code == 2, (args, output)
        one_line_error(output, message)
    assert {p: p.read_bytes() for p in originals} == originals


def test_bench_tree_and_method_lists_are_checked():
    for args, message in [
        (["--methods", "pld", "--tree", "heuristic-80"], "--tree applies to stand, stand-det, recycle"),
        (["--methods", "stand", "--tree", "heuristic-80", "--tree", "heuristic-80"], "a tree is listed twice"),
        (["--methods", "ar,,stand"], "an empty method name"),
        (["--trajectories", "100000000000"], "trajectories must be an integer in [1, 4096]"),
        (["--trajectories", "2", "--seed", str(2**64 - 1)], "seeds would run past 2**64"),
    ]:
        code, output = run("bench", *args)
        assert code == 2, output
        one_line_error(output, message)


def test_the_cli_starts_without_torch():
    """``treeopt --help`` and usage errors must come at once: the CLI module, its renderer and the
    package faces import neither torch nor transformers (they load inside the commands that need them)."""
    import subprocess
    import sys

    code = ("import sys, cli, stand_runtime; stand_runtime.StandError; stand_runtime.__version__; "
            "heavy = sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(ROOT))


def test_stop_strings_are_left_out_of_the_text_and_the_stream(tiny_qwen2):
    """One convention on every path (OpenAI's, as vLLM's server): the text ends before the stop
    string, the tokens keep the one that completed it; the CLI's stream prints exactly that text."""
    import io

    from rich.console import Console

    from treeopt_cli import render as cli_render
    from conftest import DigitsTokenizer
    from stand_runtime import DecodeRequest, HFBackend, SamplingParams, generate, generate_batch

    tokenizer = DigitsTokenizer()
    prompt = [3, 5, 7, 3, 5, 7, 3, 5]
    free = generate(tiny_qwen2, tokenizer, prompt, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=12, eos_token_ids=[])
    stop = " ".join(map(str, free.tokens[4:6]))
    buffer = io.StringIO()
    stream = cli_render.TextStream(tokenizer, Console(file=buffer, width=500), [stop])
    result = generate(tiny_qwen2, tokenizer, prompt, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=12, eos_token_ids=[], stop=stop, on_step=lambda step: (stream)(step.tokens))
    stream.end()
    full = " ".join(map(str, result.tokens))
    assert result.finish_reason == "stop" and full.endswith(stop)
    assert result.text == full[: full.find(stop)] and stop not in result.text
    assert buffer.getvalue() == result.text + "\n"
    batched = generate_batch(tiny_qwen2, tokenizer, [prompt], method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=len([prompt])), sampling=SamplingParams(temperature=0), max_new_tokens=12, eos_token_ids=[], stop=stop)[0]
    assert (batched.tokens, batched.text) == (result.tokens, result.text)
    backend = HFBackend(tiny_qwen2, tokenizer, "ar")
    greedy = SamplingParams(temperature=0)
    completion = backend.generate([DecodeRequest(prompt, max_new_tokens=12, sampling=greedy, stop=stop,
                                                 ignore_eos=True)])[0][0]
    assert (completion.tokens, completion.text) == (result.tokens, result.text)


def test_a_prompt_file_loses_its_trailing_newline_unless_asked(tmp_path):
    from treeopt_cli.options import read_prompt

    path = tmp_path / "prompt.txt"
    path.write_text("Say hi\n\n")
    assert read_prompt(None, path) == "Say hi"
    assert read_prompt(None, path, keep_newline=True) == "Say hi\n\n"
    assert read_prompt("Say hi", None) == "Say hi"


def test_usage_and_range_errors_come_before_any_import_of_torch():
    """Numeric options carry their ranges into click, so the commonest argument errors are refused as
    the command line is read (a fraction of a second), one line, exit 2, like a malformed value."""
    import subprocess
    import sys

    root = ROOT
    code = ("import sys, cli\nsys.argv = ['treeopt'] + sys.argv[1:]\ntry:\n    cli.run()\nfinally:\n"
            "    assert 'torch' not in sys.modules, 'torch was imported'\n")
    for args, message in ((["generate", "--max-new-tokens", "0", "hi"], "Invalid value for '--max-new-tokens'"),
                          (["search", "--dataset", "x", "--max-batch", "2000"], "Invalid value for '--max-batch'"),
                          (["bench", "--seed", "-1"], "Invalid value for '--seed'"),
                          (["bench", "--traces", "t.jsonl"], "No such option: --traces"),
                          (["bench-traces", "t.jsonl", "--copy-tokens", "99"], "Invalid value for '--copy-tokens'"),
                          (["bench-vllm", "--samples", "0"], "Invalid value for '--samples'"),
                          (["serve", "--port", "0"], "Invalid value for '--port'")):
        run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=root)
        assert run.returncode == 2, run.stderr
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], run.stderr


def test_show_draws_trees_with_their_own_colour_scale(tmp_path):
    """``show --tree-png``: one panel per tree (80 nodes each), written as a PNG."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "trees.png"
    code, output = run("show", "stand-smollm2-humaneval-80", "heuristic-80", "--tree-png", str(out))
    assert code == 0, output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20000


def _options(command: str) -> set[str]:
    code, output = run(command, "--help")
    assert code == 0, output
    return {word.rstrip(",") for word in output.split() if word.startswith("--")} - {"--help"}


def test_each_bench_command_lists_only_its_own_options():
    shared = {"--methods", "--json"}
    decoding = {"--model", "--dataset", "--field", "--samples", "--offset", "--temperature", "--top-p",
                "--max-new-tokens", "--seed", "--trajectories", "--ignore-eos", "--dtype"}
    trace = {"--tree", "--group-field", "--text-field", "--prompt-field", "--max-tokens", "--min-group-size",
             "--tokenizer", "--copy-tokens", "--png", "--latency", "--budgets", "--cross-prompt"}
    assert _options("bench") == shared | decoding | {"--tree", "--share-store", "--cross-prompt", "--png", "--prior", "--no-prior",
                                                     "--verification"}
    assert _options("bench-traces") == shared | trace
    assert _options("bench-vllm") == shared | decoding | {"--k", "--prior", "--no-prior"}
    code, output = run("--help")
    assert all(name in output for name in ("bench-traces", "bench-vllm"))


def test_only_the_cli_imports_rich_and_typer():
    """The packages return data; presentation (rich) and the command line (typer) stay in the CLI."""
    import re

    root = ROOT
    pattern = re.compile(r"^\s*(import|from)\s+(rich|typer|click)\b", re.MULTILINE)
    offenders = [str(path.relative_to(root)) for package in ("stand_runtime", "treeopt")
                 for path in sorted((root / package).rglob("*.py")) if pattern.search(path.read_text())]
    assert not offenders, offenders


def test_export_nodes_auto_sizes_the_tree_from_the_latency_profile(tmp_path, monkeypatch, calibration_file):
    """``export --nodes auto``: the CLI loads the model and reads its latency profile; the size comes
    from :func:`treeopt.optimize.export.choose_export_size` and lands in the tree's metadata."""
    from stand_runtime.target.latency import LatencyProfile

    flat = LatencyProfile((1, 16, 32, 64), (0.010, 0.0101, 0.0102, 0.0103))
    steep = LatencyProfile((1, 16, 32, 64), (0.010, 0.2, 0.4, 0.8))
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: (None, None))
    for profile, expected in ((flat, None), (steep, "no tree beats plain decoding")):
        monkeypatch.setattr(loading, "cached_profile", lambda *a, profile=profile, **k: profile)
        out = tmp_path / "auto.json"
        code, output = run("export", str(calibration_file), "--nodes", "auto", "--batch", "2", "--out", str(out))
        if expected is None:
            assert code == 0, output
            chosen = json.loads(out.read_text())["metadata"]["nodes_auto"]
            assert chosen["batch"] == 2 and chosen["chosen"] == load_tree(out).tree.num_nodes >= 1
        else:
            assert code == 2 and expected in output, output


@pytest.mark.parametrize("args, message", [
    (["calibrate", "--candidate", "trees/heuristic-80.json", "--candidate-nodes", "50", "--out", "OUT"],
     "--candidate-nodes does not apply to --candidate"),
    (["calibrate", "--method", "direct", "--batch-size", "4", "--out", "OUT"],
     "--batch-size does not apply to --method direct"),
    (["search", "--dataset", "DATA", "--methods", "ar,pld", "--no-prior"], "--no-prior does not apply to --methods ar,pld"),
    (["generate", "hi", "--method", "pld", "--no-prior"], "--no-prior does not apply to --method pld"),
    (["generate", "hi", "--method", "ar", "--prior"], "--prior does not apply to --method ar"),
    (["bench", "--methods", "ar,suffix", "--no-prior"], "--no-prior does not apply to --methods ar,suffix"),
    (["bench", "--methods", "stand,stand+noprior", "--no-prior"], "a +noprior method in --methods would repeat"),
    (["bench", "--methods", "ar,stand+noprior", "--prior"],
     "--prior does not apply to --methods ar,stand+noprior (every STAND method there says +noprior)"),
    (["bench", "--methods", "ar,pld", "--share-store"], "--share-store does not apply to --methods ar,pld (none of them"),
    (["bench", "--methods", "ar,stand", "--share-store", "--cross-prompt"], "--share-store and --cross-prompt both share"),
    (["search", "--dataset", "DATA", "--methods", "ar", "--subtrees", "2"],
     "--subtrees does not apply to --strategy best-of-n (options of --strategy dvts)"),
    (["search", "--dataset", "DATA", "--samples", "1", "--methods", "ar", "--in-flight", "2"],
     "--in-flight 2 is more than the 1 problem searched"),
    (["serve", "--dry-run", "--method", "ar", "--k", "4"], "--k does not apply to --method ar"),
    (["serve", "--dry-run", "--method", "suffix", "--max-prompts", "5"], "--max-prompts does not apply to --method suffix"),
])
def test_options_that_do_not_apply_are_refused(tmp_path, args, message):
    """An option accepted and then ignored reads as if it had taken effect: refused in one line."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"problem": "1 + 1?", "answer": "2"}\n')
    args = [str(data) if a == "DATA" else str(tmp_path / "out.json") if a == "OUT" else
            str(ROOT / a) if a.startswith("trees/") else a for a in args]
    code, output = run(*args)
    assert code == 2
    one_line_error(output, message)


def test_a_commands_runtime_warnings_are_one_line(capsys):
    """A StandWarning raised anywhere in a command (outside :func:`loading.runtime_warnings` too) is one
    ``warning:`` line, not Python's two-line display."""
    import warnings

    from stand_runtime.errors import StandWarning
    from treeopt_cli.app import one_line_errors

    @one_line_errors
    def command():
        warnings.warn(StandWarning("the latency profile is kept for this run only (cannot write X)"), stacklevel=2)

    command()
    assert capsys.readouterr().err.strip().splitlines() == [
        "warning: the latency profile is kept for this run only (cannot write X)"]


def test_runtime_warnings_print_one_line_each_after_the_block(capsys):
    import warnings

    from stand_runtime.errors import StandWarning

    with loading.runtime_warnings():
        warnings.warn(StandWarning("the successor prior is kept for this run only (cannot write X: denied)"))
        print("inside")
    captured = capsys.readouterr()
    assert captured.out == "inside\n"
    assert captured.err.strip().splitlines() == ["warning: the successor prior is kept for this run only "
                                                 "(cannot write X: denied)"]


def test_an_unknown_tokenizer_is_named_as_an_unknown_model():
    """``bench-traces --tokenizer bogus`` says what ``--model bogus`` says, not the hub's network message."""
    code, output = run("bench-traces", str(Path(__file__)), "--tokenizer", "no-such-model-xyz")
    assert code == 2
    one_line_error(output, "unknown model 'no-such-model-xyz': not a known name")


def test_a_folder_given_as_an_input_file_is_named_a_folder(tmp_path):
    """A folder where a calibration or traces file belongs is said to be a folder (not "corrupt: Is a
    directory", not "no traces file")."""
    code, output = run("export", str(tmp_path), "--nodes", "10", "--out", str(tmp_path / "t.json"))
    assert code == 2
    one_line_error(output, f"{tmp_path} is a folder, not a calibration file")
    code, output = run("bench-traces", str(tmp_path))
    assert code == 2
    one_line_error(output, f"{tmp_path} is a folder, not a traces file")


def test_every_dtype_and_json_option_reads_its_spellings():
    """``--dtype bf16`` is recorded as ``bfloat16`` (results said ``bf16`` verbatim); ``--json -`` is
    standard output (it wrote a file named ``-``); other values pass on to their checks."""
    import inspect

    from treeopt_cli.options import dtype_name, json_path

    assert [dtype_name(v) for v in ("fp32", "float32", "bf16", "bfloat16", "fp16")] == [
        "float32", "float32", "bfloat16", "bfloat16", "fp16"]
    assert json_path(Path("-")) == Path("/dev/stdout") and json_path(Path("r.json")) == Path("r.json")
    assert json_path(None) is None
    seen = {"dtype": 0, "json_out": 0}
    for command in app.registered_commands:
        for name, parameter in inspect.signature(command.callback).parameters.items():
            if name in seen:
                seen[name] += 1
                assert parameter.default.callback is {"dtype": dtype_name, "json_out": json_path}[name], (command, name)
    assert seen == {"dtype": 5, "json_out": 5}


def test_outputs_named_dash_folders_and_devices_are_named(tmp_path):
    """``--out -`` or ``--png -`` wrote a file named '-' (only --json means standard output); a folder
    given as a tree and a device given as a dataset are said to be what they are."""
    (tmp_path / "adir").mkdir()
    for args, message in [(["calibrate", "--out", "-", "--samples", "1"], "--out - would write a file named '-'"),
                          (["show", "heuristic-80", "--png", "-"], "--png - would write a file named '-'"),
                          (["show", str(tmp_path / "adir")], f"cannot read tree {tmp_path / 'adir'}: Is a directory"),
                          (["bench", "--dataset", "/dev/null", "--samples", "1"], "dataset /dev/null is not a regular file")]:
        code, output = run(*args)
        assert code == 2, (args, output)
        one_line_error(output, message)


@pytest.mark.model
def test_a_seed_gives_plain_decodings_text_with_every_tree(default_model, monkeypatch, tmp_path):
    """`treeopt generate --seed 7 --temperature 0.6` (the default method and tree, and an exported tree
    file) prints the text `--method ar --seed 7` prints, and the same text again on a second run."""
    import shutil

    from stand_runtime.trees.tree_io import bundled_trees

    monkeypatch.setattr(loading, "load_model", lambda *args: default_model)
    tree = tmp_path / "tree.json"
    shutil.copy(bundled_trees()["stand-smollm2-humaneval-80"], tree)
    texts, drafted = [], []
    for index, extra in enumerate((["--method", "ar"], ["--no-prior"], ["--no-prior"], ["--no-prior", "--tree", str(tree)])):
        out = tmp_path / f"run{index}.json"
        code, output = run("generate", "--seed", "7", "--temperature", "0.6", "--max-new-tokens", "48", "--json", str(out),
                           *extra, "Write a Python function is_even(n) and three tests for it: assert is_even(2), "
                           "assert not is_even(3), assert is_even(10).")
        assert code == 0, output
        data = json.loads(out.read_text())
        texts.append(data["text"])
        drafted.append(data["stats"]["new_tokens"] > data["stats"]["target_forwards"])
    assert texts[1:] == [texts[0]] * 3
    assert drafted == [False, True, True, True]  # STAND committed more than one token per forward


def test_the_verification_choices_are_the_runtimes_rules():
    from stand_runtime.verify import VERIFICATION_RULES
    from treeopt_cli.options import Verification

    assert tuple(rule.value for rule in Verification) == VERIFICATION_RULES


@pytest.mark.parametrize("name", ["STAND_NATIVE", "STAND_NATIVE_NUCLEUS", "STAND_VLLM_FAST_SAMPLING", "STAND_VLLM_ANY_VERSION"])
def test_an_on_off_variable_other_than_0_or_1_is_refused_on_every_command(name, monkeypatch, tmp_path):
    """``STAND_NATIVE=2`` was accepted on paths that draft nothing (plain decoding, export, show)."""
    monkeypatch.setenv(name, "2")
    for args in (["show", "heuristic-80"], ["candidate", "--nodes", "5", "--out", str(tmp_path / "c.json")]):
        code, output = run(*args)
        assert code == 2
        one_line_error(output, f"{name} must be 0 or 1")
    assert not (tmp_path / "c.json").exists()
    monkeypatch.setenv(name, " 0 ")
    code, output = run("show", "heuristic-80")
    assert code == 0, output


def test_the_on_off_variables_read_0_1_or_unset():
    from stand_runtime.checks import env_switch
    from stand_runtime.errors import StandError

    assert env_switch("STAND_NATIVE", {}) is None and env_switch("STAND_NATIVE", {"STAND_NATIVE": ""}) is None
    assert env_switch("STAND_NATIVE", {"STAND_NATIVE": "0"}) is False and env_switch("STAND_NATIVE", {"STAND_NATIVE": "1"}) is True
    for bad in ("2", "yes", "true", "01"):
        with pytest.raises(StandError, match=f"STAND_NATIVE must be 0 or 1 .* got '{bad}'"):
            env_switch("STAND_NATIVE", {"STAND_NATIVE": bad})


@pytest.fixture()
def without_vllm(monkeypatch):
    """As on a machine where vLLM is not installed."""
    import importlib.util
    import sys

    find_spec = importlib.util.find_spec
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "vllm" else find_spec(name, *args))


@pytest.mark.parametrize("args, message", [
    (["--k", "-3"], "--k must be auto or an integer in [1, 128], got '-3'"),
    (["--model", "/nonexist"], "/nonexist is not a model folder"),
    (["--max-model-len", "8"], "Invalid value for '--max-model-len'"),
    (["--prior", "0.6"], "--prior must be T,TOP_P"),
])
def test_serve_checks_its_own_arguments_before_asking_for_vllm(without_vllm, args, message):
    """``treeopt serve --k -3`` answered "vLLM is not installed" before looking at --k."""
    for dry in ([], ["--dry-run"]):
        code, output = run("serve", *dry, *args)
        assert code == 2
        one_line_error(output, message)


def test_serve_dry_run_prints_its_command_without_vllm(without_vllm):
    code, output = run("serve", "--dry-run", "--k", "3", "--port", "8123")
    assert code == 0, output
    assert "warning: vLLM is not installed here" in output
    assert "--port 8123" in output and '"num_speculative_tokens": 3' in output
    code, output = run("serve", "--k", "3")
    assert code == 2
    one_line_error(output, "vLLM is not installed")


def test_show_skips_a_file_that_holds_no_tree_and_names_it():
    """``treeopt show trees/*.json`` stopped at the bundled acceptance seed; now it shows the others."""
    files = sorted(str(path) for path in (ROOT / "trees").glob("*.json"))
    code, output = run("show", *files)
    assert code == 0, output
    skipped = [line for line in output.splitlines() if line.startswith("warning: skipped")]
    assert len(skipped) == 1 and "stand-smollm2-humaneval.acceptance.json" in skipped[0] and "not a tree" in skipped[0]
    assert output.count("depth") >= len(files) - 1  # one profile table per shown file
    code, output = run("show", files[0], "no-such-tree")  # a missing file or name stays an error
    assert code == 2
    one_line_error(output, "tree not found: 'no-such-tree'")
    code, output = run("show", str(ROOT / "trees" / "stand-smollm2-humaneval.acceptance.json"))
    assert code == 2
    one_line_error(output, "an acceptance seed")


def test_an_unknown_name_lists_every_bundled_name():
    code, output = run("show", "no-such-tree")
    one_line_error(output, "heuristic-80, stand-smollm2-humaneval-80 (trees); stand-smollm2-humaneval (a calibration and its tree family)")
    code, output = run("export", "no-such-calibration", "--out", "x.json")
    one_line_error(output, "calibration file not found: no-such-calibration (shipped calibrations: stand-smollm2-humaneval)")


def test_the_successor_priors_measurement_names_its_forwards_the_time_left_and_no_prior(monkeypatch, capsys):
    """49,152 one-token forwards ran with no time estimate and no word of --no-prior."""
    import time

    from treeopt_cli import render

    clock = iter([100.0, 100.0, 130.0, 160.0, 190.0, 220.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))

    def fake_prior(name, target, tokenizer, sampling, vocab, enabled, report):
        for done in range(0, 49_153, 12_288):
            report(done, 49_152)
        return "prior"

    monkeypatch.setattr("stand_runtime.drafters.prior.method_prior", fake_prior)
    monkeypatch.setattr("stand_runtime.target.model_facts.vocab_size", lambda target: 49_152)
    assert loading.successor_prior(None, None, ["stand"], None) == "prior"
    out = capsys.readouterr().out
    assert "49,152 one-token forwards" in out and "--no-prior skips it" in out
    assert "successor prior 12288/49152 about 2 min left" in out  # 30 s a quarter: 90 s for three more
    assert render.time_left(0, 0, 10) == "" and render.time_left(10.0, 5, 10) == "about 10 s left"


def test_dvts_progress_counts_its_tokens_and_best_of_n_shows_its_budget():
    """DVTS's progress showed best-of-N's token total (N x max_new_tokens), which its rounds neither reach nor bound."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from treeopt_cli import render
    from treeopt_cli.search import _token_progress

    out = io.StringIO()
    bar = render.ProgressLines(Console(file=out, width=200))
    searching = bar.add_task("searching", total=2, tokens="")
    count = _token_progress(bar, searching, SimpleNamespace(strategy="dvts", n=16, max_new_tokens=256), 2)
    assert len(bar.tasks) == 1  # no token bar of a made-up total
    count(1_000), count(234)
    bar.advance(searching)
    assert out.getvalue().strip() == "searching 1/2 1,234 tokens decoded"
    bar = render.ProgressLines(Console(file=io.StringIO(), width=200))
    searching = bar.add_task("searching", total=2, tokens="")
    count = _token_progress(bar, searching, SimpleNamespace(strategy="best-of-n", n=8, max_new_tokens=100), 3)
    assert bar.tasks[1]["description"] == "tokens" and bar.tasks[1]["total"] == 3 * 8 * 100
