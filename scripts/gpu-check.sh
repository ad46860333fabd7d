#!/usr/bin/env bash
# GPU check: make CuPy importable, then run the GPU tests and the quick GPU benchmark.
#
#   scripts/gpu-check.sh            # on the GPU machine (about 3-4 minutes; under 5)
#   scripts/gpu-check.sh --pack     # on a machine with network access: put CuPy for the GPU
#                                   # machine (Python 3.12, x86_64) into .whl/ (about 55 MB)
#
# Where CuPy comes from, in order: already importable; .whl/cupy-site.tar.xz (from --pack,
# unpacked into .gpu-site/ and put on PYTHONPATH: no pip, no network); wheels in .whl/
# (pip --no-index); pip from the network. The CUDA major version of the driver (nvidia-smi)
# picks cupy-cuda13x or cupy-cuda12x. CuPy also needs the CUDA libraries (NVRTC to compile
# kernels, cuBLAS/cuSOLVER for linear algebra) from a CUDA toolkit or nvidia-* wheels; the
# script says so if they are missing.
#
# mooncake_py itself is used from this checkout (PYTHONPATH), so nothing is built or
# downloaded for it. Exit status: 0 only if CuPy works, the tests pass and the benchmark's
# derivatives agree.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
WHL=$ROOT/.whl
SITE=$ROOT/.gpu-site
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}

log() { printf '\n=== %s\n' "$*"; }

cuda_major() {
    local v
    v=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9]*' | grep -o '[0-9]*$' | head -1)
    echo "${v:-13}"
}

if [ "${1:-}" = "--pack" ]; then
    # Download the CuPy wheels for the GPU machine and repack the one for Python 3.12 with xz,
    # small enough to travel as an ignored path (a plain wheel is ~69 MB).
    set -e
    mkdir -p "$WHL"
    tmp=$(mktemp -d)
    for major in 13 12; do
        $PY -m pip download -q --only-binary=:all: --python-version 3.12 \
            --platform manylinux2014_x86_64 --no-deps -d "$tmp" "cupy-cuda${major}x" && break
    done
    $PY -m pip download -q --only-binary=:all: --python-version 3.12 --no-deps -d "$tmp" \
        cuda-pathfinder
    mkdir "$tmp/site"
    for w in "$tmp"/*.whl; do (cd "$tmp/site" && $PY -m zipfile -e "$w" .); done
    tar -C "$tmp/site" -cf - . | xz -9 -T0 > "$WHL/cupy-site.tar.xz"
    ls -l "$WHL/cupy-site.tar.xz"
    rm -rf "$tmp"
    echo "carry .whl to the GPU machine (run with carry=['.whl']), then run scripts/gpu-check.sh"
    exit 0
fi

START=$(date +%s)
status=0

log "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1
$PY -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
for m in scipy numba pytest torch jax; do
    $PY -c "import $m; print('$m', $m.__version__)" 2>/dev/null || echo "$m: not installed"
done

log "CuPy"
have_cupy() { $PY -c 'import cupy' 2>/dev/null; }
if ! have_cupy && [ -f "$WHL/cupy-site.tar.xz" ]; then
    echo "unpacking .whl/cupy-site.tar.xz into .gpu-site/"
    mkdir -p "$SITE" && tar -C "$SITE" -xJf "$WHL/cupy-site.tar.xz"
    export PYTHONPATH="$SITE:$PYTHONPATH"
fi
if ! have_cupy; then
    major=$(cuda_major)
    for pkg in "cupy-cuda${major}x" cupy-cuda13x cupy-cuda12x; do
        if [ -d "$WHL" ] && timeout 120 $PY -m pip install -q --no-index --find-links "$WHL" "$pkg"
        then break; fi
        if timeout 120 $PY -m pip install -q "$pkg"; then break; fi
    done
fi
if ! have_cupy; then
    echo "FAILED: CuPy could not be installed (no network? run scripts/gpu-check.sh --pack on a"
    echo "machine with network access and carry .whl)"
    exit 1
fi
if ! $PY - <<'EOF'
import cupy
print("cupy", cupy.__version__, "from", cupy.__file__)
try:
    print("CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver",
          cupy.cuda.runtime.driverGetVersion(), "devices", cupy.cuda.runtime.getDeviceCount())
    k = cupy.ElementwiseKernel("T x", "T y", "y = sin(x) * x", "probe")
    print("NVRTC kernel:", float(k(cupy.arange(4.0)).sum()))
    print("cuBLAS/cuSOLVER:", float(cupy.linalg.solve(cupy.eye(3) * 2, cupy.ones(3)).sum()))
except Exception as e:
    print("CUDA is not usable:", type(e).__name__, e)
    print("(CuPy needs the CUDA libraries: a CUDA toolkit, or pip install "
          "'cupy-cuda13x[ctk]' / the nvidia-*-cu13 wheels)")
    raise SystemExit(1)
EOF
then
    ldconfig -p 2>/dev/null | grep -E 'nvrtc|cublas|cusolver' | head -5
    exit 1
fi

log "tests/gpu (budget 190 s)"
timeout 190 $PY -m pytest -q -rs -p no:cacheprovider tests/gpu || status=1

log "benchmarks/gpu.py --quick (budget 75 s)"
timeout 75 $PY benchmarks/gpu.py --quick --require-gpu || status=1

log "done in $(( $(date +%s) - START )) s, status $status"
exit $status
