"""torch.export programs that update state in place (a KV cache written with index_copy_ or an indexed
assignment, an input changed by an in-place activation), whose pointwise ops mix dtypes, or that cast
float to int: imported as ExecuTorch exports them, lowered for CPU and HTP, run with the QNN reference
kernels for two calls in a row (the runtime carrying the state) and compared with torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning")

import qlower  # noqa: E402
from qlower.frontends.torch_frontend import STATE_SUFFIX, load_exported  # noqa: E402
from qlower.reference.interpreter import run_dequantized  # noqa: E402

TOL = {"cpu": 1e-4, "htp": 2e-2}


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["aten"])


class KVCopy(torch.nn.Module):
    """The static KV cache of ExecuTorch's llama export: index_copy_ at the input positions."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 2, 8, 4))

    def forward(self, k, pos):
        self.k_cache.index_copy_(2, pos, k)
        return self.k_cache.sum(-1) * 2.0


class KVAssign(torch.nn.Module):
    """The same update written as an indexed assignment (aten.index_put), two caches."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 2, 8, 4))
        self.register_buffer("v_cache", torch.zeros(1, 2, 8, 4))

    def forward(self, k, v, pos):
        self.k_cache[:, :, pos] = k
        self.v_cache[:, :, pos] = v
        return self.k_cache + self.v_cache


class InPlaceInput(torch.nn.Module):
    def forward(self, x):
        torch.nn.functional.leaky_relu_(x, 0.1)
        return x * 3.0


def _run(graph, result, feeds):
    got = run_dequantized(result.qnn, feeds)
    return {name: got[name] for name in result.qnn.outputs}


@pytest.mark.parametrize("backend", ["cpu", "htp"])
@pytest.mark.parametrize("core", [False, True], ids=["exported", "core-aten"])
def test_kv_cache_is_paired_state(rules, backend: str, core: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    m = KVCopy().eval()
    steps = [(torch.randn(1, 2, 2, 4, generator=gen), torch.tensor([1, 2])),
             (torch.randn(1, 2, 2, 4, generator=gen), torch.tensor([5, 6]))]
    ep = torch.export.export(KVCopy(), steps[0], strict=False)
    if core:
        ep = ep.run_decompositions()
    graph = load_exported(ep)
    assert [v.name for v in graph.inputs] == ["k", "pos", "k_cache"]
    assert [v.name for v in graph.outputs][-1] == "k_cache" + STATE_SUFFIX
    result = qlower.lower(graph, rules, backend=backend)
    result.raise_for_errors()
    state = np.zeros((1, 2, 8, 4), np.float32)  # the buffer's value at export: the runtime's first input
    for k, pos in steps:
        want = m(k, pos).numpy()
        got = _run(graph, result, {"k": k.numpy(), "pos": pos.numpy().astype(np.int32), "k_cache": state})
        out = got[result.qnn.outputs[0]]
        assert np.max(np.abs(out - want)) <= TOL[backend] * np.max(np.abs(want))
        state = got["k_cache" + STATE_SUFFIX]  # carried to the next call
        np.testing.assert_allclose(state, m.k_cache.numpy(), atol=TOL[backend] * 4)


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_indexed_assignment_of_two_caches(rules, backend: str) -> None:
    gen = torch.Generator().manual_seed(1)
    args = (torch.randn(1, 2, 3, 4, generator=gen), torch.randn(1, 2, 3, 4, generator=gen), torch.tensor([0, 4, 7]))
    graph = load_exported(torch.export.export(KVAssign(), args, strict=False))
    names = [v.name for v in graph.outputs]
    assert names[1:] == ["k_cache" + STATE_SUFFIX, "v_cache" + STATE_SUFFIX]
    result = qlower.lower(graph, rules, backend=backend)
    result.raise_for_errors()
    zeros = np.zeros((1, 2, 8, 4), np.float32)
    got = _run(graph, result, {"k": args[0].numpy(), "v": args[1].numpy(), "pos": args[2].numpy().astype(np.int32),
                               "k_cache": zeros, "v_cache": zeros})
    m = KVAssign()
    want = m(*args).numpy()
    assert np.max(np.abs(got[result.qnn.outputs[0]] - want)) <= TOL[backend] * np.max(np.abs(want))
    np.testing.assert_allclose(got["v_cache" + STATE_SUFFIX], m.v_cache.numpy(), atol=TOL[backend] * 4)


def test_mutated_input_gets_an_updated_output(rules) -> None:
    x = torch.randn(2, 5, generator=torch.Generator().manual_seed(2))
    graph = load_exported(torch.export.export(InPlaceInput(), (x.clone(),), strict=False))
    assert [v.name for v in graph.outputs] == ["mul", "x" + STATE_SUFFIX]
    result = qlower.lower(graph, rules, backend="cpu")
    result.raise_for_errors()
    got = _run(graph, result, {"x": x.numpy()})
    y = x.clone()
    want = InPlaceInput()(y)
    np.testing.assert_allclose(got["mul"], want.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["x" + STATE_SUFFIX], y.numpy(), rtol=1e-6)  # the input as torch left it


class Mixed(torch.nn.Module):
    def forward(self, i, f, b):
        return (i + f) * (b != i).to(torch.float32)


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_mixed_dtypes_are_promoted(rules, backend: str) -> None:
    args = (torch.arange(6, dtype=torch.int32).view(2, 3), torch.randn(2, 3), torch.tensor([[True, False, True]]))
    graph = load_exported(torch.export.export(Mixed(), args, strict=False))
    for op in graph.ops:
        if op.type in ("aten.add", "aten.ne"):
            assert len({v.dtype for v in op.operands}) == 1, op  # one dtype per elementwise op, as ATen computes
    result = qlower.lower(graph, rules, backend=backend)
    result.raise_for_errors()
    got = _run(graph, result, {"i": args[0].numpy(), "f": args[1].numpy(), "b": args[2].numpy()})
    want = Mixed()(*args).numpy()
    assert np.max(np.abs(got[result.qnn.outputs[0]] - want)) <= TOL[backend] * np.max(np.abs(want))


class ToInt(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.int32)


def test_cast_to_int_on_htp_truncates_the_float32_input(rules) -> None:
    x = torch.tensor([8.998, -3.7, 2.5, 1000.9, 0.999])
    graph = load_exported(torch.export.export(ToInt(), (x,), strict=False))
    result = qlower.lower(graph, rules, backend="htp")
    result.raise_for_errors()
    got = _run(graph, result, {"x": x.numpy()})[result.qnn.outputs[0]]
    np.testing.assert_array_equal(got, ToInt()(x).numpy())  # 8.998 → 8, not float16's 9


class OutVariant(torch.nn.Module):
    """`out=` keeps `aten.atan2.out` in the exported program (before `run_decompositions()`)."""

    def forward(self, a, b):
        c = torch.empty_like(a)
        torch.atan2(a, b, out=c)
        return c * 2.0


class OutReadAgain(torch.nn.Module):
    def forward(self, a, b):
        c = torch.zeros_like(a)
        d = c + 1.0
        torch.atan2(a, b, out=c)
        return c + d


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_out_variant_is_imported_as_its_functional_overload(rules, backend: str) -> None:
    args = (torch.randn(2, 5), torch.randn(2, 5))
    ep = torch.export.export(OutVariant(), args, strict=False)
    assert any(str(n.target) == "aten.atan2.out" for n in ep.graph.nodes)  # what export keeps
    graph = load_exported(ep)
    assert "aten.atan2" in {op.type for op in graph.ops}
    result = qlower.lower(graph, rules, backend=backend)
    result.raise_for_errors()
    got = _run(graph, result, {"a": args[0].numpy(), "b": args[1].numpy()})[result.qnn.outputs[0]]
    want = OutVariant()(*args).numpy()
    assert np.max(np.abs(got - want)) <= TOL[backend] * np.max(np.abs(want))


def test_out_variant_reading_its_buffer_before_the_write_matches_torch(rules) -> None:
    args = (torch.randn(2, 5), torch.randn(2, 5))
    ep = torch.export.export(OutReadAgain(), args, strict=False)
    assert any(str(n.target) == "aten.atan2.out" for n in ep.graph.nodes)
    graph = load_exported(ep)
    result = qlower.lower(graph, rules, backend="cpu")
    result.raise_for_errors()
    got = _run(graph, result, {"a": args[0].numpy(), "b": args[1].numpy()})[result.qnn.outputs[0]]
    np.testing.assert_allclose(got, OutReadAgain()(*args).numpy(), rtol=1e-4, atol=1e-5)


def test_a_read_of_the_written_buffer_after_the_write_sees_the_write(rules) -> None:
    """A program edited to read the buffer itself after the out= write: functionalizing it at
    import (run_decompositions) makes that read see the written value, as eager execution does."""
    args = (torch.randn(2, 5), torch.randn(2, 5))
    ep = torch.export.export(OutReadAgain(), args, strict=False)
    out = next(n for n in ep.graph.nodes if str(n.target) == "aten.atan2.out")
    last = next(n for n in ep.graph.nodes if n.name == "add_1")
    last.replace_input_with(out, out.kwargs["out"])
    ep.graph_module.recompile()
    want = ep.module()(*args).numpy()
    graph = load_exported(ep)
    result = qlower.lower(graph, rules, backend="cpu")
    result.raise_for_errors()
    got = _run(graph, result, {"a": args[0].numpy(), "b": args[1].numpy()})[result.qnn.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
