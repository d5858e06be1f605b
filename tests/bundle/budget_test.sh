#!/usr/bin/env bash
# ctest driver for gpu_check.sh's time budgets, without a GPU: the stage budgets (and the
# reserve) sum within hard_cap; each stage's minimum and per-command limits fit its budget; every
# stage starts through stage_begin with its own budget and every command's timeout comes from
# within(); and, run against a clock moved forward, a stage whose minimum does not fit is
# skipped with "not run: N s left" while one that fits gets its budget, cut to the cap.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
script=$src/scripts/gpu_check.sh
fail() { echo "FAIL: $*"; exit 1; }

block=$(sed -n '/^# --- budgets: begin/,/^# --- budgets: end/p' "$script")
[ -n "$block" ] || fail "$script has no '# --- budgets: begin' ... '# --- budgets: end' block"
results=()
result() { results+=("$1|$2|$3"); echo "gpu_check: $1: $2${3:+ ($3)}"; }
eval "$block"

# The sum: every budget_* the block sets, and the reserve.
mapfile -t budgets < <(grep -oE '^budget_[a-z_]+=' <<<"$block" | tr -d =)
[ "${#budgets[@]}" -ge 5 ] || fail "only ${#budgets[@]} budget_* variables (${budgets[*]}): one per stage expected"
sum=$reserve terms="reserve $reserve"
for b in "${budgets[@]}"; do
  [[ "${!b}" =~ ^[0-9]+$ ]] || fail "$b='${!b}' is not a number of seconds"
  sum=$((sum + ${!b})) terms="$terms + ${b#budget_} ${!b}"
done
[ "$sum" -le "$hard_cap" ] || fail "the budgets sum to $sum s ($terms), over hard_cap $hard_cap"
echo "budgets: $terms = $sum s <= hard_cap $hard_cap s"

# Each minimum within its stage's budget; the per-command limits within theirs.
for m in $(grep -oE '\bmin_[a-z_]+=' <<<"$block" | tr -d =); do
  b=budget_${m#min_}
  [ -n "${!b:-}" ] || fail "$m has no $b"
  [ "${!m}" -le "${!b}" ] || fail "$m=${!m} exceeds $b=${!b}: the stage could never run"
done
n_rows=$(wc -w <<<"$engine_rows") n_peers=$(wc -w <<<"$peer_precisions")
[ $((n_rows * engine_each + n_peers * peer_each)) -le "$budget_torch" ] ||
  fail "$n_rows engine rows x $engine_each + $n_peers PyTorch runs x $peer_each exceeds budget_torch $budget_torch"
n_profiles=$(( $(wc -w <<<"$layer_precisions") * $(wc -w <<<"$layer_layouts") ))
[ $((n_profiles * profile_each + peer_layers_each + join_each)) -le "$budget_layers" ] ||
  fail "$n_profiles profiles x $profile_each + PyTorch $peer_layers_each + join $join_each exceeds budget_layers $budget_layers"
[ $((run_two + run_trace + run_unet)) -lt "$budget_run" ] ||
  fail "run_two ($run_two) + run_trace ($run_trace) + run_unet ($run_unet) leave nothing of budget_run $budget_run"

# Every stage starts with its own budget, and no command has a limit of its own making.
grep -q '^stage_begin "1 environment" "$budget_env"' "$script" || fail "stage 1 does not start with budget_env"
for s in tests torch layers run sanitizer; do
  grep -qE "stage_begin \"[^\"]+\" \"\\\$budget_$s\" \"\\\$min_$s\"" "$script" ||
    fail "no stage starts with stage_begin NAME \"\$budget_$s\" \"\$min_$s\""
done
bad=$(grep -nE '\btimeout ' "$script" "$src/scripts/gpu_check_env.sh" | grep -vE 'timeout "\$\(within [^)]+\)"')
[ -z "$bad" ] || fail "timeouts not taken from within() (so outside the budgets):
$bad"

# The scheduling, against a clock that says how long the check has run.
elapsed() { start=$(( $(date +%s) - $1 )); }
elapsed $((hard_cap - reserve - 30))
out=$(stage_begin "3 engine vs PyTorch" 180 40) && fail "a stage with 30 s left and a 40 s minimum ran"
grep -qx 'gpu_check: 3 engine vs PyTorch: not run: 30 s left (needs at least 40 s)' <<<"$out" ||
  fail "expected 'not run: 30 s left (needs at least 40 s)', got: $out"
elapsed $((hard_cap + 100))
out=$(stage_begin "5 sanitizer" 50 30)
grep -q 'not run: 0 s left' <<<"$out" || fail "past the cap: expected 'not run: 0 s left', got: $out"
elapsed 100
stage_begin "2 GPU tests" 130 30 || fail "a stage that fits was not run"
[ $((stage_end - $(date +%s))) -ge 129 ] && [ "$(within 60)" = 60 ] && [ "$(within 500)" -ge 129 ] &&
  [ "$(within 500)" -le 130 ] || fail "stage_end/within: the stage's budget is not its limit"
elapsed $((hard_cap - reserve - 50))
stage_begin "3 engine vs PyTorch" 180 40 || fail "a stage with 50 s left and a 40 s minimum was not run"
[ "$(within 45)" = 45 ] && [ "$(within 180)" -le 50 ] || fail "a stage's end is not cut to the cap"
echo "stage_begin: 'not run: N s left' below the minimum; budgets cut to the cap"
echo "PASS"
