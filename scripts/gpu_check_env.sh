# Stage 1 of gpu_check.sh (sourced by it, in its shell): what this machine has, printed before
# anything else so that even a failed run teaches the next one something, then the bundle's
# integrity and every library resolved. Uses gpu_check.sh's variables (bundle, python, dry_run,
# scratch) and within().

# The versions as this machine has them, without the bundle: the NVIDIA driver, GPUs, the CUDA
# libraries wherever they are (pip wheels, a CUDA toolkit, the system), and the C++ runtime.
found() {
    echo "found on $(uname -n): $(uname -sr), $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo 'unknown OS')"
    local drv="" n=""
    drv=$(sed -n 's/.*Kernel Module *\([0-9][0-9.]*\).*/\1/p' /proc/driver/nvidia/version 2>/dev/null | head -n 1)
    if command -v nvidia-smi >/dev/null 2>&1; then
        [ -n "$drv" ] || drv=$(timeout "$(within 20)" nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
        n=$(timeout "$(within 20)" nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    fi
    [ -n "$n" ] || n=$(ls -d /proc/driver/nvidia/gpus/* 2>/dev/null | wc -l)
    echo "  NVIDIA driver: ${drv:-none found (no /proc/driver/nvidia/version, no nvidia-smi)}"
    echo "  GPUs: $n (nvidia-smi -L, else /proc/driver/nvidia/gpus)"
    # Each library where the loader would find it (pip wheels, a CUDA toolkit, the system), and
    # the version it reports itself: none of these calls needs a GPU.
    local dirs=() d lib hit found_libs=()
    mapfile -t dirs < <(timeout "$(within 30)" "$python" -c "$find_wheels" 2>/dev/null)
    for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib"; do [ -d "$d" ] && dirs+=("$d"); done
    for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
        hit=""
        for d in "${dirs[@]}"; do [ -e "$d/$lib" ] && { hit=$d/$lib; break; }; done
        [ -n "$hit" ] || hit=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
        found_libs+=("$lib=${hit:-}")
    done
    timeout "$(within 30)" "$python" - "${found_libs[@]}" <<'PY' 2>&1 || echo "  CUDA libraries: '$python' could not ask them"
import ctypes, os, sys
# name: (function, how its integer reads)
calls = {"libcuda": ("cuDriverGetVersion", "cuda"), "libcudart": ("cudaRuntimeGetVersion", "cuda"),
         "libcublas": ("cublasGetProperty", "mmp"), "libcudnn": ("cudnnGetVersion", "mmp"),
         "libnccl": ("ncclGetVersion", "mmp")}
for arg in sys.argv[1:]:
    lib, path = arg.split("=", 1)
    name = lib.split(".so")[0]
    if not path:
        print(f"  {name}: not found"); continue
    real = os.path.realpath(path)
    fn, form = calls[name]
    try:
        f = getattr(ctypes.CDLL(path), fn)
        if name == "libcudnn":
            f.restype = ctypes.c_size_t; v = f()
        elif name == "libcublas":  # cublasGetProperty(MAJOR_VERSION = 0, MINOR = 1, PATCH = 2, int*)
            parts = [ctypes.c_int(0) for _ in range(3)]
            v = 0 if any(f(i, ctypes.byref(p)) for i, p in enumerate(parts)) else \
                parts[0].value * 10000 + parts[1].value * 100 + parts[2].value
        else:
            out = ctypes.c_int(0); v = out.value if f(ctypes.byref(out)) == 0 else 0
        ver = f"{v // 1000}.{v % 1000 // 10}" if form == "cuda" else f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
        print(f"  {name}: {ver if v else 'no version (the call failed)'} ({path}{' -> ' + real if real != path else ''})")
    except Exception as e:
        print(f"  {name}: {path}: cannot be asked ({e})")
PY
    timeout "$(within 30)" "$python" -c 'import importlib.metadata as m
print("  pip:", " ".join(sorted(d.metadata["Name"] + "==" + d.version for d in m.distributions()
                         if (d.metadata["Name"] or "").lower().startswith(("nvidia-", "torch")))) or "no nvidia-* or torch packages")' 2>/dev/null ||
        echo "  pip: '$python' cannot list its packages"
    local cxx have need
    # The bundle's own files carry their C++ runtime; the system's serves NVIDIA's libraries.
    cxx=$(ldconfig -p 2>/dev/null | awk '$1 == "libstdc++.so.6" && /x86-64/ {print $NF; exit}')
    have=$([ -n "$cxx" ] && grep -a -o 'GLIBCXX_3\.4\.[0-9]*' "$cxx" | sort -V -u | tail -n 1)
    echo "  libstdc++: ${cxx:-not found} (newest ${have:-unknown}); the bundle's files do not use it (theirs is linked in)"
    cxx=$(ldconfig -p 2>/dev/null | awk '$1 == "libgcc_s.so.1" && /x86-64/ {print $NF; exit}')
    have=$([ -n "$cxx" ] && grep -a -o 'GCC_[0-9][0-9.]*' "$cxx" | sort -V -u | tail -n 1)
    need=$(sed -n 's/^needs glibc.* a libgcc_s with \(GCC_[0-9.]*\).*/\1/p' "$bundle/BUNDLE.txt" | head -n 1)
    echo "  libgcc_s: ${cxx:-not found} (newest ${have:-unknown}); the bundle needs ${need:-see BUNDLE.txt}"
    have=$(ldd --version 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+$')
    need=$(sed -n 's/^needs glibc >= \([0-9.]*\).*/\1/p' "$bundle/BUNDLE.txt" | head -n 1)
    echo "  glibc: ${have:-unknown} ($(ldd --version 2>/dev/null | head -n 1)); the bundle needs >= ${need:-see BUNDLE.txt}"
    if [ -n "$have" ] && [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$have" "$need" | sort -V | tail -n 1)" != "$have" ]; then
        echo "  this system's glibc is older than the bundle needs: $(sed -n 's/^runs on: //p' "$bundle/BUNDLE.txt")"
    fi
}

# NVIDIA's wheels install the namespace package nvidia with one lib/ per wheel.
find_wheels='
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for root in nvidia.__path__:
    for name in sorted(os.listdir(root)):
        lib = os.path.join(root, name, "lib")
        if os.path.isdir(lib) and any(".so" in f for f in os.listdir(lib)):
            print(lib)
'

stage1() {
    echo "bundle: $bundle"
    sed -n '/^files:/q;p' "$bundle/BUNDLE.txt"
    (cd "$bundle" && sha256sum --quiet -c SHA256SUMS) || { echo "bundle files differ from SHA256SUMS"; return 1; }
    echo "bundle integrity: ok ($(wc -l <"$bundle/SHA256SUMS") files match SHA256SUMS)"

    # The CUDA libraries the binaries need, by soname.
    cuda_sonames=$(for f in "$bundle/parbench" "$bundle/parbench_tests" "$bundle"/libparbench_*.so "$bundle"/lib/libparbench_*.so; do
                       [ -e "$f" ] && objdump -p "$f" | awk '/NEEDED/ {print $2}'
                   done | grep -E '^lib(cudart|cublas|cublasLt|cudnn|nccl)\.so' | sort -u)
    if [ "$dry_run" = 1 ]; then
        # A simulated pip-wheel layout: site-packages/nvidia/{cu13,cudnn,nccl}/lib holding only
        # versioned sonames, made from wherever this machine's CUDA libraries are.
        local site="$scratch/site-packages" lib src d
        mkdir -p "$site/nvidia"
        for lib in $cuda_sonames libcublasLt.so.13; do
            src=$(LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib" \
                  ldd "$bundle/parbench" | awk -v l="$lib" '$1 == l && $3 ~ /^\// {print $3}')
            [ -n "$src" ] || src=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
            [ -n "$src" ] || { echo "dry run: no $lib on this machine to simulate a wheel with"; return 1; }
            case "$lib" in libcudnn*) d=cudnn ;; libnccl*) d=nccl ;; *) d=cu13 ;; esac
            mkdir -p "$site/nvidia/$d/lib"
            touch "$site/nvidia/$d/__init__.py"
            ln -sf "$(readlink -f "$src")" "$site/nvidia/$d/lib/$lib"
            # cuDNN opens its engine libraries at run time, by soname, from the library path.
            if [ "$d" = cudnn ]; then
                for s in "$(dirname "$src")"/libcudnn_*.so.9; do
                    [ -e "$s" ] && ln -sf "$(readlink -f "$s")" "$site/nvidia/cudnn/lib/$(basename "$s")"
                done
            fi
        done
        echo "dry run: simulated wheel layout in $site: $(cd "$site" && find nvidia -name '*.so*' | sort | tr '\n' ' ')"
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    fi

    # NVIDIA's wheels first (what PyTorch itself loads), then a CUDA toolkit.
    wheel_dirs=$(timeout "$(within 30)" "$python" -c "$find_wheels" 2>/dev/null)
    local dirs=()
    [ -n "$wheel_dirs" ] && mapfile -t dirs <<<"$wheel_dirs"
    if [ "$dry_run" = 0 ]; then
        for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/lib"; do
            [ -d "$d" ] && dirs+=("$d")
        done
    fi
    if [ "${#dirs[@]}" -gt 0 ]; then
        export LD_LIBRARY_PATH="$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    echo "CUDA library directories: ${dirs[*]:-(none: the system library path)}"
    [ "$dry_run" = 0 ] || [ -n "$wheel_dirs" ] ||
        { echo "dry run: '$python' did not find the simulated nvidia package"; return 1; }

    # Every binary and bundled library resolves every library: bundled ones from lib/, CUDA
    # ones from the directories above (the simulated wheels in a dry run), the rest from the
    # system, and nothing from the machine the bundle was built on.
    local bad=0 f name path needed
    local provided_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc|libnvJitLink)\.so'
    for f in "$bundle/parbench" "$bundle/parbench_tests" "$bundle"/lib/*.so* "$bundle"/libparbench_*.so; do
        [ -e "$f" ] || continue
        out=$(ldd "$f" 2>&1)
        if grep -q 'not found' <<<"$out"; then
            echo "${f#$bundle/}: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ' | tr '\n' ';')"
            bad=1
        fi
        needed=$(objdump -p "$f" | awk '/NEEDED/ {print $2}')
        while read -r name path; do
            # What a bundled file links directly must come from the bundle, unless the GPU
            # machine provides it (CUDA libraries, the C and C++ runtimes).
            if grep -qxF "$name" <<<"$needed" && ! [[ "$name" =~ $provided_re ]] &&
               [[ "$path" != "$bundle/lib/"* ]]; then
                echo "${f#$bundle/}: $name => $path, not from the bundle's lib/"; bad=1
            fi
            if grep -qxF "$name" <<<"$cuda_sonames"; then
                echo "  ${f#$bundle/}: $name => $path"
                if [ "$dry_run" = 1 ] && [[ "$path" != "$scratch"/* ]]; then
                    echo "${f#$bundle/}: $name resolves to $path, not the simulated wheel"; bad=1
                fi
            fi
        done < <(awk '/=>/ && $3 ~ /^\// {print $1, $3}' <<<"$out")
    done
    [ "$bad" = 0 ] || { echo "library resolution: FAILED"; return 1; }
    echo "library resolution: ok (every binary and bundled library)"

    # The libraries actually loaded, with versions (real file names).
    echo "loaded by 'parbench devices':"
    LD_DEBUG=libs timeout "$(within 60)" "$bundle/parbench" devices 2>&1 >"$scratch/devices.txt" |
        sed -n 's/.*calling init: //p' | sort -u | while read -r l; do
            real=$(readlink -f "$l"); [ "$real" = "$l" ] && echo "  $l" || echo "  $l -> $real"
        done
    cat "$scratch/devices.txt"
    echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) threads"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout "$(within 30)" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    else
        echo "nvidia-smi: not found"
    fi
    timeout "$(within 60)" "$python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "GPU available:", torch.cuda.is_available())' 2>&1 | tail -n 1
    echo "compute-sanitizer: $(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" 2>/dev/null || echo 'not found')"
    timeout "$(within 30)" "$bundle/parbench_tests" --gtest_list_tests >/dev/null || { echo "parbench_tests cannot list its tests"; return 1; }
    return 0
}

# The dry run's checks (gpu_check.sh --dry-run), in a subshell of gpu_check.sh: the budgets, the GPU
# tests stage 2 would run, every later stage's parbench command line parsed up to its want of a
# GPU, stage 3b's profiles and table on a tiny net on the CPU, and the PyTorch peers on the CPU.
dry_run_commands() {
    echo "budgets (s): environment $budget_env, tests $budget_tests, torch $budget_torch, layers $budget_layers, run $budget_run, sanitizer $budget_sanitizer, reserve $reserve: $((budget_env + budget_tests + budget_torch + budget_layers + budget_run + budget_sanitizer + reserve)) of $hard_cap"
    n=$(gpu_tests | wc -l)
    echo "stage 2 would run $n GPU tests (filter $gpu_filter): $(gpu_tests | cut -d. -f1 | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')"
    [ "$n" -gt 0 ] || { echo "no test matches $gpu_filter"; exit 1; }
    # Each parbench command must get past flag parsing and stop only for want of a GPU.
    while read -r args; do
        msg=$(timeout "$(within 30)" "$bundle/parbench" $args 2>&1 >/dev/null)
        if ! grep -q 'no CUDA device' <<<"$msg"; then
            echo "parbench $args: expected 'no CUDA device', got: $msg"; exit 1
        fi
        echo "parbench $args: parsed (stops at: $msg)"
    done <<EOF
train --workload great_net --image 512 --width 1 --batch 1 --precision tf32 --device-kind cuda --iterations $iterations --warmup $warmup
train --workload great_net --image 512 --width 1 --batch 1 --precision tf32 --layout nhwc --device-kind cuda --iterations $iterations --warmup $warmup
train --workload great_net --image 512 --width 1 --batch 1 --precision bf16 --device-kind cuda --iterations $iterations --warmup $warmup
train --workload great_net --image 512 --width 1 --batch 1 --precision bf16 --layout nhwc --device-kind cuda --iterations $iterations --warmup $warmup
profile --workload great_net --image 512 --width 1 --batch 1 --precision bf16 --device-kind cuda --out $scratch/p.json
profile --workload great_net --image 512 --width 1 --batch 1 --precision tf32 --layout nhwc --device-kind cuda --out $scratch/p.json
run --device-kind cuda --oversubscribe --strategies dp,ddp,mp,pipeline --devices 2 --iterations 3 --warmup 1 --out $scratch/run
run --device-kind cuda --strategies regular --devices 1 --precision tf32 --iterations 2 --warmup 1 --trace --out $scratch/run-trace
run --device-kind cuda --oversubscribe --strategies all --devices 2,4 --workload great_net --image 64 --width 0.25 --batch 2 --iterations 2 --warmup 1 --out $scratch/run-all
run --device-kind cuda --oversubscribe --workload unet --image 64 --width 0.125 --batch 2 --strategies regular,ddp,fsdp,mp,pipeline-1f1b,pipeline-zb,pipeline-interleaved,pipeline-zbv,tp --devices 3 --iterations 2 --warmup 1 --out $scratch/run-unet
train --workload great_net --image 64 --width 0.25 --batch 2 --device-kind cuda --iterations 2 --warmup 1
EOF
    # What BUNDLE.txt's "runs on" rests on, checked on the files as shipped: none needs a glibc newer
    # or libgcc_s than it names, nor the system's libstdc++ (RHEL 9's is older than the one they were
    # built with, so they carry theirs).
    if command -v objdump >/dev/null 2>&1; then
        local f need_glibc need_gcc_s newest cxx bad=()
        need_glibc=$(sed -n 's/^needs glibc >= \([0-9.]*\).*/\1/p' "$bundle/BUNDLE.txt" | head -n 1)
        need_gcc_s=$(sed -n 's/^needs glibc.* a libgcc_s with GCC_\([0-9.]*\).*/\1/p' "$bundle/BUNDLE.txt" | head -n 1)
        for f in "$bundle/parbench" "$bundle/parbench_tests" "$bundle"/*.so "$bundle"/lib/*.so*; do
            [ -e "$f" ] || continue
            newest=$(objdump -T "$f" | grep -oE '\(GLIBC_[0-9.]+\)' | tr -d '()' | sed 's/GLIBC_//' | sort -V -u | tail -n 1)
            [ -z "$newest" ] || [ "$(printf '%s\n%s\n' "$newest" "$need_glibc" | sort -V | tail -n 1)" = "$need_glibc" ] ||
                bad+=("${f#$bundle/} needs glibc $newest")
            cxx=$(objdump -p "$f" | awk '$1 == "NEEDED" && $2 ~ /^(libstdc\+\+|libgomp)\./ {print $2}'
                  objdump -T "$f" | grep -oE '\((GLIBCXX|CXXABI)_[0-9.]+\)' | sort -u)
            [ -z "$cxx" ] || bad+=("${f#$bundle/} needs the system's libstdc++: $(tr '\n' ' ' <<<"$cxx")")
            newest=$(objdump -T "$f" | grep -oE '\(GCC_[0-9.]+\)' | tr -d '()' | sed 's/GCC_//' | sort -V -u | tail -n 1)
            [ -z "$newest" ] || [ "$(printf '%s\n%s\n' "$newest" "$need_gcc_s" | sort -V | tail -n 1)" = "$need_gcc_s" ] ||
                bad+=("${f#$bundle/} needs libgcc_s GCC_$newest")
        done
        [ "${#bad[@]}" = 0 ] || { printf '%s\n' "${bad[@]}"; echo "BUNDLE.txt's 'runs on' does not hold"; exit 1; }
        echo "runs on: every bundled file needs glibc <= $need_glibc, libgcc_s <= GCC_$need_gcc_s and no libstdc++ of the system's"
    else
        echo "runs on: not checked (no objdump here)"
    fi
    # The program and the CUDA module each carry a C++ runtime; errors and strings cross between
    # them (the module loaded, the system described, a missing GPU refused by the module).
    timeout "$(within 60)" "$bundle/parbench_tests" --gtest_filter='Cuda.*' >"$scratch/cuda.txt" 2>&1 ||
        { cat "$scratch/cuda.txt"; echo "parbench_tests' Cuda.* tests failed"; exit 1; }
    echo "program and CUDA module: $(grep -E '^\[  PASSED  \]' "$scratch/cuda.txt")"
    # Stage 3b's whole chain on a tiny net on the CPU: the engine's profiles, PyTorch's where this
    # Python has torch, the joined table (no GPU named: its roofline columns read n/a). fp32 and tf32:
    # bf16 on a CPU needs oneDNN, which the bundle leaves out; NCHW only: a CPU run refuses --layout
    # nhwc (its parse is among the lines above).
    layers_torch_args=""
    "$python" -c 'import torch' 2>/dev/null && layers_torch_args="--device cpu --image 8 --width 0.125 --batch 1 --reps 1"
    layer_precisions="fp32 tf32" layer_layouts="nchw" gpu_name="" layer_stage "$scratch/layers-dry" --workload great_net --image 8 --width 0.125 --batch 1 \
        --device-kind cpu --warmup 0 --reps 1 || { cat "$scratch/layers-dry/layers.log"; echo "stage 3b failed on CPU"; exit 1; }
    echo "stage 3b on CPU: $(grep -c '^| [0-9]' "$scratch/layers-dry/layers.md") table rows, layers.json" \
         "($([ -n "$layers_torch_args" ] && echo 'engine and PyTorch' || echo "engine only: '$python' has no torch"))"
    if "$python" -c 'import torch' 2>/dev/null; then
        timeout "$(within 60)" "$python" "$bundle/scripts/torch_gpu_peer.py" --device cpu --image 16 --width 0.125 --batch 1 \
            --precision bf16 --iterations 1 --warmup 0 >"$scratch/peer.txt" 2>&1 ||
            { cat "$scratch/peer.txt"; echo "the PyTorch peer failed on CPU"; exit 1; }
        echo "PyTorch peer: ran on CPU ($(grep -m1 '^median' "$scratch/peer.txt"))"
        timeout "$(within 60)" "$python" "$bundle/scripts/torch_layer_profile.py" --device cpu --image 8 --width 0.125 \
            --precision bf16 --reps 1 >"$scratch/peer.txt" 2>&1 ||
            { cat "$scratch/peer.txt"; echo "the PyTorch per-layer profile failed on CPU"; exit 1; }
        echo "PyTorch per-layer profile: ran on CPU ($(grep -c '^ *[0-9]' "$scratch/peer.txt") layers)"
    else
        echo "PyTorch peer: '$python' has no torch; not tried"
    fi
}
