#!/usr/bin/env bash
# How well `parbench compare` separates a uniform 5% slowdown from run-to-run noise: one
# baseline run, then RERUNS unchanged reruns of the same build, each compared with the baseline
# (a FAIL is a false alarm) and, doctored 5% slower (every time x1.05), compared again (a PASS
# is a miss). Also with the history as baseline (rerun i against the baseline and reruns < i,
# from i = 3), and with --time cpu. Last, each rerun against itself doctored 5% slower: the
# statistic's power when there is no run-to-run drift at all. Exit code 3 (inconclusive: too
# little data for a verdict) is neither a false alarm nor a miss; it is counted apart.
# FACTOR=1.10: the doctored slowdown (default 1.05). JUDGE=1 (both modes): run nothing; judge
# the runs already in OUT_DIR again with this PARBENCH (the same data for two builds).
#
# With --ab first: the A/B mode instead. RERUNS jobs of `parbench ab PARBENCH PARBENCH --pairs
# $PAIRS --interleave $INTERLEAVE` (environment, default 5 and benchmark; the same build on both
# sides: a FAIL is a false alarm), each job's contender runs then doctored 5% slower (every time
# x1.05) and compared pair by pair again (`compare --paired`: a PASS is a miss); wall time and
# --time cpu, suite verdict and --gate each. DOCTOR=wrapper: misses only, on runs of their own:
# the contender is a wrapper script that makes a real run and then multiplies its times by 1.05.
# usage: scripts/compare_noise.sh [--ab] PARBENCH [OUT_DIR] [RERUNS] [-- extra parbench run flags]
set -euo pipefail
PY=${PARBENCH_PYTHON:-/usr/bin/python3}
doctor() {  # doctor IN OUT FACTOR: every time of a parbench results.json multiplied by FACTOR
  "$PY" - "$1" "$2" "$3" <<'PY'
import json, math, sys
src, dst, k = sys.argv[1], sys.argv[2], float(sys.argv[3])
text = open(src).read().replace("-nan", "NaN")
doc = json.loads(text)
for b in doc["benchmarks"]:
    if b.get("error_occurred") or b.get("aggregate_unit", "time") != "time" or "real_time" not in b:
        continue
    b["real_time"] *= k
    b["cpu_time"] *= k
doc["iteration_times_s"] = {n: [[t * k for t in rep] for rep in reps] for n, reps in doc.get("iteration_times_s", {}).items()}
open(dst, "w").write(json.dumps(doc, indent=1))
PY
}
# --doctor FILE FACTOR: the A/B wrapper's hook (below), FILE doctored in place.
if [[ ${1:-} == --doctor ]]; then doctor "$2" "$2" "$3"; exit; fi
AB=0
[[ ${1:-} == --ab ]] && { AB=1; shift; }
PB=${1:?usage: compare_noise.sh [--ab] PARBENCH [OUT_DIR] [RERUNS]}
OUT=${2:-runs/compare-noise}
N=${3:-10}
shift $(( $# < 3 ? $# : 3 ))
[[ ${1:-} == -- ]] && shift
# One thread per worker: on a 2-core machine shared with other jobs, OpenMP teams of 2 per
# worker make single steps swing by 10x, which no gate can see through.
RUN=(run --workload great_net --image 8 --width 0.1875 --devices 1,2 --iterations 10 --warmup 2 --threads 1
     --device-kind cpu --benchmark_repetitions=5 "$@")
JUDGE=${JUDGE:-0}
FACTOR=${FACTOR:-1.05}
if (( ! JUDGE )); then
  rm -rf "$OUT"
  mkdir -p "$OUT/history"
fi
[[ -d $OUT/history ]] || { echo "JUDGE=1: $OUT holds no runs of this script" >&2; exit 2; }

if (( AB )); then
  PAIRS=${PAIRS:-5} INTERLEAVE=${INTERLEAVE:-benchmark}
  # The pairs are the repetitions: each run of a side is one repetition of every benchmark.
  AB_RUN=()
  for a in "${RUN[@]:1}"; do [[ $a == --benchmark_repetitions=* ]] || AB_RUN+=("$a"); done
  verdict() { grep -o 'geometric mean time ratio [0-9.]* ([0-9]*% CI [0-9.]* to [0-9.]*)' "$1" | sed 's/geometric mean time ratio //'; }
  echo "start: $(uptime)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus; $PAIRS pairs a job, --interleave $INTERLEAVE"
  fa=0 fa_each=0 fa_cpu=0 fa_cpu_each=0 miss=0 miss_each=0 miss_cpu=0 miss_cpu_each=0
  if [[ ${DOCTOR:-scale} == wrapper ]]; then
    # Misses measured on their own runs: the contender is a wrapper that makes a real run,
    # interleaved with the baseline's like any build, and then multiplies its times by 1.05.
    cat >"$OUT/slower.sh" <<SH
#!/usr/bin/env bash
"$(realpath "$PB")" "\$@"; rc=\$?
out=\${@: -1}
[[ -f \$out/results.json ]] && "$(realpath "$0")" --doctor "\$out/results.json" 1.05
exit \$rc
SH
    chmod +x "$OUT/slower.sh"
    printf '%-4s %-34s %-34s %s\n' job "x1.05 (wrapper): ratio (CI) rc,each" "cpu, x1.05 (wrapper)" "load (1, 5, 15 min)"
    for i in $(seq 1 "$N"); do
      d="$OUT/ab$i"
      set +e
      "$PB" ab "$PB" "$OUT/slower.sh" --pairs "$PAIRS" --interleave "$INTERLEAVE" --out "$d" -- "${AB_RUN[@]}" >"$d.md" 2>"$d.log"; w=$?
      set -e
      if (( w == 2 )); then cat "$d.log" >&2; exit 2; fi
      set +e
      "$PB" compare --paired "$d/baseline" "$d/contender" --gate each >/dev/null; we=$?
      "$PB" compare --paired "$d/baseline" "$d/contender" --time cpu >"$d/slower-cpu.md"; wc=$?
      "$PB" compare --paired "$d/baseline" "$d/contender" --time cpu --gate each >/dev/null; wce=$?
      set -e
      (( w == 0 )) && miss=$((miss + 1)); (( we == 0 )) && miss_each=$((miss_each + 1))
      (( wc == 0 )) && miss_cpu=$((miss_cpu + 1)); (( wce == 0 )) && miss_cpu_each=$((miss_cpu_each + 1))
      printf '%-4s %-34s %-34s %s\n' "$i" "$(verdict "$d.md") $w,$we" "$(verdict "$d/slower-cpu.md") $wc,$wce" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
    done
    echo "end: $(uptime)"
    echo "A/B, x1.05 by a wrapper not caught (misses): wall suite $miss/$N, --gate each $miss_each/$N; --time cpu suite $miss_cpu/$N, --gate each $miss_cpu_each/$N"
    exit 0
  fi
  printf '%-4s %-34s %-34s %-34s %-34s %s\n' job "unchanged: ratio (CI) rc,each" "x1.05: ratio (CI) rc,each" \
    "cpu, unchanged" "cpu, x1.05" "load (1, 5, 15 min)"
  for i in $(seq 1 "$N"); do
    d="$OUT/ab$i"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    if (( JUDGE )); then
      load="(judged again)"
    else
      set +e
      "$PB" ab "$PB" "$PB" --pairs "$PAIRS" --interleave "$INTERLEAVE" --out "$d" -- "${AB_RUN[@]}" >"$d.md" 2>"$d.log"; s=$?
      set -e
      if (( s == 2 )); then cat "$d.log" >&2; exit 2; fi
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      while IFS= read -r f; do
        mkdir -p "$d/doctored/$(dirname "$f")"; doctor "$d/contender/$f" "$d/doctored/$f" 1.05
      done < <(cd "$d/contender" && find . -name results.json)
    fi
    set +e
    "$PB" compare --paired "$d/baseline" "$d/contender" >"$d/same.md"; s=$?
    "$PB" compare --paired "$d/baseline" "$d/contender" --gate each >/dev/null; se=$?
    "$PB" compare --paired "$d/baseline" "$d/doctored" >"$d/slower.md"; w=$?
    "$PB" compare --paired "$d/baseline" "$d/doctored" --gate each >/dev/null; we=$?
    "$PB" compare --paired "$d/baseline" "$d/contender" --time cpu >"$d/same-cpu.md"; sc=$?
    "$PB" compare --paired "$d/baseline" "$d/contender" --time cpu --gate each >/dev/null; sce=$?
    "$PB" compare --paired "$d/baseline" "$d/doctored" --time cpu >"$d/slower-cpu.md"; wc=$?
    "$PB" compare --paired "$d/baseline" "$d/doctored" --time cpu --gate each >/dev/null; wce=$?
    set -e
    (( s == 1 )) && fa=$((fa + 1)); (( se == 1 )) && fa_each=$((fa_each + 1))
    (( sc == 1 )) && fa_cpu=$((fa_cpu + 1)); (( sce == 1 )) && fa_cpu_each=$((fa_cpu_each + 1))
    (( w == 0 )) && miss=$((miss + 1)); (( we == 0 )) && miss_each=$((miss_each + 1))
    (( wc == 0 )) && miss_cpu=$((miss_cpu + 1)); (( wce == 0 )) && miss_cpu_each=$((miss_cpu_each + 1))
    printf '%-4s %-34s %-34s %-34s %-34s %s\n' "$i" "$(verdict "$d/same.md") $s,$se" "$(verdict "$d/slower.md") $w,$we" \
      "$(verdict "$d/same-cpu.md") $sc,$sce" "$(verdict "$d/slower-cpu.md") $wc,$wce" "$load"
  done
  echo "end: $(uptime)"
  echo "A/B, unchanged flagged (false alarms): wall suite $fa/$N, --gate each $fa_each/$N; --time cpu suite $fa_cpu/$N, --gate each $fa_cpu_each/$N"
  echo "A/B, x1.05 not caught (misses): wall suite $miss/$N, --gate each $miss_each/$N; --time cpu suite $miss_cpu/$N, --gate each $miss_cpu_each/$N"
  exit 0
fi

echo "start: $(uptime)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus; slowdown x$FACTOR"
if (( ! JUDGE )); then
  "$PB" "${RUN[@]}" --out "$OUT/baseline" >"$OUT/baseline.log" 2>&1
  cp "$OUT/baseline/results.json" "$OUT/history/00.json"
fi
fa=0 fa_each=0 miss=0 miss_each=0 fa_hist=0 miss_hist=0 hist=0 fa_cpu=0 miss_cpu=0 miss_self=0 miss_self_cpu=0
inc=0 inc_w=0 inc_hist=0 inc_hist_w=0 inc_self=0 inc_self_cpu=0  # exit 3: inconclusive
printf '%-5s %-34s %-34s %-31s %-31s %-31s %-31s %s\n' rerun "unchanged: suite ratio (CI) rc,each" \
  "x$FACTOR: suite ratio (CI) rc,each" "history, unchanged: rc" "history, x$FACTOR: rc" "cpu time, unchanged" \
  "cpu time, x$FACTOR" load
for i in $(seq 1 "$N"); do
  d="$OUT/rerun$i"
  (( JUDGE )) || "$PB" "${RUN[@]}" --out "$d" >"$d.log" 2>&1
  doctor "$d/results.json" "$d/slower.json" "$FACTOR"
  verdict() { grep -o 'geometric mean time ratio [0-9.]* ([0-9]*% CI [0-9.]* to [0-9.]*)' "$1" | sed 's/geometric mean time ratio //'; }
  # The history baseline of rerun i: the baseline and reruns < i.
  hdir="$OUT/history-$i"
  rm -rf "$hdir"; mkdir -p "$hdir"
  for k in $(seq 0 $((i - 1))); do cp "$OUT/history/$(printf %02d "$k").json" "$hdir/"; done
  set +e
  "$PB" compare "$OUT/baseline/results.json" "$d/results.json" >"$d/same.md"; s=$?
  "$PB" compare "$OUT/baseline/results.json" "$d/results.json" --gate each >/dev/null; se=$?
  "$PB" compare "$OUT/baseline/results.json" "$d/slower.json" >"$d/slower.md"; w=$?
  "$PB" compare "$OUT/baseline/results.json" "$d/slower.json" --gate each >/dev/null; we=$?
  "$PB" compare "$OUT/baseline/results.json" "$d/results.json" --time cpu >"$d/same-cpu.md"; sc=$?
  "$PB" compare "$OUT/baseline/results.json" "$d/slower.json" --time cpu >"$d/slower-cpu.md"; wc=$?
  "$PB" compare "$d/results.json" "$d/slower.json" >/dev/null; self=$?
  "$PB" compare "$d/results.json" "$d/slower.json" --time cpu >/dev/null; self_cpu=$?
  h=- hw=-
  if (( i >= 3 )); then
    "$PB" compare "$hdir" "$d/results.json" >"$d/history.md"; h=$?
    "$PB" compare "$hdir" "$d/slower.json" >"$d/history-slower.md"; hw=$?
    hist=$((hist + 1))
  fi
  set -e
  rm -rf "$hdir"
  (( s == 1 )) && fa=$((fa + 1)); (( se == 1 )) && fa_each=$((fa_each + 1))
  (( w == 0 )) && miss=$((miss + 1)); (( we == 0 )) && miss_each=$((miss_each + 1))
  [[ $h == 1 ]] && fa_hist=$((fa_hist + 1)); [[ $hw == 0 ]] && miss_hist=$((miss_hist + 1))
  (( sc == 1 )) && fa_cpu=$((fa_cpu + 1)); (( wc == 0 )) && miss_cpu=$((miss_cpu + 1))
  (( self == 0 )) && miss_self=$((miss_self + 1)); (( self_cpu == 0 )) && miss_self_cpu=$((miss_self_cpu + 1))
  (( self == 3 )) && inc_self=$((inc_self + 1)); (( self_cpu == 3 )) && inc_self_cpu=$((inc_self_cpu + 1))
  (( s == 3 )) && inc=$((inc + 1)); (( w == 3 )) && inc_w=$((inc_w + 1))
  [[ $h == 3 ]] && inc_hist=$((inc_hist + 1)); [[ $hw == 3 ]] && inc_hist_w=$((inc_hist_w + 1))
  printf '%-5s %-34s %-34s %-31s %-31s %-31s %-31s %s\n' "$i" "$(verdict "$d/same.md") $s,$se" \
    "$(verdict "$d/slower.md") $w,$we" "$( [[ $h == - ]] && echo - || echo "$(verdict "$d/history.md") $h")" \
    "$( [[ $hw == - ]] && echo - || echo "$(verdict "$d/history-slower.md") $hw")" "$(verdict "$d/same-cpu.md") $sc" \
    "$(verdict "$d/slower-cpu.md") $wc" "$( (( JUDGE )) && echo "(judged again)" || cut -d' ' -f1-3 /proc/loadavg)"
  (( JUDGE )) || cp "$d/results.json" "$OUT/history/$(printf %02d "$i").json"
done
echo "end: $(uptime)"
echo "unchanged reruns flagged (false alarms): suite $fa/$N, --gate each $fa_each/$N, history baseline $fa_hist/$hist, --time cpu $fa_cpu/$N"
echo "${FACTOR}x slower not caught (misses, exit 0): suite $miss/$N, --gate each $miss_each/$N, history baseline $miss_hist/$hist, --time cpu $miss_cpu/$N"
echo "inconclusive (exit 3): unchanged suite $inc/$N, history $inc_hist/$hist; ${FACTOR}x slower suite $inc_w/$N, history $inc_hist_w/$hist"
echo "a rerun against itself x$FACTOR, not caught (exit 0): wall time $miss_self/$N, --time cpu $miss_self_cpu/$N; inconclusive: $inc_self/$N, $inc_self_cpu/$N"
