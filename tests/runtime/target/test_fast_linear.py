"""Linear kernels per row count (stand_runtime.target.fast_linear): the stock kernel for
forwards of at most S tokens, the packed one beyond, S measured on whole forwards and cached."""

import copy
import json

import pytest
import torch

from conftest import tiny_model
from stand_runtime.target import fast_linear
from stand_runtime.target.fast_linear import PackedLinear, dispatch_signature, prepack_linears, use_stock_up_to
from stand_runtime.target.forward import tree_forward, with_cache
from stand_runtime.target.kv_cache import new_cache
from stand_runtime.trees.tree import DraftTree


def packed_tiny():
    model = tiny_model("llama", vocab=64, seed=1)
    stock = copy.deepcopy(model)
    assert prepack_linears(model) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the output layer
    return model, stock


def chain_logits(model, prefix, tokens):
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.tensor([prefix]), **with_cache(model, cache), use_cache=True)
    chain = DraftTree.chain(len(tokens) - 1)
    return tree_forward(model, cache, tokens, chain.depths, chain.ancestor_mask, len(prefix))


@pytest.mark.parametrize("stock_rows", [0, 3, 8])
def test_either_kernel_gives_the_stock_model_logits(stock_rows):
    """Whatever S, forwards of 1-6 tokens (below, at and above S) equal the stock model's logits up to
    float32 rounding, with the same argmax."""
    model, stock = packed_tiny()
    use_stock_up_to(model, stock_rows)
    prefix = [3, 1, 4, 1, 5, 9, 2, 6]
    for n in range(1, 7):
        tokens = list(range(10, 10 + n))
        fast, reference = chain_logits(model, prefix, tokens), chain_logits(stock, prefix, tokens)
        assert (fast - reference).abs().max().item() <= 1e-5 * reference.abs().max().item()
        assert torch.equal(fast.argmax(-1), reference.argmax(-1))
    layer = next(m for m in model.modules() if isinstance(m, PackedLinear))
    assert layer.stock_up_to == stock_rows


def test_the_choice_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    """choose_kernels measures S on whole forwards (a prefix of the measured sizes where the stock
    kernel was faster; the model's dispatch left as it was), writes it atomically, reads it back on
    the next load, measures again when the file is corrupt or holds no valid S, survives an unwritable
    folder, and releases the stock weights when S is 0."""
    model, _ = packed_tiny()
    use_stock_up_to(model, 2)
    rows, timings = fast_linear.measure_stock_rows(model, rounds=1)
    assert all(m.stock_up_to == 2 for m in model.modules() if isinstance(m, PackedLinear))
    assert rows == 0 or rows in fast_linear.SIZES
    faster = [s < p for s, p in zip(timings["stock_s"], timings["packed_s"])]
    taken = fast_linear.SIZES.index(rows) + 1 if rows else 0
    assert all(faster[:taken]) and (taken == len(faster) or not faster[taken])
    with pytest.raises(ValueError, match="rounds"):
        fast_linear.measure_stock_rows(model, rounds=0)

    calls = []

    def measured(model, sizes=fast_linear.SIZES, rounds=fast_linear.ROUNDS, seed=0):
        calls.append(1)
        return 2, {"sizes": list(sizes), "stock_s": [], "packed_s": []}

    monkeypatch.setattr(fast_linear, "measure_stock_rows", measured)
    monkeypatch.setattr(fast_linear, "timing_disturbed", lambda: None)  # cached even under `pytest --cov`
    assert fast_linear.choose_kernels(model, tmp_path) == 2 and len(calls) == 1
    [path] = tmp_path.glob("linears-*.json")
    assert json.loads(path.read_text())["stock_rows"] == 2
    fresh, _ = packed_tiny()
    assert fast_linear.choose_kernels(fresh, tmp_path) == 2 and len(calls) == 1  # read, not measured
    assert dispatch_signature(fresh) == "packed=True|stock_up_to=2"
    for bad in ("{not json", "[]", '{"stock_rows": Infinity}', '{"stock_rows": 1e9}', '{"stock_rows": -1}',
                '{"stock_rows": 7}', '{"stock_rows": true}', '{"stock_rows": 3.0}'):
        path.write_text(bad)
        assert fast_linear.choose_kernels(fresh, tmp_path) == 2, bad  # measured again
    assert len(calls) == 9
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert fast_linear.choose_kernels(fresh, blocked / "latency") == 2  # no folder can be made there: uncached

    path.write_text(json.dumps({"stock_rows": 0}))
    fast_linear.choose_kernels(fresh, tmp_path)
    layer = next(m for m in fresh.modules() if isinstance(m, PackedLinear))
    assert layer.stock_up_to == 0 and layer.stock_weight is None
    assert dispatch_signature(fresh) == "packed=True"
    with pytest.raises(ValueError, match="released"):
        use_stock_up_to(fresh, 1)
    assert layer.stock_up_to == 0  # unchanged, and a forward still runs
    chain_logits(fresh, [1, 2, 3], [4, 5])
    assert fast_linear.choose_kernels(tiny_model("llama", vocab=64), tmp_path) == 0  # nothing packed: left alone
    assert dispatch_signature(tiny_model("llama", vocab=64)) == "packed=False"


