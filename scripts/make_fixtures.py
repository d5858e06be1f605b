#!/usr/bin/python3
"""Generate the golden PyTorch training trajectories under tests/fixtures/.

Each net gets tests/fixtures/<name>/ with net.json, params/<key>.npy (initial),
input.npy, target.npy (random targets only), expected.json (per-step Adam losses)
and final/<key>.npy (parameters after --steps steps). The engine's tests replay
them and compare. BF16_NETS get the same files under <out>/bf16/<name>/, trained
under torch.autocast("cpu", dtype=torch.bfloat16) with the loss in fp32 (the
engine's --precision bf16, docs/bf16.md). GRAPH_NETS, nets with skips, get theirs
under <out>/graph/<name>/ (their bf16 ones under <out>/bf16/<name>/ too).

    /usr/bin/python3 scripts/make_fixtures.py [--out DIR] [--steps K]
"""
import argparse
import math
import os
import shutil

import torch
from torch import nn

import torchnet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 0


def conv(out, k, s=1, p=0):
    return {"type": "conv2d", "out_channels": out, "kernel_size": k, "stride": s, "padding": p}


def conv_t(out, k, s=1, p=0):
    return {"type": "conv_transpose2d", "out_channels": out, "kernel_size": k, "stride": s, "padding": p}


RELU = {"type": "relu"}
FLATTEN = {"type": "flatten"}
POOL = {"type": "maxpool2d"}
UPSAMPLE = {"type": "upsample"}

# (net description, batch size)
NETS = [
    ({"name": "conv_stride2", "input": [3, 9, 9],
      "layers": [conv(4, 3, 2, 1), RELU, conv(2, [3, 2], [1, 2], [0, 1]), RELU, FLATTEN,
                 {"type": "linear", "out_features": 3}],
      "target": "random", "lr": 1e-3, "weight_decay": 0.0}, 3),
    ({"name": "conv_pad0", "input": [2, 8, 8],
      "layers": [conv(4, 3, 1, 0), RELU, conv(3, 3, 1, 0)],
      "target": "random", "lr": 1e-3}, 2),
    ({"name": "conv_pad2", "input": [2, 8, 8],
      "layers": [conv(4, 5, 1, 2), RELU, conv(2, 3, 1, 1)],
      "target": "input", "lr": 1e-3}, 2),
    ({"name": "conv_nonsquare", "input": [2, 7, 5],
      "layers": [conv(4, [3, 1], 1, [1, 0]), RELU, conv(4, [1, 3], 1, [0, 1]), RELU,
                 conv(3, [2, 3], [2, 1], [0, 1])],
      "target": "random", "lr": 1e-3}, 2),
    ({"name": "conv_odd", "input": [3, 11, 11],
      "layers": [conv(8, 3, 1, 1), RELU, conv(16, 3, 1, 1), RELU, conv(8, 3, 1, 1), RELU,
                 conv(3, 3, 1, 1), RELU],
      "target": "input", "lr": 1e-3}, 2),
    ({"name": "linear", "input": [5],
      "layers": [{"type": "linear", "out_features": 2}],
      "target": "random", "lr": 1e-3}, 30),
    # Odd sizes: pooling leaves the last row out; upsampling doubles what is left.
    ({"name": "conv_pool_upsample", "input": [2, 9, 7],
      "layers": [conv(4, 3, 1, 1), RELU, POOL, conv(6, 3, 1, 1), RELU, UPSAMPLE, conv(2, 3, 1, 1)],
      "target": "random", "lr": 1e-3}, 3),
    # nnU-Net's up-sampling (2x2, stride 2) after pooling, and an odd kernel, stride and padding.
    ({"name": "conv_transpose", "input": [2, 8, 6],
      "layers": [conv(4, 3, 1, 1), RELU, POOL, conv(6, 3, 1, 1), RELU, conv_t(3, 2, 2), RELU,
                 conv_t(2, [3, 2], [1, 2], [1, 0]), RELU, conv(2, [1, 3], 1, [0, 1])],
      "target": "random", "lr": 1e-3}, 3),
    ({"name": "conv_linear", "input": [1, 6, 6],
      "layers": [conv(3, 3, 1, 1), RELU, FLATTEN, {"type": "linear", "out_features": 4}],
      "target": "random", "lr": 1e-3, "weight_decay": 0.01}, 4),
]


