#!/usr/bin/env bash
# The GPU suites and the GPU benchmarks, on whatever GPU machine this runs on (1, 2 or more
# GPUs): installs the given GPU wheel into a private directory, runs the test suites under
# MPI, then the benchmark, which appends every figure to the history file (bench/README.md
# is made from it).
#
# Usage: bash scripts/gpu.sh WHEEL [PART ...]
#   WHEEL  the GPU variant's wheel (scripts/build_wheels.sh builds it); installed without
#          dependencies: the machine's python3 must have CuPy, mpi4py, pytest (and NumPy)
#   PART   what to run (default: all). Groups: suites, bench, all. Parts:
#          tests1        the whole test suite on 1 rank
#          tests         the whole suite on 2 ranks (one GPU each, or sharing one GPU), and on
#                        every GPU where there are more than 2
#          shared        the whole suite on 3, 4 and 6 ranks sharing the GPUs there are
#          sliced        transposes and halos cut into 64-byte slices (every multi-slice path)
#          unregistered  NCCL without registered workspaces (CUDECOMP_ENABLE_NCCL_UBR=0)
#          simnodes      2 ranks as 2 simulated nodes, NCCL over sockets on loopback
#          fft-orders    the FFT suite with each streamed backward order (rows, planes)
#          examples      every example on 2 ranks
#          transposes    X->Y, Y->X 1024^3 c128/f64 on 2x1 and 1x2, every backend, beside the
#                        peer-copy ceiling and raw NCCL all-to-all
#          halo          halo updates of extent 8, 1024^3 c128
#          tiny          8^3 host overhead per call, eager and replayed from a CUDA graph
#          fft           1024^3 c128 FFTs, transposed and natural output, beside cupy.fft on
#                        one GPU, with stage costs and both backward orders
#          tg            Taylor-Green 512^3 from t = 0 to 20, checked against the reference
#          suites = tests sliced unregistered simnodes fft-orders examples (2 ranks each)
#          bench  = transposes halo tiny fft tg;  all = tests1 suites shared bench
# Environment: OUT (logs; default .gpu/out), HISTORY (default bench/history.csv), MACHINE
# and COMMIT (the history's names; default: the benchmark's: e.g. 2xH200, git HEAD),
# PYTHON (default python3), LAUNCHER (the MPI launcher without its rank count; default:
# Open MPI's "mpirun --allow-run-as-root --oversubscribe --bind-to none", else MPICH's
# "mpiexec"; ranks are added as -n N), STEP_TIMEOUT (seconds per step, default 590),
# DRY_RUN=1 (print each step's command instead of running it; GPUS=N then sets the count).
# Exit status: 0 when every step passed, 1 otherwise, 2 on a usage error.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
WHEEL=$1; shift
[ -f "$WHEEL" ] || { echo "gpu.sh: no wheel at $WHEEL" >&2; exit 2; }
PARTS=("${@:-all}")
PYTHON=${PYTHON:-python3}
OUT=${OUT:-.gpu/out}
HISTORY=${HISTORY:-bench/history.csv}
STEP_TIMEOUT=${STEP_TIMEOUT:-590}
DRY_RUN=${DRY_RUN:-0}
SITE=.gpu/site

# Parts of each group, then the parts asked for, in this order.
ALL_PARTS="tests1 tests sliced unregistered simnodes fft-orders examples shared transposes halo tiny fft tg"
SELECTED=" "
for p in "${PARTS[@]}"; do
    case $p in
        all) SELECTED+="$ALL_PARTS " ;;
        suites) SELECTED+="tests sliced unregistered simnodes fft-orders examples " ;;
        bench) SELECTED+="transposes halo tiny fft tg " ;;
        *) [[ " $ALL_PARTS " == *" $p "* ]] || { echo "gpu.sh: unknown part '$p'" >&2; usage; }; SELECTED+="$p " ;;
    esac
done
on() { [[ $SELECTED == *" $1 "* ]]; }

