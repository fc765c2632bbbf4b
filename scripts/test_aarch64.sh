#!/usr/bin/env bash
# Tests the aarch64 wheels in dist/ (scripts/build_wheels.sh) on an x86_64 Linux machine
# under user-mode emulation (QEMU), in a Debian 12 arm64 root file system:
#   CPU variant: the serial pytest suite, then tests/test_transpose.py and tests/test_halo.py
#                on 2 ranks (MPICH from PyPI);
#   GPU variant: import, NVIDIA's aarch64 wheels (NVRTC, NCCL, NVSHMEM) found by
#                cudecomp._libs (and by cuda-pathfinder), and cudecomp.Handle(COMM_WORLD)
#                raising cudecomp.CudaError (no driver under emulation).
# Slow (emulation): not part of scripts/test.sh. Prints how long each step took.
#
# Needs root (debootstrap, chroot, mounts) and Debian's packages qemu-user-static,
# binfmt-support and debootstrap (installed with apt-get if missing). The kernel must run
# arm64 programs through QEMU (binfmt_misc): the script mounts binfmt_misc and enables
# Debian's qemu-aarch64 entry if needed, and stops with a message if the kernel refuses.
# Python packages for the arm64 Python come from PyPI (aarch64 wheels, fetched on the host).
#
# Environment: CUDECOMP_ARM64_ROOT (default .venv/aarch64-root; kept between runs),
# CUDECOMP_AARCH64_STEPS (default "cpu-serial cpu-mpi gpu").
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIST=${CUDECOMP_DIST:-$ROOT/dist}
RFS=${CUDECOMP_ARM64_ROOT:-$ROOT/.venv/aarch64-root}
STEPS=${CUDECOMP_AARCH64_STEPS:-"cpu-serial cpu-mpi gpu"}
LOGS=${CUDECOMP_AARCH64_LOGS:-$ROOT/.venv/aarch64-logs}
MIRROR=${CUDECOMP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYPKGS=(numpy mpi4py==4.1.2 mpich==5.0.2 pytest==9.2.0 pytest-timeout==2.4.0)
GPUPKGS=("nvidia-cuda-nvrtc==13.0.*" nvidia-nccl-cu13 nvidia-nvshmem-cu13 cuda-pathfinder)
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
T0=$SECONDS
declare -a TIMES=()
FAILED=0
timed() {  # timed LABEL CMD...: runs CMD, records its wall time and result; a failure is counted, not fatal
    local label=$1 s=$SECONDS rc=0; shift
    "$@" || rc=$?
    TIMES+=("$(printf '%-58s %5d s  %s' "$label" $((SECONDS - s)) "$([ $rc = 0 ] && echo ok || echo "FAILED (rc $rc)")")")
    [ $rc = 0 ] || FAILED=$((FAILED + 1))
}

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
[ "$(uname -m)" = x86_64 ] || [ "$(uname -m)" = aarch64 ] || die "unexpected host $(uname -m)"
CPU_WHL=$(ls "$DIST"/cudecomp-*+cpu-*aarch64.whl 2>/dev/null | head -n 1) || true
GPU_WHL=$(ls "$DIST"/cudecomp-*aarch64.whl 2>/dev/null | grep -v '+cpu-' | head -n 1) || true
[ -n "$CPU_WHL" ] && [ -n "$GPU_WHL" ] || die "no aarch64 wheels in $DIST: run scripts/build_wheels.sh first"
mkdir -p "$LOGS"

# ------------------------------------------------------------------ emulation
if [ "$(uname -m)" = x86_64 ]; then
    log "QEMU user-mode emulation"
    need=()
    for p in qemu-user-static binfmt-support debootstrap; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
    if [ ${#need[@]} -gt 0 ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
    fi
    if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
            || die "cannot mount binfmt_misc: this kernel/container cannot run arm64 programs through QEMU"
    fi
    if ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
        update-binfmts --enable qemu-aarch64 || die "cannot register qemu-aarch64 with binfmt_misc"
    fi
    grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || die "qemu-aarch64 is registered without the F flag: it would not work inside the chroot"
fi

# ------------------------------------------------------------------ arm64 root file system
MOUNTED=()
cleanup() {
    local i
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTED[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind SRC DST-inside-root
    mkdir -p "$RFS$2"
    mount --bind "$1" "$RFS$2"
    MOUNTED+=("$RFS$2")
}
# MPIR_CVAR_CH4_CMA_ENABLE=0: MPICH copies larger messages between ranks with process_vm_readv
# (CMA), which QEMU's user-mode emulation does not provide (MPI_Alltoallv then fails with
# MPI_ERR_IN_STATUS, e.g. test_random_sweep[(13, 14, 12)-(1, 2)-MPI_A2A]); without CMA,
# MPICH copies through its shared memory, as it does where CMA is not permitted.
in_root() { chroot "$RFS" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MPIR_CVAR_CH4_CMA_ENABLE=0 "$@"; }

make_rootfs() {  # (runs where set -e does not apply: every step is chained)
    rm -rf "$RFS" && mkdir -p "$RFS" \
        && debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,python3-venv bookworm "$RFS" "$MIRROR" \
        && chroot "$RFS" /debootstrap/debootstrap --second-stage \
        && touch "$RFS/.cudecomp-rootfs-ready"
}
if [ ! -e "$RFS/.cudecomp-rootfs-ready" ]; then
    log "Debian 12 arm64 root file system in $RFS (debootstrap; slow under emulation)"
    timed "debootstrap arm64 (bookworm, minbase + python3)" make_rootfs
    [ -e "$RFS/.cudecomp-rootfs-ready" ] || die "debootstrap failed"
fi
[ -L "$RFS/proc" ] && rm "$RFS/proc" && mkdir "$RFS/proc"
mkdir -p "$RFS/proc" "$RFS/dev" "$RFS/src"
mount -t proc proc "$RFS/proc"; MOUNTED+=("$RFS/proc")
bind /dev /dev
bind /sys /sys  # hwloc and UCX (in MPICH) read the topology there, and complain on stdout without it
mount -t tmpfs -o size=2g tmpfs "$RFS/dev/shm"; MOUNTED+=("$RFS/dev/shm")  # DIRECT backends' node-shared memory
bind "$ROOT" /src
echo "arm64 Python: $(in_root python3 -c 'import platform, sys; print(platform.machine(), sys.version.split()[0])')"

# ------------------------------------------------------------------ arm64 Python packages
WH="$RFS/opt/wheels"
venv() {  # venv NAME PKGS...: a venv in the root with aarch64 wheels fetched on the host
    local name=$1; shift
    mkdir -p "$WH" \
        && pip download -q --dest "$WH" --only-binary=:all: --python-version 3.11 --implementation cp \
            --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux_2_28_aarch64 \
            --platform manylinux_2_34_aarch64 "$@" \
        && { [ -x "$RFS/opt/$name/bin/python" ] || in_root python3 -m venv "/opt/$name"; } \
        && in_root "/opt/$name/bin/pip" install -q --no-index --find-links /opt/wheels "$@"
}

cpu_serial() {
    in_root /bin/sh -c "cd /src && timeout 3000 /opt/cpu/bin/python -m pytest -q -p no:cacheprovider tests" > "$LOGS/cpu-serial.log" 2>&1
    local rc=$?
    tail -n 5 "$LOGS/cpu-serial.log"
    [ $rc = 0 ] || { sed -n '/= FAILURES =/,$p' "$LOGS/cpu-serial.log" | head -n 80; return $rc; }
}
cpu_mpi() {
    in_root /bin/sh -c "cd /src && timeout 3000 /opt/cpu/bin/mpiexec -n 2 /opt/cpu/bin/python -m pytest -q -p no:cacheprovider \
        tests/test_transpose.py tests/test_halo.py" > "$LOGS/cpu-mpi.log" 2>&1
    local rc=$?
    awk '/passed|failed|error/ && !seen[$0]++ {print "  " $0; next} /^\[rank|Error|FAILED|assert/ {print}' "$LOGS/cpu-mpi.log"
    return $rc
}
gpu_check() {
    in_root /opt/gpu/bin/python - <<'EOF'
import os, platform
from mpi4py import MPI
import cudecomp
from cudecomp import _libs
assert platform.machine() == "aarch64" and not cudecomp.CPU_ONLY, (platform.machine(), cudecomp.CPU_ONLY)
print("cudecomp", cudecomp.__version__, "GPU variant on", platform.machine())
import cuda.pathfinder as pf
for name, pfname, rel in [("nvrtc", "nvrtc", "nvidia/cu13/lib/libnvrtc.so.13"), ("nccl", "nccl", "nvidia/nccl/lib/libnccl.so.2"),
                          ("nvshmem", "nvshmem_host", "nvidia/nvshmem/lib/libnvshmem_host.so.3")]:
    ours = _libs._own_search(name)
    found = _libs.find(name)
    loaded = pf.load_nvidia_dynamic_lib(pfname)
    print(f"  {name:8s} _libs.find: {found}\n  {'':8s} own search: {ours}\n  {'':8s} pathfinder: {loaded.abs_path} (via {getattr(loaded, 'found_via', '?')})")
    assert found.endswith(rel) and ours.endswith(rel) and loaded.abs_path == found, name
from cudecomp import _cudecomp
_libs.preload_nvrtc()
sizes = [_cudecomp._compile_kernels(*arch) for arch in ((8, 0), (9, 0))]
print("  copy kernels compiled by the aarch64 NVRTC to CUBIN for sm_80 and sm_90:", sizes, "bytes")
assert all(s > 1000 for s in sizes)
try:
    cudecomp.Handle(MPI.COMM_WORLD)
except cudecomp.CudaError as e:
    print("  Handle(COMM_WORLD) without a driver -> CudaError:", e)
else:
    raise SystemExit("Handle() did not raise CudaError without a driver")
print("GPU variant aarch64 checks passed")
EOF
}

for step in $STEPS; do
    case $step in
        cpu-serial|cpu-mpi)
            if [ ! -e "$RFS/opt/cpu/.ready" ]; then
                log "arm64 venv for the CPU variant: ${PYPKGS[*]}"
                timed "arm64 venv (CPU): pip install, emulated" venv cpu "${PYPKGS[@]}"
                touch "$RFS/opt/cpu/.ready"
            fi
            if [ "$step" = cpu-serial ] || [[ " $STEPS " != *" cpu-serial "* ]]; then
                cp "$CPU_WHL" "$WH/"
                in_root /opt/cpu/bin/pip install -q --no-deps --force-reinstall "/opt/wheels/$(basename "$CPU_WHL")"
                echo "installed $(basename "$CPU_WHL")"
            fi
            if [ "$step" = cpu-serial ]; then
                log "CPU variant, aarch64: serial suite"
                timed "CPU variant: serial pytest suite (tests/)" cpu_serial
            else
                log "CPU variant, aarch64: test_transpose.py and test_halo.py on 2 ranks (MPICH)"
                timed "CPU variant: 2 ranks, test_transpose.py + test_halo.py" cpu_mpi
            fi
            ;;
        gpu)
            if [ ! -e "$RFS/opt/gpu/.ready" ]; then
                log "arm64 venv for the GPU variant: NVIDIA's aarch64 wheels ${GPUPKGS[*]}"
                timed "arm64 venv (GPU): pip install, emulated" venv gpu numpy mpi4py==4.1.2 mpich==5.0.2 "${GPUPKGS[@]}"
                touch "$RFS/opt/gpu/.ready"
            fi
            cp "$GPU_WHL" "$WH/"
            in_root /opt/gpu/bin/pip install -q --no-deps --force-reinstall "/opt/wheels/$(basename "$GPU_WHL")"
            log "GPU variant, aarch64: import, library search, no-driver CudaError"
            timed "GPU variant: import, libraries, CudaError" gpu_check
            ;;
        *) die "unknown step $step" ;;
    esac
done

log "times (wall clock, this machine: $(nproc) cores; logs in $LOGS)"
printf '  %s\n' "${TIMES[@]}"
printf '  %-58s %5d s\n' "total" $((SECONDS - T0))
[ "$FAILED" = 0 ] || die "$FAILED step(s) failed"
echo "all aarch64 checks passed"
