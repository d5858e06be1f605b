#!/usr/bin/env python3
"""Per-layer convolution times of great_net in PyTorch, the peer of `parbench profile`.

Each of the net's convolutions is timed alone on the device's own clock (CUDA events): forward,
backward-data (the input gradient) and backward-weights (the weight and bias gradients) apart,
through aten's convolution_backward with one output mask at a time, as the engine's profile
splits them. Precision and algorithm search as scripts/torch_gpu_peer.py (bf16: the convolution
on bf16 tensors, as autocast runs it). Prints a table in milliseconds, the median of --reps.

    python3 scripts/torch_layer_profile.py --image 512 --width 1 --precision tf32
"""
import statistics
import sys

import torch

from torch_gpu_peer import net_arguments, pin_precision
from torchnet import great_net


def main():
    ap = net_arguments(__doc__, "tf32")
    ap.add_argument("--conv-search", choices=["exhaustive", "heuristic"], default="heuristic",
                    help="cudnn.benchmark True or False (default heuristic, as parbench profile)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5)")
    args = ap.parse_args()
    if min(args.image, args.batch, args.reps) < 1 or args.width <= 0:
        ap.error("image, batch and reps must be positive, width > 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_layer_profile: error: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    pin_precision(args.precision, args.conv_search)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    model, chans = great_net(args.width)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]

    def timed(fn):
        fn()  # algorithm search and warm-up
        ms = []
        for _ in range(args.reps):
            if args.device == "cuda":
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                fn()
                t1.record()
                t1.synchronize()
                ms.append(t0.elapsed_time(t1))
            else:
                import time
                s = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - s) * 1e3)
        return statistics.median(ms)

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(dev) if args.device == 'cuda' else 'cpu'}; "
          f"{args.precision}, conv search {args.conv_search}; great_net {args.image}x{args.image} width "
          f"{args.width} batch {args.batch}; median of {args.reps}, ms")
    print(f"{'layer':>5}  {'in->out':>10}  {'forward':>9}  {'bwd-data':>9}  {'bwd-wts':>9}  {'TFLOP/s':>8}")
    total = [0.0, 0.0, 0.0]
    flops_total = 0.0
    for i, conv in enumerate(convs):
        c_in, c_out = conv.in_channels, conv.out_channels
        x = torch.randn(args.batch, c_in, args.image, args.image, device=dev, dtype=dtype)
        w = torch.randn(c_out, c_in, 3, 3, device=dev, dtype=dtype)
        b = torch.randn(c_out, device=dev, dtype=dtype)
        dy = torch.randn(args.batch, c_out, args.image, args.image, device=dev, dtype=dtype)
        conv_args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)

        def fwd():
            torch.nn.functional.conv2d(x, w, b, padding=1)

        def bwd(mask):
            torch.ops.aten.convolution_backward(dy, x, w, [c_out], *conv_args, mask)

        t = [timed(fwd), timed(lambda: bwd([True, False, False])), timed(lambda: bwd([False, True, True]))]
        flops = 3 * 2 * c_in * c_out * 9 * args.image * args.image * args.batch
        flops_total += flops
        total = [a + b_ for a, b_ in zip(total, t)]
        print(f"{i:>5}  {f'{c_in}->{c_out}':>10}  {t[0]:>9.3f}  {t[1]:>9.3f}  {t[2]:>9.3f}  "
              f"{flops / (sum(t) / 1e3) / 1e12:>8.1f}")
        del x, w, b, dy
    print(f"{'sum':>5}  {'':>10}  {total[0]:>9.3f}  {total[1]:>9.3f}  {total[2]:>9.3f}  "
          f"{flops_total / (sum(total) / 1e3) / 1e12:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
