#!/usr/bin/env bash
# ctest driver for the GPU bundle: builds it with scripts/gpu_bundle.sh (incremental in
# build-bundle/), then checks it without a GPU: size; every binary and bundled library resolves
# every library from the bundle plus a simulated pip-wheel layout (site-packages/nvidia/...
# holding only versioned sonames, made here from the CUDA toolkit's libraries, found through a
# fake `nvidia` package as gpu_check.sh finds the real one); nothing resolves into the source
# or build tree; no file holds a path of this machine (strings); no file needs a newer C++
# runtime than BUNDLE.txt and the README say (objdump -T); the tests find their fixtures inside
# the bundle; gpu_check.sh --dry-run prints what it found first, makes stage 3b's table on the
# CPU, writes only the files it promises and ends with "no GPU" (exit 2) within a minute; and a
# bundle missing a library or with a changed file is caught.
# usage: bundle_test.sh [BUNDLE]   (BUNDLE given: check it and build nothing)
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d /tmp/parbench_bundle_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

if [ $# -ge 1 ]; then
  bundle=$(cd "$1" && pwd) || fail "no bundle at $1"
else
  bundle=$src/build-bundle/out
  "$src/scripts/gpu_bundle.sh" --jobs 2 "$bundle" || fail "gpu_bundle.sh"
fi

bytes=$(du -sb "$bundle" | cut -f1)
[ "$bytes" -lt $((20 * 1024 * 1024)) ] || fail "bundle is $bytes bytes, not under 20 MiB (scripts/gpu_bundle.sh's limit)"
echo "bundle: $((bytes / 1024)) KiB, libraries: $(ls "$bundle/lib" | tr '\n' ' ')"

# The simulated wheels: the toolkit's CUDA libraries under their versioned sonames only.
site=$tmp/site-packages
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -n "$path" ] || { [ -e "$d/$lib" ] && path=$d/$lib; }
  done
  [ -n "$path" ] || fail "no $lib in the CUDA toolkit to simulate a wheel with"
  case $lib in libcudnn*) w=cudnn ;; libnccl*) w=nccl ;; *) w=cu13 ;; esac
  mkdir -p "$site/nvidia/$w/lib" && touch "$site/nvidia/$w/__init__.py"
  cp -L "$path" "$site/nvidia/$w/lib/$lib"  # a copy: no unversioned name, no link into the toolkit
done
for s in $(dirname "$(ldconfig -p | awk '$1 == "libcudnn.so.9" {print $NF; exit}')")/libcudnn_*.so.9; do
  ln -s "$(readlink -f "$s")" "$site/nvidia/cudnn/lib/$(basename "$s")"
done
[ -z "$(find "$site" -name '*.so')" ] || fail "the simulated wheels must hold only versioned sonames"
libdirs=$(PYTHONPATH=$site python3 -c '
import os, nvidia
for root in nvidia.__path__:
    for n in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, n, "lib")): print(os.path.join(root, n, "lib"))' | paste -sd:)
[ -n "$libdirs" ] || fail "the fake nvidia package was not found"
export LD_LIBRARY_PATH=$libdirs

provided='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
elfs=("$bundle/parbench" "$bundle/parbench_tests" "$bundle"/lib/*.so* "$bundle"/libparbench_*.so)
checked=0
for f in "${elfs[@]}"; do
  [ -e "$f" ] || continue
  out=$(ldd "$f") || fail "ldd ${f#$bundle/}"
  ! grep -q 'not found' <<<"$out" || fail "${f#$bundle/}: $(grep 'not found' <<<"$out")"
  ! grep -v -e "$bundle/" -e "$tmp/" <<<"$out" | grep -qF "$src/" ||
    fail "${f#$bundle/} resolves into the source or build tree: $(grep -F "$src/" <<<"$out")"
  while read -r name path; do
    case $name in
      libcudart* | libcublas* | libcudnn* | libnccl*)
        [[ $path == "$site"/* ]] || fail "${f#$bundle/}: $name => $path, not the simulated wheel" ;;
      *)
        [[ $name =~ $provided ]] || [[ $path == "$bundle/lib/"* ]] ||
          fail "${f#$bundle/}: $name => $path, neither bundled nor a system library" ;;
    esac
  done < <(awk '/=>/ {print $1, $3}' <<<"$out")
  checked=$((checked + 1))
done
# parbench, parbench_tests and the CUDA module at least (no library is bundled since the C++ runtime
# is linked in; any that is, is checked too).
[ "$checked" -ge 3 ] && [ -e "$bundle/libparbench_cuda.so" ] || fail "only $checked files checked"
! objdump -x "$bundle/parbench" "$bundle/parbench_tests" | grep -E 'R(UN)?PATH' | grep -q "$src" ||
  fail "a run path into the source tree"
echo "ldd: $checked files resolve from the bundle and the simulated wheels"

# No path of the build machine (__FILE__ in error messages, PARBENCH_SOURCE_DIR, the build tree).
for f in "${elfs[@]}"; do
  [ -e "$f" ] || continue
  leaked=$(strings -a "$f" | grep -F "$src/" | head -n 3)
  [ -z "$leaked" ] || fail "${f#$bundle/} holds paths of the build machine: $leaked"
  # Nor one of another tree, nor one relative to the build folder (what ccache's CCACHE_BASEDIR
  # hands the compiler).
  leaked=$(strings -a "$f" | grep -E '(^/|(^|[^.])\.\./)(.*/)?(bench|engine|reports|strategies|tests|workloads)/[a-z_/]+\.(cpp|h|cu|cuh)\b' | head -n 3)
  [ -z "$leaked" ] || fail "${f#$bundle/} names sources by absolute or build-relative paths: $leaked"
