#!/usr/bin/python3
"""Export a PyTorch nn.Module to a parbench net: DIR/net.json and DIR/params/<key>.npy.

Traces the module with torch.fx and writes its layers in the JSON workload format
(docs/usage.md), each layer with a parameter named by its module path ("name"), and
the module's current parameters as float32 .npy files named by their state_dict keys,
which `parbench replay --params DIR/params` reads:

    /usr/bin/python3 scripts/torch_export.py --module model.py:MyNet --input-shape 3,64,64 --out DIR
    build/parbench run --workload DIR/net.json ...
    build/parbench replay --workload DIR/net.json --params DIR/params --out OUT ...

The net is made of the layers parbench runs: Conv2d, ConvTranspose2d (bias on, no
groups, dilation or output padding), Linear, ReLU, Flatten, MaxPool2d(2) and nearest 2x
Upsample (as modules or their torch.nn.functional forms), joined by residual adds
(a + b, torch.add) and channel concatenations (torch.cat(..., dim=1)), which become
layers reading their "inputs". Anything else is refused with its name and module path,
and nothing is written. Exit status: 0 written, 1 refused, 2 bad arguments or a module
that cannot be loaded.
"""
import argparse
import importlib.util
import json
import operator
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

SUPPORTED = ("Conv2d, ConvTranspose2d, Linear, ReLU, Flatten, MaxPool2d(2), Upsample(scale_factor=2, "
             "mode='nearest') and their torch.nn.functional forms, tensor + tensor and torch.cat(dim=1)")


class Refused(Exception):
    """The module has something parbench cannot run; the message names it."""


def _pair(v):
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


def _json_pair(p):
    """An int where both sides agree, as the fixture nets write them; else [h, w]."""
    return p[0] if p[0] == p[1] else [p[0], p[1]]


def _where(node):
    """The module path (or the op) a message names."""
    return f"module '{node.target}'" if node.op == "call_module" else f"'{node.name}' ({_op_name(node)})"


def _op_name(node):
    if node.op == "call_module":
        return type(node.graph.owning_module.get_submodule(node.target)).__name__
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    return f".{node.target}()" if node.op == "call_method" else node.op


def _conv_fields(m, node, kind):
    for attr, want in (("groups", 1), ("dilation", (1, 1))):
        if _pair(getattr(m, attr)) != _pair(want):
            raise Refused(f"{_where(node)}: {kind} with {attr}={getattr(m, attr)} (parbench: {attr} {want})")
    if not isinstance(m.padding, (int, tuple, list)):
        raise Refused(f"{_where(node)}: {kind} with padding={m.padding!r} (parbench: explicit int or [h, w] padding)")
    if m.padding_mode != "zeros":
        raise Refused(f"{_where(node)}: {kind} with padding_mode={m.padding_mode!r} (parbench: zeros)")
    if m.bias is None:
        raise Refused(f"{_where(node)}: {kind} without bias (parbench's convolutions always have one)")
    return {"out_channels": m.out_channels, "kernel_size": _json_pair(_pair(m.kernel_size)),
            "stride": _json_pair(_pair(m.stride)), "padding": _json_pair(_pair(m.padding))}


def _module_layer(m, node):
    """The parbench layer of a call_module node."""
    if isinstance(m, nn.Conv2d):
        return {"type": "conv2d", **_conv_fields(m, node, "Conv2d")}
    if isinstance(m, nn.ConvTranspose2d):
        if _pair(m.output_padding) != (0, 0):
            raise Refused(f"{_where(node)}: ConvTranspose2d with output_padding={m.output_padding} (parbench: 0)")
        return {"type": "conv_transpose2d", **_conv_fields(m, node, "ConvTranspose2d")}
    if isinstance(m, nn.Linear):
        if m.bias is None:
            raise Refused(f"{_where(node)}: Linear without bias (parbench's linear layers always have one)")
        return {"type": "linear", "out_features": m.out_features}
    if isinstance(m, nn.ReLU):
        return {"type": "relu"}
    if isinstance(m, nn.Flatten):
        if m.start_dim != 1 or m.end_dim != -1:
            raise Refused(f"{_where(node)}: Flatten({m.start_dim}, {m.end_dim}) (parbench flattens all but the batch)")
        return {"type": "flatten"}
    if isinstance(m, nn.MaxPool2d):
        stride = m.stride if m.stride is not None else m.kernel_size
        if (_pair(m.kernel_size), _pair(stride), _pair(m.padding), _pair(m.dilation), m.ceil_mode) != \
                ((2, 2), (2, 2), (0, 0), (1, 1), False):
            raise Refused(f"{_where(node)}: {m} (parbench pools 2x2 windows of stride 2, no padding)")
        return {"type": "maxpool2d"}
    if isinstance(m, nn.Upsample):
        if m.mode != "nearest" or m.size is not None or _pair(m.scale_factor) != (2, 2):
            raise Refused(f"{_where(node)}: {m} (parbench upsamples by 2, nearest)")
        return {"type": "upsample"}
    if isinstance(m, nn.Identity):
        return None
    raise Refused(f"unsupported op {type(m).__name__} at {_where(node)} (parbench runs {SUPPORTED})")


