"""muP-style multipliers around GEMMs: the input scaled before the first Linear, its output
scaled before the ReLU (`relu(fc(x * a) * m)`), and the readout divided by the width
multiplier after it."""
import torch
import torch.nn as nn

TOKENS = 8192
D_IN = 1024
WIDTH = 4096
D_OUT = 1024

CPU_TEST_SIZES = {"TOKENS": 32, "D_IN": 32, "WIDTH": 128, "D_OUT": 16}
DTYPES = ("float32", "bfloat16")
BASE_WIDTH = 256.0


class Model(nn.Module):
    def __init__(self, d_in, width, d_out):
        super().__init__()
        self.input_mult = 2.0
        self.hidden_mult = 0.75
        self.width_mult = width / BASE_WIDTH
        self.fc_in = nn.Linear(d_in, width)
        self.readout = nn.Linear(width, d_out, bias=False)

    def forward(self, x):
        h = torch.relu(self.fc_in(x * self.input_mult) * self.hidden_mult)
        return self.readout(h) / self.width_mult


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, D_IN, dtype=dtype, device=device)]


def get_init_inputs():
    return [D_IN, WIDTH, D_OUT]
