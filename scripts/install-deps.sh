#!/usr/bin/env bash
# Install the Debian packages parbench needs to build, test and plot.
# Idempotent: only missing packages are installed.
#
#   scripts/install-deps.sh [--with-torch]
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/install-deps.sh [--with-torch] [--help]

Installs the Debian packages parbench needs (only those missing).
As root it runs apt-get; otherwise it prints the command to run and exits 1.

  --with-torch   also install python3-torch (needed only by
                 scripts/make_fixtures.py and scripts/torch_check.py)
  --help         show this help
EOF
}

packages=(
    cmake g++ make git pkg-config
    nlohmann-json3-dev libfmt-dev libbenchmark-dev libboost-dev libcli11-dev
    libgtest-dev libgmock-dev libdnnl-dev ocl-icd-opencl-dev
    libopenmpi-dev openmpi-bin
    python3-numpy python3-matplotlib
    chromium  # the html_report test opens report.html in it (headless)
    clang
)

for arg in "$@"; do
    case "$arg" in
        --with-torch) packages+=(python3-torch) ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install-deps.sh: unknown argument: $arg" >&2; usage >&2; exit 2 ;;
    esac
done

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "all dependencies present"
    exit 0
fi

echo "missing packages: ${missing[*]}"
install_cmd="DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"

if [ "$(id -u)" -ne 0 ]; then
    echo "not root; run:" >&2
    echo "  sudo apt-get update && sudo $install_cmd" >&2
    exit 1
fi

apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
