"""PyTorch reference for parbench nets, shared by make_fixtures.py and torch_check.py.

Builds the nn.Sequential equivalent of a parbench net description (JSON), makes
the input batch and target, trains with Adam on that fixed batch, and writes the
fixture layout:

    net.json  input.npy  [target.npy]  params/<key>.npy  final/<key>.npy  expected.json

Not run directly; use /usr/bin/python3 (Debian's python3-torch).
"""
import json
import math
import os

import numpy as np
import torch
from torch import nn


GREAT_NET_CHANNELS = [3, 16, 32, 64, 128, 256, 512, 1024, 512, 256, 128, 64, 32, 16, 3]


def great_net_channels(width):
    """Channels of workloads/workload.cpp great_net(): hidden ones scaled, the 3s at both ends kept."""
    chans = [GREAT_NET_CHANNELS[0]]
    for i in range(1, len(GREAT_NET_CHANNELS)):
        last = i == len(GREAT_NET_CHANNELS) - 1
        # C++ std::llround rounds halves away from zero; channels * width is positive.
        chans.append(3 if last else max(1, int(GREAT_NET_CHANNELS[i] * width + 0.5)))
    return chans


def great_net(width):
    """nn.Sequential twin of great_net(): conv3x3 pad 1 + ReLU per layer. Returns (model, channels)."""
    chans = great_net_channels(width)
    layers = []
    for c_in, c_out in zip(chans, chans[1:]):
        layers += [nn.Conv2d(c_in, c_out, kernel_size=3, stride=1, padding=1), nn.ReLU()]
    return nn.Sequential(*layers), chans


