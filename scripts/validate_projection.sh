#!/bin/bash
# Measures the runs `parbench project --validate` is checked against on this machine: great_net at
# two sizes and the linear workload, every strategy at 1, 2 and 4 workers (threads shared as run
# shares them), and ddp/mp/pipeline under mpirun -np 2. A machine whose speed wanders (a VM's
# cores, shared with others) would put a run and a profile or calibration timed minutes apart in
# different spells, so each set is measured in ROUNDS rounds: `calibrate` (in-process, or under
# mpirun for the MPI set), a short run (REPS repetitions, random order; linear's LINEAR_REPS: its
# microsecond steps make a repetition last a millisecond, spent at whatever speed the VM's core has
# then, 3.0 or 4.2 us a step, so it needs more of them to sample those speeds), then validated at once
# against that calibration (its profile timed right after it); `project --combine` pools them.
# On a VM whose host gives the CPUs to others for a while (steal time in /proc/stat), a round
# measured then is not this machine's: a round whose share of stolen time exceeds MAX_STEAL is
# measured again after a pause, up to REDO times; every try's share is in steal.txt.
# Writes OUT/ (default runs/validate-<UTC>): each round's machine file, run folder, validation
# and profiles, the pooled validate-*.md/json, uptime.txt, steal.txt.
# usage: [ROUNDS=6] [REPS=2] [LINEAR_REPS=10] [MAX_STEAL=0.1] [REDO=3] [SETS="great_net-32 great_net-48 linear mpi"]
#        scripts/validate_projection.sh [PARBENCH] [OUT]
set -euo pipefail
PB=${1:-build/parbench}
OUT=${2:-runs/validate-$(date -u +%Y%m%dT%H%M%SZ)}
ROUNDS=${ROUNDS:-6}
REPS=${REPS:-2}
LINEAR_REPS=${LINEAR_REPS:-10}
for v in ROUNDS REPS LINEAR_REPS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v: expected a positive count, got '${!v}'" >&2; exit 2; }
done
SETS=${SETS:-great_net-32 great_net-48 linear mpi}
MAX_STEAL=${MAX_STEAL:-0.1}
REDO=${REDO:-3}
[[ $MAX_STEAL =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v m="$MAX_STEAL" 'BEGIN { exit !(m <= 1) }' || { echo "MAX_STEAL: expected a share from 0 to 1, got '$MAX_STEAL'" >&2; exit 2; }
[[ $REDO =~ ^[0-9]+$ ]] || { echo "REDO: expected a count, got '$REDO'" >&2; exit 2; }
for s in $SETS; do
  case $s in great_net-32|great_net-48|linear|mpi) ;; *) echo "SETS: unknown set '$s' (expected great_net-32, great_net-48, linear, mpi)" >&2; exit 2;; esac
done
want() { [[ " $SETS " == *" $1 "* ]]; }
mkdir -p "$OUT"
stamp() { echo "$1 $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')" | tee -a "$OUT/uptime.txt"; }
# "steal total" clock ticks of all CPUs so far; "0 0" where /proc/stat has no steal field.
cpu_ticks() { awk '/^cpu /{ if (NF < 9) { print "0 0"; exit } t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat 2>/dev/null || echo "0 0"; }
# The share of the ticks between two cpu_ticks readings that was stolen (0 where unknown).
stolen() { echo "$1 $2" | awk '{ dt = $4 - $2; printf "%.3f", (dt > 0 ? ($3 - $1) / dt : 0) }'; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)
# rounds NAME CALIBRATE-PREFIX REPETITIONS RUN-COMMAND...: ROUNDS x (calibrate, run, validate), then
# the pooled validation. CALIBRATE-PREFIX: "" (in-process) or "mpi" (the MPI job's ranks).
rounds() {
  local name=$1 cal=$2 reps=$3; shift 3
  local list=()
  for r in $(seq 1 "$ROUNDS"); do
    local machine="$OUT/machine-$name-r$r.json" try=0
    while :; do
      stamp "run $name round $r$([ "$try" -gt 0 ] && echo " try $((try + 1))")"
      rm -rf "$OUT/$name-r$r" "$OUT/$name-r$r.log"
      local before; before=$(cpu_ticks)
      if [ "$cal" = mpi ]; then "${MPIRUN[@]}" "$PB" calibrate --out "$machine" >/dev/null 2>>"$OUT/$name-r$r.log"
      else "$PB" calibrate --out "$machine" >/dev/null 2>>"$OUT/$name-r$r.log"; fi
      "$@" --benchmark_repetitions="$reps" --out "$OUT/$name-r$r" >>"$OUT/$name-r$r.log" 2>&1
      "$PB" project --validate "$OUT/$name-r$r/results.json" --machine "$machine" --profile-rounds 1 \
        --out "$OUT/validate-$name-r$r" --save-profile "$OUT/profile-$name-r$r" >/dev/null 2>>"$OUT/$name-r$r.log"
      local share; share=$(stolen "$before" "$(cpu_ticks)")
      if awk -v s="$share" -v m="$MAX_STEAL" 'BEGIN { exit !(s > m) }' && [ "$try" -lt "$REDO" ]; then
        echo "$name round $r try $((try + 1)): steal $share > MAX_STEAL $MAX_STEAL: measured again" | tee -a "$OUT/steal.txt"
        try=$((try + 1))
        sleep 20
        continue
      fi
      echo "$name round $r try $((try + 1)): steal $share: kept" >>"$OUT/steal.txt"
      break
    done
    list+=("$OUT/validate-$name-r$r.json")
  done
  stamp "combine $name"
  "$PB" project --combine "$(IFS=,; echo "${list[*]}")" --out "$OUT/validate-$name" 2>/dev/null | grep -E "^(Mean|Repeat)"
}
for cfg in "great_net 32 0.25 great_net-32" "great_net 48 0.25 great_net-48" "linear 0 0 linear"; do
  set -- $cfg
  want "$4" || continue
  name=$1; [ "$1" = great_net ] && name="great_net-$2-$3"
  args=(--workload "$1" --batch 2 --devices 1,2,4 --all-at-one-device --iterations 10 --benchmark_enable_random_interleaving=true)
  [ "$1" = great_net ] && args+=(--image "$2" --width "$3")
  [ "$1" = linear ] && args+=(--iterations 200)  # the last --iterations counts
  reps=$REPS; [ "$1" = linear ] && reps=$LINEAR_REPS
  rounds "$name" "" "$reps" "$PB" run "${args[@]}"
done
want mpi && rounds great_net-32-0.25-mpi mpi "$REPS" "${MPIRUN[@]}" "$PB" run --workload great_net --image 32 --width 0.25 \
  --batch 2 --devices 2 --strategies ddp,mp,pipeline --iterations 10
stamp done
