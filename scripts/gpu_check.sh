#!/usr/bin/env bash
# All GPU checking in one run, for an NVIDIA H200 (or any sm_90 GPU) machine: build for sm_90,
# run the whole test suite (GPU tests included), then time the seed's GreatNetwork at 512x512
# against PyTorch on the same GPU, fp32 and tf32, batch 1 and 2. Logs and table.md go to OUTDIR.
#
#   scripts/gpu_check.sh runs/gpu-$(date +%Y%m%d)
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/gpu_check.sh [options] OUTDIR

Builds parbench for sm_90 (build-gpu/), runs build-gpu/parbench_tests and `parbench run`
with its GPU defaults (OUTDIR/run/), then times
`parbench train --workload great_net --image 512 --width 1` and the PyTorch peer
(scripts/torch_gpu_peer.py) for fp32 and tf32 at each batch, both with exhaustive
convolution search (PARBENCH_CONV_SEARCH=exhaustive; torch.backends.cudnn.benchmark=True).
Prints a table last; every log and OUTDIR/table.md stay in OUTDIR. Installs nothing
itself: missing build packages are delegated to scripts/install-deps.sh (apt-get).

Options:
  --iterations N   timed iterations per configuration (default 10)
  --warmup N       untimed iterations first; the algorithm search runs here (default 2)
  --batches "B.."  batch sizes (default "1 2")
  --jobs N         build parallelism (default: nproc)
  --help           show this help

Exit status: 0 when the build, the tests and every timed run succeeded (whether the
performance bars are met is printed, not the exit status); 1 when a test or a run
failed; 2 when the check could not start (usage, missing tools, no GPU).
EOF
}

die() { echo "gpu_check: error: $*" >&2; exit 2; }

iterations=10
warmup=2
batches="1 2"
jobs=$(nproc 2>/dev/null || echo 16)
outdir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --iterations) [ $# -ge 2 ] || die "--iterations needs a value"; iterations=$2; shift 2 ;;
        --warmup) [ $# -ge 2 ] || die "--warmup needs a value"; warmup=$2; shift 2 ;;
        --batches) [ $# -ge 2 ] || die "--batches needs a value"; batches=$2; shift 2 ;;
        --jobs) [ $# -ge 2 ] || die "--jobs needs a value"; jobs=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option: $1" ;;
        *) [ -z "$outdir" ] || die "more than one OUTDIR: '$outdir' and '$1'"; outdir=$1; shift ;;
    esac
done
[ -n "$outdir" ] || { usage >&2; die "OUTDIR is required"; }
for v in "$iterations" "$warmup" "$jobs" $batches; do
    [[ "$v" =~ ^[0-9]+$ ]] || die "expected a non-negative integer, got '$v'"
done
[ "$iterations" -ge 1 ] || die "--iterations must be at least 1"
[ -n "${batches// /}" ] || die "--batches needs at least one batch size"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
build="$root/build-gpu"
# Everything this script prints also lands in OUTDIR/gpu_check.log.
exec > >(tee "$outdir/gpu_check.log") 2>&1
cd "$root"

failures=()
note_failure() { failures+=("$1"); echo "gpu_check: FAILED: $1"; }
section() { printf '\n=== %s (%s) ===\n' "$1" "$(date +%H:%M:%S)"; }

# TF32 must be what --precision says: an inherited NVIDIA_TF32_OVERRIDE=0 would silently turn
# the tf32 rows into fp32 (fp32 is pinned through the library APIs, not this variable).
unset NVIDIA_TF32_OVERRIDE

# --- 1. tools and packages ----------------------------------------------------------------
section "environment"
if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
        if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
    done
fi
command -v nvcc >/dev/null 2>&1 || die "nvcc not found (install the CUDA toolkit or put it on PATH)"
header_present() {
    local h
    for h in "$@"; do
        [ -e "/usr/include/$h" ] || [ -e "/usr/local/include/$h" ] || return 1
    done
}
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1 ||
   ! header_present fmt/format.h nlohmann/json.hpp benchmark/benchmark.h gtest/gtest.h; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "build tools or libraries missing; running scripts/install-deps.sh"
        bash "$root/scripts/install-deps.sh" ||
            die "scripts/install-deps.sh failed; install cmake, g++, libfmt-dev, nlohmann-json3-dev, libbenchmark-dev, libgtest-dev, libgmock-dev and rerun"
    else
        die "cmake, g++ or a library header (fmt, nlohmann-json, benchmark, gtest) is missing and apt-get is not available: install them and rerun"
    fi
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi >"$outdir/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed:"
    cat "$outdir/nvidia-smi.txt"
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
    gpu_name=${gpu_name:-unknown GPU}
