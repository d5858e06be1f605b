#!/usr/bin/env bash
# Installs what is missing, builds, and runs parbench's main job with its defaults.
# Extra arguments go to the parbench command.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
scripts/install-deps.sh
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)"
exec build/parbench run "$@"