done
strings -a "$bundle/parbench" | grep -qxE '(bench|engine|reports|strategies)/[a-z_]+\.cpp' ||
  fail "parbench names no source relative to the repository (__FILE__ of PB_CHECK, as engine/model.cpp)"
echo "strings: no file holds a path under $src/; __FILE__ is repository-relative"

# The systems BUNDLE.txt and the README name include RHEL 9; that the files hold to it (glibc 2.34,
# libgcc_s GCC_7.0.0, no libstdc++ of the system's) is the dry run's check, required below.
grep -qE '^runs on: glibc >= 2\.34, whatever its libstdc\+\+: RHEL/Rocky/Alma 9\+' "$bundle/BUNDLE.txt" ||
  fail "BUNDLE.txt does not say it runs on RHEL 9 ('runs on: glibc >= 2.34, whatever its libstdc++: RHEL/Rocky/Alma 9+')"
grep -q 'RHEL/Rocky/Alma 9' "$src/README.md" || fail "README.md does not name RHEL 9, where the bundle runs"
echo "BUNDLE.txt and README.md name RHEL 9"

# The tests find parbench and the fixtures next to themselves, not in the source tree: in a
# copy without one fixture, the test that requires it fails.
cp -r "$bundle" "$tmp/copy"
(cd "$tmp" && env -u PARBENCH_BINARY -u PARBENCH_SOURCE_DIR "$tmp/copy/parbench_tests" \
   --gtest_filter='GoldenFixtures.*:Replay.CommandReproducesFixtureFiles:Strategies.ReplayThroughTheBinary' \
   >"$tmp/t.txt" 2>&1) || { cat "$tmp/t.txt"; fail "fixture tests from the bundle"; }
rm -rf "$tmp/copy/tests/fixtures/conv_pad0"
(cd "$tmp" && env -u PARBENCH_BINARY -u PARBENCH_SOURCE_DIR "$tmp/copy/parbench_tests" \
   --gtest_filter='GoldenFixtures.CoverTheRequiredCases' >"$tmp/t.txt" 2>&1) &&
  fail "parbench_tests read fixtures from outside the bundle"
echo "parbench_tests: finds parbench and its fixtures inside the bundle"

# The dry run, as CI and a first GPU session run it.
py=python3
/usr/bin/python3 -c 'import torch' 2>/dev/null && py=/usr/bin/python3
start=$(date +%s)
(cd "$tmp" && mkdir -p cwd && cd cwd && "$bundle/gpu_check.sh" --dry-run --python "$py" "$tmp/dry" >"$tmp/dry.txt" 2>&1)
rc=$? elapsed=$(($(date +%s) - start))
[ $rc -eq 2 ] || { cat "$tmp/dry.txt"; fail "gpu_check.sh --dry-run exited $rc, expected 2"; }
tail -n 1 "$tmp/dry.txt" | grep -q '^gpu_check: no GPU' || { cat "$tmp/dry.txt"; fail "no 'no GPU' last line"; }
grep -q 'library resolution: ok' "$tmp/dry.txt" || fail "dry run did not check library resolution"
grep -q 'gpu_check: dry run: ok' "$tmp/dry.txt" || fail "dry run did not parse the later stages"
grep -q '^runs on: every bundled file needs glibc <= 2.34, libgcc_s <= GCC_7.0.0 and no libstdc++' "$tmp/dry.txt" ||
  { cat "$tmp/dry.txt"; fail "the dry run did not check the systems BUNDLE.txt says it runs on"; }