else
    echo "nvidia-smi not found"
    gpu_name="unknown GPU"
fi
nvcc --version | tail -n 2
cmake --version | head -n 1
have_torch=1
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >"$outdir/torch-probe.log" 2>&1; then
    have_torch=0
    note_failure "python3 has no PyTorch with CUDA (see torch-probe.log): PyTorch columns will be n/a"
else
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' |
        tee -a "$outdir/torch-probe.log"
fi
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# --- 2. build for sm_90 -------------------------------------------------------------------
section "build (sm_90, $jobs jobs)"
# A cache from a copy of the repo at another path cannot be reused.
if [ -f "$build/CMakeCache.txt" ] && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
    echo "build-gpu/ was configured for another source directory; starting it afresh"
    rm -rf "$build"
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPARBENCH_CUDA=ON \
      -DPARBENCH_CUDA_ARCHS=90 -DCMAKE_CUDA_ARCHITECTURES=90 >"$outdir/configure.log" 2>&1 ||
    { tail -n 30 "$outdir/configure.log"; die "configure failed (full log: $outdir/configure.log)"; }
grep 'parbench:' "$outdir/configure.log" || true
cmake --build "$build" -j "$jobs" >"$outdir/build.log" 2>&1 ||
    { tail -n 40 "$outdir/build.log"; die "build failed (full log: $outdir/build.log)"; }
echo "built: $build/parbench, $build/parbench_tests"
"$build/parbench" devices | tee "$outdir/devices.txt"
if grep -q 'cuda: 0 device' "$outdir/devices.txt"; then
    die "parbench sees no CUDA device"
fi

# --- 3. tests -----------------------------------------------------------------------------
section "tests (all of parbench_tests; the Cuda suite needs the GPU)"
if timeout 300 "$build/parbench_tests" >"$outdir/tests.log" 2>&1; then
    grep -E '^\[  (PASSED|SKIPPED) ' "$outdir/tests.log" | head -n 20 || true
else
    grep -E '^\[  FAILED  \]|^\[  (PASSED|SKIPPED) ' "$outdir/tests.log" | head -n 40 || true
    note_failure "parbench_tests (log: tests.log)"
fi
if grep -E '^\[  SKIPPED \] Cuda' "$outdir/tests.log"; then
    note_failure "Cuda tests skipped on a GPU machine"
fi

# --- 4. GreatNetwork 512x512 against PyTorch ----------------------------------------------
section "GreatNetwork 512x512, width 1: engine vs PyTorch (exhaustive conv search)"
# Training FLOPs per image = 3 x forward; forward = sum over the 14 convs of 2*Cin*Cout*3*3*H*W.
gflop_per_image=$(python3 - <<'EOF'
c = [3, 16, 32, 64, 128, 256, 512, 1024, 512, 256, 128, 64, 32, 16, 3]
print(3 * sum(2 * a * b * 9 * 512 * 512 for a, b in zip(c, c[1:])) / 1e9)
EOF
)
median_of() { sed -n 's/^median \([0-9.]*\) ms\/iteration.*/\1/p' "$1" | tail -n 1; }

