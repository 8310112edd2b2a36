"""``treeopt serve``: an OpenAI-compatible server, vLLM with STAND's proposer."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from .app import app, console, one_line_errors
from .options import dtype_name, refuse_options


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@one_line_errors
def serve(
    ctx: typer.Context,
    model: str = typer.Option("smollm2-135m", help="smollm2-135m (default: its float32 folder, made once) or a Hugging Face model folder."),
    method: str = typer.Option("stand", help="stand (STAND's proposer), or vLLM's ar (plain decoding), ngram, suffix."),
    k: Optional[str] = typer.Option(None, help="Draft tokens per request and step (default: 4 for stand, 5 ngram, 16 suffix; `treeopt bench-vllm --k auto` measures the best for this machine); stand: auto cuts each request's chain by expected tokens per second (at most 16; from vLLM's latency here when `bench-vllm` measured it)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    kv_cache_gib: int = typer.Option(1, help="KV-cache size in GiB (1 GiB holds ~23k tokens of the default model); a fixed size lets vLLM start beside other processes."),
    max_model_len: int = typer.Option(2048, help="Context length (tokens)."),
    dtype: str = typer.Option("float32", callback=dtype_name, help="float32 (or fp32) or bfloat16 (or bf16)."),
    max_prompts: int = typer.Option(64, help="stand: prompt stores kept (least recently used dropped)."),
    prior: Optional[str] = typer.Option(None, metavar="T,TOP_P", help="stand: draft from the target's successor prior "
                                        "for requests sampled at temperature T and top-p TOP_P (e.g. 0.6,0.95; T 0: greedy), "
                                        "where a request's store has not seen a step's root token; measured once per model, "
                                        "dtype and distribution (one one-token forward per vocabulary token) and cached under "
                                        "$STAND_CACHE_DIR or ~/.cache/stand; requests sampled otherwise draft without it (0,1 also "
                                        "serves T 1 with top-p 1: greedy requests record the softmax). "
                                        "Default: no prior."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the vLLM command and its STAND settings; start nothing and measure nothing (a --prior not cached yet is named by its path)."),
) -> None:
    """Serve an OpenAI-compatible API with vLLM and STAND (arguments after the options go to vLLM as they are)."""
    from stand_runtime import DEFAULT_MODEL
    from stand_runtime.vllm import default_model_folder
    from stand_runtime.vllm.engine import private_ipc_folder
    from stand_runtime.vllm.server import ServerSettings, describe, server_command

    chain, distribution = _check_arguments(ctx, model, method, k, prior, host, port, kv_cache_gib, max_model_len,
                                           dtype, dry_run)
    if distribution is not None:
        _check_prior_folder()  # before a measurement of minutes, not after it
    folder = str(default_model_folder() if model == DEFAULT_MODEL else model)
    options = {"max_prompts": max_prompts} if method == "stand" else {}
    pending = None  # a dry run's prior path not measured yet (the proposer's options check reads the file)
    if distribution is not None:
        options["prior"] = _prior_path(model, dtype, distribution, measure=not dry_run)
        if not os.path.isfile(options["prior"]):
            pending = options.pop("prior")
    if chain == "auto":
        from stand_runtime.vllm.sizing import latency_option, read_vllm_latency

        options["latency"] = latency_option(read_vllm_latency(folder, dtype))
    settings = ServerSettings(folder, method, chain, host, port, kv_cache_gib, max_model_len, dtype,
                              name=model if model == DEFAULT_MODEL else None, stand_options=options,
                              extra=tuple(ctx.args))
    argv, env = server_command(settings)
    if dry_run:
        _print_dry_run(describe(settings), argv, env, pending)
        return
    console.print(describe(settings), highlight=False, soft_wrap=True)
    sys.stdout.flush()
    private_ipc_folder(env)  # left when the server ends (no exit handler runs); the next start removes it
    os.execve(argv[0], argv, env)  # the server replaces this process: its PID is the server's


def _print_dry_run(line: str, argv: list[str], env: dict[str, str], pending: Optional[str]) -> None:
    """``--dry-run``: the server's description and command; ``pending``: the path of a successor prior
    the server would measure first (left out of the options checked, which read the file)."""
    import json
    import shlex

    from stand_runtime.vllm.proposer import OPTIONS_ENV

    if pending is not None:
        line = line.replace("successor prior off", f"successor prior measured first, into {pending}")
        env = {**env, OPTIONS_ENV: json.dumps({**json.loads(env[OPTIONS_ENV]), "prior": pending})}
    console.print(line, highlight=False, soft_wrap=True)
    prefix = f"{OPTIONS_ENV}={shlex.quote(env[OPTIONS_ENV])} " if OPTIONS_ENV in env else ""
    console.print(prefix + shlex.join(argv), highlight=False, soft_wrap=True)


def _check_arguments(ctx, model, method, k, prior, host, port, kv_cache_gib, max_model_len, dtype, dry_run):
    """This command's arguments, then vLLM (a dry run goes on without it), before a prior's minutes and
    vLLM's start; ``(chain, distribution)``: the parsed ``--k`` and ``--prior``. Raises StandError."""
    from stand_runtime import DEFAULT_MODEL
    from stand_runtime.vllm.engine import check_model_folder
    from stand_runtime.vllm.server import check_extra_args, check_listen, check_server_values

    _check_options(ctx, method)
    chain = _chain_length(k, method)
    distribution = None if prior is None else _prior_distribution(prior)
    check_server_values(port, kv_cache_gib, max_model_len, dtype)
    if model != DEFAULT_MODEL:
        check_model_folder(model)
    check_listen(host, 0 if dry_run else port)  # a dry run: the host only (port 0), its port may be the server's
    if _check_vllm(dry_run):
        check_extra_args(ctx.args)
    return chain, distribution


