"""Modules a user might hand scripts/torch_export.py (tests/export/export_test.py)."""
import torch
from torch import nn
from torch.nn import functional as F


class EncoderDecoder(nn.Module):
    """A chain in named parts: pooling down, a transposed convolution up, functional ReLUs."""

    def __init__(self, width=4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.middle = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.decoder = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.head = nn.Conv2d(width, 3, 1)

    def forward(self, x):
        x = self.encoder(x)
        x = F.relu(self.middle(x))
        x = torch.relu(self.decoder(x))
        return self.head(x)


class Classifier(nn.Module):
    """Convolutions, flatten and linear layers, with an identity in the way."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1), nn.ReLU(), nn.Identity(),
                                      nn.Upsample(scale_factor=2))
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


class SkipNet(nn.Module):
    """A residual block and a U-Net level: an add and a concatenation, one reading the input."""

    def __init__(self, width=4):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True),
                                  nn.Conv2d(width, width, 3, padding=1))
        self.down = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.head = nn.Conv2d(2 * width + 3, 3, 1)

    def forward(self, x):
        s = F.relu(self.stem(x))
        s = F.relu(s + self.body(s))
        d = F.relu(self.down(F.max_pool2d(s, 2)))
        return self.head(torch.cat([self.up(d), s, x], dim=1))


class AddsAScalar(nn.Module):
    """An add of a number: refused (parbench's add sums two outputs)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return self.conv(x) + 1.0


class WithBatchNorm(nn.Module):
    """Batch normalization: refused by name."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))
