#!/usr/bin/env bash
# The first run on a GPU machine, from a bundle made by scripts/gpu_bundle.sh: builds and
# installs nothing. Copy the bundle over and run one command:
#
#   BUNDLE/gpu_check.sh OUTDIR            # on the GPU machine, about 6 minutes, 10 at most
#   BUNDLE/gpu_check.sh --dry-run OUTDIR  # anywhere: every stage that needs no GPU, then exit 2
set -uo pipefail

usage() {
    cat <<'EOF'
Usage: gpu_check.sh [options] [OUTDIR]

Stages, each with its own time budget (they sum within the 570 s cap; a stage whose minimum no
longer fits is reported "not run: N s left"), each writing its log as soon as it ends:
  1 environment   first what this machine has (driver, GPUs, CUDA runtime, cuDNN, NCCL,
                  libstdc++, glibc); then bundle integrity (SHA256SUMS), CUDA libraries from
                  NVIDIA's pip wheels (python3 -c 'import nvidia...') or a CUDA toolkit, every
                  bundled binary and library resolved (ldd), GPU, CPU, the libraries loaded
  2 tests         the GPU tests of parbench_tests only (every test with "Gpu" in its name:
                  tests/gpu_skip.h), one process per test
  3 torch         GreatNetwork 512x512 batch 1, engine at tf32 and bf16 (autocast), each in NCHW
                  and NHWC (--layout), PyTorch at tf32 and bf16; exhaustive convolution search
                  on both sides
  3b layers       that net per layer and pass (forward, backward-data, backward-weights, bias add
                  and gradient, ReLU forward and backward) in tf32 and bf16: the engine's
                  `parbench profile` in NCHW and NHWC (profile/*.json in run.tar.gz, the input of
                  `parbench project`) beside PyTorch's in NCHW and channels_last
                  (scripts/torch_layer_profile.py), each with its roofline time and achieved
                  fraction (scripts/layer_table.py): tables in summary.md, rows in layers.json
  4 run           parbench run on the one GPU, --oversubscribe: dp, ddp, mp and pipeline with
                  2 workers each; one traced step of regular (trace-*.json); then every
                  strategy (1F1B, recompute, fsdp, zero2, tp; and the dp x pp / dp x tp hybrids
                  at 4) with 2 and 4 workers on a small great_net; a small U-Net (skips) under
                  regular, ddp, fsdp, mp, 1F1B, ZB-H1, interleaved, ZB-V and tp on 3 workers
  5 sanitizer     compute-sanitizer --tool memcheck over a small parbench train (if present)
At most 9 files land in OUTDIR (default gpu-check-<UTC time> in the current directory):
gpu_check.log (everything printed), env.txt, tests.log, torch.log, layers.json, run.log,
run.tar.gz (the run folders and the profiles), sanitizer.log, summary.md. Commands run in a scratch folder,
so nothing else lands anywhere.

Options:
  --dry-run        run what needs no GPU: bundle integrity, library resolution against a
                   simulated pip-wheel layout made from this machine's CUDA libraries, every
                   later stage's command line parsed, stage 3b's table made from CPU profiles;
                   then stop with "no GPU" (exit 2)
  --python PY      the Python with PyTorch and NVIDIA's wheels (default: python3)
  --iterations N   timed iterations in stage 3 (default 5)
  --warmup N       untimed iterations first in stage 3; the algorithm search runs here (default 2)
  --help           show this help

Exit status: 0 when every stage passed; 1 when a stage failed; 2 when the check could not
run on a GPU (bad usage, a broken bundle or unresolved library, no GPU, --dry-run).
EOF
}

die() { echo "gpu_check: error: $*" >&2; exit 2; }

dry_run=0
python=python3
iterations=5
warmup=2
outdir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry_run=1; shift ;;
        --python) [ $# -ge 2 ] || die "--python needs a value"; python=$2; shift 2 ;;
        --iterations) [ $# -ge 2 ] || die "--iterations needs a value"; iterations=$2; shift 2 ;;
        --warmup) [ $# -ge 2 ] || die "--warmup needs a value"; warmup=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option: $1" ;;
        *) [ -z "$outdir" ] || die "more than one OUTDIR: '$outdir' and '$1'"; outdir=$1; shift ;;
    esac
done
[[ "$iterations" =~ ^[1-9][0-9]*$ ]] || die "--iterations expects a positive integer, got '$iterations'"
[[ "$warmup" =~ ^[0-9]+$ ]] || die "--warmup expects a non-negative integer, got '$warmup'"

bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -x "$bundle/parbench" ] && [ -x "$bundle/parbench_tests" ] && [ -f "$bundle/SHA256SUMS" ] && [ -f "$bundle/gpu_check_env.sh" ] ||
    die "$bundle is not a bundle (no parbench, parbench_tests, SHA256SUMS or gpu_check_env.sh next to this script): make one with scripts/gpu_bundle.sh OUTDIR and run OUTDIR/gpu_check.sh"
outdir=${outdir:-gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$outdir" || die "cannot create $outdir"
outdir=$(cd "$outdir" && pwd)
# Commands run elsewhere (below): a relative --python must still name the same file.
case "$python" in /*) ;; */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
exec > >(tee "$outdir/gpu_check.log") 2>&1

start=$(date +%s)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Every command runs here, so that a file one writes where it stands lands in no promised place.
mkdir -p "$scratch/cwd" && cd "$scratch/cwd" || die "cannot enter $scratch/cwd"
results=()                       # "stage|status|detail" for summary.md
failed=0
section() { printf '\n=== %s (%s, %ds in) ===\n' "$1" "$(date -u +%H:%M:%S)" "$(( $(date +%s) - start ))"; }
result() {
    results+=("$1|$2|$3")
    echo "gpu_check: $1: $2${3:+ ($3)}"
    case "$2" in FAILED | "not run: "*) failed=1 ;; esac
    write_summary
}
# --- budgets: begin (tests/bundle/budget_test.sh sources this block) -----------------------
# Seconds per stage. They sum within hard_cap, so a stage is never cut short because those
# before it used their whole budgets; a stage whose minimum no longer fits is not run, and says so.
hard_cap=570             # the whole check ends before 10 minutes
budget_env=20            # 1: found, integrity, libraries (or, in a dry run, stage 1 and the parse)
budget_tests=75          # 2: the GPU tests, one process each
budget_torch=190         # 3: engine rows (at most engine_each each) and PyTorch (peer_each each)
budget_layers=175        # 3b: engine profiles (profile_each each), PyTorch's (peer_layers_each), the join (join_each)
budget_run=82            # 4: 2 workers (run_two), a traced one-device step (run_trace), every strategy, a U-Net (run_unet)
budget_sanitizer=23      # 5: memcheck over a small training run
reserve=5                # the summary and run.tar.gz
min_tests=30 min_torch=40 min_layers=60 min_run=30 min_sanitizer=20
engine_each=25 peer_each=45 run_two=40 run_trace=20 run_unet=20
profile_each=27 peer_layers_each=55 join_each=10
# Stage 3: engine rows, PRECISION[:MIB][/LAYOUT] (MIB: --conv-workspace-mib MIB, a convolution
# workspace cap; without, the default fastest-fits policy; LAYOUT: --layout, nchw by default), and
# PyTorch at peer_precisions. PyTorch's fp32 exhaustive search did not finish within 50 s on an
# H200 (twice), so fp32 has no peer and no row; tf32 and bf16 run in both layouts.
engine_rows="tf32 tf32/nhwc bf16 bf16/nhwc"
peer_precisions="tf32 bf16"
# Stage 3b: the engine's per-layer profiles, one per precision and layout; PyTorch's in one
# process, every precision in both layouts.
layer_precisions="tf32 bf16"
layer_layouts="nchw nhwc"
peer_layouts="nchw channels_last"
# stage_begin NAME BUDGET MINIMUM: the stage may run until stage_end (its budget, cut to what is
# left of the cap); false, with NAME recorded "not run: N s left", when MINIMUM does not fit.
stage_begin() {
    local left=$(( hard_cap - reserve - ($(date +%s) - start) ))
    if [ "$left" -lt "$3" ]; then
        result "$1" "not run: $(( left > 0 ? left : 0 )) s left" "needs at least $3 s"
        return 1
    fi
    stage_end=$(( $(date +%s) + ($2 < left ? $2 : left) ))
}
# A command's time limit: at most $1 seconds, and no later than the stage's end.
within() {
    local left=$(( stage_end - $(date +%s) ))
    [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
# --- budgets: end ----------------------------------------------------------------------------
write_summary() {
    {
        echo "# parbench GPU check"
        echo
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), ${gpu_name:-no GPU}, $(sed -n 2p "$bundle/BUNDLE.txt")"
        [ "$dry_run" = 1 ] && echo "dry run: no GPU used"
        echo
        echo "| stage | result | detail |"
        echo "|---|---|---|"
        local r
        for r in "${results[@]}"; do echo "| ${r//|/ | } |"; done
        if [ -n "${table:-}" ]; then echo; echo "$table"; fi
        if [ -n "${layers_table:-}" ]; then echo; echo "$layers_table"; fi
    } >"$outdir/summary.md"
}

# TF32 must be what --precision says: an inherited NVIDIA_TF32_OVERRIDE=0 would silently turn
# the tf32 rows into fp32.
unset NVIDIA_TF32_OVERRIDE

# --- 1. environment and library resolution ------------------------------------------------
section "1 environment"
env_log="$outdir/env.txt"
stage_begin "1 environment" "$budget_env" 0
. "$bundle/gpu_check_env.sh"
found 2>&1 | tee "$env_log"
env_lines=$(wc -l <"$env_log")
# Stage 1 runs in this shell (it exports the library path); each command in it has its own limit.
stage1 >>"$env_log" 2>&1
rc=$?
tail -n "+$((env_lines + 1))" "$env_log"
if [ "$rc" != 0 ]; then
    result "1 environment" FAILED "see env.txt"
    echo "gpu_check: the bundle cannot run here; nothing else is tried"
    exit 2
fi
gpu_name=$(command -v nvidia-smi >/dev/null 2>&1 && timeout "$(within 30)" nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
gpus=$(sed -n 's/^cuda: \([0-9]*\) device(s).*/\1/p' "$scratch/devices.txt" | head -n 1)
result "1 environment" ok "libraries resolved; ${gpus:-0} CUDA device(s)"

# The GPU tests, by the one rule of tests/gpu_skip.h: every test that needs a GPU has "Gpu" in
# its name (TestRules.EveryTestThatSkipsWithoutADeviceIsSelected checks it).
gpu_filter='*Gpu*'
# Their full names, one a line: --gtest_list_tests prints "Suite." lines, then "  Test" lines
# (and gtest_main's banner, skipped).
gpu_tests() {
    local line suite=""
    timeout "$(within 30)" "$bundle/parbench_tests" --gtest_list_tests --gtest_filter="$gpu_filter" | sed 's/  *#.*//; s/ *$//' |
        while IFS= read -r line; do
            case "$line" in
                "  "*) echo "$suite${line##* }" ;;
                [A-Za-z_]*.) suite=$line ;;
            esac
        done
}

# layer_stage DIR ENGINE_ARGS...: the engine's profile per precision and layout, PyTorch's, the
# joined table (in a dry run DIR holds CPU profiles of a tiny net). Sets layers_table; fails when a
# side failed.
layer_stage() {
    local dir=$1 precision layout prc bad=() engines=() log=$1/layers.log torch_json=$1/torch-layers.json
    shift
    mkdir -p "$dir"
    for precision in $layer_precisions; do
        for layout in $layer_layouts; do
            echo "=== parbench profile $precision $layout" >>"$log"
            timeout "$(within "$profile_each")" "$bundle/parbench" profile "$@" --precision "$precision" \
                $([ "$layout" = nchw ] || echo "--layout $layout") --out "$dir/great_net-$precision-$layout.json" >>"$log" 2>&1
            prc=$?
            [ "$prc" = 0 ] && engines+=(--engine "$precision/$layout=$dir/great_net-$precision-$layout.json") ||
                bad+=("engine $precision $layout (exit $prc)")
        done
    done
    if [ -n "${layers_torch_args:-}" ]; then
        echo "=== PyTorch per layer: $layer_precisions; $peer_layouts" >>"$log"
        timeout "$(within "$peer_layers_each")" "$python" "$bundle/scripts/torch_layer_profile.py" $layers_torch_args \
            --precisions "$(tr ' ' , <<<"$layer_precisions")" --layouts "$(tr ' ' , <<<"$peer_layouts")" \
            --json "$torch_json" >>"$log" 2>&1
        prc=$?
        [ "$prc" = 0 ] || { bad+=("PyTorch (exit $prc)"); rm -f "$torch_json"; }
    fi
    [ -f "$torch_json" ] && engines+=(--torch "$torch_json")
    echo "=== layer_table.py" >>"$log"
    timeout "$(within "$join_each")" "$python" "$bundle/scripts/layer_table.py" "${engines[@]}" --gpu "${gpu_name:-}" \
        --json "$outdir/layers.json" >"$dir/layers.md" 2>>"$log"
    prc=$?
    [ "$prc" = 0 ] && layers_table=$(cat "$dir/layers.md") || bad+=("layer_table.py (exit $prc)")
    grep -E '^=== |^layer_table' "$log"
    # The passes summed over the layers, per precision (the per-layer rows: summary.md).
    awk '/summed over the layers/ {on = 1} /per layer \(ms/ {on = 0} on && !/^\|---/' "$dir/layers.md" 2>/dev/null
    [ "${#bad[@]}" = 0 ] || { echo "3b failed: ${bad[*]}"; return 1; }
}

# --- dry run: every later stage's command line, parsed ------------------------------------
if [ "$dry_run" = 1 ]; then
    section "dry run: command lines of stages 2-5"
    stage_begin "dry run" "$budget_tests" "$min_tests" || exit 1
    env_lines=$(wc -l <"$env_log")
    ( dry_run_commands
    ) >>"$env_log" 2>&1
    rc=$?
    tail -n "+$((env_lines + 1))" "$env_log"
    [ "$rc" = 0 ] && result "dry run" ok "every stage's command line parsed" || result "dry run" FAILED "see env.txt"
    [ "$rc" = 0 ] || exit 1
    echo "gpu_check: no GPU: dry run done, every stage that needs no GPU passed ($(( $(date +%s) - start ))s)"
    exit 2
fi
if [ "${gpus:-0}" -lt 1 ]; then
    echo "gpu_check: no GPU: parbench sees no CUDA device (see env.txt)"
    exit 2
fi

# --- 2. the GPU tests, one process each ------------------------------------------------------
section "2 GPU tests"
tests_log="$outdir/tests.log"
stage2() {
    local t trc passed=0 failed_tests=() skipped=0 not_run=0
    while read -r t; do
        if [ $(( stage_end - $(date +%s) )) -le 1 ]; then not_run=$((not_run + 1)); echo "NOT RUN (stage time out): $t" >>"$tests_log"; continue; fi
        echo "=== $t" >>"$tests_log"
        timeout "$(within 60)" "$bundle/parbench_tests" --gtest_filter="$t" >"$scratch/t.txt" 2>&1
        trc=$?
        cat "$scratch/t.txt" >>"$tests_log"
        if [ "$trc" != 0 ]; then
            failed_tests+=("$t$([ "$trc" = 124 ] && echo ' (timed out)')")
        elif grep -q '^\[  SKIPPED \]' "$scratch/t.txt"; then
            skipped=$((skipped + 1))
        else
            passed=$((passed + 1))
        fi
    done < <(gpu_tests)
    echo "passed $passed, failed ${#failed_tests[@]}, skipped $skipped, not run $not_run"
    [ "${#failed_tests[@]}" = 0 ] || printf '  FAILED %s\n' "${failed_tests[@]}"
    if [ "${#failed_tests[@]}" -gt 0 ] || [ "$not_run" -gt 0 ] || [ "$skipped" -gt 0 ]; then
        result "2 GPU tests" FAILED "passed $passed, failed ${#failed_tests[@]}: ${failed_tests[*]:-}; skipped $skipped; not run $not_run"
    else
        result "2 GPU tests" ok "passed $passed"
    fi
}
stage_begin "2 GPU tests" "$budget_tests" "$min_tests" && stage2

# --- 3. GreatNetwork 512x512, engine vs PyTorch ---------------------------------------------
section "3 GreatNetwork 512x512 batch 1: engine vs PyTorch (exhaustive conv search)"
torch_log="$outdir/torch.log"
# Training FLOPs per 512x512 image, width 1: 3 x forward, forward = sum over the 14 convs.
tflop_per_image=$(awk 'BEGIN { split("3 16 32 64 128 256 512 1024 512 256 128 64 32 16 3", c, " ");
                               for (i = 1; i < 15; i++) f += 2 * c[i] * c[i + 1] * 9 * 512 * 512;
                               printf "%.2f", 3 * f / 1e12 }')
# The last "median X UNIT/iteration" line, in ms (parbench prints the unit that fits: 1.02 s).
median_of() {
    awk '$1 == "median" && $3 ~ /^(ns|us|ms|s)\/iteration/ {
             u = substr($3, 1, index($3, "/") - 1); v = $2 * (u == "s" ? 1000 : u == "us" ? 0.001 : u == "ns" ? 1e-6 : 1) }
         END { if (v != "") printf "%.4g\n", v }' "$1"
}
stage3() {
    local spec precision cap layout label e t erc trc ratio peak share
    declare -A peer_ms peer_rc
    rows=()
    rate() { [ -n "$1" ] && awk -v ms="$1" -v f="$tflop_per_image" 'BEGIN {printf "%.1f", f / (ms / 1e3)}' || echo n/a; }
    for precision in $peer_precisions; do
        echo "=== PyTorch $precision" >>"$torch_log"
        timeout "$(within "$peer_each")" "$python" "$bundle/scripts/torch_gpu_peer.py" --device cuda --image 512 --width 1 --batch 1 \
            --precision "$precision" --conv-search exhaustive --iterations "$iterations" --warmup "$warmup" \
            >"$scratch/t.txt" 2>&1
        peer_rc[$precision]=$?
        cat "$scratch/t.txt" >>"$torch_log"
        peer_ms[$precision]=$(median_of "$scratch/t.txt")
    done
    for spec in $engine_rows; do
        layout=nchw
        case "$spec" in */*) layout=${spec#*/} spec=${spec%%/*} ;; esac
        precision=${spec%%:*} cap=""
        [ "$spec" = "$precision" ] || cap=${spec#*:}
        label="$precision${cap:+, workspace cap $cap MiB}$([ "$layout" = nchw ] || echo ", $layout")"
        echo "=== engine $label" >>"$torch_log"
        env PARBENCH_CONV_SEARCH=exhaustive timeout "$(within "$engine_each")" \
            "$bundle/parbench" train --workload great_net --image 512 --width 1 --batch 1 --precision "$precision" \
            ${cap:+--conv-workspace-mib "$cap"} --layout "$layout" \
            --device-kind cuda --iterations "$iterations" --warmup "$warmup" >"$scratch/e.txt" 2>&1
        erc=$?
        cat "$scratch/e.txt" >>"$torch_log"
        e=$(median_of "$scratch/e.txt")
        t=${peer_ms[$precision]:-} trc=${peer_rc[$precision]:-not run}
        echo "$label: engine ${e:-n/a} ms/iteration (exit $erc), PyTorch ${t:-n/a} ms/iteration (exit $trc)"
        ratio=n/a
        [ -n "$e" ] && [ -n "$t" ] && ratio=$(awk -v e="$e" -v t="$t" 'BEGIN {printf "%.2f", e / t}')
        # The H200's dense peak at this precision (datasheet): what share of it the engine reached.
        peak=$(case "$precision" in fp32) echo 67 ;; tf32) echo 494 ;; bf16) echo 989 ;; esac)
        share=n/a
        [ -n "$e" ] && share=$(awk -v ms="$e" -v f="$tflop_per_image" -v p="$peak" 'BEGIN {printf "%.0f%%", 100 * f / (ms / 1e3) / p}')
        rows+=("| $label | ${e:-n/a} | ${t:-n/a} | $ratio | $(rate "$e") | $(rate "$t") | $share of $peak |")
        [ "$erc" = 0 ] && { [ "$trc" = 0 ] || [ "$trc" = "not run" ]; } || stage3_failed=1
    done
    table=$(printf '%s\n' "GreatNetwork 512x512, width 1, batch 1, median of $iterations after $warmup warm-up, exhaustive search." \
            "Training FLOPs = 3 x forward = $tflop_per_image TFLOP per image (forward: the 14 convs, 2*Cin*Cout*9*512*512 each)." \
            "Bars: engine/PyTorch <= 1.00 at each precision; tf32 engine >= 247 TFLOP/s (50% of H200 dense TF32, 494)." \
            "bf16 is autocast on both sides (fp32 master weights and Adam, bf16 convolutions, fp32 loss)." "" \
            "| precision | engine ms/iteration | PyTorch ms/iteration | engine/PyTorch | engine TFLOP/s | PyTorch TFLOP/s | engine, % of H200 dense peak (TFLOP/s) |" \
            "|---|---:|---:|---:|---:|---:|---:|" "${rows[@]}")
    [ -z "${stage3_failed:-}" ] && result "3 engine vs PyTorch" ok "table below" ||
        result "3 engine vs PyTorch" FAILED "see torch.log"
}
stage_begin "3 engine vs PyTorch" "$budget_torch" "$min_torch" && stage3

# --- 3b. per layer and pass: engine and PyTorch against the roofline ---------------------------
section "3b per layer: GreatNetwork 512x512 batch 1, engine and PyTorch (NCHW, NHWC), rooflines"
stage3b() {
    layers_torch_args="--device cuda --image 512 --width 1 --batch 1 --reps 3"
    layer_stage "$scratch/profile" --workload great_net --image 512 --width 1 --batch 1 --device-kind cuda \
        --warmup 1 --reps 3
    if [ "$?" = 0 ]; then result "3b layers" ok "tables below; layers.json, profile/ in run.tar.gz"
    else result "3b layers" FAILED "see profile/layers.log in run.tar.gz"; fi
}
stage_begin "3b layers" "$budget_layers" "$min_layers" && stage3b

# --- 4. every multi-worker strategy on the one GPU ------------------------------------------
section "4 parbench run: dp, ddp, mp, pipeline with 2 workers on one GPU; every strategy with 2 and 4"
stage4() {
    timeout "$(within "$run_two")" "$bundle/parbench" run --device-kind cuda --oversubscribe --strategies dp,ddp,mp,pipeline \
        --devices 2 --iterations 3 --warmup 1 --out "$scratch/run" >"$outdir/run.log" 2>&1
    local rrc=$? arc trc urc
    sed -n '/^## /,$p' "$outdir/run.log" | head -n 30
    # One device, one step traced layer by layer (trace-*.json in run.tar.gz): where the time goes.
    echo "--- regular on one GPU, traced ---" >>"$outdir/run.log"
    timeout "$(within "$run_trace")" "$bundle/parbench" run --device-kind cuda --strategies regular --devices 1 --precision tf32 \
        --iterations 2 --warmup 1 --trace --out "$scratch/run-trace" >>"$outdir/run.log" 2>&1
    trc=$?
    # Every strategy's GPU code path (4 workers: dp2xpp2 and dp2xtp2 too), at a small size.
    echo "--- every strategy, 2 and 4 workers, great_net 64x64 width 0.25 ---" >>"$outdir/run.log"
    timeout "$(within "$budget_run")" "$bundle/parbench" run --device-kind cuda --oversubscribe --strategies all --devices 2,4 \
        --workload great_net --image 64 --width 0.25 --batch 2 --iterations 2 --warmup 1 --out "$scratch/run-all" \
        >>"$outdir/run.log" 2>&1
    arc=$?
    sed -n '/^## great_net (image 64/,$p' "$outdir/run.log" | head -n 20
    # A net with skips: its stages send them over NCCL, on communicators of their own past a neighbour
    # (under the chunked schedules, interleaved and ZB-V, a two-worker one per flow); tp runs it as a graph.
    echo "--- a U-Net 64x64 width 0.125, 3 workers ---" >>"$outdir/run.log"
    timeout "$(within "$run_unet")" "$bundle/parbench" run --device-kind cuda --oversubscribe --workload unet --image 64 \
        --width 0.125 --batch 2 --strategies regular,ddp,fsdp,mp,pipeline-1f1b,pipeline-zb,pipeline-interleaved,pipeline-zbv,tp --devices 3 --iterations 2 \
        --warmup 1 --out "$scratch/run-unet" >>"$outdir/run.log" 2>&1
    urc=$?
    if [ "$rrc" = 0 ] && [ "$trc" = 0 ] && [ "$arc" = 0 ] && [ "$urc" = 0 ]; then result "4 run" ok "run.log, run.tar.gz"
    else result "4 run" FAILED "exit $rrc (2 workers), $trc (traced), $arc (every strategy, 2 and 4 workers), $urc (U-Net), see run.log"; fi
}
stage_begin "4 run" "$budget_run" "$min_run" && stage4

# --- 5. memcheck over a small training run --------------------------------------------------
section "5 compute-sanitizer memcheck"
sanitizer=$(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}"/bin/compute-sanitizer \
            /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
if [ -z "$sanitizer" ]; then
    result "5 sanitizer" "not run" "compute-sanitizer not found"
elif stage_begin "5 sanitizer" "$budget_sanitizer" "$min_sanitizer"; then
    # fp32 first (the path every strategy takes), then bf16 (autocast: conversions, bf16 convolutions).
    src=0 bad=()
    for precision in fp32 bf16; do
        echo "=== memcheck, train --precision $precision" >>"$outdir/sanitizer.log"
        timeout "$(within "$budget_sanitizer")" "$sanitizer" --tool memcheck --error-exitcode 3 "$bundle/parbench" train \
            --workload great_net --image 64 --width 0.25 --batch 2 --precision "$precision" --device-kind cuda \
            --iterations 2 --warmup 1 >>"$outdir/sanitizer.log" 2>&1
        src=$?
        [ "$src" = 0 ] || bad+=("$precision: exit $src")
    done
    grep -E '^=== |ERROR SUMMARY' "$outdir/sanitizer.log"
    [ "${#bad[@]}" = 0 ] && result "5 sanitizer" ok "no memcheck error (fp32, bf16)" ||
        result "5 sanitizer" FAILED "${bad[*]}, see sanitizer.log"
fi

section "summary"
runs=()
for r in run run-trace run-all run-unet profile; do [ -d "$scratch/$r" ] && runs+=("$r"); done
[ "${#runs[@]}" -gt 0 ] && tar -C "$scratch" -czf "$outdir/run.tar.gz" "${runs[@]}"
stray=$(find "$scratch/cwd" -type f | sed "s|^$scratch/cwd/||" | head -n 5 | tr '\n' ' ')
[ -z "$stray" ] || echo "gpu_check: files written where commands stood, not kept: $stray"
cat "$outdir/summary.md"
exit "$failed"
