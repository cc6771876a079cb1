"""An MLP whose layers live in an nn.ModuleDict and are looked up by name in forward
(`self.layers["fc_in"]`), with the activation chosen by a config string (SiLU here) and a
dropout between, depth 3."""
import torch
import torch.nn as nn

BATCH = 16
SEQ_LEN = 512
D_MODEL = 2048
D_HIDDEN = 5632

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "D_MODEL": 64, "D_HIDDEN": 160}
DTYPES = ("float32", "bfloat16")

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class Model(nn.Module):
    def __init__(self, d_model, d_hidden, activation="silu"):
        super().__init__()
        self.layers = nn.ModuleDict({
            "fc_in": nn.Linear(d_model, d_hidden),
            "act_in": ACTIVATIONS[activation](),
            "fc_mid": nn.Linear(d_hidden, d_hidden),
            "act_mid": ACTIVATIONS[activation](),
            "drop": nn.Dropout(0.1),
            "fc_out": nn.Linear(d_hidden, d_model),
        })

    def forward(self, x):
        h = self.layers["act_in"](self.layers["fc_in"](x))
        h = self.layers["drop"](self.layers["act_mid"](self.layers["fc_mid"](h)))
        return self.layers["fc_out"](h)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, D_MODEL, dtype=dtype, device=device)]


def get_init_inputs():
    return [D_MODEL, D_HIDDEN, "silu"]
