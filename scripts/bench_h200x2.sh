#!/usr/bin/env bash
# The two-GPU measurements that bench/RESULTS.md still lists as not measured (issues 17, 19,
# 20), for a machine with two GPUs joined by NVLink. Run there from the repository root with
# the GPU wheel in .whl-gpu/ (see scripts/gpu_check.sh); JSON and data files go to $OUT.
# Usage: bash scripts/bench_h200x2.sh PART   (PART: tests | fft | transposes | tg; each fits
# in a 10-minute call; tg runs the 512^3 Taylor-Green case from t = 0 to 20)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-gpu/cudecomp-*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi -L
M="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2"
quiet() { grep -vE "^\s*$" | tail -"$1"; }
case ${1:-} in
tests)
    # One GPU per rank: library arrays through CUDA IPC, NVSHMEM symmetric buffers,
    # input_ready and output_ready marks across GPUs, streamed slab FFTs (both backward orders).
    timeout 500 $M python3 -m pytest -q --color=no -p no:cacheprovider -rs tests/test_library_arrays.py \
        tests/test_nvshmem.py tests/test_input_ready.py tests/test_fft.py 2>&1 | grep -E "passed|failed|rror|SKIPPED" | head -20
    ;;
fft)
    # Issue 19: 1024^3 complex128 forward/backward (target <= 20 ms), both orders of the
    # streamed backward (CUDECOMP_FFT_BACKWARD: rows, the default, and planes, which lands
    # the exchange in slabs of Z planes), then the natural output beside NCCL.
    for o in rows planes; do
        CUDECOMP_FFT_BACKWARD=$o timeout 150 $M -x CUDECOMP_FFT_BACKWARD python3 -m cudecomp.bench --gdims 1024^3 512^3 \
            --pdims 1x2 --dtypes c128 --backends DIRECT --ops fft --fft-out transposed --reps 5 --warmup 2 \
            --json "$OUT/fft-backward-$o.json" 2>&1 | quiet 12
    done
    timeout 150 $M python3 -m cudecomp.bench --gdims 1024^3 --pdims 1x2,2x1 --dtypes c128 --backends DIRECT,NCCL \
        --ops fft --fft-out natural --reps 5 --warmup 2 --json "$OUT/fft-natural.json" 2>&1 | quiet 12
    ;;
transposes)
    # Issue 20 on GPUs (single copies between library arrays) and issue 17 (NVSHMEM_SM).
    for a in user library; do
        timeout 150 $M python3 -m cudecomp.bench --gdims 1024^3 512^3 --pdims 2x1,1x2 --dtypes c128 f64 \
            --backends DIRECT --ops xy yz zy yx --alloc $a --reps 5 --warmup 2 --no-baselines \
            --json "$OUT/alloc-$a.json" 2>&1 | quiet 22
    done
    timeout 150 $M python3 -m cudecomp.bench --gdims 1024^3 --pdims 2x1 --dtypes c128 f64 \
        --backends NVSHMEM_SM,NVSHMEM,DIRECT --ops xy yx --reps 10 --warmup 3 --json "$OUT/nvshmem.json" 2>&1 | quiet 16
    ;;
tg)
    # Issue 19: 512^3 from t = 0 to 20 in one call (target <= 110 ms per step).
    timeout 590 $M python3 examples/taylor_green.py -n 512 --dt 0.004 --t-end 20 --pdims 1x2 --backend DIRECT \
        --out "$OUT/tg512-2gpu.dat" 2>&1 | awk 'NR<=3 || NR%10==0' | tail -40
    ;;
*)
    echo "usage: bash scripts/bench_h200x2.sh tests|fft|transposes|tg" >&2
    exit 2
    ;;
esac