def _arg(node, i, key, default):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(key, default)


def _function_layer(node):
    """The parbench layer of a call_function or call_method node."""
    t = node.target
    if t in (torch.relu, F.relu) or (node.op == "call_method" and t == "relu"):
        return {"type": "relu"}
    if t is torch.flatten or (node.op == "call_method" and t == "flatten"):
        if _arg(node, 1, "start_dim", 0) != 1 or _arg(node, 2, "end_dim", -1) != -1:
            raise Refused(f"{_where(node)}: flatten not from dim 1 to the end (parbench flattens all but the batch)")
        return {"type": "flatten"}
    if t is F.max_pool2d:
        k, s = _arg(node, 1, "kernel_size", None), _arg(node, 2, "stride", None)
        if _pair(k) != (2, 2) or (s is not None and _pair(s) != (2, 2)) or _arg(node, 3, "padding", 0) != 0 or \
                node.kwargs.get("ceil_mode", False):
            raise Refused(f"{_where(node)}: max_pool2d other than 2x2 of stride 2 (parbench's only pooling)")
        return {"type": "maxpool2d"}
    if t is F.interpolate:
        if _arg(node, 1, "size", None) is not None or _arg(node, 3, "mode", "nearest") != "nearest" or \
                _pair(_arg(node, 2, "scale_factor", 1)) != (2, 2):
            raise Refused(f"{_where(node)}: interpolate other than nearest 2x (parbench's only upsampling)")
        return {"type": "upsample"}
    if t in (operator.add, operator.iadd, torch.add) or (node.op == "call_method" and t in ("add", "add_")):
        tensors = [a for a in node.args[:2] if isinstance(a, torch.fx.Node)]
        if len(node.args) != 2 or len(tensors) != 2 or node.kwargs:
            raise Refused(f"{_where(node)}: an add other than tensor + tensor (parbench's add sums two outputs)")
        return {"type": "add"}
    if t is torch.cat:
        tensors = _arg(node, 0, "tensors", None)
        if _arg(node, 1, "dim", 0) != 1 or not isinstance(tensors, (list, tuple)) or \
                not all(isinstance(a, torch.fx.Node) for a in tensors):
            raise Refused(f"{_where(node)}: a cat other than of outputs along dim 1 (parbench joins channels)")
        return {"type": "concat"}
    raise Refused(f"unsupported op {_op_name(node)} at {_where(node)} (parbench runs {SUPPORTED})")


