#!/bin/bash
# Measures the runs `parbench project --validate` is checked against on this machine: great_net at
# two sizes and the linear workload, every strategy at 1, 2 and 4 workers (threads shared as run
# shares them), and ddp/mp/pipeline under mpirun -np 2. A machine whose speed wanders (a VM's
# cores, shared with others) would put a run and a profile or calibration timed minutes apart in
# different spells, so each set is measured in ROUNDS rounds: `calibrate` (in-process, or under
# mpirun for the MPI set), a short run (REPS repetitions, random order), then validated at once
# against that calibration (its profile timed right after it); `project --combine` pools them.
# Writes OUT/ (default runs/validate-<UTC>): each round's machine file, run folder, validation
# and profiles, the pooled validate-*.md/json, uptime.txt.
# usage: [ROUNDS=6] [REPS=2] [SETS="great_net-32 great_net-48 linear mpi"] scripts/validate_projection.sh [PARBENCH] [OUT]
set -euo pipefail
PB=${1:-build/parbench}
OUT=${2:-runs/validate-$(date -u +%Y%m%dT%H%M%SZ)}
ROUNDS=${ROUNDS:-6}
REPS=${REPS:-2}
SETS=${SETS:-great_net-32 great_net-48 linear mpi}
for s in $SETS; do
  case $s in great_net-32|great_net-48|linear|mpi) ;; *) echo "SETS: unknown set '$s' (expected great_net-32, great_net-48, linear, mpi)" >&2; exit 2;; esac
done
want() { [[ " $SETS " == *" $1 "* ]]; }
mkdir -p "$OUT"
stamp() { echo "$1 $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')" | tee -a "$OUT/uptime.txt"; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)
# rounds NAME CALIBRATE-PREFIX RUN-COMMAND...: ROUNDS x (calibrate, run, validate), then the pooled
# validation. CALIBRATE-PREFIX: "" (in-process) or "mpi" (the MPI job's ranks).
rounds() {
  local name=$1 cal=$2; shift 2
  local list=()
  for r in $(seq 1 "$ROUNDS"); do
    stamp "run $name round $r"
    local machine="$OUT/machine-$name-r$r.json"
    if [ "$cal" = mpi ]; then "${MPIRUN[@]}" "$PB" calibrate --out "$machine" >/dev/null 2>>"$OUT/$name-r$r.log"
    else "$PB" calibrate --out "$machine" >/dev/null 2>>"$OUT/$name-r$r.log"; fi
    "$@" --benchmark_repetitions="$REPS" --out "$OUT/$name-r$r" >>"$OUT/$name-r$r.log" 2>&1
    "$PB" project --validate "$OUT/$name-r$r/results.json" --machine "$machine" --profile-rounds 1 \
      --out "$OUT/validate-$name-r$r" --save-profile "$OUT/profile-$name-r$r" >/dev/null 2>>"$OUT/$name-r$r.log"
    list+=("$OUT/validate-$name-r$r.json")
  done
  stamp "combine $name"
  "$PB" project --combine "$(IFS=,; echo "${list[*]}")" --out "$OUT/validate-$name" 2>/dev/null | grep -E "^(Mean|Repeat)"
}
for cfg in "great_net 32 0.25 great_net-32" "great_net 48 0.25 great_net-48" "linear 0 0 linear"; do
  set -- $cfg
  want "$4" || continue
  name=$1; [ "$1" = great_net ] && name="great_net-$2-$3"
  args=(--workload "$1" --batch 2 --devices 1,2,4 --iterations 10 --benchmark_enable_random_interleaving=true)
  [ "$1" = great_net ] && args+=(--image "$2" --width "$3")
  [ "$1" = linear ] && args+=(--iterations 200)  # the last --iterations counts
  rounds "$name" "" "$PB" run "${args[@]}"
done
want mpi && rounds great_net-32-0.25-mpi mpi "${MPIRUN[@]}" "$PB" run --workload great_net --image 32 --width 0.25 \
  --batch 2 --devices 2 --strategies ddp,mp,pipeline --iterations 10
stamp done
