#!/usr/bin/env python3
"""PyTorch peer of `parbench train --workload great_net --device-kind cuda`.

The same net (the seed's GreatNetwork: 14 conv3x3 pad 1 layers, each followed by ReLU,
hidden channels scaled by --width), the same loss (MSE against the input image) and optimizer
(Adam, lr 1e-4), with precision and algorithm search pinned like the engine's:

  --precision fp32   TF32 off for matmul and cuDNN convolutions: fp32_precision = "ieee" where
                     PyTorch has it (>= 2.9), else allow_tf32 = False for both
  --precision tf32   TF32 on for both ("tf32", or allow_tf32 = True)
  --precision bf16   torch.autocast(device, dtype=torch.bfloat16) around forward and loss:
                     fp32 parameters and Adam (master weights), bf16 convolutions, the loss in
                     fp32 (mse_loss is on autocast's fp32 list); TF32 off outside autocast
  --conv-search exhaustive   torch.backends.cudnn.benchmark = True  (PARBENCH_CONV_SEARCH=exhaustive)
  --conv-search heuristic    torch.backends.cudnn.benchmark = False (the engine's default)

Each timed iteration is bracketed by torch.cuda.synchronize(); the loss is read after the
timer stops. Prints every iteration and then the lines scripts/gpu_check.sh parses:

    training GFLOP per iteration: X
    median X ms/iteration, ...

    python3 scripts/torch_gpu_peer.py --device cuda --image 512 --width 1 --batch 1 --precision tf32
    /usr/bin/python3 scripts/torch_gpu_peer.py --device cpu --image 32 --width 0.125   # smoke test
"""
import argparse
import statistics
import sys
import time

import torch
from torch import nn

from torchnet import great_net

def forward_flops_per_sample(chans, image):
    """Multiply-adds of the convolutions counted as 2 FLOPs; 3x3 pad 1 keeps HxW."""
    return sum(2 * c_in * c_out * 9 * image * image for c_in, c_out in zip(chans, chans[1:]))


def pin_precision(precision, conv_search):
    """Returns which TF32 API was used. PyTorch >= 2.9 has per-backend fp32_precision settings
    and raises when they and the legacy allow_tf32 flags are mixed, so only one is touched."""
    tf32 = precision == "tf32"  # bf16: autocast casts the convolutions; what stays fp32 is ieee
    cudnn_conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(cudnn_conv, "fp32_precision") and hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        mode = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        cudnn_conv.fp32_precision = mode
        api = f"fp32_precision={mode}"
    else:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        if hasattr(torch, "set_float32_matmul_precision"):
            torch.set_float32_matmul_precision("high" if tf32 else "highest")
        api = f"allow_tf32={tf32}"
    torch.backends.cudnn.benchmark = conv_search == "exhaustive"
    torch.backends.cudnn.deterministic = False
    return api


def net_arguments(doc, precision):
    """The parser both GPU peers start from: device, great_net's size, batch, precision."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=doc.split("\n\n", 1)[1])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="default cuda")
    ap.add_argument("--image", type=int, default=512, help="image height and width (default 512)")
    ap.add_argument("--width", type=float, default=1.0, help="channel width scale (default 1)")
    ap.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default=precision, help=f"default {precision}")
    return ap


def main():
    ap = net_arguments(__doc__, "fp32")
    ap.add_argument("--conv-search", choices=["exhaustive", "heuristic"], default="exhaustive",
                    help="cudnn.benchmark True or False (default exhaustive)")
    ap.add_argument("--iterations", type=int, default=10, help="timed iterations (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    args = ap.parse_args()
    if min(args.image, args.batch, args.iterations) < 1 or args.warmup < 0 or args.width <= 0:
        ap.error("image, batch and iterations must be positive, warmup >= 0, width > 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_gpu_peer: error: torch.cuda.is_available() is False "
              f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})", file=sys.stderr)
        return 2

    device = torch.device(args.device)
    tf32_api = pin_precision(args.precision, args.conv_search)
    torch.manual_seed(args.seed)
    model, chans = great_net(args.width)
    model = model.to(device)
    x = torch.randn(args.batch, 3, args.image, args.image, device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()
    params = sum(p.numel() for p in model.parameters())
    train_gflop = 3 * forward_flops_per_sample(chans, args.image) * args.batch / 1e9

    if args.device == "cuda":
        gpu = torch.cuda.get_device_name(device)
        backend = f"cuDNN {torch.backends.cudnn.version()}, CUDA {torch.version.cuda}"
    else:
        gpu, backend = "cpu", f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__} on {gpu} ({backend}); {args.precision} ({tf32_api}), "
          f"conv search {args.conv_search} "
          f"(cudnn.benchmark={torch.backends.cudnn.benchmark}); great_net channels {'-'.join(map(str, chans))}, "
          f"input {args.batch} x 3x{args.image}x{args.image}, {params} parameters", flush=True)
    print(f"training GFLOP per iteration: {train_gflop:.6g}", flush=True)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize(device)

    def step():
        opt.zero_grad(set_to_none=True)
        if args.precision == "bf16":
            with torch.autocast(args.device, dtype=torch.bfloat16):
                loss = loss_fn(model(x), x)
        else:
            loss = loss_fn(model(x), x)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):  # algorithm search and allocator warm-up happen here
        step()
    sync()
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ms = []
    for i in range(args.iterations):
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        ms.append((time.perf_counter() - t0) * 1e3)
        print(f"iteration {i + 1:4d}: {ms[-1]:9.2f} ms  loss {loss.item():.6g}", flush=True)
    median = statistics.median(ms)
    extra = ""
    if args.device == "cuda":
        extra = f", peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB allocated"
    print(f"median {median:.2f} ms/iteration, {args.batch / (median / 1e3):.1f} samples/s, "
          f"{train_gflop / (median / 1e3):.4g} GFLOP/s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