def at(layer, *inputs, name=None):
    """A layer reading `inputs` (names, indices or "input"), optionally named."""
    out = dict(layer, inputs=list(inputs))
    if name:
        out["name"] = name
    return out


def named(layer, name):
    return dict(layer, name=name)


ADD = {"type": "add"}
CONCAT = {"type": "concat"}

# Nets with skips, written under graph/: residual adds (an identity and a strided projection
# shortcut, a ReLU output read twice) and U-Net concats (skips over one and two levels, one from
# the net's input).
GRAPH_NETS = [
    ({"name": "resnet_small", "input": [3, 8, 8],
      "layers": [conv(4, 3, 1, 1), named(RELU, "stem"), conv(4, 3, 1, 1), RELU, conv(4, 3, 1, 1),
                 at(ADD, "stem", 4), RELU,
                 conv(6, 3, 2, 1), RELU, conv(6, 3, 1, 1), at(conv(6, 1, 2, 0), 6), at(ADD, 9, 10), RELU,
                 FLATTEN, {"type": "linear", "out_features": 3}],
      "target": "random", "lr": 1e-3}, 3),
    ({"name": "unet_small", "input": [2, 8, 8],
      "layers": [conv(4, 3, 1, 1), named(RELU, "enc1"), POOL, conv(8, 3, 1, 1), named(RELU, "enc2"), POOL,
                 conv(8, 3, 1, 1), RELU, conv_t(8, 2, 2), at(CONCAT, 8, "enc2"), conv(8, 3, 1, 1), RELU,
                 conv_t(4, 2, 2), at(CONCAT, 12, "enc1", "input"), conv(4, 3, 1, 1), RELU, conv(2, 1)],
      "target": "input", "lr": 1e-3}, 3),
    # The same levels without the skip from the input, which autocast would keep in fp32: for bf16.
    ({"name": "unet_levels", "input": [2, 8, 8],
      "layers": [conv(4, 3, 1, 1), named(RELU, "enc1"), POOL, conv(8, 3, 1, 1), named(RELU, "enc2"), POOL,
                 conv(8, 3, 1, 1), RELU, conv_t(8, 2, 2), at(CONCAT, 8, "enc2"), conv(8, 3, 1, 1), RELU,
                 conv_t(4, 2, 2), at(CONCAT, 12, "enc1"), conv(4, 3, 1, 1), RELU, conv(2, 1)],
      "target": "input", "lr": 1e-3}, 3),
]


# Nets of NETS (same seed, so the same initial parameters and batch as their fp32 fixtures) that
# also get an autocast bf16 trajectory; the tests compare the engine's bf16 run with both.
BF16_NETS = ["conv_odd", "conv_linear", "conv_stride2", "conv_pool_upsample", "conv_transpose", "resnet_small",
             "unet_levels"]


