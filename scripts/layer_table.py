#!/usr/bin/env python3
"""great_net per layer and pass: the engine (`parbench profile`'s profile.json) beside PyTorch
(scripts/torch_layer_profile.py --json), with each pass's roofline. Python's standard library only.

Rows: per layer, forward, backward-data and backward-weights (a convolution's; a ReLU's forward
and backward-data), and a convolution's bias add and bias gradient, which PyTorch times apart and
the engine does not (its bias add is inside its forward, its bias gradient inside
backward-weights). Columns: the roofline time, the engine and PyTorch each in NCHW and NHWC
(`parbench profile --layout nhwc`; PyTorch's channels_last), each in ms with its achieved
fraction of the roofline, and the faster engine layout over the faster PyTorch one.

Roofline time = max(FLOPs / peak, bytes / bandwidth), at the GPU's datasheet dense peak in the
precision (tf32 or bf16 tensor cores; fp32: the vector rate) and its memory bandwidth; achieved
fraction = roofline time / measured time. FLOPs: a convolution pass 2 Cin Cout 9 H W N, an
element-wise pass one per element; bytes: each tensor the pass must read or write once, at 4
bytes an element (fp32, tf32) or 2 (bf16), the least any implementation moves.
Datasheet figures (NVIDIA's H100 and H200 datasheets; the same table as bench/roofline.cpp):
H100 SXM fp32 67, tf32 494, bf16 989 TFLOP/s dense, 3.35 TB/s HBM3; H100 PCIe 51 / 378 / 756,
2.0 TB/s; H100 NVL 60 / 417.5 / 835.5, 3.9 TB/s; H200 SXM 67 / 494 / 989, 4.8 TB/s HBM3e;
H200 NVL 60 / 417.5 / 835.5, 4.8 TB/s. Another GPU: the roofline columns read n/a.

    layer_table.py --engine tf32=p-tf32.json --engine tf32/nhwc=p-tf32-nhwc.json \
        --engine bf16=p-bf16.json --torch t.json --gpu "NVIDIA H200" --json layers.json >layers.md
"""
import argparse
import json
import re
import sys

# (words every one of which is a word of the GPU's name, model, {precision: FLOP/s}, bytes/s);
# most specific first: an H200 NVL is also an "H200".
DATASHEETS = [
    (("H200", "NVL"), "NVIDIA H200 NVL", {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12}, 4.8e12),
    (("H200",), "NVIDIA H200 SXM", {"fp32": 67e12, "tf32": 494e12, "bf16": 989e12}, 4.8e12),
    (("H100", "NVL"), "NVIDIA H100 NVL", {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12}, 3.9e12),
    (("H100", "PCIE"), "NVIDIA H100 PCIe", {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12}, 2.0e12),
    (("H100",), "NVIDIA H100 SXM", {"fp32": 67e12, "tf32": 494e12, "bf16": 989e12}, 3.35e12),
]
NOT_APART = "n/a (engine does not time it apart)"
# The engine's --layout values; PyTorch's runs name theirs nchw and channels_last.
LAYOUTS = ("nchw", "nhwc")
# (key in the JSON files, label); the bias rows exist for convolutions only.
PASSES = [("forward_s", "forward"), ("backward_data_s", "backward-data"), ("backward_weights_s", "backward-weights"),
          ("bias_add_s", "bias add"), ("bias_grad_s", "bias gradient")]


class InputError(Exception):
    pass


