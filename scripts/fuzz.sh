#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang under ASan + UBSan in build-fuzz/ and runs each
# for a bounded time, seeded from tests/fixtures. Exits non-zero on the first crash, sanitizer
# report or uncaught exception; the input that caused it is left in build-fuzz/artifacts/.
#   scripts/fuzz.sh [SECONDS]   time per target (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
case "$seconds" in -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "scripts/fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }
scripts/install-deps.sh
command -v clang++ >/dev/null || { echo "scripts/fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }

build=build-fuzz
launcher=${CMAKE_CXX_COMPILER_LAUNCHER:-}
if [ -z "$launcher" ] && command -v ccache >/dev/null 2>&1; then  # as scripts/test.sh
  launcher=ccache
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPARBENCH_FUZZ=ON \
  -DPARBENCH_CUDA=OFF -DPARBENCH_MPI=OFF -DPARBENCH_DNNL=OFF -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  ${launcher:+-DCMAKE_C_COMPILER_LAUNCHER=$launcher -DCMAKE_CXX_COMPILER_LAUNCHER=$launcher} >/dev/null
cmake --build "$build" -j"$(nproc)" --target npy_fuzz net_json_fuzz gbjson_fuzz plan_fuzz config_fuzz

# Seed corpora: every fixture of the kind each parser reads, plus the example nets.
corpus=$build/corpus
rm -rf "$corpus"
mkdir -p "$corpus"/{npy,net_json,gbjson,plan,config} "$build/artifacts"
find tests/fixtures -name '*.npy' -exec cp --backup=numbered {} "$corpus/npy/" \;
i=0
for f in tests/fixtures/*/net.json workloads/examples/*.json; do
  [ -f "$f" ] && cp "$f" "$corpus/net_json/$((i++)).json"
done
for f in $(grep -l '"benchmarks"' -r tests/fixtures --include='*.json' 2>/dev/null) reports/*.json; do
  [ -f "$f" ] && cp "$f" "$corpus/gbjson/$((i++)).json"
done
# A minimal Google Benchmark file, so the reader's corpus is never empty.
cat >"$corpus/gbjson/seed.json" <<'JSON'
{"context": {"workload": "linear", "device_kind": "cpu"}, "benchmarks": [
 {"name": "linear/regular/devices:1/batch:1", "run_name": "linear/regular/devices:1/batch:1", "run_type": "iteration",
  "repetitions": 2, "repetition_index": 0, "iterations": 10, "real_time": 1.5, "cpu_time": 1.4, "time_unit": "ms",
  "samples_per_s": 666.0, "devices": 1, "global_batch": 1, "peak_bytes_max": 1024, "iter_cv": 0.01},
 {"name": "linear/ddp/devices:2/batch:1", "run_type": "iteration", "iterations": 10, "real_time": 1.0,
  "time_unit": "ms", "error_occurred": true, "error_message": "out of memory"}]}
JSON

# Plans: the hand-written ones; configs: a small one of each form the reader accepts.
for f in tests/fixtures/plans/*.json; do
  [ -f "$f" ] && cp "$f" "$corpus/plan/$((i++)).json"
done
cat >"$corpus/config/seed.toml" <<'TOML'
# a kept sweep
strategies = ["dp", "ddp"]
devices = [1, 2]
batch = 4   # per device
precision = "fp32"
[run]
iterations = 3
TOML
printf 'devices = [1,\n  2]\nwidth=0.5\n; INI comment\nall-at-one-device = true\n' >"$corpus/config/seed.ini"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
for t in npy net_json gbjson plan config; do
  echo "== fuzzing ${t} for ${seconds} s (corpus: $(ls "$corpus/$t" | wc -l) seed(s))"
  "$build/${t}_fuzz" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$build/artifacts/${t}-" -print_final_stats=1 "$corpus/$t" 2>"$build/${t}.log" ||
    { tail -60 "$build/${t}.log"; echo "FAIL: ${t}_fuzz found a crash (input in $build/artifacts/)"; exit 1; }
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$build/${t}.log" | tr '\n' ' '
  echo
done
echo "PASS: no crash in $((5 * seconds)) s of fuzzing"
