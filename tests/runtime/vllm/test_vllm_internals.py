"""The vLLM versions the STAND proposer supports, as data: every internal it reads
(stand_runtime/vllm/runner_access.py ``INTERNALS``), checked against vLLM's sources at load.

``tests/runtime/vllm/vllm_internals_0.33.0.json`` records them as read from the vllm==0.33.0 (GPU) wheel's sources,
which CI has not installed; regenerate it with::

    pip download --no-deps vllm==0.33.0 -d /tmp/w && unzip -q /tmp/w/vllm-0.33.0-*.whl 'vllm/*' -d /tmp/w
    PYTHONPATH=. python tests/runtime/vllm/test_vllm_internals.py /tmp/w/vllm 0.33.0
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from stand_runtime.vllm.runner_access import (ANY_VERSION_ENV, INTERNALS, VLLMInternalsChanged, check_version,
                                              read_internals)

RECORDED = Path(__file__).with_name("vllm_internals_0.33.0.json")
_SAMPLER = "v1/sample/rejection_sampler.py:"


def patch_internals() -> dict:
    """What the CPU patch set (stand_runtime/vllm/cpu032) replaces or calls, as it expects it."""
    from stand_runtime.vllm import cpu032

    return {_SAMPLER + "sample_recovered_tokens": list(cpu032._RECOVERED_PARAMETERS),
            _SAMPLER + "RejectionSampler.forward": list(cpu032._FORWARD_PARAMETERS),
            "v1/sample/ops/topk_topp_sampler.py:apply_top_k_top_p_pytorch": list(cpu032._TOP_K_TOP_P_PARAMETERS),
            _SAMPLER + "expand_batch_to_tokens": ["x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"],
            _SAMPLER + "generate_uniform_probs": ["num_tokens", "num_draft_tokens", "generators", "device"]}


def test_vllm_033_loads_and_a_renamed_internal_fails_naming_it():
    recorded = json.loads(RECORDED.read_text())
    assert recorded["version"] == "0.33.0" and set(recorded["proposer"]) == set(INTERNALS)
    assert check_version("0.33.0", recorded["proposer"]) == "0.33.0"
    renamed = {**recorded["proposer"], "v1/worker/gpu_model_runner.py:GPUModelRunner._sample": None}
    with pytest.raises(VLLMInternalsChanged, match=r"^vLLM 0\.33\.0's internals moved: v1/worker/gpu_model_runner\.py:"
                                                   r"GPUModelRunner\._sample is None, expected \['self', 'logits', "
                                                   r"'spec_decode_metadata'\]; the STAND proposer cannot run on it"):
        check_version("0.33.0", renamed)
    call = "v1/worker/gpu_model_runner.py:GPUModelRunner.propose_draft_token_ids>propose"
    moved = {**recorded["proposer"], call: ["sampled_token_ids", "self.input_batch.token_ids_cpu"]}
    with pytest.raises(VLLMInternalsChanged, match="propose_draft_token_ids>propose is"):
        check_version("0.33.0", moved)


def test_an_unsupported_release_needs_the_override_and_still_its_internals(monkeypatch):
    recorded = json.loads(RECORDED.read_text())["proposer"]
    with pytest.raises(VLLMInternalsChanged, match="supports vLLM 0.32.x, 0.33.x, not 0.40.1: install one of them, "
                                                   f"or set {ANY_VERSION_ENV}=1"):
        check_version("0.40.1", recorded)
    monkeypatch.setenv(ANY_VERSION_ENV, "1")
    assert check_version("0.40.1", recorded) == "0.40.1"
    with pytest.raises(VLLMInternalsChanged, match="InputBatch.req_ids is None"):
        check_version("0.40.1", {**recorded, "v1/worker/gpu_input_batch.py:InputBatch.req_ids": None})


def test_the_cpu_patch_set_finds_in_033_what_it_was_written_against():
    """vLLM 0.33 keeps every function the CPU patch set replaces with the signature it checks."""
    assert json.loads(RECORDED.read_text())["cpu032"] == patch_internals()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed")
def test_the_installed_vllm_is_read_from_its_sources_and_a_renamed_function_is_caught(tmp_path):
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    assert read_internals() == INTERNALS and read_internals(table=patch_internals()) == patch_internals()
    check_version()
    for file in {key.split(":")[0] for key in INTERNALS}:
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / file, tmp_path / file)
    runner = tmp_path / "v1/worker/gpu_model_runner.py"
    runner.write_text(runner.read_text().replace("def _sample(", "def _sample_tokens("))
    found = read_internals(tmp_path)
    assert [key for key in INTERNALS if found[key] != INTERNALS[key]] == [
        "v1/worker/gpu_model_runner.py:GPUModelRunner._sample"]
    with pytest.raises(VLLMInternalsChanged, match="GPUModelRunner._sample is None"):
        check_version("0.32.0", found)


if __name__ == "__main__":  # regenerate the recorded sources of a release: ROOT VERSION
    source, version = sys.argv[1], sys.argv[2]
    record = {"version": version, "proposer": read_internals(source),
              "cpu032": read_internals(source, patch_internals())}
    Path(__file__).with_name(f"vllm_internals_{version}.json").write_text(json.dumps(record, indent=1) + "\n")
