#!/usr/bin/python3
"""CPU training speed and memory of the parbench engine against PyTorch, side by side.

For each configuration runs `parbench train --workload great_net` (or --workload unet / resnet:
the nets with skips, given to PyTorch as `parbench net` writes them) and scripts/torch_peer.py
(the same net, batch, loss and optimizer in PyTorch) as subprocesses, alternating between the
two (and which goes first) so that background load hits both alike, --repeats times. Reports
the median over repeats of each run's median ms/iteration, the ratio engine/PyTorch and each
peer's peak resident memory (from wait4's rusage of that very subprocess), as a markdown table.

    /usr/bin/python3 scripts/cpu_vs_torch.py [--parbench build/parbench] [--workload great_net|unet|resnet]
        [--threads 2] [--precision fp32|bf16]
        [--configs 64:1,128:0.25] [--batch 2] [--iterations 10] [--warmup 2] [--repeats 3]
        [--also-direct] [--contention] [--strategies] [--isa AVX2] [--out FILE] [--max-ratio 0.80]

--also-direct adds a third peer: the engine with PARBENCH_CPU_WINOGRAD=0, i.e. only oneDNN's
direct convolution kernels, the ones PyTorch's CPU convolutions use.

--contention also runs both peers, at --contention-configs (default a small step, 32:0.25),
once on the machine as it is and once while one background busy-loop process (started before
and stopped after each run) competes for the cores, and reports each peer's slowdown factor
(busy / plain ms/iteration). Both peers run with the OpenMP wait policy they default to.

--strategies also times parbench's multi-worker strategies against PyTorch's on --workers
processes of one thread each (scripts/torch_strategy_peer.py, gloo): `--strategy ddp` against
DistributedDataParallel (global batch --batch per worker x workers), and `mp` / `pipeline`
against the same layer split (by forward FLOPs, given to both as --balance) with activations
sent between processes, at --strategy-configs (default 64:1).

--isa ISA runs every peer with ONEDNN_MAX_CPU_ISA=ISA (and PyTorch with ATEN_CPU_CAPABILITY
set to match where it has one), to see what a CPU without the larger ISAs gets from oneDNN;
the engine's own loops keep the ISA they were compiled for (-march=native by default).

Exit status: 0, or 1 when --max-ratio is given and a ratio exceeds it or the engine's peak
RSS exceeds PyTorch's, or the engine slows down more than PyTorch under contention; 2 when a
run fails.
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# parbench prints the unit that fits (ns, us, ms, s); the PyTorch peers print ms.
MEDIAN_RE = re.compile(r"^median ([0-9.]+) (ns|us|ms|s)/iteration", re.MULTILINE)
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def fail(msg):
    print(f"cpu_vs_torch: error: {msg}", file=sys.stderr)
    sys.exit(2)


def run(cmd, env):
    """Run one peer; return (median ms/iteration it printed, its peak RSS in MiB)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        # wait4 gives this child's own rusage; RUSAGE_CHILDREN would be the max over all children.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {proc.returncode}:\n{text[-2000:]}")
    m = MEDIAN_RE.search(text)
    if not m:
        fail(f"no 'median X ms/iteration' line in the output of {' '.join(cmd)}:\n{text[-2000:]}")
    return float(m.group(1)) * TO_MS[m.group(2)], usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def parse_configs(s):
    configs = []
    for item in filter(None, s.split(",")):
        try:
            image, width = item.split(":")
            configs.append((int(image), float(width)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected IMAGE:WIDTH[,IMAGE:WIDTH...], got {item!r}")
    return configs


GREAT_NET_CHANNELS = [3, 16, 32, 64, 128, 256, 512, 1024, 512, 256, 128, 64, 32, 16, 3]


def balanced_split(width, stages):
    """Conv layers per stage, contiguous, minimising the largest stage's forward FLOPs (all
    layers keep the image size, so a layer's FLOPs go as c_in * c_out); parbench's default
    split (strategies/common.cpp) minimises the same, over the same cut points."""
    sys.path.insert(0, HERE)
    from torchnet import great_net_channels  # no torch needed
    chans = great_net_channels(width)
    cost = [a * b for a, b in zip(chans, chans[1:])]
    n = len(cost)
    best = {(0, 0): (0, [])}  # (stages used, layers used) -> (largest stage, split)
    for p in range(1, stages + 1):
        for j in range(p, n + 1):
            options = [(max(best[(p - 1, i)][0], sum(cost[i:j])), best[(p - 1, i)][1] + [j - i])
                       for i in range(p - 1, j) if (p - 1, i) in best]
            if options:
                best[(p, j)] = min(options)
    return best[(stages, n)][1]


class Table:
    """Rows of one comparison: each peer's runs against a reference peer's."""

    def __init__(self, title, header):
        self.title, self.header, self.rows, self.failed = title, header, [], False

    def markdown(self):
        return "\n".join([self.title, "", "| " + " | ".join(self.header) + " |",
                          "|" + "".join("---|" if h in ("peer", "strategy", "runs (ms)", "busy runs (ms)",
                                                        "engine runs", "PyTorch runs") else "---:|"
                                        for h in self.header)] + ["| " + " | ".join(r) + " |" for r in self.rows])


def isa_env(env, isa):
    if not isa:
        return env
    env = dict(env, ONEDNN_MAX_CPU_ISA=isa.upper())
    # PyTorch's own kernels (Adam, ReLU, MSE) dispatch on ATEN_CPU_CAPABILITY: default, avx2, avx512.
    aten = {"AVX2": "avx2", "AVX512_CORE": "avx512"}.get(isa.upper().split("_VNNI")[0].split("_BF16")[0])
    if aten:
        env["ATEN_CPU_CAPABILITY"] = aten
    return env


def busy_loop():
    """One background process that spins until stopped."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def run_peers(peers, repeats, label, busy=False):
    """Each peer `repeats` times, alternating, rotating which goes first; {name: [(ms, rss)]}."""
    names = list(peers)
    out = {name: [] for name in names}
    for rep in range(repeats):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            spinner = busy_loop() if busy else None
            try:
                ms, rss = run(*peers[name])
            finally:
                if spinner:
                    spinner.kill()
                    spinner.wait()
            out[name].append((ms, rss))
            print(f"repeat {rep + 1}/{repeats}  {label}  {name:26s} {ms:10.2f} ms/iteration  peak RSS {rss:7.0f} MiB",
                  flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--parbench", default="build/parbench", help="the parbench program (default build/parbench)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="Python with PyTorch for the peer (default /usr/bin/python3, Debian's python3-torch)")
    ap.add_argument("--workload", choices=["great_net", "unet", "resnet"], default="great_net",
                    help="the net of --configs and --contention (default great_net; --strategies: great_net)")
    ap.add_argument("--configs", type=parse_configs, default=parse_configs("64:1,128:0.25"),
                    help="IMAGE:WIDTH pairs of --workload (default 64:1,128:0.25); empty: none")
    ap.add_argument("--batch", type=int, default=2, help="batch size (per worker with --strategies; default 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both peers (default 2)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="fp32, or bf16 (the engine's --precision bf16 against torch.autocast bf16; default fp32)")
    ap.add_argument("--iterations", type=int, default=10, help="timed iterations per run (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations per run (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each peer per config (default 3)")
    ap.add_argument("--also-direct", action="store_true",
                    help="also run the engine with PARBENCH_CPU_WINOGRAD=0 (direct convolutions only)")
    ap.add_argument("--contention", action="store_true",
                    help="also run both peers with and without a background busy loop, report slowdowns")
    ap.add_argument("--contention-configs", type=parse_configs, default=parse_configs("32:0.25"),
                    help="IMAGE:WIDTH pairs for --contention (default 32:0.25)")
    ap.add_argument("--strategies", action="store_true",
                    help="also time ddp, mp and pipeline against PyTorch's on --workers processes")
    ap.add_argument("--strategy-configs", type=parse_configs, default=parse_configs("64:1"),
                    help="IMAGE:WIDTH pairs for --strategies (default 64:1)")
    ap.add_argument("--workers", type=int, default=2, help="workers for --strategies, 1 thread each (default 2)")
    ap.add_argument("--micro-batches", type=int, default=4, help="pipeline micro-batches (default 4)")
    ap.add_argument("--isa", help="run every peer with ONEDNN_MAX_CPU_ISA=ISA, e.g. AVX2")
    ap.add_argument("--out", help="also write the markdown tables to this file")
    ap.add_argument("--max-ratio", type=float,
                    help="exit 1 if the engine's time / PyTorch's exceeds this, or its peak RSS is above PyTorch's, "
                         "or its contention slowdown is above PyTorch's")
    args = ap.parse_args()
    if min(args.batch, args.threads, args.iterations, args.repeats, args.workers, args.micro_batches) < 1 \
            or args.warmup < 0:
        ap.error("batch, threads, iterations, repeats, workers and micro-batches must be positive")
    if not os.access(args.parbench, os.X_OK):
        fail(f"{args.parbench} is not an executable (build it, or pass --parbench)")

    # The same OpenMP setting for both peers; each also sets its thread count explicitly.
    env = isa_env(dict(os.environ, OMP_NUM_THREADS=str(args.threads)), args.isa)
    env.pop("PARBENCH_CPU_WINOGRAD", None)
    iters = ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]
    common = ["--batch", str(args.batch), *iters, "--threads", str(args.threads)]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    tables = []
    rows_header = ["image", "width", "peer", "ms/iteration", "/ PyTorch", "runs (ms)", "peak RSS (MiB)", "/ PyTorch"]

    def single_peers(image, width, penv):
        shape = ["--image", str(image), "--width", f"{width:g}"]
        engine = [args.parbench, "train", "--workload", args.workload, *shape, *common, "--precision", args.precision]
        peers = {"engine": (engine, penv)}
        if args.also_direct:
            peers["engine, direct only"] = (engine, dict(penv, PARBENCH_CPU_WINOGRAD="0"))
        net = []  # PyTorch's net: great_net its own, another as `parbench net` writes it
        if args.workload != "great_net":
            path = os.path.join(tempfile.mkdtemp(prefix="cpu_vs_torch_"), f"{args.workload}-{image}-{width:g}.json")
            subprocess.run([args.parbench, "net", "--workload", args.workload, *shape, "--device-kind", "cpu", "--out", path],
                           check=True, stdout=subprocess.DEVNULL)
            net = ["--net", path]
        peers["PyTorch"] = ([args.python, os.path.join(HERE, "torch_peer.py"), *shape, *net, *common,
                             "--precision", args.precision], penv)
        return peers

    isa_note = f", ONEDNN_MAX_CPU_ISA={args.isa.upper()} (emulated)" if args.isa else ""
    if args.configs:
        t = Table(f"{args.workload}, batch {args.batch}, {args.threads} threads each, {args.precision}{isa_note}; median over "
                  f"{args.repeats} runs of each run's median of {args.iterations} iterations (after {args.warmup} "
                  f"warm-up); peak RSS: the largest of the runs", rows_header)
        for image, width in args.configs:
            r = run_peers(single_peers(image, width, env), args.repeats, f"{args.workload} {image}x{image} width {width:g}")
            t_ms = statistics.median(ms for ms, _ in r["PyTorch"])
            t_rss = max(rss for _, rss in r["PyTorch"])
            for name, runs in r.items():
                ms = statistics.median(m for m, _ in runs)
                rss = max(x for _, x in runs)
                if name == "engine" and args.max_ratio is not None and (ms / t_ms > args.max_ratio or rss > t_rss):
                    t.failed = True
                t.rows.append([str(image), f"{width:g}", name, f"{ms:.1f}", f"{ms / t_ms:.3f}",
                               ", ".join(f"{m:.0f}" for m, _ in runs), f"{rss:.0f}", f"{rss / t_rss:.3f}"])
        tables.append(t)

    if args.contention:
        t = Table(f"Contention: {args.workload}, batch {args.batch}, {args.threads} threads each{isa_note}; each peer "
                  f"{args.repeats} runs alone and {args.repeats} with one background busy-loop process; slowdown = "
                  f"busy / plain median ms/iteration",
                  ["image", "width", "peer", "plain ms", "busy ms", "slowdown", "busy runs (ms)"])
        for image, width in args.contention_configs:
            label = f"{args.workload} {image}x{image} width {width:g}"
            peers = single_peers(image, width, env)
            peers.pop("engine, direct only", None)
            plain = run_peers(peers, args.repeats, label)
            busy = run_peers(peers, args.repeats, label + " busy", busy=True)
            slow = {}
            for name in peers:
                p = statistics.median(m for m, _ in plain[name])
                b = statistics.median(m for m, _ in busy[name])
                slow[name] = b / p
                t.rows.append([str(image), f"{width:g}", name, f"{p:.1f}", f"{b:.1f}", f"{b / p:.2f}",
                               ", ".join(f"{m:.0f}" for m, _ in busy[name])])
            if args.max_ratio is not None and slow["engine"] > slow["PyTorch"]:
                t.failed = True
        tables.append(t)

    if args.strategies:
        w = args.workers
        t = Table(f"Strategies: {w} workers x 1 thread, global batch {args.batch * w} ({args.batch} per worker for "
                  f"ddp), pipeline {args.micro_batches} micro-batches{isa_note}; median over {args.repeats} runs; "
                  f"PyTorch: scripts/torch_strategy_peer.py (one process per worker, gloo)",
                  ["image", "width", "strategy", "split (conv layers)", "engine ms", "PyTorch ms", "/ PyTorch",
                   "engine runs", "PyTorch runs"])
        senv = dict(env, OMP_NUM_THREADS="1")
        for image, width in args.strategy_configs:
            shape = ["--image", str(image), "--width", f"{width:g}"]
            split = balanced_split(width, w)
            for strategy in ("ddp", "mp", "pipeline"):
                engine = [args.parbench, "train", "--workload", "great_net", *shape, "--strategy", strategy,
                          "--devices", str(w), "--threads", "1", "--batch", str(args.batch * w), *iters]
                torch_cmd = [args.python, os.path.join(HERE, "torch_strategy_peer.py"), "--strategy", strategy,
                             "--workers", str(w), "--threads", "1", *shape, "--batch", str(args.batch * w), *iters]
                if strategy != "ddp":
                    # parbench counts a conv and its ReLU as two layers.
                    engine += ["--balance", ",".join(str(2 * n) for n in split)]
                    torch_cmd += ["--balance", ",".join(map(str, split))]
                if strategy == "pipeline":
                    engine += ["--micro-batches", str(args.micro_batches)]
                    torch_cmd += ["--micro-batches", str(args.micro_batches)]
                r = run_peers({"engine": (engine, senv), "PyTorch": (torch_cmd, senv)}, args.repeats,
                              f"{strategy} great_net {image}x{image} width {width:g}")
                e = statistics.median(m for m, _ in r["engine"])
                p = statistics.median(m for m, _ in r["PyTorch"])
                t.rows.append([str(image), f"{width:g}", strategy, "-" if strategy == "ddp" else "+".join(map(str, split)),
                               f"{e:.1f}", f"{p:.1f}", f"{e / p:.3f}", ", ".join(f"{m:.0f}" for m, _ in r["engine"]),
                               ", ".join(f"{m:.0f}" for m, _ in r["PyTorch"])])
        tables.append(t)

    load_after = os.getloadavg()
    text = "\n\n".join(t.markdown() for t in tables) + (
        f"\n\nStarted {started:%Y-%m-%d %H:%M} UTC; load average (1, 5, 15 min) "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after.")
    print()
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if any(t.failed for t in tables):
        print(f"cpu_vs_torch: engine/PyTorch above {args.max_ratio}, engine peak RSS above PyTorch's, or a larger "
              f"slowdown under contention", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
