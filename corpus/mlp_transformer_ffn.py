"""The timm / ViT `Mlp`: fc1 -> nn.GELU -> Dropout -> fc2 -> Dropout, with the block's pre-norm
and residual around it (`x + mlp(norm(x))`), ViT-Large width."""
import torch
import torch.nn as nn

BATCH = 32
TOKENS = 256
EMBED_DIM = 1024
MLP_RATIO = 4

CPU_TEST_SIZES = {"BATCH": 2, "TOKENS": 16, "EMBED_DIM": 64, "MLP_RATIO": 4}
DTYPES = ("float32", "bfloat16")


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class Model(nn.Module):
    def __init__(self, embed_dim, mlp_ratio):
        super().__init__()
        self.norm2 = nn.LayerNorm(embed_dim, eps=1e-6)
        self.mlp = Mlp(embed_dim, hidden_features=int(embed_dim * mlp_ratio), drop=0.1)

    def forward(self, x):
        return x + self.mlp(self.norm2(x))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, TOKENS, EMBED_DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [EMBED_DIM, MLP_RATIO]