def _check_vllm(dry_run: bool) -> bool:
    """Whether vLLM is here, in a release the proposer supports (StandError if not); a dry run without vLLM
    goes on with one warning."""
    import importlib.util

    from stand_runtime.vllm import check_version

    if dry_run and importlib.util.find_spec("vllm") is None:
        from .app import print_warning

        print_warning("vLLM is not installed here: the command below is not checked against vLLM's version "
                      "or its server's options")
        return False
    check_version()
    return True


def _check_options(ctx, method: str) -> None:
    """Refuse (StandError) an unknown method, options that do not apply to it, and ``--no-prior`` (not an
    option of ours or of vLLM's: it would reach vLLM's command line)."""
    from stand_runtime import StandError
    from stand_runtime.vllm.engine import check_vllm_method

    check_vllm_method(method)  # before the option checks below, which name the method
    if method == "ar":
        refuse_options(ctx, ["k"], "--method ar (plain decoding drafts nothing)")
    if method != "stand":
        refuse_options(ctx, ["max_prompts"], f"--method {method} (STAND's prompt stores)")
        refuse_options(ctx, ["prior"], f"--method {method} (STAND's successor prior)")
    if "--no-prior" in ctx.args:
        raise StandError("treeopt serve has no --no-prior: it serves without the successor prior unless --prior T,TOP_P is given")


def _chain_length(k: Optional[str], method: str):
    """``--k``: None (the method's default), ``auto`` (stand only) or an integer (:func:`parse_chain`)."""
    from treeopt.evaluate.vllm_bench import parse_chain

    return k if k is None else parse_chain(k, auto=method == "stand")


def _prior_distribution(text: str):
    """``--prior T,TOP_P`` as :class:`stand_runtime.SamplingParams` (StandError: not two numbers, T not in
    [0, 100], TOP_P not in (0, 1])."""
    from stand_runtime import SamplingParams, StandError

    parts = text.split(",")
    try:
        temperature, top_p = (float(part) for part in parts)
    except ValueError:
        raise StandError(f"--prior must be T,TOP_P (e.g. 0.6,0.95), got {text!r}") from None
    if not 0 <= temperature <= 100 or not 0 < top_p <= 1:
        raise StandError(f"--prior {text}: the temperature must be in [0, 100] and top-p in (0, 1]")
    return SamplingParams(temperature, top_p, 0)


def _check_prior_folder() -> None:
    """Raises StandError when the cache's ``prior`` folder cannot be made or takes no new file
    (:func:`stand_runtime.files.check_writable`; vLLM's server reads the prior from a file there)."""
    from stand_runtime import StandError
    from stand_runtime.files import check_writable
    from stand_runtime.target.models import cache_root

    folder = cache_root() / "prior"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        check_writable(folder / "prior.npz")
    except (OSError, StandError):
        raise StandError(f"--prior: vLLM's server reads the successor prior from a file in {folder}, which is not a "
                         "writable folder: set STAND_CACHE_DIR to one") from None


def _prior_path(model: str, dtype: str, distribution, measure: bool = True) -> str:
    """The cached successor prior file of ``model`` / ``dtype`` for ``distribution``, measured first where
    none is cached (StandError where the cache takes no file); a dry run (``measure`` False) only names it."""
    from stand_runtime import StandError
    from stand_runtime.drafters.prior import prior_path
    from stand_runtime.files import write_cache_file
    from stand_runtime.target.model_facts import vocab_size

    from . import loading

    target, tokenizer = loading.load_model(model, dtype)
    if not measure:
        path = prior_path(target, tokenizer, distribution, vocab_size(target))
        if not path.is_file():
            console.print(f"note: the successor prior is not measured yet: the server measures it first "
                          f"(one one-token forward per vocabulary token) into {path}", highlight=False, soft_wrap=True)
        return str(path)
    found = loading.successor_prior(target, tokenizer, ["stand"], distribution, skip="without --prior the server drafts without it")
    path = prior_path(target, tokenizer, distribution, found.vocab)
    if not path.is_file():  # kept in this process's memory only (measured earlier in it, or the cache took no file)
        problem = write_cache_file(path, found.to_bytes())
        if problem is not None:
            raise StandError(f"--prior: vLLM's server reads the successor prior from a file, and the cache takes none "
                             f"({problem}): set STAND_CACHE_DIR to a writable folder")
    return str(path)