def datasheet(gpu):
    words = set(re.findall(r"[A-Z0-9]+", (gpu or "").upper()))
    for need, model, peaks, bw in DATASHEETS:
        if all(w in words for w in need):
            return model, peaks, bw
    return None


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{what} {path}: cannot be read as JSON ({e})")


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def work(layer, key, batch, elt):
    """(FLOPs, bytes) of one pass of one layer at this batch and element size."""
    x, y = numel(layer["in"]) * batch, numel(layer["out"]) * batch
    if layer["type"] == "conv2d":
        c_in, c_out = layer["in"][0], layer["out"][0]
        w = c_out * c_in * 9
        flops = 2.0 * c_in * c_out * 9 * numel(layer["out"][1:]) * batch
        return {"forward_s": (flops, (x + w + y + c_out) * elt),
                "backward_data_s": (flops, (y + w + x) * elt),
                "backward_weights_s": (flops, (y + x + w + c_out) * elt),
                "bias_add_s": (float(y), (2 * y + c_out) * elt),
                "bias_grad_s": (float(y), (y + c_out) * elt)}[key]
    if layer["type"] == "relu":
        return {"forward_s": (float(y), 2 * y * elt), "backward_data_s": (float(y), 3 * y * elt)}[key]
    raise InputError(f"layer {layer.get('index')}: type {layer['type']} is not a great_net layer")


def engine_layers(doc, path):
    """The engine profile's layers at its batch (the first of `batches`), with times in seconds;
    the batch, the context's precision and its conv_layout ("n/a" on a CPU) beside them."""
    try:
        batch = doc["batches"][0]
        out = []
        for l in doc["layers"]:
            e = {"index": l["index"], "type": l["type"], "in": l["in"], "out": l["out"]}
            for key in ("forward_s", "backward_data_s", "backward_weights_s"):
                e[key] = l[key][0]
            # Per pass, where the profile has them: algorithm, first call, workspace.
            passes = l.get("passes", {})
            e["algorithms"] = {k: p["algorithm"][0] for k, p in passes.items() if p.get("algorithm", [""])[0]}
            e["first_call_s"] = {k: p["first_call_s"][0] for k, p in passes.items() if "first_call_s" in p}
            e["workspace_bytes"] = {k: p["workspace_bytes"][0] for k, p in passes.items() if "workspace_bytes" in p}
            out.append(e)
        ctx = doc.get("context", {})
        return batch, ctx.get("precision"), ctx.get("conv_layout"), out
    except (KeyError, IndexError, TypeError) as e:
        raise InputError(f"engine profile {path}: no field {e} where profile.json has one (docs/reports.md)")


def fmt_ms(s, roof):
    if s is None:
        return "n/a"
    if s <= 0:
        return "0 (none timed)"
    return f"{s * 1e3:.3f}" + (f" ({roof / s:.0%})" if roof else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--engine", action="append", default=[], metavar="PRECISION[/LAYOUT]=FILE",
                    help="an engine profile.json, its precision and its --layout (nchw, the default, or "
                         "nhwc) (repeatable)")
    ap.add_argument("--torch", metavar="FILE", help="scripts/torch_layer_profile.py --json output")
    ap.add_argument("--gpu", default="", help="the GPU's name as nvidia-smi or CUDA gives it (roofline figures)")
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON here")
    args = ap.parse_args()
    try:
        return run(args)
    except InputError as e:
        print(f"layer_table: error: {e}", file=sys.stderr)
        return 2


