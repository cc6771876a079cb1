"""A classifier MLP head on pooled features, deliberately with odd output widths kept odd in
CPU_TEST_SIZES: 2048 -> 1024 -> ReLU -> 1000 ImageNet classes at full size (N = 1000 is not a
multiple of 16), 64 -> 32 -> 10 on the CPU test. Input is [batch, channels, h, w] pooled by mean."""
import torch
import torch.nn as nn

BATCH = 4096
CHANNELS = 2048
SPATIAL = 7
HIDDEN = 1024
NUM_CLASSES = 1000

CPU_TEST_SIZES = {"BATCH": 8, "CHANNELS": 64, "SPATIAL": 3, "HIDDEN": 32, "NUM_CLASSES": 10}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, channels, hidden, num_classes):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
            nn.Flatten(1),
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(0.2),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, features):
        return self.fc(self.pool(features))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, CHANNELS, SPATIAL, SPATIAL, dtype=dtype, device=device)]


def get_init_inputs():
    return [CHANNELS, HIDDEN, NUM_CLASSES]
