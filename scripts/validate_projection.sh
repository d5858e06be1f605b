#!/bin/bash
# Measures the runs `parbench project --validate` is checked against on this machine and
# validates each right after it is measured (the profile is timed then, under the same load):
# great_net at two sizes and the linear workload, every strategy at 1, 2 and 4 workers (threads
# shared as run shares them), and ddp/mp/pipeline under mpirun -np 2. Each run takes 6 repetitions
# in random order (drift in the machine's speed then touches every configuration alike); each is
# validated as it is and anchored (--anchor: scaled by its one-device regular run). Writes OUT/
# (default runs/validate-<UTC>): each run folder, validate-*.md/json, uptime.txt.
# usage: scripts/validate_projection.sh [PARBENCH] [OUT]
set -euo pipefail
PB=${1:-build/parbench}
OUT=${2:-runs/validate-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
stamp() { echo "$1 $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')" | tee -a "$OUT/uptime.txt"; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2)
stamp calibrate
"$PB" calibrate --out "$OUT/this_cpu.json" >/dev/null
"${MPIRUN[@]}" "$PB" calibrate --out "$OUT/this_cpu_mpi.json" >/dev/null
for cfg in "great_net 32 0.25" "great_net 48 0.25" "linear 0 0"; do
  set -- $cfg
  name=$1; [ "$1" = great_net ] && name="great_net-$2-$3"
  args=(--workload "$1" --batch 2 --devices 1,2,4 --iterations 10 --benchmark_repetitions=6
        --benchmark_enable_random_interleaving=true)
  [ "$1" = great_net ] && args+=(--image "$2" --width "$3")
  [ "$1" = linear ] && args+=(--iterations 200)  # the last --iterations counts
  stamp "run $name"
  "$PB" run "${args[@]}" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  stamp "validate $name"
  "$PB" project --validate "$OUT/$name/results.json" --machine "$OUT/this_cpu.json" --out "$OUT/validate-$name" \
    --save-profile "$OUT/profile-$name" 2>>"$OUT/$name.log" | grep -E "^(Mean|Repeat)"
  "$PB" project --validate "$OUT/$name/results.json" --machine "$OUT/this_cpu.json" --out "$OUT/validate-$name-anchored" \
    --anchor 2>>"$OUT/$name.log" | grep -E "^(Mean|Anchored)"
done
stamp "run mpi"
"${MPIRUN[@]}" "$PB" run --workload great_net --image 32 --width 0.25 --batch 2 --devices 2 \
  --strategies ddp,mp,pipeline --iterations 10 --benchmark_repetitions=6 --out "$OUT/great_net-32-0.25-mpi" >"$OUT/mpi.log" 2>&1
stamp "validate mpi"
"$PB" project --validate "$OUT/great_net-32-0.25-mpi/results.json" --machine "$OUT/this_cpu_mpi.json" \
  --out "$OUT/validate-mpi" 2>>"$OUT/mpi.log" | grep -E "^(Mean|Repeat)"
stamp done
