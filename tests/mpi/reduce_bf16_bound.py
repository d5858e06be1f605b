#!/usr/bin/python3
# --reduce-dtype bf16 over N > 2 MPI processes against the in-process run, within docs/bf16.md's
# bound: MPI's user op adds in MPI's order (at 4 ranks Open MPI pairs them), the in-process sum in
# rank order, each rounding every partial sum, so the two sums of the same N bf16 terms x_w differ
# by at most 2(N-1) 2^-8 sum_w |x_w|. One Adam step with lr 1, eps 1 moves a parameter by
# g / (|g| + 1), 1-Lipschitz in g, so the parameters differ by at most that too (+ 2^-21 (|p| + 1)
# for Adam's fp32 roundings). |x_w| comes from a one-process run on chunk w alone: its loss is
# chunk w's mean, N times ddp's share, so its step u_w shows N x_w = u_w / (1 - u_w) (x_w's bf16
# rounding and the factor's fp32 one within 2^-7).
#   make DIR N: DIR/net.json (conv_odd, lr 1, eps 1), DIR/x.npy (N chunks of 2), DIR/x<w>.npy, DIR/p0/
#   check DIR N: DIR/one, DIR/mpi (ddp) and DIR/w<w> (regular on chunk w) within the bound
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
d, n = sys.argv[2], int(sys.argv[3])

if sys.argv[1] == "make":
    net = json.load(open(os.path.join(HERE, "..", "fixtures", "conv_odd", "net.json")))
    net["lr"], net["eps"] = 1.0, 1.0
    json.dump(net, open(os.path.join(d, "net.json"), "w"))
    x = np.random.default_rng(n).standard_normal((2 * n, *net["input"])).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    for w in range(n):
        np.save(os.path.join(d, f"x{w}.npy"), x[2 * w : 2 * w + 2])
    src = os.path.join(HERE, "..", "fixtures", "conv_odd", "params")
    os.makedirs(os.path.join(d, "p0"), exist_ok=True)
    for f in sorted(os.listdir(src)):
        np.save(os.path.join(d, "p0", f), np.load(os.path.join(src, f)))
    sys.exit(0)

u8 = 2.0**-8
worst, moved, differ, count = 0.0, 0, 0, 0
load = lambda *p: np.load(os.path.join(d, *p)).astype(np.float64)
for f in sorted(os.listdir(os.path.join(d, "p0"))):
    p0, one, mpi = load("p0", f), load("one", "params", f), load("mpi", "params", f)
    slack = 2.0**-21 * (np.abs(p0) + 1)
    terms = 0.0  # sum_w |x_w|, rounded up
    for w in range(n):
        u = np.minimum(np.abs(p0 - load(f"w{w}", "params", f)) + slack, 1 - 1e-9)
        terms = terms + u / (1 - u) / n * (1 + 2 * u8)
    bound = 2 * (n - 1) * u8 * terms + slack
    diff = np.abs(mpi - one)
    worst = max(worst, float(np.max(diff / bound)))
    moved += int(np.count_nonzero(p0 != one))
    differ += int(np.count_nonzero(diff))
    count += p0.size
print(f"{count} parameters, {moved} moved, {differ} differ between MPI and in process; worst |difference| / bound {worst:.3g}")
sys.exit(0 if worst <= 1 and moved > count // 2 else 1)
