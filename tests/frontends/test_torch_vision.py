"""CNNs and vision encoders through torch.export: exported as users do (before and after
`run_decompositions()`), lowered for CPU and HTP, validated, run with the QNN reference kernels and
compared with torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning")

import qlower  # noqa: E402
from qlower.frontends.torch_frontend import load_exported  # noqa: E402
from tests.frontends.torch_harness import lower_and_compare  # noqa: E402

nn = torch.nn


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["aten"])


def _randomize_bn(model: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model


class ConvStack(nn.Module):
    """Conv-BN-ReLU, max pool, depthwise conv with hard activations, padding, pools, conv1d, transposed conv."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.BatchNorm2d(8), nn.Hardswish())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 8, 1), nn.Hardsigmoid())
        self.up = nn.ConvTranspose2d(8, 4, 2, 2)
        self.c1 = nn.Conv1d(4, 4, 3, padding=2, dilation=2)

    def forward(self, x):
        y = self.pool(self.stem(x))
        y = self.dw(y)
        y = y * self.se(y)
        y = nn.functional.relu6(nn.functional.pad(y, (1, 0, 0, 1)))
        y = nn.functional.avg_pool2d(y, 2, ceil_mode=True)
        u = self.up(y)
        return self.c1(u.flatten(2)).type_as(x)


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_conv_bn_pool_stack(rules, backend: str, core: bool) -> None:
    torch.manual_seed(0)
    counts = lower_and_compare(_randomize_bn(ConvStack()), (torch.randn(1, 3, 20, 20),), rules, backend, core)
    assert counts["Conv2d"] == 3 and counts["DepthWiseConv2d"] == 1 and counts["TransposeConv2d"] == 1
    assert counts["PoolMax2d"] == 1 and counts["PoolAvg2d"] == 1 and counts["Batchnorm"] == 2


class PatchEmbed(nn.Module):
    """A ViT patch embedding: conv with stride = kernel, flattened to tokens, plus a class token."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 16, 4, 4)
        self.cls = nn.Parameter(torch.randn(1, 1, 16))

    def forward(self, x):
        t = self.proj(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_vit_patch_embed(rules, backend: str, core: bool) -> None:
    torch.manual_seed(0)
    counts = lower_and_compare(PatchEmbed(), (torch.randn(2, 3, 16, 16),), rules, backend, core)
    assert counts["Conv2d"] == 1


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_tiny_hf_resnet(rules, backend: str, core: bool) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                                    num_labels=5)
    model = _randomize_bn(transformers.ResNetForImageClassification(cfg))

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x).logits

    counts = lower_and_compare(Logits(), (torch.randn(1, 3, 32, 32),), rules, backend, core)
    assert counts["PoolMax2d"] == 1 and counts["Conv2d"] >= 5


class EmptyParts(nn.Module):
    """Phi-3's full-width rotary leaves an empty pass-through slice that is concatenated back;
    a sum over an empty dim is all zeros; unbind splits a tensor into its rows."""

    def forward(self, x):
        rot, keep = x[..., :16], x[..., 16:]
        y = torch.cat([rot * 2.0, keep], dim=-1)
        a, b = torch.unbind(y, dim=1)
        return a - b + x[:, :0, :].sum(1)


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
def test_empty_slice_and_reduction(rules, core: bool) -> None:
    x = torch.randn(2, 2, 16)
    ep = torch.export.export(EmptyParts(), (x,), strict=False)
    graph = load_exported(ep.run_decompositions() if core else ep)
    assert not any(0 in v.shape for v in graph.values if v.users or v.is_output)
    counts = lower_and_compare(EmptyParts(), (x,), rules, "cpu", core)
    assert "StridedSlice" in counts


def test_unsupported_convolution_has_a_reason(rules) -> None:
    class Dilated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(2, 2, 3, dilation=2)

        def forward(self, x):
            return self.up(x)

    x = torch.randn(1, 2, 5, 5)
    graph = load_exported(torch.export.export(Dilated(), (x,), strict=False))
    result = qlower.lower(graph, rules, backend="gpu")  # no TransposeConv3d there
    assert not result.ok
    assert any("only on CPU and HTP" in d.message for d in result.errors)
    torch.manual_seed(0)
    assert lower_and_compare(Dilated(), (x,), rules, "cpu", False).get("TransposeConv3d") == 1


class WindowSplit(nn.Module):
    """Attention within windows whose bounds are a constant tensor read with `.tolist()` (as Qwen2.5-VL's
    vision tower splits q/k/v): torch.export keeps the sizes as unbacked symbols the importer resolves."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self._bounds = [torch.tensor([0, 3, 8, 12], dtype=torch.int32)]  # a list: lifted as a constant

    def forward(self, x):
        cu = self._bounds[0]
        h = self.proj(x)
        parts = torch.split(h, (cu[1:] - cu[:-1]).tolist(), dim=0)
        return torch.cat([torch.softmax(p @ p.T, -1) @ p for p in parts]) * (cu[-1] - cu[0]).item()


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
def test_data_dependent_sizes_from_constants(rules, core: bool) -> None:
    torch.manual_seed(0)
    counts = lower_and_compare(WindowSplit(), (torch.randn(12, 8),), rules, "cpu", core)
    assert counts.get("Softmax") == 3  # one attention per window of sizes 3, 5, 4


class Up3d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose3d(4, 2, (2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), output_padding=(0, 1, 1))

    def forward(self, x):
        return self.up(x)


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_conv_transpose3d(rules, backend: str, core: bool) -> None:
    torch.manual_seed(0)
    counts = lower_and_compare(Up3d(), (torch.randn(1, 4, 2, 3, 3),), rules, backend, core)
    assert counts.get("TransposeConv3d") == 1


class CircularConv(nn.Module):
    """A conv with circular padding (padding_mode="circular"): core ATen writes the wrap-around with
    empty + copy + slice_scatter."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular")

    def forward(self, x):
        return self.conv(nn.functional.pad(x, (1, 2, 2, 1), mode="circular"))


@pytest.mark.parametrize("core", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_circular_padding(rules, backend: str, core: bool) -> None:
    torch.manual_seed(0)
    counts = lower_and_compare(CircularConv(), (torch.randn(1, 3, 6, 7),), rules, backend, core)
    assert counts["Conv2d"] == 1


def test_uninitialized_tensors_fold_to_the_same_constant_every_time(rules) -> None:
    """Core ATen writes circular padding into torch.empty: its (unspecified) contents become zeros, so two
    imports of one program give the same constants (and byte-identical artifacts)."""
    torch.manual_seed(0)
    ep = torch.export.export(CircularConv().eval(), (torch.randn(1, 3, 6, 7),), strict=False).run_decompositions()
    consts = []
    for _ in range(2):
        graph = load_exported(ep)
        consts.append({v.name: v.data.copy() for v in graph.values if v.data is not None})
    assert consts[0].keys() == consts[1].keys()
    empties = [n for n in consts[0] if "empty" in n]
    assert empties and all(not consts[0][n].any() for n in empties)
    assert all(np.array_equal(consts[0][n], consts[1][n]) for n in consts[0])
