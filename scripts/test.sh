#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
#   scripts/test.sh              release build in build/ (CUDA code compiled when the toolkit is found)
#   scripts/test.sh --sanitize   CPU build under AddressSanitizer + UBSan in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") build=build; flags=() ;;
  --sanitize) build=build-asan; flags=(-DPARBENCH_SANITIZE=ON -DPARBENCH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "scripts/test.sh: unknown argument '$1' (expected --sanitize or --help)" >&2; exit 2 ;;
esac

scripts/install-deps.sh
# Where ccache is installed it compiles each unchanged source once. Its keys leave out where the
# tree is checked out (paths under it are made relative, the build folder not hashed), so a fresh
# clone of the same commit, as CI's, reuses what the working tree compiled.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build" "${flags[@]}"
cmake --build "$build" -j"$(nproc)"
# Leak checks stay on; OpenMP's thread pool is process-lifetime, not a leak.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