# NVLink multicast (NVLS) stays off: NCCL and NVSHMEM would otherwise set up multicast
# objects that some machines' drivers or containers refuse.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mkdir -p "$OUT"
rm -rf "$SITE"  # pip --target does not replace an installed copy
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEEL" || exit 1
export PYTHONPATH="$PWD/$SITE${PYTHONPATH:+:$PYTHONPATH}"

if [ "$DRY_RUN" = 1 ]; then
    G=${GPUS:-2}
else
    "$PYTHON" -c 'import cudecomp; assert not cudecomp.CPU_ONLY, "the wheel is the CPU variant"' || exit 2
    G=$("$PYTHON" -c 'import cupy; print(cupy.cuda.runtime.getDeviceCount())') || exit 1
    [ "$G" -ge 1 ] || { echo "gpu.sh: no GPU" >&2; exit 1; }
    nvidia-smi -L
fi
if [ -z "${LAUNCHER:-}" ]; then
    if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
        # Unbound ranks: NVSHMEM's proxy thread must not share the one core a bound rank gets.
        LAUNCHER="mpirun --allow-run-as-root --oversubscribe --bind-to none"
    else
        LAUNCHER="mpiexec"
    fi
fi
echo "gpu.sh: $G GPU(s); parts:$SELECTED; launcher: $LAUNCHER; logs in $OUT"

rc=0
# step NAME RANKS COMMAND...: run COMMAND on RANKS ranks (0: no launcher), log to $OUT/NAME.log.
step() {
    local name=$1 n=$2
    shift 2
    local cmd=("$@")
    [ "$n" -gt 0 ] && cmd=($LAUNCHER -n "$n" "${cmd[@]}")
    local settings
    settings=$(env | grep -E '^(CUDECOMP|NCCL)_' | grep -v '^NCCL_NVLS_ENABLE=' | sort | tr '\n' ' ')
    echo "=== $name: $settings$(printf '%q ' "${cmd[@]}")"
    if [ "$DRY_RUN" = 1 ]; then return 0; fi
    timeout "$STEP_TIMEOUT" "${cmd[@]}" >"$OUT/$name.log" 2>&1 </dev/null
    local status=$?
    grep -E "passed|failed|error|FAILED|Traceback|recorded|check against" "$OUT/$name.log" | sort | uniq -c | head -8
    [ $status -eq 0 ] || { echo "--- $name FAILED (exit status $status; $OUT/$name.log)"; rc=1; }
}
PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider --color=no)
BENCH=("$PYTHON" -m cudecomp.bench --quiet --record "$HISTORY" ${MACHINE:+--machine "$MACHINE"} ${COMMIT:+--commit "$COMMIT"})
TWO=2  # ranks of the 2-rank parts: one GPU each where there are two, else sharing one

on tests1 && step tests1 1 "${PYTEST[@]}" tests
if on tests; then
    step tests2 2 "${PYTEST[@]}" tests
    [ "$G" -gt 2 ] && step "tests$G" "$G" "${PYTEST[@]}" tests
fi
if on sliced; then
    CUDECOMP_PIPELINE_SLICE_BYTES=64 step sliced $TWO "${PYTEST[@]}" -k "NCCL or DIRECT or MPI_P2P or NVSHMEM or halo_reference" \
        tests/test_transpose.py tests/test_halo.py
fi
on unregistered && CUDECOMP_ENABLE_NCCL_UBR=0 step unregistered $TWO "${PYTEST[@]}" -k "NCCL or halo_reference" \
    tests/test_transpose.py tests/test_halo.py tests/test_gpu.py
if on simnodes; then
    CUDECOMP_SIMULATE_NODES=2 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo step simnodes $TWO "${PYTEST[@]}" \
        tests/test_transpose.py tests/test_halo.py tests/test_nodes.py tests/test_nvshmem.py tests/test_gpu.py tests/test_graphs.py
fi
if on fft-orders; then
    for order in rows planes; do
        CUDECOMP_FFT_BACKWARD=$order step "fft-suite-$order" $TWO "${PYTEST[@]}" tests/test_fft.py tests/test_input_ready.py
    done
