"""MobileNetV3's h_swish / h_sigmoid written with relu6 and constants: `x * F.relu6(x + 3.) / 6.`
after one Linear and `torch.clamp(x + 3, 0, 6) / 6` (add a constant, clamp, divide) after
another (the squeeze-excite-style gate), multiplied together."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
IN_FEATURES = 960
HIDDEN = 1280

CPU_TEST_SIZES = {"BATCH": 32, "IN_FEATURES": 48, "HIDDEN": 64}
DTYPES = ("float32", "bfloat16")


class h_swish(nn.Module):
    def forward(self, x):
        return x * F.relu6(x + 3.0) / 6.0


class h_sigmoid(nn.Module):
    def forward(self, x):
        return torch.clamp(x + 3, min=0.0, max=6.0) / 6


class Model(nn.Module):
    def __init__(self, in_features, hidden):
        super().__init__()
        self.fc = nn.Linear(in_features, hidden)
        self.act = h_swish()
        self.gate_fc = nn.Linear(in_features, hidden)
        self.gate = h_sigmoid()

    def forward(self, x):
        return self.act(self.fc(x)) * self.gate(self.gate_fc(x))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [3.0 * torch.randn(BATCH, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN]