def configure():
    """Single-threaded, deterministic float32 computation."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)


def load_net(path):
    with open(path) as f:
        return json.load(f)


def _pair(v):
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


def _check_in(layer, key, actual, i):
    if key in layer and layer[key] != actual:
        raise ValueError(f"layer {i}: {key}={layer[key]} but the incoming size is {actual}")


def _layer(layer, shape, i):
    """(module or None for add/concat, output shape) of one layer on its first input's shape."""
    kind = layer["type"]
    if kind in ("conv2d", "conv_transpose2d"):
        if len(shape) != 3:
            raise ValueError(f"layer {i}: {kind} needs a [C, H, W] input, got {shape}")
        c, h, w = shape
        _check_in(layer, "in_channels", c, i)
        k = _pair(layer["kernel_size"])
        s = _pair(layer.get("stride", 1))
        p = _pair(layer.get("padding", 0))
        out = int(layer["out_channels"])
        if kind == "conv2d":
            module = nn.Conv2d(c, out, k, stride=s, padding=p, bias=True)
            h, w = ((n + 2 * pad - ks) // st + 1 for n, pad, ks, st in zip((h, w), p, k, s))
        else:
            module = nn.ConvTranspose2d(c, out, k, stride=s, padding=p, bias=True)
            h, w = ((n - 1) * st - 2 * pad + ks for n, pad, ks, st in zip((h, w), p, k, s))
        if h < 1 or w < 1:
            raise ValueError(f"layer {i}: {kind} output is empty ({h}x{w})")
        return module, [out, h, w]
    if kind == "relu":
        return nn.ReLU(), shape
    if kind == "flatten":
        return nn.Flatten(), [math.prod(shape)]
    if kind == "maxpool2d":
        if len(shape) != 3 or shape[1] < 2 or shape[2] < 2:
            raise ValueError(f"layer {i}: maxpool2d needs a [C, H, W] input of at least 2x2, got {shape}")
        return nn.MaxPool2d(2), [shape[0], shape[1] // 2, shape[2] // 2]
    if kind == "upsample":
        if len(shape) != 3:
            raise ValueError(f"layer {i}: upsample needs a [C, H, W] input, got {shape}")
        return nn.Upsample(scale_factor=2, mode="nearest"), [shape[0], 2 * shape[1], 2 * shape[2]]
    if kind == "linear":
        if len(shape) != 1:
            raise ValueError(f"layer {i}: linear needs a flat input, got {shape} (add a flatten)")
        _check_in(layer, "in_features", shape[0], i)
        out = int(layer["out_features"])
        return nn.Linear(shape[0], out), [out]
    if kind in ("add", "concat"):
        return None, shape
    raise ValueError(f"layer {i}: unknown layer type {kind!r}")


def _inputs(net, i):
    """Layer i's inputs as layer indices (-1: the net's input), as parbench reads "inputs"."""
    layers = net["layers"]
    if "inputs" not in layers[i]:
        return [i - 1]
    named = {l["name"]: k for k, l in enumerate(layers[:i]) if "name" in l}
    return [-1 if v == "input" else named[v] if isinstance(v, str) else int(v) for v in layers[i]["inputs"]]


class GraphNet(nn.Module):
    """A net with skips: each layer reads the outputs its "inputs" name. Modules are registered
    under the layer's "name" (a dotted module path) or index, in layer order."""

    def __init__(self, net, modules):
        super().__init__()
        self.reads = [_inputs(net, i) for i in range(len(net["layers"]))]
        self.kinds = [l["type"] for l in net["layers"]]
        self.paths = []
        for i, (layer, module) in enumerate(zip(net["layers"], modules)):
            path = layer.get("name", str(i))
            self.paths.append(path)
            if module is None:
                continue
            parent = self
            *outer, leaf = path.split(".")
            for part in outer:
                if not hasattr(parent, part):
                    parent.add_module(part, nn.Module())
                parent = getattr(parent, part)
            parent.add_module(leaf, module)

    def forward(self, x):
        outs = []
        for i, kind in enumerate(self.kinds):
            ins = [x if k == -1 else outs[k] for k in self.reads[i]]
            if kind == "add":
                outs.append(ins[0] + ins[1])
            elif kind == "concat":
                outs.append(torch.cat(ins, dim=1))
            else:
                outs.append(self.get_submodule(self.paths[i])(ins[0]))
        return outs[-1]


def build_model(net):
    """Return (module, per-sample output shape) for a net description: an nn.Sequential for a
    chain of unnamed layers, a GraphNet otherwise."""
    shapes = []
    modules = []
    for i, layer in enumerate(net["layers"]):
        reads = _inputs(net, i)
        ins = [list(net["input"]) if k == -1 else shapes[k] for k in reads]
        module, shape = _layer(layer, [int(d) for d in ins[0]], i)
        if layer["type"] == "add" and ins[0] != ins[1]:
            raise ValueError(f"layer {i}: add of {ins[0]} and {ins[1]}")
        if layer["type"] == "concat":
            shape = [sum(s[0] for s in ins)] + list(ins[0][1:])
        modules.append(module)
        shapes.append(shape)
    chain = all("inputs" not in l and "name" not in l and l["type"] not in ("add", "concat") for l in net["layers"])
    return (nn.Sequential(*modules) if chain else GraphNet(net, modules)), shapes[-1]


def setup(net, batch, seed):
    """Seed, then build the model (default init), the input batch and the target.

    Returns (model, x, target, random_target); target is x when net["target"] is "input".
    """
    torch.manual_seed(seed)
    model, out_shape = build_model(net)
    x = torch.randn(batch, *net["input"])
    kind = net.get("target", "input")
    if kind == "input":
        if list(out_shape) != list(net["input"]):
            raise ValueError(f"target 'input' needs output shape {net['input']}, got {out_shape}")
        return model, x, x, False
    if kind == "random":
        return model, x, torch.randn(batch, *out_shape), True
    raise ValueError(f"unknown target {kind!r} (expected 'input' or 'random')")


def train(model, x, target, lr, weight_decay, steps):
    """Adam on the fixed batch; returns the per-step MSE losses (before each update)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                           weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def save_npy(path, tensor):
    np.save(path, np.ascontiguousarray(tensor.detach().numpy().astype(np.float32)))


def save_params(model, directory):
    os.makedirs(directory, exist_ok=True)
    for key, value in model.state_dict().items():
        save_npy(os.path.join(directory, f"{key}.npy"), value)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def write_net(path, net):
    """Write a net description as JSON, one layer per line."""
    fields = []
    for key, value in net.items():
        if key == "layers":
            body = ",\n".join("    " + json.dumps(layer) for layer in value)
            fields.append(f'  "layers": [\n{body}\n  ]')
        else:
            fields.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(fields) + "\n}\n")


def write_inputs(directory, net, model, x, target, random_target):
    """net.json, params/ (initial), input.npy and, for a random target, target.npy."""
    os.makedirs(directory, exist_ok=True)
    write_net(os.path.join(directory, "net.json"), net)
    save_params(model, os.path.join(directory, "params"))
    save_npy(os.path.join(directory, "input.npy"), x)
    if random_target:
        save_npy(os.path.join(directory, "target.npy"), target)