grep -qE '^program and CUDA module: \[  PASSED  \] [1-9]' "$tmp/dry.txt" ||
  { cat "$tmp/dry.txt"; fail "the dry run did not run the program-and-module tests"; }
[ $elapsed -lt 60 ] || fail "dry run took ${elapsed}s"
# What it found comes first, before the bundle is even checked.
first=$(grep -n -m1 '^found on ' "$tmp/dry.txt" | cut -d: -f1)
integrity=$(grep -n -m1 '^bundle integrity' "$tmp/dry.txt" | cut -d: -f1)
[ -n "$first" ] && [ -n "$integrity" ] && [ "$first" -lt "$integrity" ] ||
  { cat "$tmp/dry.txt"; fail "the dry run did not print what it found before the integrity check"; }
for what in 'NVIDIA driver:' 'GPUs:' 'libcudart:' 'libcudnn:' 'libnccl:' 'libstdc++:' 'glibc:'; do
  sed -n "$first,${integrity}p" "$tmp/dry.txt" | grep -q "^  $what" || fail "what it found lacks '$what'"
done
n=$(find "$tmp/dry" -type f | wc -l)
[ "$n" -le 9 ] || fail "$n output files, more than 9"
others=$(cd "$tmp/dry" && find . -type f | sed 's|^\./||' |
         grep -vxE 'gpu_check\.log|env\.txt|tests\.log|torch\.log|layers\.json|run\.log|run\.tar\.gz|sanitizer\.log|summary\.md')
[ -z "$others" ] || fail "files gpu_check.sh does not promise: $others"
[ -z "$(ls -A "$tmp/cwd")" ] || fail "the dry run left files where it was started: $(ls -A "$tmp/cwd")"
# Stage 3b's chain ran on the CPU: profiles, the joined table, its rows in layers.json.
grep -qE '^stage 3b on CPU: [1-9][0-9]* table rows' "$tmp/dry.txt" || { cat "$tmp/dry.txt"; fail "the dry run did not make stage 3b's table"; }
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if d["rows"] and d["engine_profiles"] == ["fp32/nchw", "tf32/nchw"] else 1)' \
  "$tmp/dry/layers.json" || fail "layers.json lacks the rows of the engine's fp32 and tf32 profiles (the dry run's)"
echo "gpu_check.sh --dry-run: found first, exit 2 'no GPU' in ${elapsed}s, $n promised file(s)"

# A bundled library whose own dependency is missing is caught by the library check (the bundle
# holds none now: one is made here, needing a library deleted after the link), a changed file by
# the integrity check.
rm -rf "$tmp/copy" && cp -r "$bundle" "$tmp/copy"
mkdir -p "$tmp/stub"
echo 'int pb_missing(void) { return 1; }' | cc -shared -fPIC -x c - -o "$tmp/stub/libpbmissing.so.1" -Wl,-soname,libpbmissing.so.1
echo 'int pb_missing(void); int pb_extra(void) { return pb_missing(); }' |
  cc -shared -fPIC -x c - -x none -o "$tmp/copy/lib/libpbextra.so.1" "$tmp/stub/libpbmissing.so.1"
rm -rf "$tmp/stub"
(cd "$tmp/copy" && sha256sum lib/libpbextra.so.1 >>SHA256SUMS)
"$tmp/copy/gpu_check.sh" --dry-run "$tmp/dry2" >"$tmp/dry2.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "libpbmissing.so.1 => not found" "$tmp/dry2.txt" ||
  { cat "$tmp/dry2.txt"; fail "a bundled library's missing dependency was not reported (exit $rc)"; }
echo "x" >>"$tmp/copy/scripts/chart.py"
"$tmp/copy/gpu_check.sh" --dry-run "$tmp/dry3" >"$tmp/dry3.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q 'scripts/chart.py: FAILED' "$tmp/dry3.txt" ||
  { cat "$tmp/dry3.txt"; fail "a changed file was not reported (exit $rc)"; }
echo "gpu_check.sh --dry-run: reports a missing library and a changed file"
echo "PASS"
