"""torch.addmm spelled two ways: the old F.linear body `addmm(bias, x, weight.t())` and
`addmm(input, x, w, beta=, alpha=)` with a weight stored (in, out) and non-unit beta/alpha."""
import torch
import torch.nn as nn

TOKENS = 8192
IN_FEATURES = 4096
HIDDEN = 4096
OUT_FEATURES = 2048

CPU_TEST_SIZES = {"TOKENS": 32, "IN_FEATURES": 64, "HIDDEN": 96, "OUT_FEATURES": 48}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        # (out, in) like nn.Linear
        self.weight1 = nn.Parameter(torch.randn(hidden, in_features) / in_features ** 0.5)
        self.bias1 = nn.Parameter(torch.zeros(hidden).uniform_(-0.1, 0.1))
        # (in, out), used without a transpose
        self.weight2 = nn.Parameter(torch.randn(hidden, out_features) / hidden ** 0.5)
        self.shift = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        h = torch.addmm(self.bias1, x, self.weight1.t())
        return torch.addmm(self.shift, h, self.weight2, beta=0.5, alpha=2.0)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES]
