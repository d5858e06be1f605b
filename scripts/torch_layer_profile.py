#!/usr/bin/env python3
"""Per-layer times of great_net in PyTorch, the peer of `parbench profile`.

Each of the net's convolutions is timed alone on the device's own clock (CUDA events): forward
(the convolution with its bias, as nn.Conv2d runs it), backward-data (the input gradient) and
backward-weights (the weight and bias gradients) apart, through aten's convolution_backward with
one output mask at a time, as the engine's profile splits them; then, apart, the bias add
(y + b, broadcast over the channels), the bias gradient (dy summed over batch, height and width)
and each ReLU's forward and backward (threshold_backward). Precision and algorithm search as
scripts/torch_gpu_peer.py (bf16: every tensor in bf16, as autocast runs the convolutions).
Layouts: nchw (contiguous) and channels_last (NHWC: tensors and weights in
torch.channels_last). Prints a table per precision and layout in milliseconds, the median of
--reps after one untimed call; --json writes every time (seconds) for scripts/layer_table.py.

    python3 scripts/torch_layer_profile.py --image 512 --width 1 --precision tf32
    python3 scripts/torch_layer_profile.py --precisions tf32,bf16 --layouts nchw,channels_last --json t.json
"""
import json
import statistics
import sys
import time

import torch

from torch_gpu_peer import net_arguments, pin_precision
from torchnet import great_net_channels

LAYOUTS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def split_list(text, allowed, flag, ap):
    items = [s for s in text.split(",") if s]
    bad = [s for s in items if s not in allowed]
    if not items or bad:
        ap.error(f"{flag} expects a comma-separated list of {', '.join(allowed)}, got '{text}'")
    return items


def profile(args, dev, precision, layout):
    """One run: a list of per-layer dicts in engine order (conv, ReLU, conv, ReLU, ...)."""
    pin_precision(precision, args.conv_search)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    fmt_ = LAYOUTS[layout]
    cuda = dev.type == "cuda"

    def timed(fn):
        fn()  # algorithm search and warm-up
        ms = []
        for _ in range(args.reps):
            if cuda:
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                fn()
                t1.record()
                t1.synchronize()
                ms.append(t0.elapsed_time(t1))
            else:
                s = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - s) * 1e3)
        return statistics.median(ms) / 1e3

    def tensor(*shape):
        t = torch.randn(*shape, device=dev, dtype=dtype)
        return t.contiguous(memory_format=fmt_) if t.dim() == 4 else t

    chans = great_net_channels(args.width)
    n, hw = args.batch, args.image
    layers = []
    for k, (c_in, c_out) in enumerate(zip(chans, chans[1:])):
        x, w, b = tensor(n, c_in, hw, hw), tensor(c_out, c_in, 3, 3), tensor(c_out)
        dy, y = tensor(n, c_out, hw, hw), tensor(n, c_out, hw, hw)
        conv_args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)

        def bwd(mask):
            torch.ops.aten.convolution_backward(dy, x, w, [c_out], *conv_args, mask)

        b4 = b.view(1, c_out, 1, 1)
        conv = {"index": 2 * k, "type": "conv2d", "in": [c_in, hw, hw], "out": [c_out, hw, hw],
                "forward_s": timed(lambda: torch.nn.functional.conv2d(x, w, b, padding=1)),
                # The first layer's input gradient is never needed, but timed for comparison.
                "backward_data_s": timed(lambda: bwd([True, False, False])),
                "backward_weights_s": timed(lambda: bwd([False, True, True])),
                "bias_add_s": timed(lambda: y.add_(b4)),
                "bias_grad_s": timed(lambda: dy.sum(dim=(0, 2, 3)))}
        relu = {"index": 2 * k + 1, "type": "relu", "in": [c_out, hw, hw], "out": [c_out, hw, hw],
                "forward_s": timed(lambda: torch.relu(y)),
                "backward_data_s": timed(lambda: torch.ops.aten.threshold_backward(dy, y, 0))}
        layers += [conv, relu]
        del x, w, b, dy, y
    return layers


def print_table(layers, precision, layout):
    print(f"\n{precision}, {layout}: ms")
    print(f"{'layer':>5}  {'type':<6}  {'in->out':>10}  {'forward':>9}  {'bwd-data':>9}  {'bwd-wts':>9}  "
          f"{'bias add':>9}  {'bias grad':>9}")
    total = {}
    for l in layers:
        cells = []
        for key in ("forward_s", "backward_data_s", "backward_weights_s", "bias_add_s", "bias_grad_s"):
            v = l.get(key)
            if v is not None:
                total[key] = total.get(key, 0.0) + v
            cells.append(f"{v * 1e3:>9.3f}" if v is not None else f"{'-':>9}")
        io = f"{l['in'][0]}->{l['out'][0]}"
        print(f"{l['index']:>5}  {l['type']:<6}  {io:>10}  {'  '.join(cells)}")
    print(f"{'sum':>5}  {'':<6}  {'':>10}  " + "  ".join(
        f"{total.get(k, 0) * 1e3:>9.3f}" for k in ("forward_s", "backward_data_s", "backward_weights_s",
                                                    "bias_add_s", "bias_grad_s")))


def main():
    ap = net_arguments(__doc__, "tf32")
    ap.add_argument("--precisions", metavar="LIST", help="comma-separated precisions, each a run (default: --precision)")
    ap.add_argument("--layouts", metavar="LIST", default="nchw",
                    help="comma-separated memory layouts: nchw, channels_last (default nchw)")
    ap.add_argument("--conv-search", choices=["exhaustive", "heuristic"], default="heuristic",
                    help="cudnn.benchmark True or False (default heuristic, as parbench profile)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5)")
    ap.add_argument("--json", metavar="FILE", help="also write every time (seconds) here")
    args = ap.parse_args()
    if min(args.image, args.batch, args.reps) < 1 or args.width <= 0:
        ap.error("image, batch and reps must be positive, width > 0")
    precisions = split_list(args.precisions, ["fp32", "tf32", "bf16"], "--precisions", ap) if args.precisions \
        else [args.precision]
    layouts = split_list(args.layouts, list(LAYOUTS), "--layouts", ap)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_layer_profile: error: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if args.device == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}; conv search {args.conv_search}; great_net {args.image}x{args.image} "
          f"width {args.width} batch {args.batch}; median of {args.reps} after one untimed call")
    runs = []
    for precision in precisions:
        for layout in layouts:
            start = time.perf_counter()
            layers = profile(args, dev, precision, layout)
            print_table(layers, precision, layout)
            print(f"({precision}, {layout}: {time.perf_counter() - start:.1f} s)")
            runs.append({"precision": precision, "layout": layout, "layers": layers})
    if args.json:
        doc = {"torch_layer_profile": 1,
               "context": {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
                           "device": name, "conv_search": args.conv_search, "workload": "great_net",
                           "image": args.image, "width": args.width, "batch": args.batch, "reps": args.reps,
                           "timing": "median of --reps after one untimed call, seconds (CUDA: events)"},
               "runs": runs}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
