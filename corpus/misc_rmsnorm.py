"""Hand-written RMSNorm in front of a GEMM: Llama's (`x.float()`, `pow(2).mean(-1)`, `rsqrt`,
back to the input dtype, times weight) and T5's spelling (variance in float32, weight applied
after the cast), each followed by a bias-free Linear, the two summed."""
import torch
import torch.nn as nn

TOKENS = 8192
HIDDEN = 4096
OUT = 4096

CPU_TEST_SIZES = {"TOKENS": 32, "HIDDEN": 64, "OUT": 48}
DTYPES = ("float32", "bfloat16")


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class Model(nn.Module):
    def __init__(self, hidden, out):
        super().__init__()
        self.norm_a = LlamaRMSNorm(hidden)
        self.norm_b = T5LayerNorm(hidden)
        self.proj_a = nn.Linear(hidden, out, bias=False)
        self.proj_b = nn.Linear(hidden, out, bias=False)
        with torch.no_grad():
            self.norm_a.weight.uniform_(0.5, 1.5)
            self.norm_b.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.proj_a(self.norm_a(x)) + self.proj_b(self.norm_b(x))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, HIDDEN, dtype=dtype, device=device) * 4.0]


def get_init_inputs():
    return [HIDDEN, OUT]
