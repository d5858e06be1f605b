#!/usr/bin/env bash
# Builds a self-contained GPU bundle on a machine without a GPU: parbench and parbench_tests
# for one CUDA architecture (sm_90 by default), Release, portable x86-64, CUDA on, oneDNN and
# MPI off, with the non-CUDA shared libraries they need, the Python peers, the test fixtures
# and gpu_check.sh. The CUDA libraries (cudart, cuBLAS, cuDNN, NCCL) are not bundled: the GPU
# machine provides them from a CUDA toolkit or NVIDIA's pip wheels (gpu_check.sh finds them).
#
#   scripts/gpu_bundle.sh OUTDIR
#   scp -r OUTDIR gpu-host: && ssh gpu-host OUTDIR/gpu_check.sh runs/gpu
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/gpu_bundle.sh [options] OUTDIR

Options:
  --arch N         CUDA architecture to build for (default 90: sm_90, H100/H200)
  --build-dir DIR  where to configure and build (default build-bundle/ in the source tree)
  --jobs N         build parallelism (default: nproc)
  --help           show this help

OUTDIR is replaced. Exit status: 0 on success, 1 when the build or a bundle check failed,
2 on bad usage or a missing tool.
EOF
}

die() { echo "gpu_bundle: error: $*" >&2; exit 2; }
fail() { echo "gpu_bundle: FAILED: $*" >&2; exit 1; }

# The bundle must stay small enough (20 MiB) to copy onto a locked-down machine in seconds: the build
# keeps each function and datum in a section of its own and the linker drops those unused.
max_bytes=$((20 * 1024 * 1024))
# What the GPU machine's C library and libgcc_s must provide; the checks below fail when a bundled
# file needs more, and BUNDLE.txt repeats it. Its libstdc++ is not used: the binaries carry their
# own (PARBENCH_STATIC_RUNTIME), so no system libstdc++ is too old (RHEL 9's is GCC 11's, older
# than this GCC 12's). libgcc_s (the unwinder) stays the system's: GCC_7.0.0 is the newest
# version GCC 7 to 11 define.
max_glibc=2.34
max_gcc_s=7.0.0
runs_on="glibc >= $max_glibc, whatever its libstdc++: RHEL/Rocky/Alma 9+, Debian 12+, Ubuntu 22.04+, Fedora 35+, Amazon Linux 2023; not RHEL 8 or Ubuntu 20.04 (glibc 2.28, 2.31)"

arch=90
jobs=$(nproc 2>/dev/null || echo 2)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) [ $# -ge 2 ] || die "--arch needs a value"; arch=$2; shift 2 ;;
        --build-dir) [ $# -ge 2 ] || die "--build-dir needs a value"; build=$2; shift 2 ;;
        --jobs) [ $# -ge 2 ] || die "--jobs needs a value"; jobs=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option: $1" ;;
        *) [ -z "$out" ] || die "more than one OUTDIR: '$out' and '$1'"; out=$1; shift ;;
    esac
done
[ -n "$out" ] || { usage >&2; die "OUTDIR is required"; }
[[ "$arch" =~ ^[0-9]+[a-z]?$ ]] || die "--arch expects a CUDA architecture such as 90 or 90a, got '$arch'"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs expects a positive integer, got '$jobs'"
build=${build:-$root/build-bundle}
for tool in cmake nvcc ldd objdump sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found on PATH (the bundle is built with the CUDA toolkit and binutils)"
done

launcher=()
if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    # ccache's direct mode does not tell -fmacro-prefix-map values apart (it handed back
    # objects whose __FILE__ was ../engine/x.cpp); its preprocessor mode hashes the expanded
    # __FILE__ itself.
    export CCACHE_NODIRECT=1