rows=()
for precision in fp32 tf32; do
    for batch in $batches; do
        config="$precision batch $batch"
        echo "--- $config"
        elog="$outdir/engine-$precision-b$batch.log"
        if PARBENCH_CONV_SEARCH=exhaustive timeout 300 "$build/parbench" train --workload great_net --image 512 \
                --width 1 --batch "$batch" --precision "$precision" --device-kind cuda \
                --iterations "$iterations" --warmup "$warmup" >"$elog" 2>&1; then
            engine_ms=$(median_of "$elog")
        else
            engine_ms=""
            tail -n 5 "$elog"
            note_failure "engine $config (log: $(basename "$elog"))"
        fi
        torch_ms=""
        if [ "$have_torch" = 1 ]; then
            tlog="$outdir/torch-$precision-b$batch.log"
            if timeout 300 python3 "$root/scripts/torch_gpu_peer.py" --device cuda --image 512 --width 1 \
                    --batch "$batch" --precision "$precision" --conv-search exhaustive \
                    --iterations "$iterations" --warmup "$warmup" >"$tlog" 2>&1; then
                torch_ms=$(median_of "$tlog")
            else
                tail -n 5 "$tlog"
                note_failure "PyTorch $config (log: $(basename "$tlog"))"
            fi
        fi
        echo "engine ${engine_ms:-n/a} ms/iteration, PyTorch ${torch_ms:-n/a} ms/iteration"
        rows+=("$precision|$batch|${engine_ms}|${torch_ms}")
    done
done

# --- 4b. the benchmark sweep with its GPU defaults -----------------------------------------
section "parbench run with its defaults (great_net 512x512, batch 1 per GPU, every strategy)"
if timeout 300 "$build/parbench" run --out "$outdir/run" >"$outdir/run.log" 2>&1; then
    sed -n '/^## /,$p' "$outdir/run.log"
else
    tail -n 20 "$outdir/run.log"
    note_failure "parbench run (log: run.log)"
fi

# --- 5. the table ---------------------------------------------------------------------------
section "table"
table=$(python3 - "$gflop_per_image" "${rows[@]}" <<'EOF'
import sys
gflop_per_image = float(sys.argv[1])
TF32_DENSE_TFLOPS = 494.0  # H200 SXM dense TF32 tensor-core peak
lines = ["| config | engine ms/iteration | PyTorch ms/iteration | engine/PyTorch | engine TFLOP/s | PyTorch TFLOP/s |",
         "|---|---:|---:|---:|---:|---:|"]
ratio_ok, tf32_ok, complete = True, True, True
for row in sys.argv[2:]:
    prec, batch, e, t = row.split("|")
    batch = int(batch)
    tflop = gflop_per_image * batch / 1e3
    e = float(e) if e else None
    t = float(t) if t else None
    fmt_ms = lambda v: f"{v:.2f}" if v is not None else "n/a"
    fmt_rate = lambda v: f"{tflop / (v / 1e3):.1f}" if v is not None else "n/a"
    ratio = f"{e / t:.2f}" if e is not None and t is not None else "n/a"
    if e is None or t is None:
        complete = False
    elif e / t > 1.00:
        ratio_ok = False
    if prec == "tf32" and (e is None or tflop / (e / 1e3) < 0.6 * TF32_DENSE_TFLOPS):
        tf32_ok = False
    lines.append(f"| {prec}, batch {batch} | {fmt_ms(e)} | {fmt_ms(t)} | {ratio} | {fmt_rate(e)} | {fmt_rate(t)} |")
lines.append("")
lines.append(f"Training FLOPs = 3 x forward = {gflop_per_image / 1e3:.2f} TFLOP per image "
             "(forward: sum over the 14 convs of 2*Cin*Cout*9*512*512).")
lines.append("Bar 1, engine <= PyTorch at every configuration (ratio <= 1.00): "
             + ("NOT met" if not ratio_ok else "met" if complete else "incomplete (a run failed)"))
lines.append(f"Bar 2, tf32 engine >= 60% of H200 dense TF32 ({0.6 * TF32_DENSE_TFLOPS:.0f} TFLOP/s): "
             + ("met" if tf32_ok else "NOT met"))
print("\n".join(lines))
EOF
)
{
    echo "# GPU check: GreatNetwork 512x512, width 1, engine vs PyTorch"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%MZ), $gpu_name, commit $commit; $iterations timed iterations after $warmup warm-up,"
    echo "median; exhaustive conv search in both (PARBENCH_CONV_SEARCH=exhaustive, cudnn.benchmark=True)."
    echo "Command: scripts/gpu_check.sh $outdir"
    echo
    echo "$table"
    if [ "${#failures[@]}" -gt 0 ]; then
        echo
        echo "Failures:"
        printf -- '- %s\n' "${failures[@]}"
    fi
} >"$outdir/table.md"
cat "$outdir/table.md"
[ "${#failures[@]}" -eq 0 ] || exit 1
