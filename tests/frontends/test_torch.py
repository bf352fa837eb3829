"""The torch.export frontend and the aten dialect: importer, kernels, and a tiny Qwen2 lowered end to end."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning")  # torch's own pytree deprecation

import qlower  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.frontends.torch_frontend import load_exported  # noqa: E402
from qlower.reference.aten_kernels import AtenKernels, AtenOps  # noqa: E402
from qlower.reference.interpreter import run_dequantized  # noqa: E402
from qlower.reference.spec import KernelError, OutSpec  # noqa: E402


def _export(module: torch.nn.Module, *args, **kwargs):
    return torch.export.export(module.eval(), args, kwargs=kwargs or None, strict=False)


def _ops(graph) -> list[str]:
    return [op.type for op in graph.topo_order()]


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["aten"])


class _Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.arange(3, dtype=torch.float32))

    def forward(self, x):
        return self.fc(x) * 2.0 + self.shift


def test_parameters_and_buffers_become_constants() -> None:
    m = _Affine()
    g = load_exported(_export(m, torch.randn(2, 4)))
    assert [v.name for v in g.inputs] == ["x"] and g.inputs[0].shape == (2, 4)
    assert len(g.outputs) == 1 and g.outputs[0].shape == (2, 3)
    consts = {v.name: v.data for v in g.iter_consts()}
    np.testing.assert_array_equal(consts["p_fc_weight"], m.fc.weight.detach().numpy())
    np.testing.assert_array_equal(consts["b_shift"], np.arange(3, dtype=np.float32))
    assert _ops(g) == ["aten.linear", "aten.mul", "aten.add"]


def test_attributes_and_scalars_follow_the_schema() -> None:
    class M(torch.nn.Module):
        def forward(self, x):
            y = x.view(2, -1).transpose(0, 1)[1:3]
            return y.mean(-1, keepdim=True) * 3 - torch.pow(x.sum(), 2)

    g = load_exported(_export(M(), torch.randn(2, 3, 4)))
    attrs = {op.type: op.attrs for op in g.ops}
    assert attrs["aten.view"] == {"size": [2, -1]}
    assert attrs["aten.transpose"] == {"dim0": 0, "dim1": 1}
    assert attrs["aten.slice"] == {"dim": 0, "start": 1, "end": 3, "step": 1}
    assert attrs["aten.mean"] == {"dim": [-1], "keepdim": True, "dtype": None}
    mul = next(op for op in g.ops if op.type == "aten.mul")
    scalar = mul.operands[1]
    assert scalar.shape == (1,) and scalar.dtype == np.float32 and scalar.data.tolist() == [3.0]
    pow_ = next(op for op in g.ops if op.type == "aten.pow")
    assert pow_.operands[1].shape == () and pow_.operands[1].dtype == np.float32  # next to a 0-d sum


def test_int64_becomes_int32_and_masks_fold() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.register_buffer("offset", torch.tensor([1, 2, 3], dtype=torch.int64))

        def forward(self, ids, scores):
            pos = torch.arange(scores.shape[-1])
            causal = pos[None, :] <= pos[:, None]
            masked = scores.masked_fill(~causal, float("-inf"))
            return self.emb(ids + self.offset[0]), masked.softmax(-1)

    ids = torch.tensor([[1, 5, 2]])
    g = load_exported(_export(M(), ids, torch.randn(3, 3)))
    assert g.inputs[0].dtype == np.int32
    assert "aten.arange" not in _ops(g) and "aten.le" not in _ops(g)
    fill = next(op for op in g.ops if op.type == "aten.masked_fill")
    mask = fill.operands[1]
    assert mask.is_const and mask.dtype == np.bool_ and mask.data[0, 1] and not mask.data[1, 0]  # ~causal
    offset = next(op for op in g.ops if op.type == "aten.add").operands[1]
    assert offset.dtype == np.int32 and offset.is_const


def test_pt2_round_trip(tmp_path, rules) -> None:
    from qlower.cli.commands import load_model

    m = _Affine()
    x = torch.randn(2, 4)
    path = tmp_path / "affine.pt2"
    torch.export.save(_export(m, x), str(path))
    g = load_model(str(path))  # picked by suffix: the "torch" frontend
    assert g.name == "affine" and _ops(g) == _ops(load_exported(path))
    result = qlower.lower(g, rules, backend="cpu")
    result.raise_for_errors()
    got = run_dequantized(result.qnn, {"x": x.numpy()})[result.qnn.outputs[0]]
    assert _rel_err(got, m(x).detach().numpy()) < 1e-6


def test_errors_are_clear(tmp_path) -> None:
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return x + self.n

    with pytest.raises(QlowerError, match="ExportedProgram"):
        load_exported(42)
    with pytest.raises(QlowerError, match="no such file"):
        load_exported(tmp_path / "missing.pt2")
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    with pytest.raises(QlowerError, match="cannot load junk.pt2"):
        load_exported(tmp_path / "junk.pt2")
    counted = load_exported(_export(Counter(), torch.randn(2)))  # state: an input and an output, paired by name
    assert [v.name for v in counted.inputs] == ["x", "n"] and [v.name for v in counted.outputs][1] == "n__updated"
    batch = torch.export.Dim("batch", min=2, max=8)
    ep = torch.export.export(_Affine().eval(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: batch}}, strict=False)
    with pytest.raises(QlowerError) as info:
        load_exported(ep)
    assert info.value.diagnostics[0].code == "symbolic-shape"


def test_op_types_group_overloads() -> None:
    ops = AtenOps()
    assert ops.form_of_overload("mul", "Scalar")[0].type_name == "mul"
    assert ops.form_of_overload("where", "ScalarOther")[0].type_name == "where"
    assert ops.form_of_overload("squeeze", "dim")[0].type_name == "squeeze"
    assert ops.form_of_overload("squeeze", "dims")[0].type_name == "squeeze_dims"
    assert ops.form_of_overload("max", "dim")[0].type_name == "max_dim"
    assert ops.form("repeat_interleave_self_int").packet == "repeat_interleave"
    assert ops.form("no_such_op") is None


def test_kernels_call_aten() -> None:
    k = AtenKernels()
    f32 = lambda *shape: OutSpec(shape, np.float32)  # noqa: E731
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    one = np.array([2.0], np.float32)
    np.testing.assert_array_equal(k["add"]([x, one], {"alpha": 3}, [f32(2, 3)])[0], x + 6)
    np.testing.assert_allclose(k["mean"]([x], {"dim": [-1], "keepdim": True}, [f32(2, 1)])[0], [[1.0], [4.0]])
    assert k["mean"]([x], {}, [f32()])[0] == 2.5
    mask = np.array([[True, False, True], [False, False, True]])
    filled = k["masked_fill"]([x, mask, np.array([-1.0], np.float32)], {}, [f32(2, 3)])[0]
    np.testing.assert_array_equal(filled, np.where(mask, -1.0, x))
    idx = np.array([2, 0], np.int32)
    picked = k["index"]([x, idx], {"indices_pos": [1]}, [f32(2, 2)])[0]
    np.testing.assert_array_equal(picked, x[:, [2, 0]])
    ids = k["arange"]([], {"end": 4}, [OutSpec(None, np.float32)])[0]
    assert ids.dtype == np.int32 and ids.tolist() == [0, 1, 2, 3]  # int64 narrowed
    with pytest.raises(KernelError, match="random"):
        k["rand"]([], {"size": [2]}, [f32(2)])
    with pytest.raises(KernelError, match="no overload"):
        k["view"]([x], {"shape": [6]}, [f32(6)])


def test_decomposed_layer_norm(rules) -> None:
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU())
    x = torch.randn(3, 8)
    g = load_exported(_export(m, x), decompose=True)
    assert "aten.native_layer_norm" in _ops(g) and "aten.addmm" in _ops(g)
    result = qlower.lower(g, rules, backend="cpu")
    result.raise_for_errors()
    assert result.coverage["aten.native_layer_norm"].rules == {"aten.native_layer_norm": 1}
    assert {"FullyConnected": 1, "Gelu": 1, "LayerNorm": 1}.items() <= result.qnn_op_counts().items()
    got = run_dequantized(result.qnn, {"input": x.numpy()})[result.qnn.outputs[0]]  # Sequential's argument
    assert _rel_err(got, m(x).detach().numpy()) < 1e-5


# ---------------------------------------------------------------- acceptance: a tiny Qwen2

@pytest.fixture(scope="module", params=[False, True], ids=["no-mask", "left-padding"])
def qwen2(request):
    """A one-layer Qwen2ForCausalLM with random weights, exported at sequence length 8; with
    `left-padding` it also takes an attention mask that hides the first two tokens."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=1, vocab_size=100,
                                      max_position_embeddings=64)
    model = transformers.Qwen2ForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    kwargs = {"use_cache": False}
    feeds = {"input_ids": ids.numpy().astype(np.int32)}
    if request.param:
        kwargs["attention_mask"] = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
        feeds["attention_mask"] = kwargs["attention_mask"].numpy().astype(np.int32)
    with torch.no_grad():
        logits = model(ids, **kwargs).logits.numpy()
    ep = torch.export.export(model, (ids,), kwargs=kwargs, strict=False)
    return ep, feeds, logits


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "core-aten"])
@pytest.mark.parametrize("backend, tol", [("cpu", 1e-4), ("htp", 1e-2)])
def test_qwen2_lowers_and_matches_torch(qwen2, rules, backend: str, tol: float, decompose: bool) -> None:
    ep, feeds, logits = qwen2
    graph = load_exported(ep, decompose=decompose)
    result = qlower.lower(graph, rules, backend=backend)
    result.raise_for_errors()
    counts = result.qnn_op_counts()
    assert counts["RmsNorm"] == 3 and counts["FullyConnected"] == 8 and counts["Softmax"] == 1
    with np.errstate(invalid="ignore"):  # softmax rows that the padding masks entirely
        got = run_dequantized(result.qnn, feeds)[result.qnn.outputs[0]]
    assert got.shape == logits.shape
    assert _rel_err(got, logits) < tol