fi
# The binaries look for their libraries in lib/ next to them ($ORIGIN/lib) and nowhere on the
# build machine. DT_RPATH rather than DT_RUNPATH: it also serves the bundled libraries' own
# dependencies, and LD_LIBRARY_PATH cannot
# replace a bundled library with an older one.
echo "gpu_bundle: configuring $build (sm_$arch)"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DPARBENCH_CUDA=ON -DPARBENCH_DNNL=OFF -DPARBENCH_MPI=OFF -DPARBENCH_NATIVE=OFF -DPARBENCH_SANITIZE=OFF \
      -DPARBENCH_RELOCATABLE=ON -DPARBENCH_STATIC_RUNTIME=ON -DPARBENCH_CUDA_ARCHS="$arch" -DCMAKE_CUDA_ARCHITECTURES="$arch" \
      -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/lib;$ORIGIN' \
      -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF \
      '-DCMAKE_CXX_FLAGS=-ffunction-sections -fdata-sections' \
      '-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,--gc-sections' \
      '-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,--gc-sections' \
      '-DCMAKE_MODULE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,--gc-sections' \
      "${launcher[@]}" >"$build/bundle-configure.log" 2>&1 ||
    { tail -n 30 "$build/bundle-configure.log"; fail "configure failed (log: $build/bundle-configure.log)"; }
grep 'parbench:' "$build/bundle-configure.log" || true
grep -q 'CUDA+cuDNN ON' "$build/bundle-configure.log" || fail "the configure did not enable CUDA (log: $build/bundle-configure.log)"
echo "gpu_bundle: building parbench and parbench_tests (-j$jobs)"
cmake --build "$build" -j "$jobs" --target parbench parbench_tests >"$build/bundle-build.log" 2>&1 ||
    { tail -n 40 "$build/bundle-build.log"; fail "build failed (log: $build/bundle-build.log)"; }
# Modules the program opens at run time (libparbench_*.so), next to the binary or under lib/.
shopt -s nullglob
modules=("$build"/libparbench_*.so "$build"/lib/libparbench_*.so)
shopt -u nullglob

# Libraries the GPU machine provides (CUDA toolkit or pip wheels, the driver), the C library,
# libgcc_s and the libstdc++ NVIDIA's libraries use (ours is linked in: the check below);
# everything else a binary needs is copied.
provided_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc|libnvJitLink)\.so'

