#!/usr/bin/python3
"""PyTorch peers of parbench's multi-worker CPU strategies: ddp, mp and pipeline on 2+ processes.

Each worker is its own process with --threads threads (torch.set_num_threads), joined by
torch.distributed's gloo backend over loopback. Same net (great_net from torchnet.py), loss
(MSE against the input) and optimizer (Adam, lr 1e-4) as `parbench train`:

- ddp: torch.nn.parallel.DistributedDataParallel; --batch is the global batch, split in
  torch.chunk pieces, one per worker (parbench's ddp does the same).
- mp: the layer list in contiguous stages, one per worker (--balance: conv layers per stage),
  activations sent forward and their gradients back with send/recv, the loss on the last
  stage, one Adam per stage.
- pipeline: mp with the batch in --micro-batches torch.chunk pieces under a GPipe fill-drain
  schedule (all forwards, then all backwards; gradients summed over micro-batches, the loss a
  mean over the whole batch), as parbench's pipeline.

Rank 0 prints every timed iteration and the line scripts/cpu_vs_torch.py parses:

    median X ms/iteration

    /usr/bin/python3 scripts/torch_strategy_peer.py --strategy ddp --workers 2 --threads 1 \
        --image 64 --width 1 --batch 4
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchnet import great_net  # noqa: E402


def chunk_sizes(n, parts):
    """Sizes of torch.chunk(n, parts): ceil(n / parts) each, the last ones smaller or missing."""
    size = -(-n // parts)
    out = []
    while n > 0:
        out.append(min(size, n))
        n -= out[-1]
    return out


def worker(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    torch.manual_seed(args.seed)
    model, chans = great_net(args.width)  # same parameters on every rank (same seed)
    x = torch.rand(args.batch, 3, args.image, args.image)
    loss_fn = nn.MSELoss()

    if args.strategy == "ddp":
        pieces = torch.chunk(x, args.workers)
        mine = pieces[rank]
        ddp = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(mine), mine)
            loss.backward()
            opt.step()
    else:
        convs = len(chans) - 1
        balance = args.balance or [convs // args.workers] * args.workers
        if len(balance) != args.workers or sum(balance) != convs or min(balance) < 1:
            raise SystemExit(f"--balance {balance}: need {args.workers} positive entries summing to {convs}")
        first = sum(balance[:rank])
        stage = model[2 * first:2 * (first + balance[rank])]  # conv + ReLU per layer
        opt = torch.optim.Adam(stage.parameters(), lr=1e-4)
        micro = args.micro_batches if args.strategy == "pipeline" else 1
        sizes = chunk_sizes(args.batch, micro)
        xs = torch.chunk(x, micro)
        last = rank == args.workers - 1
        in_shape = [(n, chans[first], args.image, args.image) for n in sizes]
        out_shape = [(n, chans[first + balance[rank]], args.image, args.image) for n in sizes]

        def step():
            opt.zero_grad(set_to_none=True)
            inputs, outputs = [], []
            for k in range(len(sizes)):  # fill
                if rank == 0:
                    a = xs[k]
                else:
                    a = torch.empty(in_shape[k])
                    dist.recv(a, rank - 1)
                    a.requires_grad_()
                y = stage(a)
                inputs.append(a)
                if last:
                    # Sum of per-micro-batch losses weighted by size: the whole batch's mean.
                    outputs.append(loss_fn(y, xs[k]) * (sizes[k] / args.batch))
                else:
                    dist.send(y.detach(), rank + 1)
                    outputs.append(y)
            for k in reversed(range(len(sizes))):  # drain
                if last:
                    outputs[k].backward()
                else:
                    g = torch.empty(out_shape[k])
                    dist.recv(g, rank + 1)
                    outputs[k].backward(g)
                if rank > 0:
                    dist.send(inputs[k].grad, rank - 1)
            opt.step()

    for _ in range(args.warmup):
        step()
    ms = []
    for i in range(args.iterations):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        dist.barrier()  # the step ends when every worker has finished it
        ms.append((time.perf_counter() - t0) * 1e3)
        if rank == 0:
            print(f"iteration {i + 1:4d}: {ms[-1]:9.2f} ms", flush=True)
    if rank == 0:
        queue.put(statistics.median(ms))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--strategy", choices=["ddp", "mp", "pipeline"], required=True)
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per worker (default 1)")
    ap.add_argument("--image", type=int, default=64, help="image height and width (default 64)")
    ap.add_argument("--width", type=float, default=1.0, help="channel width scale (default 1)")
    ap.add_argument("--batch", type=int, default=4, help="global batch size (default 4)")
    ap.add_argument("--micro-batches", type=int, default=4, help="pipeline: micro-batches per step (default 4)")
    ap.add_argument("--balance", type=lambda s: [int(v) for v in s.split(",")],
                    help="mp/pipeline: conv layers per stage (default: equal counts)")
    ap.add_argument("--iterations", type=int, default=10, help="timed iterations (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    args = ap.parse_args()
    if min(args.workers, args.threads, args.image, args.batch, args.iterations, args.micro_batches) < 1 \
            or args.warmup < 0 or args.width <= 0:
        ap.error("sizes, workers, threads, iterations and micro-batches must be positive")
    if args.batch < args.workers and args.strategy == "ddp":
        ap.error(f"--batch {args.batch} has fewer samples than --workers {args.workers}")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"torch {torch.__version__}, {args.strategy} on {args.workers} processes x {args.threads} thread(s), "
          f"gloo; great_net {args.image}x{args.image} width {args.width:g}, batch {args.batch}", flush=True)
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(args, port, queue), nprocs=args.workers, join=True)
    median = queue.get()
    print(f"median {median:.2f} ms/iteration, {args.batch / (median / 1e3):.1f} samples/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