def train_autocast(model, x, target, lr, weight_decay, steps):
    """train() under CPU autocast bf16: fp32 parameters and Adam, the loss in fp32."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                           weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        if out.dtype != torch.bfloat16:
            raise RuntimeError(f"autocast left the output in {out.dtype}")
        loss = nn.functional.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def make_fixture(net, batch, out_dir, steps, bf16=False):
    directory = os.path.join(out_dir, "bf16" if bf16 else "", net["name"])
    shutil.rmtree(directory, ignore_errors=True)
    model, x, target, random_target = torchnet.setup(net, batch, SEED)
    torchnet.write_inputs(directory, net, model, x, target, random_target)
    lr, wd = net["lr"], net.get("weight_decay", 0.0)
    losses = (train_autocast if bf16 else torchnet.train)(model, x, target, lr, wd, steps)
    torchnet.save_params(model, os.path.join(directory, "final"))
    expected = {"steps": steps, "lr": lr, "weight_decay": wd, "batch": batch, "seed": SEED,
                "losses": losses, "torch_version": torch.__version__}
    if bf16:
        expected["autocast"] = "cpu bfloat16"
    torchnet.write_json(os.path.join(directory, "expected.json"), expected)
    return losses


# The built-in workloads `resnet` and `unet` (workloads/workload.cpp) as PyTorch writes them:
# scripts/torch_export.py exports these to the nets `parbench net --workload resnet|unet` writes
# (tests/export/export_test.py).
def scaled(channels, width):
    """A channel count scaled by --width as parbench does: rounded half away from zero, at least 1."""
    return max(1, int(math.floor(channels * width + 0.5)))


class BasicBlock(nn.Module):
    """ResNet-18's basic block without normalization: two 3x3 convs, the block's input added
    (through a 1x1 projection where the shape changes, torchvision's downsample), ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.downsample = nn.Conv2d(cin, cout, 1, stride, 0) if stride != 1 or cin != cout else None

    def forward(self, x):
        out = self.conv2(torch.relu(self.conv1(x)))
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class ResNet(nn.Module):
    """`resnet`: a 7x7 stride-2 stem, ReLU, 2x2 max pooling, four stages of two basic blocks
    (channels 64-128-256-512 times `width`), flatten and a linear layer to 10 outputs."""

    def __init__(self, image, width):
        super().__init__()
        channels = scaled(64, width)
        self.conv1 = nn.Conv2d(3, channels, 7, 2, 3)
        self.pool = nn.MaxPool2d(2)
        for stage in range(4):
            out = scaled(64 << stage, width)
            blocks = [BasicBlock(channels if b == 0 else out, out, 2 if stage > 0 and b == 0 else 1) for b in range(2)]
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
            channels = out
        with torch.no_grad():
            features = self.features(torch.zeros(1, 3, image, image)).numel()
        self.fc = nn.Linear(features, 10)

    def features(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1), nn.ReLU())


class UNet(nn.Module):
    """`unet`: depth 4, two 3x3 conv + ReLU per level (channels 32-64-128-256 times `width`), 2x2
    max pooling down; up, a 2x2 stride-2 transposed conv, the level's encoder output concatenated
    after it, two 3x3 conv + ReLU; a 1x1 conv to 3 channels."""

    def __init__(self, width):
        super().__init__()
        self.down, self.up, self.dec = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        cin = 3
        for level in range(4):
            self.down.append(double_conv(cin, scaled(32 << level, width)))
            cin = scaled(32 << level, width)
        self.pool = nn.MaxPool2d(2)
        for level in (2, 1, 0):
            out = scaled(32 << level, width)
            self.up.append(nn.ConvTranspose2d(cin, out, 2, 2))
            self.dec.append(double_conv(2 * out, out))
            cin = out
        self.head = nn.Conv2d(cin, 3, 1)

    def forward(self, x):
        skips = []
        for level, block in enumerate(self.down):
            x = block(x if level == 0 else self.pool(x))
            skips.append(x)
        for k, (up, dec) in enumerate(zip(self.up, self.dec)):
            x = dec(torch.cat([up(x), skips[2 - k]], dim=1))
        return self.head(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"),
                    help="output directory (default: tests/fixtures in the repo)")
    ap.add_argument("--steps", type=int, default=5, help="Adam steps per net (default 5)")
    args = ap.parse_args()
    torchnet.configure()
    for net, batch in NETS:
        losses = make_fixture(net, batch, args.out, args.steps)
        print(f"{net['name']:16s} batch {batch:2d}  loss {losses[0]:.6g} -> {losses[-1]:.6g}")
        if net["name"] in BF16_NETS:
            losses = make_fixture(net, batch, args.out, args.steps, bf16=True)
            print(f"{net['name']:16s} batch {batch:2d}  loss {losses[0]:.6g} -> {losses[-1]:.6g}  (autocast bf16)")
    for net, batch in GRAPH_NETS:
        losses = make_fixture(net, batch, os.path.join(args.out, "graph"), args.steps)
        print(f"{net['name']:16s} batch {batch:2d}  loss {losses[0]:.6g} -> {losses[-1]:.6g}  (skips)")
        if net["name"] in BF16_NETS:
            losses = make_fixture(net, batch, args.out, args.steps, bf16=True)
            print(f"{net['name']:16s} batch {batch:2d}  loss {losses[0]:.6g} -> {losses[-1]:.6g}  (skips, autocast bf16)")


if __name__ == "__main__":
    main()