def test_a_choice_timed_under_a_profiler_is_not_cached(tmp_path, monkeypatch):
    """Timings taken while a Python profiler runs are not the machine's: the choice serves this load
    and is measured again next time."""
    model, _ = packed_tiny()
    calls = []
    monkeypatch.setattr(fast_linear, "measure_stock_rows",
                        lambda model: (calls.append(1), (2, {"stock_s": [], "packed_s": []}))[1])
    monkeypatch.setattr(fast_linear, "timing_disturbed", lambda: "a Python profiler is active")
    assert fast_linear.choose_kernels(model, tmp_path) == 2 and not list(tmp_path.glob("linears-*.json"))
    monkeypatch.setattr(fast_linear, "timing_disturbed", lambda: None)
    fresh, _ = packed_tiny()
    assert fast_linear.choose_kernels(fresh, tmp_path) == 2 and len(calls) == 2
    assert len(list(tmp_path.glob("linears-*.json"))) == 1


def test_the_choice_is_keyed_by_the_architecture_not_the_folder(monkeypatch):
    """A model loaded from another folder (a moved or copied cache) keeps its kernel choice; other
    shapes do not."""
    model, _ = packed_tiny()
    key = fast_linear.machine_key(model)
    monkeypatch.setattr(model.config, "_name_or_path", "/somewhere/else", raising=False)
    assert fast_linear.machine_key(model) == key
    other = tiny_model("llama", vocab=80, seed=1)
    prepack_linears(other)
    assert fast_linear.machine_key(other) != key


def test_bfloat16_linears_are_packed_only_where_the_cpu_computes_bfloat16(monkeypatch):
    """A bfloat16 model's linears are packed where the CPU has native bfloat16 (the packed layers then
    give the stock bfloat16 model's very logits at every row count, and the kernel choice is keyed
    apart from float32's); without it they stay stock."""

    model = tiny_model("llama", vocab=64, seed=1).to(torch.bfloat16)
    monkeypatch.setattr(fast_linear, "native_bf16", lambda: False)
    assert fast_linear.packable_dtypes() == (torch.float32,)
    assert prepack_linears(copy.deepcopy(model)) == 0
    monkeypatch.undo()
    if not fast_linear.native_bf16():
        pytest.skip("this CPU has no native bfloat16")
    stock = copy.deepcopy(model)
    assert prepack_linears(model) == 2 * 7 + 1
    layer = next(m for m in model.modules() if isinstance(m, PackedLinear))
    assert layer.weight.dtype == torch.bfloat16
    prefix = [3, 1, 4, 1, 5, 9, 2, 6]
    for n in (1, 3, 8):
        tokens = list(range(10, 10 + n))
        fast, reference = chain_logits(model, prefix, tokens), chain_logits(stock, prefix, tokens)
        assert (fast.float() - reference.float()).abs().max().item() <= 1e-2 * reference.float().abs().max().item()
        assert torch.equal(fast.argmax(-1), reference.argmax(-1))
    fp32, _ = packed_tiny()
    assert fast_linear.machine_key(model) != fast_linear.machine_key(fp32)

