"""Cores for vLLM's CPU worker: on a small machine none is kept back for vLLM's scheduler process.

On CPU, vLLM 0.32 runs the model in a worker process beside its engine core (scheduler) process and
keeps cores out of the worker's OpenMP threads for the engine core (``VLLM_CPU_NUM_OF_RESERVED_CPU``,
by default one per local worker on x86: ``vllm/utils/ompmultiprocessing.py``). On a 2-core
machine that halves the forward's compute: the worker runs on one thread. The engine core's
work between steps is small (scheduling, and a busy-wait on the worker's reply that yields the core
whenever a worker thread wants it), so on a machine of at most :data:`SMALL_MACHINE_CORES` usable
cores :func:`cpu_environment` keeps none back, unless the caller set the variable; the engine core's
busy-wait is kept, since waking a sleeping vCPU costs more than the spin (docs/decisions.md).
"""

from __future__ import annotations

import os
from typing import MutableMapping

TARGET_ENV = "VLLM_TARGET_DEVICE"
"""vLLM's variable: the platform it runs on (``cpu``, ``cuda``, ...); vLLM does not second-guess it."""

RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
"""vLLM's variable: cores kept out of its CPU worker's OpenMP threads."""

SMALL_MACHINE_CORES = 4
"""Usable cores up to which :func:`cpu_environment` reserves none (a whole core is a quarter or more
of the machine's compute there)."""


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; the CPU count where that is not known)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def cpu_environment(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Set vLLM's CPU settings in ``env`` (in place; returned), each only where ``env`` does not set it
    already: ``VLLM_TARGET_DEVICE=cpu`` only on a machine without a CUDA device
    (``torch.cuda.is_available()`` false; vLLM takes the variable as final, so on any other machine
    it is left to the user and to vLLM's own detection) and, for the CPU target on a machine of at most
    :data:`SMALL_MACHINE_CORES` usable cores, ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``."""
    if TARGET_ENV not in env:
        import torch

        if not torch.cuda.is_available():
            env[TARGET_ENV] = "cpu"
    if env.get(TARGET_ENV) == "cpu" and RESERVED_ENV not in env and usable_cores() <= SMALL_MACHINE_CORES:
        env[RESERVED_ENV] = "0"
    return env


def worker_threads(env: MutableMapping[str, str] | None = None) -> int:
    """OpenMP threads of vLLM's CPU worker under ``env`` (default: this process's) once
    :func:`cpu_environment` applied: the usable cores less the reserved ones."""
    value = cpu_environment(dict(os.environ if env is None else env)).get(RESERVED_ENV, "").strip()
    reserved = int(value) if value.isdigit() else 1  # vLLM's own default: one core per local worker
    return max(1, usable_cores() - reserved)