def run(args):
    engine = {}
    batch = None
    for spec in args.engine:
        key, sep, path = spec.partition("=")
        precision, _, layout = key.partition("/")
        layout = layout or "nchw"
        if not sep or precision not in ("fp32", "tf32", "bf16") or layout not in LAYOUTS or not path:
            raise InputError(f"--engine expects PRECISION[/LAYOUT]=FILE with PRECISION fp32, tf32 or bf16 and "
                             f"LAYOUT nchw or nhwc, got '{spec}'")
        if (precision, layout) in engine:
            raise InputError(f"--engine {spec}: a second profile for {precision}/{layout}")
        b, p, lay, layers = engine_layers(load(path, "engine profile"), path)
        if p and p != precision:
            raise InputError(f"--engine {spec}: the profile's context says precision {p}, not {precision}")
        # A CPU profile ("n/a": oneDNN picks its own layouts) stands for the engine's NCHW only.
        if lay and lay != layout and not (lay == "n/a" and layout == "nchw"):
            raise InputError(f"--engine {spec}: the profile's context says conv_layout {lay}, not {layout}")
        if batch is not None and b != batch:
            raise InputError(f"--engine {spec}: batch {b}, another profile's {batch}")
        batch = b
        engine[(precision, layout)] = layers
    torch_runs, torch_ctx = {}, {}
    if args.torch:
        doc = load(args.torch, "PyTorch profile")
        try:
            torch_ctx = doc["context"]
            for r in doc["runs"]:
                torch_runs[(r["precision"], r["layout"])] = r["layers"]
            if batch is None:
                batch = torch_ctx["batch"]
            elif torch_ctx["batch"] != batch:
                raise InputError(f"--torch {args.torch}: batch {torch_ctx['batch']}, the engine's {batch}")
        except (KeyError, TypeError) as e:
            raise InputError(f"PyTorch profile {args.torch}: no field {e} (scripts/torch_layer_profile.py --json)")
    if batch is None:
        raise InputError("nothing to join: give --engine PRECISION=FILE and/or --torch FILE")
    gpu = args.gpu or torch_ctx.get("device", "")
    sheet = datasheet(gpu)
    precisions = [p for p in ("fp32", "tf32", "bf16") if any(k[0] == p for k in list(engine) + list(torch_runs))]

    out_rows, md = [], []
    roof_note = (f"roofline at {sheet[0]}'s datasheet (dense peak per precision, {sheet[2] / 1e12:g} TB/s)" if sheet
                 else f"roofline n/a: no datasheet figures for GPU '{gpu or 'unknown'}'")
    md.append(f"great_net per layer, batch {batch}: ms (achieved fraction of the roofline); engine NCHW and NHWC "
              f"(--layout nhwc), PyTorch NCHW and channels_last (NHWC); {roof_note}. Engine bias add and gradient: "
              f"inside its forward and "
              f"backward-weights. PyTorch's forward includes its bias; its first layer's backward-data is timed "
              f"though a net never needs it (the engine's reads 0).")
    for p in precisions:
        elt = 2 if p == "bf16" else 4
        peak = sheet[1].get(p) if sheet else None
        bw = sheet[2] if sheet else None
        engs = {lay: {l["index"]: l for l in engine[(p, lay)]} for lay in LAYOUTS if (p, lay) in engine}
        tch = {lay: {l["index"]: l for l in torch_runs.get((p, lay), [])} for lay in ("nchw", "channels_last")}
        # The net's layers, from whichever side has them; every side must agree on every shape.
        ref = next(filter(None, [engine.get((p, lay)) for lay in LAYOUTS] +
                          [torch_runs.get((p, lay)) for lay in ("nchw", "channels_last")]))
        for side in list(engs.values()) + list(tch.values()):
            for l in ref:
                o = side.get(l["index"])
                if o and (o["type"], list(o["in"]), list(o["out"])) != (l["type"], list(l["in"]), list(l["out"])):
                    raise InputError(f"{p}: layer {l['index']} is {o['type']} {o['in']}->{o['out']} on one side, "
                                     f"{l['type']} {l['in']}->{l['out']} on the other: not the same net")
        sums = {}
        body = []
        for l in ref:
            for key, label in PASSES:
                if l["type"] != "conv2d" and key not in ("forward_s", "backward_data_s"):
                    continue
                flops, nbytes = work(l, key, batch, elt)
                roof = max(flops / peak, nbytes / bw) if sheet else None
                apart = key in ("bias_add_s", "bias_grad_s")
                el = {lay: engs[lay].get(l["index"], {}) if lay in engs else None for lay in LAYOUTS}
                e = {lay: None if el[lay] is None or apart else el[lay].get(key) for lay in LAYOUTS}
                tn = tch["nchw"].get(l["index"], {}).get(key)
                tc = tch["channels_last"].get(l["index"], {}).get(key)
                best_e = min([t for t in e.values() if t], default=None)
                best = min([t for t in (tn, tc) if t], default=None)
                ratio = best_e / best if best_e and best else None
                algo = {lay: (el[lay] or {}).get("algorithms", {}).get(key[:-2]) or None for lay in LAYOUTS}
                row = {"precision": p, "layer": l["index"], "type": l["type"], "pass": label,
                       "shape": f"{l['in'][0]}->{l['out'][0]}", "flops": flops, "bytes": nbytes,
                       "roofline_s": roof, "engine_s": e["nchw"], "engine_nhwc_s": e["nhwc"],
                       "torch_nchw_s": tn, "torch_channels_last_s": tc, "engine_over_best_torch": ratio}
                for lay, suffix in (("nchw", ""), ("nhwc", "_nhwc")):
                    row[f"engine{suffix}_algorithm"] = algo[lay]
                    row[f"engine{suffix}_first_call_s"] = (el[lay] or {}).get("first_call_s", {}).get(key[:-2])
                    row[f"engine{suffix}_workspace_bytes"] = (el[lay] or {}).get("workspace_bytes", {}).get(key[:-2])
                if apart and engs:
                    row["engine_note"] = NOT_APART
                out_rows.append(row)
                cells_e = [NOT_APART if apart and lay in engs else fmt_ms(e[lay], roof) for lay in LAYOUTS]
                algos = "; ".join(f"{lay.upper()} {algo[lay]}" for lay in LAYOUTS if algo[lay])
                body.append(f"| {l['index']} | {l['type']} {l['in'][0]}->{l['out'][0]} | {label} | "
                            f"{f'{roof * 1e3:.3f}' if roof else 'n/a'} | {' | '.join(cells_e)} | {fmt_ms(tn, roof)} | "
                            f"{fmt_ms(tc, roof)} | {f'{ratio:.2f}' if ratio else 'n/a'} | {algos} |")
                # Summed per pass: roofline, engine NCHW, engine NHWC, PyTorch NCHW, channels_last; a
                # column is n/a once one of its layers is.
                s = sums.setdefault(label, [0.0] * 5)
                for i, v in enumerate((roof, e["nchw"], e["nhwc"], tn, tc)):
                    if v is not None and s[i] is not None:
                        s[i] += v
                    elif i > 0 and v is None:
                        s[i] = None
        md += ["", f"**{p}**: the passes summed over the layers (ms)", "",
               "| pass | roofline | engine NCHW | engine NHWC | PyTorch NCHW | PyTorch NHWC | faster engine / faster PyTorch |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        for label, s in sums.items():
            roof, en, eh, tn, tc = s
            r = roof if sheet else None
            best_e = min([t for t in (en, eh) if t], default=None)
            best = min([t for t in (tn, tc) if t], default=None)
            cells_e = [NOT_APART if label in ("bias add", "bias gradient") and lay in engs else fmt_ms(v, r)
                       for lay, v in zip(LAYOUTS, (en, eh))]
            md.append(f"| {label} | {f'{roof * 1e3:.3f}' if sheet else 'n/a'} | {' | '.join(cells_e)} | "
                      f"{fmt_ms(tn, r)} | {fmt_ms(tc, r)} | {f'{best_e / best:.2f}' if best_e and best else 'n/a'} |")
        md += ["", f"**{p}** per layer (ms, achieved fraction of the roofline)", "",
               "| layer | shape | pass | roofline | engine NCHW | engine NHWC | PyTorch NCHW | PyTorch NHWC | "
               "faster engine / faster PyTorch | engine algorithm |",
               "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"] + body
    print("\n".join(md))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"layer_table": 1, "gpu": gpu, "datasheet": sheet[0] if sheet else None,
                       "peak_flop_per_s": sheet[1] if sheet else None, "bytes_per_s": sheet[2] if sheet else None,
                       "batch": batch, "engine_profiles": sorted(f"{p}/{lay}" for p, lay in engine), "torch": torch_ctx, "rows": out_rows},
                      f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