rm -rf "$out"
mkdir -p "$out/lib" "$out/scripts" "$out/tests"
out=$(cd "$out" && pwd)
cp "$build/parbench" "$build/parbench_tests" "$out/"
for m in "${modules[@]}"; do
    case "$m" in
        "$build"/lib/*) cp "$m" "$out/lib/" ;;
        *) cp "$m" "$out/" ;;
    esac
done
cp "$root/scripts/gpu_check.sh" "$root/scripts/gpu_check_env.sh" "$out/"
cp "$root/scripts/torch_gpu_peer.py" "$root/scripts/torch_layer_profile.py" "$root/scripts/layer_table.py" \
    "$root/scripts/torchnet.py" "$root/scripts/chart.py" \
    "$root/scripts/chart_style.py" "$root/scripts/html_report.py" "$out/scripts/"
cp -r "$root/tests/fixtures" "$out/tests/fixtures"

# Copy the dependencies of every binary and module, then of the copied libraries, until no
# new one appears.
copy_deps() {
    local f=$1 name path
    while read -r name path; do
        [[ "$name" =~ $provided_re ]] && continue
        [ -n "$path" ] && [ "$path" != "not" ] ||
            fail "$(basename "$f") needs $name, which is not found on this machine"
        [ -e "$out/lib/$name" ] && continue
        cp -L "$path" "$out/lib/$name"
        chmod 0755 "$out/lib/$name"
        copy_deps "$out/lib/$name"
    done < <(ldd "$f" | awk '/=>/ {print $1, $3} !/=>/ && NF == 2 {print $1, ""}' | grep -v '^/' || true)
}
for f in "$out/parbench" "$out/parbench_tests" "${modules[@]/#$build/$out}"; do
    copy_deps "$f"
done
# Symbols and debug info are not needed to run; they would triple the size.
bundled_elf() {
    local f
    for f in "$out/parbench" "$out/parbench_tests" "$out"/lib/*.so* "$out"/libparbench_*.so; do
        if [ -e "$f" ]; then echo "$f"; fi
    done
}
bundled_elf | while read -r f; do strip --strip-unneeded "$f"; done

# --- checks -------------------------------------------------------------------------------
# No file may need a glibc newer than max_glibc.
newest=$(bundled_elf | while read -r f; do objdump -T "$f"; done | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' |
         sort -V -u | tail -n 1)
if [ "$(printf '%s\n%s\n' "$newest" "$max_glibc" | sort -V | tail -n 1)" != "$max_glibc" ]; then
    fail "a bundled file needs glibc $newest, newer than $max_glibc"
fi
# No file may need the machine's libstdc++ or libgomp (no symbol versioned GLIBCXX_* or CXXABI_*),
# nor a libgcc_s newer than max_gcc_s.
bundled_elf | while read -r f; do
    needs=$(objdump -p "$f" | awk '$1 == "NEEDED" && $2 ~ /^(libstdc\+\+|libgomp)\./ {print $2}' | tr '\n' ' ')
    vers=$(objdump -T "$f" | { grep -oE '\((GLIBCXX|CXXABI)_[0-9.]*\)' || true; } | sort -u | tr '\n' ' ')
    [ -z "$needs$vers" ] || fail "$(basename "$f") needs the machine's libstdc++: ${needs}${vers}"
    gcc_s=$(objdump -T "$f" | { grep -oE '\(GCC_[0-9.]+\)' || true; } | tr -d '()' | sed 's/GCC_//' | sort -V -u | tail -n 1)
    [ -z "$gcc_s" ] || [ "$(printf '%s\n%s\n' "$gcc_s" "$max_gcc_s" | sort -V | tail -n 1)" = "$max_gcc_s" ] ||
        fail "$(basename "$f") needs libgcc_s GCC_$gcc_s, newer than GCC_$max_gcc_s"
done
# No path of this machine compiled in (__FILE__ in error messages, PARBENCH_SOURCE_DIR):
# PARBENCH_RELOCATABLE maps them to repository-relative ones.
bundled_elf | while read -r f; do
    leaked=$(strings -a "$f" | grep -F -e "$root/" -e "$build/" | head -n 3 || true)
    [ -z "$leaked" ] || fail "$(basename "$f") holds paths of this machine: $leaked"
done
# Nothing may point back at the build machine.
bundled_elf | while read -r f; do
    rp=$(objdump -x "$f" | awk '/RPATH|RUNPATH/ {print $2}')
    case "$rp" in *"$root"*|*"$build"*) fail "$(basename "$f") has a run path into the build tree: $rp" ;; esac
done
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
{
    echo "parbench GPU bundle"
    echo "commit $commit$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), sm_$arch, Release, portable x86-64, oneDNN off, MPI off"
    echo "needs glibc >= $max_glibc (newest symbol used: GLIBC_$newest), a libgcc_s with GCC_$max_gcc_s (GCC >= 7),"
    echo "no libstdc++ of the system's (libstdc++ and libgomp are linked in), an NVIDIA driver, and"
    echo "cudart/cuBLAS/cuDNN 9/NCCL 2 from a CUDA toolkit or NVIDIA's pip wheels"
    echo "runs on: $runs_on"
    echo "files:"
} >"$out/BUNDLE.txt"
(cd "$out" && find . -type f ! -name BUNDLE.txt ! -name SHA256SUMS | sed 's|^\./||' | sort | xargs sha256sum) >"$out/SHA256SUMS"
sed 's/^[0-9a-f]*  /  /' "$out/SHA256SUMS" >>"$out/BUNDLE.txt"

bytes=$(du -sb "$out" | cut -f1)
[ "$bytes" -le "$max_bytes" ] || fail "the bundle is $bytes bytes, over the $max_bytes-byte limit"
echo "gpu_bundle: $out: $((bytes / 1024)) KiB; bundled libraries: $(cd "$out/lib" && ls | tr '\n' ' ' | grep . || echo none)"
