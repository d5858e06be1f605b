#!/usr/bin/python3
"""PyTorch peer of `parbench train --workload great_net`: the same net, loss and optimizer.

Trains the seed's GreatNetwork (14 conv3x3 pad 1 layers, each followed by ReLU, channels
scaled by --width except the 3s at both ends), or with --net FILE the net a parbench JSON
describes (`parbench net --workload unet --out FILE`: skips included), on one synthetic batch
with MSE against the input (a random target where the net says so) and Adam (lr 1e-4), on the CPU with --threads threads, in fp32 or (--precision bf16) under
torch.autocast("cpu", dtype=torch.bfloat16) with fp32 parameters and Adam, as `parbench train
--precision bf16`, and prints every timed iteration and the line scripts/cpu_vs_torch.py parses:

    median X ms/iteration

Run with Debian's python3-torch: /usr/bin/python3 scripts/torch_peer.py --image 64 --width 1
"""
import argparse
import resource
import statistics
import sys
import time

import torch
from torch import nn

from torchnet import build_model, great_net, load_net

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", type=int, default=96, help="image height and width (default 96, as parbench on CPU)")
    ap.add_argument("--width", type=float, default=0.5, help="channel width scale (default 0.5, as parbench on CPU)")
    ap.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    ap.add_argument("--iterations", type=int, default=10, help="timed iterations (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    ap.add_argument("--net", help="a parbench net JSON to train instead of great_net (--image, --width unused)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="fp32, or bf16 autocast with fp32 master weights (default fp32)")
    args = ap.parse_args()
    if min(args.image, args.batch, args.iterations, args.threads) < 1 or args.warmup < 0 or args.width <= 0:
        ap.error("sizes, iterations and threads must be positive")

    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(args.seed)
    if args.net:
        net = load_net(args.net)
        model, out_shape = build_model(net)
        x = torch.rand(args.batch, *net["input"])
        target = x if net.get("target", "input") == "input" else torch.rand(args.batch, *out_shape)
        what = f"{net.get('name', args.net)}, input {args.batch} x {'x'.join(map(str, net['input']))}"
    else:
        model, chans = great_net(args.width)
        x = torch.rand(args.batch, 3, args.image, args.image)
        target = x
        what = f"great_net channels {'-'.join(map(str, chans))}, input {args.batch} x 3x{args.image}x{args.image}"
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, {args.precision}, {torch.get_num_threads()} threads, mkldnn "
          f"{torch.backends.mkldnn.is_available()}; {what}, {params} parameters", flush=True)

    def step():
        opt.zero_grad(set_to_none=True)
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x).float(), target)
        else:
            loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    ms = []
    for i in range(args.iterations):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1e3)
        print(f"iteration {i + 1:4d}: {ms[-1]:9.2f} ms  loss {loss.item():.6g}", flush=True)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"median {statistics.median(ms):.2f} ms/iteration, {args.batch / (statistics.median(ms) / 1e3):.1f} "
          f"samples/s, peak RSS {rss_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