def export(module, input_shape):
    """(net description, {state_dict key: array}) for `module` on per-sample input_shape."""
    module = module.eval()
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as e:  # data-dependent control flow and the like
        raise Refused(f"torch.fx cannot trace the module: {e}") from e
    ShapeProp(gm).propagate(torch.zeros(1, *input_shape))
    layers, index, last = [], {}, None  # index: each node's layer (-1: the net's input)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if index:
                raise Refused(f"input '{node.name}': parbench nets take one input")
            index[node] = -1
            continue
        if node.op == "get_attr":
            raise Refused(f"'{node.name}' reads attribute '{node.target}' directly (parbench layers own their parameters)")
        if node.op == "output":
            last = node.args[0]
            break
        if node.op == "call_module":
            layer = _module_layer(gm.get_submodule(node.target), node)
        else:
            layer = _function_layer(node)
        reads = node.args[0] if layer and layer["type"] == "concat" else node.args[:2] if layer and layer["type"] == "add" \
            else node.all_input_nodes
        reads = [index[a] for a in reads]
        if layer is None:  # Identity: its input stands for it
            index[node] = reads[0]
            continue
        if len(reads) != (2 if layer["type"] == "add" else len(reads) if layer["type"] == "concat" else 1):
            raise Refused(f"{_where(node)} reads {len(reads)} tensors (parbench: one)")
        if node.op == "call_module" and layer["type"] in ("conv2d", "conv_transpose2d", "linear"):
            if node.target != str(len(layers)):  # an nn.Sequential's own index needs no name
                layer = {"name": node.target, **layer}
        if reads != [len(layers) - 1]:
            layer["inputs"] = ["input" if k == -1 else k for k in reads]
        index[node] = len(layers)
        layers.append(layer)
    if not layers:
        raise Refused("the module has no layers parbench runs")
    if not isinstance(last, torch.fx.Node) or index.get(last) != len(layers) - 1:
        raise Refused("the module returns something other than its last layer's output (one tensor)")
    read = {k for layer in layers for k in layer.get("inputs", [])} | \
        {k for k, layer in enumerate(layers[1:]) if "inputs" not in layer}
    for k, layer in enumerate(layers[:-1]):
        if k not in read:
            raise Refused(f"layer {k} ({layer['type']}) computes an output nothing reads (parbench: the last layer's "
                          "output is the net's)")
    out_shape = list(last.meta["tensor_meta"].shape[1:])
    net = {"name": re.sub(r"[^A-Za-z0-9_.+-]", "_", type(module).__name__.lower()) or "net",
           "input": list(input_shape), "layers": layers,
           "target": "input" if out_shape == list(input_shape) else "random"}
    params = {k: v.detach().cpu().float().numpy() for k, v in module.state_dict().items()}
    return net, params


def load_module(spec, args_json):
    path, _, cls = spec.rpartition(":")
    if not path or not cls:
        raise ValueError(f"--module {spec!r}: expected FILE.py:ClassName")
    if not os.path.isfile(path):
        raise ValueError(f"--module {spec!r}: no file {path}")
    loaded = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(mod)
    if not hasattr(mod, cls):
        raise ValueError(f"--module {spec!r}: {path} defines no {cls}")
    kwargs = json.loads(args_json) if args_json else {}
    return getattr(mod, cls)(**kwargs)


def write(net, params, out):
    """DIR/net.json and DIR/params/*.npy, written in a temporary folder and renamed into place."""
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(out) and (not os.path.isdir(out) or os.path.islink(out)):
        raise ValueError(f"--out {out}: exists and is not a folder")
    staging = tempfile.mkdtemp(prefix=".torch_export.", dir=parent)
    try:
        with open(os.path.join(staging, "net.json"), "w") as f:
            json.dump(net, f, indent=2)
            f.write("\n")
        os.makedirs(os.path.join(staging, "params"))
        for key, value in params.items():
            np.save(os.path.join(staging, "params", key + ".npy"), np.ascontiguousarray(value, dtype=np.float32))
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Writes DIR/net.json and DIR/params/; see docs/usage.md.")
    ap.add_argument("--module", required=True, metavar="FILE.py:ClassName", help="the nn.Module class to export")
    ap.add_argument("--input-shape", required=True, metavar="C,H,W", help="one sample's shape, e.g. 3,64,64 (or F)")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (replaced if it exists)")
    ap.add_argument("--args", default="", metavar="JSON", help="keyword arguments of the class, as a JSON object")
    ap.add_argument("--seed", type=int, default=0, metavar="S",
                    help="torch.manual_seed before the module is made, so that its initial parameters are the same "
                         "every export (default 0)")
    args = ap.parse_args()
    try:
        shape = [int(d) for d in args.input_shape.split(",")]
        if len(shape) not in (1, 3) or min(shape) <= 0:
            raise ValueError
    except ValueError:
        print(f"torch_export: --input-shape {args.input_shape!r}: expected C,H,W or F of positive integers",
              file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    try:
        module = load_module(args.module, args.args)
    except Exception as e:
        print(f"torch_export: {e}", file=sys.stderr)
        return 2
    try:
        net, params = export(module, shape)
    except Refused as e:
        print(f"torch_export: {args.module}: {e}; nothing written", file=sys.stderr)
        return 1
    try:
        write(net, params, args.out)
    except (OSError, ValueError) as e:
        print(f"torch_export: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/net.json ({len(net['layers'])} layers) and {args.out}/params/ ({len(params)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
