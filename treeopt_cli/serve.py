"""``treeopt serve``: an OpenAI-compatible server, vLLM with STAND's proposer."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from .app import app, console, one_line_errors
from .options import refuse_options


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
    dtype: str = typer.Option("float32", help="float32 or bfloat16."),
    max_prompts: int = typer.Option(64, help="stand: prompt stores kept (least recently used dropped)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the vLLM command and its STAND settings, do not start it."),
) -> None:
    """Serve an OpenAI-compatible API with vLLM and STAND (arguments after the options go to vLLM as they are)."""
    import shlex

    from stand_runtime import DEFAULT_MODEL
    from stand_runtime.vllm import check_version, default_model_folder
    from stand_runtime.vllm.server import ServerSettings, describe, server_command

    from stand_runtime.vllm.engine import check_vllm_method

    check_vllm_method(method)  # before the option checks below, which name the method
    if method == "ar":
        refuse_options(ctx, ["k"], "--method ar (plain decoding drafts nothing)")
    if method != "stand":
        refuse_options(ctx, ["max_prompts"], f"--method {method} (STAND's prompt stores)")
    check_version()
    chain = _chain_length(k, method)
    folder = str(default_model_folder() if model == DEFAULT_MODEL else model)
    options = {"max_prompts": max_prompts} if method == "stand" else {}
    if chain == "auto":
        from stand_runtime.vllm.sizing import latency_option, read_vllm_latency

        options["latency"] = latency_option(read_vllm_latency(folder, dtype))
    settings = ServerSettings(folder, method, chain, host, port, kv_cache_gib, max_model_len, dtype,
                              name=model if model == DEFAULT_MODEL else None, stand_options=options,
                              extra=tuple(ctx.args))
    argv, env = server_command(settings)
    console.print(describe(settings), highlight=False, soft_wrap=True)
    if dry_run:
        from stand_runtime.vllm.proposer import OPTIONS_ENV

        prefix = f"{OPTIONS_ENV}={shlex.quote(env[OPTIONS_ENV])} " if OPTIONS_ENV in env else ""
        console.print(prefix + shlex.join(argv), highlight=False, soft_wrap=True)
        return
    sys.stdout.flush()
    os.execve(argv[0], argv, env)  # the server replaces this process: its PID is the server's


def _chain_length(k: Optional[str], method: str):
    """``--k``: None (the method's default), ``auto`` (stand only) or an integer >= 1.

    Raises:
        StandError: anything else.
    """
    from stand_runtime import StandError
    from stand_runtime.checks import parse_count

    if k is None or (k == "auto" and method == "stand"):
        return k
    try:
        return parse_count("--k", k, 1, 128)
    except StandError:
        allowed = "auto or an integer in [1, 128]" if method == "stand" else "an integer in [1, 128]"
        raise StandError(f"--k must be {allowed}, got {k!r}") from None
