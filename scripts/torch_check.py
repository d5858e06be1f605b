#!/usr/bin/python3
"""Check the parbench engine against PyTorch on any net description.

Builds the PyTorch model from NET.json, writes its initial parameters, input and
target (the tests/fixtures layout) to a work directory, runs

    PARBENCH replay --workload DIR/net.json --params DIR/params --input DIR/input.npy
                    [--target DIR/target.npy] --steps K --lr LR --out DIR/out

and compares the per-step losses (DIR/out/losses.json) and final parameters
(DIR/out/params/<key>.npy) with PyTorch's Adam run. Exit status: 0 if every loss
is within 1e-5 relative and every parameter within 1e-5 absolute, 1 if not,
2 if the check could not run.

    /usr/bin/python3 scripts/torch_check.py --net NET.json [--batch B] [--steps K]
        [--lr LR] [--parbench build/parbench] [--seed S] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

import torchnet

LOSS_RTOL = 1e-5
PARAM_ATOL = 1e-5


def fail(msg):
    print(f"torch_check: error: {msg}", file=sys.stderr)
    sys.exit(2)


def run_replay(args, work, random_target, lr):
    out = os.path.join(work, "out")
    cmd = [args.parbench, "replay", "--workload", os.path.join(work, "net.json"),
           "--params", os.path.join(work, "params"), "--input", os.path.join(work, "input.npy")]
    if random_target:
        cmd += ["--target", os.path.join(work, "target.npy")]
    cmd += ["--steps", str(args.steps), "--lr", repr(lr), "--out", out]
    print("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        fail(f"parbench replay exited with status {proc.returncode}")
    return out


def compare(expected_losses, model, out):
    """Print the comparison table; return True if everything is within tolerance."""
    losses_path = os.path.join(out, "losses.json")
    if not os.path.isfile(losses_path):
        fail(f"parbench replay wrote no {losses_path}")
    with open(losses_path) as f:
        got_losses = json.load(f)["losses"]
    ok = len(got_losses) == len(expected_losses)
    if not ok:
        print(f"loss count: parbench {len(got_losses)}, torch {len(expected_losses)}")

    print(f"\n{'step':>4}  {'torch loss':>14}  {'parbench loss':>14}  {'rel err':>9}")
    for i, (want, got) in enumerate(zip(expected_losses, got_losses), 1):
        rel = abs(got - want) / max(abs(want), 1e-30)
        bad = not rel <= LOSS_RTOL
        ok &= not bad
        print(f"{i:>4}  {want:>14.8g}  {got:>14.8g}  {rel:>9.2e}{'  FAIL' if bad else ''}")

    print(f"\n{'parameter':<16}  {'shape':<16}  {'max abs err':>11}")
    for key, value in model.state_dict().items():
        want = value.detach().numpy()
        path = os.path.join(out, "params", f"{key}.npy")
        if not os.path.isfile(path):
            print(f"{key:<16}  missing {path}  FAIL")
            ok = False
            continue
        got = np.load(path)
        if got.shape != want.shape:
            print(f"{key:<16}  shape {got.shape} != torch {want.shape}  FAIL")
            ok = False
            continue
        err = float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0
        bad = not err <= PARAM_ATOL
        ok &= not bad
        print(f"{key:<16}  {str(tuple(want.shape)):<16}  {err:>11.2e}{'  FAIL' if bad else ''}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", required=True, help="net description (JSON)")
    ap.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    ap.add_argument("--steps", type=int, default=5, help="Adam steps (default 5)")
    ap.add_argument("--lr", type=float, help="learning rate (default: the net's lr)")
    ap.add_argument("--parbench", default="build/parbench",
                    help="parbench binary (default build/parbench)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for init and data (default 0)")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the work files to DIR and keep them (default: a temp dir)")
    args = ap.parse_args()

    if not (os.path.isfile(args.parbench) and os.access(args.parbench, os.X_OK)):
        fail(f"parbench binary not found at {args.parbench!r}; build it "
             "(cmake -S . -B build && cmake --build build) or pass --parbench PATH")
    args.parbench = os.path.abspath(args.parbench)

    torchnet.configure()
    net = torchnet.load_net(args.net)
    lr = args.lr if args.lr is not None else net.get("lr")
    if lr is None:
        fail(f"{args.net} has no lr; pass --lr")
    wd = net.get("weight_decay", 0.0)
    try:
        model, x, target, random_target = torchnet.setup(net, args.batch, args.seed)
    except (KeyError, ValueError) as e:
        fail(f"bad net {args.net}: {e}")

    with tempfile.TemporaryDirectory(prefix="torch_check.") as tmp:
        work = os.path.abspath(args.keep) if args.keep else tmp
        for stale in ("params", "final", "out"):
            shutil.rmtree(os.path.join(work, stale), ignore_errors=True)
        if os.path.exists(os.path.join(work, "target.npy")):
            os.remove(os.path.join(work, "target.npy"))
        torchnet.write_inputs(work, net, model, x, target, random_target)
        losses = torchnet.train(model, x, target, lr, wd, args.steps)
        torchnet.save_params(model, os.path.join(work, "final"))
        torchnet.write_json(os.path.join(work, "expected.json"), {
            "steps": args.steps, "lr": lr, "weight_decay": wd, "batch": args.batch,
            "seed": args.seed, "losses": losses, "torch_version": torch.__version__})
        ok = compare(losses, model, run_replay(args, work, random_target, lr))

    name = net.get("name", args.net)
    print(f"\n{name}: {'PASS' if ok else 'FAIL'} (loss rtol {LOSS_RTOL:g}, param atol {PARAM_ATOL:g})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