fi
if on shared; then
    for n in 3 4 6; do [ "$n" -ne "$G" ] && step "tests$n-shared" $n "${PYTEST[@]}" tests; done
fi
on examples && CUDECOMP_EXAMPLE_RANKS=2 step examples 0 bash scripts/examples.sh "$(command -v "$PYTHON")" "$LAUNCHER"

if on transposes; then
    step transposes $TWO "${BENCH[@]}" --gdims 1024^3 --pdims 2x1,1x2 --dtypes c128 f64 --ops xy yx \
        --backends NCCL,NCCL_PL,DIRECT,NVSHMEM,NVSHMEM_PL,NVSHMEM_SM
    # Host-staged MPI (MPI that is not CUDA-aware) takes about a second per 1024^3 call.
    step transposes-mpi $TWO "${BENCH[@]}" --gdims 1024^3 --pdims 2x1,1x2 --dtypes c128 f64 --ops xy yx \
        --backends MPI_P2P,MPI_P2P_PL,MPI_A2A --reps 3 --warmup 1 --no-baselines
fi
on halo && step halo $TWO "${BENCH[@]}" --gdims 1024^3 --pdims 2x1,1x2 --dtypes c128 --ops halo --halo 8 8 8 \
    --backends NCCL,DIRECT,NVSHMEM --no-baselines
on tiny && step tiny $TWO "${BENCH[@]}" --gdims 8^3 --pdims 2x1,1x2 --dtypes c128 --ops xy yx halo \
    --backends NCCL,NCCL_PL,DIRECT --graph 100 --reps 50 --no-baselines
if on fft; then
    step fft $TWO "${BENCH[@]}" --gdims 1024^3 --pdims 1x2,2x1 --dtypes c128 --backends DIRECT,NCCL --ops fft \
        --fft-out both --fft-stages --reps 5 --warmup 2
    CUDECOMP_FFT_BACKWARD=planes step fft-planes $TWO "${BENCH[@]}" --gdims 1024^3 --pdims 1x2 --dtypes c128 \
        --backends DIRECT --ops fft --reps 5 --warmup 2
fi
if on tg; then
    TG=(-n 512 --dt 0.004 --t-end 20 --pdims 1x2 --backend DIRECT)
    step tg $TWO "$PYTHON" examples/taylor_green.py "${TG[@]}" --check --out "$OUT/tg512.dat"
    # The example has no --record: its rate and its check go to the history from its log.
    if [ "$DRY_RUN" != 1 ]; then
        "$PYTHON" - "$OUT/tg.log" "$HISTORY" "$TWO" "${MACHINE:-}" "${COMMIT:-}" "${TG[*]}" <<'EOF' || rc=1
import re, sys, time
from cudecomp.bench import history
from cudecomp.bench._cli import git_commit
from cudecomp.bench._record import machine_label
log, path, ranks, machine, commit, argv = sys.argv[1:]
text = open(log).read()
rates = re.findall(r"\[step (\d+), ([0-9.]+) steps/s\]", text)
check = re.search(r"check against the reference \([^)]*\): (\w+)", text)
peak = re.search(r"reference [0-9.e+-]+ at t=[0-9.]+: ([+-][0-9.]+)%", text)
if not rates or not check:
    sys.exit(f"{log}: no rate or check line; nothing recorded")
case = "taylor-green 512^3 t=0..20 1x2 DIRECT"
steps, rate = int(rates[-1][0]), float(rates[-1][1])
recs = [(case, "ms_per_step", 1e3 / rate), (case, "steps_per_s", rate), (case, "steps", steps), (case, "check", check.group(1))]
if peak:
    recs.append((case, "dissipation_peak_vs_reference_pct", float(peak.group(1))))
run = history.Run(time.strftime("%Y-%m-%d"), commit or git_commit(), machine or machine_label(), int(ranks),
                  f"python examples/taylor_green.py {argv} --check")
print(f"recorded {history.append(path, run, recs)} figures in {path}")
EOF
    fi
fi
[ $rc -eq 0 ] && echo "gpu.sh: every step passed" || echo "gpu.sh: some step FAILED (logs in $OUT)"
exit $rc
