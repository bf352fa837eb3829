"""The ATen ops the model zoo's Swin, SegFormer, RoBERTa and Wav2Vec2 brought (roll, index_select,
gather, group_norm, bilinear upsampling), through torch.export as users get it and after
`run_decompositions()`: lowered for CPU and HTP, validated, run with the QNN reference kernels and
compared with torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning")

import qlower  # noqa: E402
from tests.frontends.torch_harness import lower_and_compare  # noqa: E402

nn = torch.nn


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["aten"])


class ShiftedWindows(nn.Module):
    """Swin's cyclic shift, window partition (a rank-6 view and transpose, past HTP's rank 5), a
    per-window op, the reverse partition and the reverse shift (roll over two dims, both signs)."""

    def forward(self, x):  # [1, 8, 8, c], windows of 4x4
        c = x.shape[-1]
        s = torch.roll(x, shifts=(-2, -2), dims=(1, 2))
        w = s.view(1, 2, 4, 2, 4, c).transpose(2, 3).contiguous().view(-1, 4, 4, c)
        w = w * torch.arange(4 * 4 * 4, dtype=w.dtype).view(4, 4, 4, 1)
        s = w.view(1, 2, 2, 4, 4, c).permute(0, 1, 3, 2, 4, 5).contiguous().view(1, 8, 8, c)
        return torch.roll(s, shifts=(2, 2), dims=(1, 2))


class SignalNorm(nn.Module):
    """Wav2Vec2's first feature-extractor layer: conv1d, GroupNorm with one group per channel, GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 10, 5, bias=False)
        self.norm = nn.GroupNorm(8, 8, affine=True)
        self.norm2 = nn.GroupNorm(2, 8)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):  # [b, t]
        h = nn.functional.gelu(self.norm(self.conv(x[:, None])))
        return self.norm2(h)


class DecodeHead(nn.Module):
    """SegFormer's all-MLP head: features of two scales brought to one size by bilinear upsampling."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 3, 2, 1)

    def forward(self, x):
        fa, fb = self.a(x), self.b(x)
        up = nn.functional.interpolate(fb, size=fa.shape[2:], mode="bilinear", align_corners=False)
        up2 = nn.functional.interpolate(fb, scale_factor=2.0, mode="bilinear", align_corners=True)
        return fa + up + up2


class Gathers(nn.Module):
    """torch.gather along a middle dim and index_select of whole rows."""

    def forward(self, x, idx):
        sel = torch.index_select(x, 1, torch.tensor([3, 0, 0, 2]))
        return torch.gather(sel, 2, idx) * 2.0


CASES = {
    "shifted-windows": (ShiftedWindows, lambda g: (torch.randn(1, 8, 8, 4, generator=g),),
                        {"Gather", "Transpose"}),
    "signal-norm": (SignalNorm, lambda g: (torch.randn(1, 120, generator=g),), {"GroupNorm"}),
    "decode-head": (DecodeHead, lambda g: (torch.randn(1, 3, 8, 8, generator=g),), {"Resize"}),
    "gathers": (Gathers, lambda g: (torch.randn(2, 5, 3, generator=g),
                                    torch.randint(0, 3, (2, 4, 2), generator=g)), {"GatherElements", "Gather"}),
}


@pytest.mark.parametrize("core", [False, True], ids=["export", "core"])
@pytest.mark.parametrize("backend", ["cpu", "htp"])
@pytest.mark.parametrize("case", list(CASES))
def test_zoo_op_lowers_and_matches_torch(case, backend, core, rules):
    cls, make_args, expected = CASES[case]
    torch.manual_seed(0)
    counts = lower_and_compare(cls(), make_args(torch.Generator().manual_seed(0)), rules, backend, core)
    assert expected <= {k.removeprefix("qnn.") for k in counts}, counts
