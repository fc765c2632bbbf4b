#!/usr/bin/env bash
# The main job: builds the right variant, then runs the 4-rank demo (a distributed FFT of
# the Taylor-Green vortex, checked against the oracle and the reference DNS data).
# Usage: bash scripts/demo.sh [demo options, e.g. -n 128 --backend MPI_A2A]
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
V=$(variant)
log "installing MPICH, mpi4py and build tools into .venv/mpich"
make_venv mpich
if [ "$V" = gpu ]; then
    log "installing CuPy, NCCL and NVRTC wheels for the GPU variant"
    "$VENVS/mpich/bin/pip" install -q cupy-cuda13x nvidia-nccl-cu13 "nvidia-cuda-nvrtc==13.0.*"
fi
log "building the $V variant"
build_wheel "$V"
install_wheel mpich "$V"
log "running the demo on 4 ranks"
$(launcher mpich) -n 4 "$VENVS/mpich/bin/python" "$ROOT/examples/demo.py" "$@"
