"""nn.Sequential(Linear, ReLU, Linear, ReLU, Linear): the plainest MLP (KernelBench level 3 "MLP"
shape), three GEMMs of which two carry a ReLU. A known crash repro: consecutive matches share
their boundary tensors."""
import torch
import torch.nn as nn

BATCH_SIZE = 8192
INPUT_SIZE = 4096
LAYER_1 = 4096
LAYER_2 = 2048
OUTPUT_SIZE = 1024

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "INPUT_SIZE": 64, "LAYER_1": 128, "LAYER_2": 64, "OUTPUT_SIZE": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers = []
        current_input_size = input_size
        for layer_size in layer_sizes:
            layers.append(nn.Linear(current_input_size, layer_size))
            layers.append(nn.ReLU())
            current_input_size = layer_size
        layers.append(nn.Linear(current_input_size, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH_SIZE, INPUT_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return [INPUT_SIZE, [LAYER_1, LAYER_2], OUTPUT_SIZE]
