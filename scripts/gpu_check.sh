#!/usr/bin/env bash
# GPU suites on a GPU machine (run there; see bench/RESULTS.md for recorded runs).
# Expects the GPU wheel in .whl-gpu/ and the machine's python3 with CuPy, mpi4py, pytest.
# Usage: bash scripts/gpu_check.sh [pytest -k expression]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf /tmp/site  # pip --target does not replace an installed copy
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-gpu/cudecomp-*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi -L
python3 -c 'import cudecomp, cupy; print("cudecomp", cudecomp.__version__, "CPU_ONLY", cudecomp.CPU_ONLY, "GPUs", cupy.cuda.runtime.getDeviceCount())'
K=${1:-}
run() {  # run NAME NRANKS
    local name=$1 n=$2
    echo "=== $name ($n ranks) ==="
    local what=${3:-tests}
    timeout 540 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" python3 -m pytest -q -p no:cacheprovider -x ${K:+-k "$K"} $what \
        > "$OUT/$name.log" 2>&1
    local rc=$?
    grep -E "passed|failed|error" "$OUT/$name.log" | sort | uniq -c | head -5
    grep -E "^\[rank|Error|FAILED" "$OUT/$name.log" | head -20
    return $rc
}
G=$(python3 -c 'import cupy; print(cupy.cuda.runtime.getDeviceCount())')
rc=0
# SUITES picks runs (default all): gpu1 gpu2 sliced unregistered gpu4 gpu3 gpu6 examples
# (gpu3, gpu6: the suites with 3 and 6 ranks on the GPUs there are; examples: every example
# of scripts/examples.sh on 2 ranks)
SUITES=${SUITES:-gpu1 gpu2 sliced unregistered gpu4 gpu3 gpu6 examples}
on() { [[ " $SUITES " == *" $1 "* ]]; }
on gpu1 && { run gpu1 1 || rc=1; }
if [ "$G" -ge 2 ]; then on gpu2 && { run gpu2 2 || rc=1; }; else on gpu2 && { run gpu2-shared 2 || rc=1; }; fi
# Sliced transposes (NCCL, DIRECT, host-staged MPI_P2P) and DIRECT halos cut chunks and
# faces into slices of 32 MiB: tiny slices make the suite's small arrays take the
# multi-slice paths too.
if on sliced; then
    CUDECOMP_PIPELINE_SLICE_BYTES=64 K="NCCL or DIRECT or MPI_P2P or NVSHMEM or halo_reference" \
        run sliced 2 "tests/test_transpose.py tests/test_halo.py" || rc=1
fi
# NCCL transposes exchange through workspaces registered with NCCL by default; this run
# covers the unregistered path.
if on unregistered && [ "$G" -ge 2 ]; then
    CUDECOMP_ENABLE_NCCL_UBR=0 K="NCCL or halo_reference" run unregistered 2 "tests/test_transpose.py tests/test_halo.py tests/test_gpu.py" || rc=1
fi
on gpu4 && { run gpu4-shared 4 || rc=1; }
on gpu3 && { run gpu3 3 || rc=1; }
on gpu6 && { run gpu6 6 || rc=1; }
if on examples; then
    CUDECOMP_EXAMPLE_RANKS=2 bash scripts/examples.sh "$(command -v python3)" "mpirun --allow-run-as-root --oversubscribe --bind-to none" \
        > "$OUT/examples.log" 2>&1 || rc=1
    grep -E "==>|FAILED|passed|timed out" "$OUT/examples.log" | tail -12
fi
B=MPI_P2P; [ "$G" -ge 2 ] && B=NCCL
echo "=== demo (2 ranks, $B, 128^3) ==="
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 python3 examples/demo.py -n 128 --backend $B 2>&1 | tail -8
echo "=== Taylor-Green on cudecomp.fft (2 ranks, $B, 64^3 to t=1, --check) ==="
timeout 180 mpirun --allow-run-as-root --oversubscribe -np 2 python3 examples/taylor_green.py -n 64 --t-end 1 --check --backend $B \
    2>&1 | tail -4 || rc=1
exit $rc
