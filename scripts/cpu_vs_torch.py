#!/usr/bin/python3
"""CPU training speed and memory of the parbench engine against PyTorch, side by side.

For each configuration runs `parbench train --workload great_net` and scripts/torch_peer.py
(the same net, batch, loss and optimizer in PyTorch) as subprocesses, alternating between the
two (and which goes first) so that background load hits both alike, --repeats times. Reports
the median over repeats of each run's median ms/iteration, the ratio engine/PyTorch and each
peer's peak resident memory (from wait4's rusage of that very subprocess), as a markdown table.

    /usr/bin/python3 scripts/cpu_vs_torch.py [--parbench build/parbench] [--threads 2]
        [--configs 64:1,128:0.25] [--batch 2] [--iterations 10] [--warmup 2] [--repeats 3]
        [--also-direct] [--out FILE] [--max-ratio 0.90]

--also-direct adds a third peer: the engine with PARBENCH_CPU_WINOGRAD=0, i.e. only oneDNN's
direct convolution kernels, the ones PyTorch's CPU convolutions use.

Exit status: 0, or 1 when --max-ratio is given and a ratio exceeds it or the engine's peak
RSS exceeds PyTorch's; 2 when a run fails.
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
MEDIAN_RE = re.compile(r"^median ([0-9.]+) ms/iteration", re.MULTILINE)


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
    return float(m.group(1)), usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def parse_configs(s):
    configs = []
    for item in s.split(","):
        try:
            image, width = item.split(":")
            configs.append((int(image), float(width)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected IMAGE:WIDTH[,IMAGE:WIDTH...], got {item!r}")
    return configs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--parbench", default="build/parbench", help="the parbench program (default build/parbench)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="Python with PyTorch for the peer (default /usr/bin/python3, Debian's python3-torch)")
    ap.add_argument("--configs", type=parse_configs, default=parse_configs("64:1,128:0.25"),
                    help="great_net IMAGE:WIDTH pairs (default 64:1,128:0.25)")
    ap.add_argument("--batch", type=int, default=2, help="batch size (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads for both peers (default 2)")
    ap.add_argument("--iterations", type=int, default=10, help="timed iterations per run (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations per run (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each peer per config (default 3)")
    ap.add_argument("--also-direct", action="store_true",
                    help="also run the engine with PARBENCH_CPU_WINOGRAD=0 (direct convolutions only)")
    ap.add_argument("--out", help="also write the markdown table to this file")
    ap.add_argument("--max-ratio", type=float,
                    help="exit 1 if the engine's time / PyTorch's exceeds this, or its peak RSS is above PyTorch's")
    args = ap.parse_args()
    if min(args.batch, args.threads, args.iterations, args.repeats) < 1 or args.warmup < 0:
        ap.error("batch, threads, iterations and repeats must be positive")
    if not os.access(args.parbench, os.X_OK):
        fail(f"{args.parbench} is not an executable (build it, or pass --parbench)")

    # The same OpenMP setting for both peers; each also sets its thread count explicitly.
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    env.pop("PARBENCH_CPU_WINOGRAD", None)
    common = ["--batch", str(args.batch), "--iterations", str(args.iterations), "--warmup", str(args.warmup),
              "--threads", str(args.threads)]
    names = ["engine"] + (["engine, direct only"] if args.also_direct else []) + ["PyTorch"]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    results = {cfg: {name: [] for name in names} for cfg in args.configs}
    for rep in range(args.repeats):
        for image, width in args.configs:
            shape = ["--image", str(image), "--width", f"{width:g}"]
            engine = [args.parbench, "train", "--workload", "great_net", *shape, *common]
            peers = {
                "engine": (engine, env),
                "engine, direct only": (engine, dict(env, PARBENCH_CPU_WINOGRAD="0")),
                "PyTorch": ([args.python, os.path.join(HERE, "torch_peer.py"), *shape, *common], env),
            }
            # Rotate which peer goes first, so drifting load does not favour one side.
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                ms, rss = run(*peers[name])
                results[(image, width)][name].append((ms, rss))
                print(f"repeat {rep + 1}/{args.repeats}  great_net {image}x{image} width {width:g}  {name:20s} "
                      f"{ms:10.2f} ms/iteration  peak RSS {rss:7.0f} MiB", flush=True)
    load_after = os.getloadavg()

    lines = [
        f"great_net, batch {args.batch}, {args.threads} threads each, fp32; median over {args.repeats} runs of each "
        f"run's median of {args.iterations} iterations (after {args.warmup} warm-up); peak RSS: the largest of the runs",
        "",
        "| image | width | peer | ms/iteration | / PyTorch | runs (ms) | peak RSS (MiB) | / PyTorch |",
        "|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    failed = False
    for (image, width), r in results.items():
        t_ms = statistics.median(ms for ms, _ in r["PyTorch"])
        t_rss = max(rss for _, rss in r["PyTorch"])
        for name in names:
            ms = statistics.median(m for m, _ in r[name])
            rss = max(x for _, x in r[name])
            if name == "engine" and args.max_ratio is not None and (ms / t_ms > args.max_ratio or rss > t_rss):
                failed = True
            runs = ", ".join(f"{m:.0f}" for m, _ in r[name])
            lines.append(f"| {image} | {width:g} | {name} | {ms:.1f} | {ms / t_ms:.3f} | {runs} | {rss:.0f} | "
                         f"{rss / t_rss:.3f} |")
    lines += [
        "",
        f"Started {started:%Y-%m-%d %H:%M} UTC; load average (1, 5, 15 min) "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after.",
    ]
    table = "\n".join(lines)
    print()
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    if failed:
        print(f"cpu_vs_torch: engine/PyTorch above {args.max_ratio} or engine peak RSS above PyTorch's",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
