"""NVSHMEM probe: initialise the wheel's host library and move data with on-stream puts.

Loads the host library of NVIDIA's wheel, initialises it with a unique ID broadcast over
MPI, and moves data between two GPUs with on-stream puts and signals.

Checks what the NVSHMEM backends build on (issue 17) before writing them: the init
sequence with the exported hostlib entry points, symmetric allocation, nvshmem_ptr peer
addresses, putmem_signal_on_stream / signal_wait_until_on_stream ordering, and the put
bandwidth against a CuPy peer copy of the same bytes.

Usage: mpirun -np 2 python bench/probes/nvshmem_probe.py  (one GPU per rank)
"""

from __future__ import annotations

import ctypes
import os
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

SIGNAL_SET, CMP_GE, INIT_WITH_UNIQUEID = 9, 5, 1 << 3


def library() -> ctypes.CDLL:
    """Load the wheel's libnvshmem_host.so.3 globally, so that it finds its plugins."""
    import nvidia.nvshmem as pkg

    path = os.path.join(list(pkg.__path__)[0], "lib", "libnvshmem_host.so.3")
    lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    vp, sz, i32, u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64
    sig = {
        "nvshmemx_get_uniqueid": (i32, [vp]),
        "nvshmemx_set_attr_uniqueid_args": (i32, [i32, i32, vp, vp]),
        "nvshmemx_hostlib_init_attr": (i32, [ctypes.c_uint, vp]),
        "nvshmemx_hostlib_finalize": (None, []),
        "nvshmem_my_pe": (i32, []),
        "nvshmem_n_pes": (i32, []),
        "nvshmem_malloc": (vp, [sz]),
        "nvshmem_free": (None, [vp]),
        "nvshmem_ptr": (vp, [vp, i32]),
        "nvshmemx_putmem_on_stream": (None, [vp, vp, sz, i32, vp]),
        "nvshmemx_putmem_signal_on_stream": (None, [vp, vp, sz, vp, u64, i32, i32, vp]),
        "nvshmemx_signal_wait_until_on_stream": (None, [vp, i32, u64, vp]),
        "nvshmemx_quiet_on_stream": (None, [vp]),
        "nvshmemx_barrier_all_on_stream": (None, [vp]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def main() -> None:
    """Initialise, exchange, time, finalise (prints on rank 0)."""
    comm = MPI.COMM_WORLD
    rank, n = comm.rank, comm.size
    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
    cp.zeros(1)  # primary context current
    os.environ.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
    os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
    lib = library()
    uid = (ctypes.c_char * 128)()
    if rank == 0:
        ctypes.memset(uid, 0, 128)
        ctypes.c_int.from_buffer(uid).value = (1 << 16) + 128
        assert lib.nvshmemx_get_uniqueid(ctypes.addressof(uid)) == 0
    uid_bytes = comm.bcast(bytes(uid) if rank == 0 else None)
    ctypes.memmove(uid, uid_bytes, 128)
    attr = (ctypes.c_char * 144)()
    ctypes.memset(attr, 0, 144)
    ctypes.c_int.from_buffer(attr, 0).value = (1 << 16) + 144  # attr.version
    ctypes.c_int.from_buffer(attr, 16).value = (1 << 16) + 128  # attr.args.version
    ctypes.c_int.from_buffer(attr, 24).value = (1 << 16) + 24  # attr.args.uid_args.version
    assert lib.nvshmemx_set_attr_uniqueid_args(rank, n, ctypes.addressof(uid), ctypes.addressof(attr)) == 0
    t0 = time.perf_counter()
    rc = lib.nvshmemx_hostlib_init_attr(INIT_WITH_UNIQUEID, ctypes.addressof(attr))
    init_s = time.perf_counter() - t0
    assert rc == 0, rc
    assert (lib.nvshmem_my_pe(), lib.nvshmem_n_pes()) == (rank, n)

    nbytes = 1 << 30
    buf = lib.nvshmem_malloc(nbytes)
    sigs = lib.nvshmem_malloc(8 * n)
    assert buf and sigs
    cp.cuda.runtime.memset(sigs, 0, 8 * n)
    peer = (rank + 1) % n
    src = (rank - 1) % n
    reachable = [bool(lib.nvshmem_ptr(buf, p)) for p in range(n)]
    local = cp.full(nbytes // 8, rank + 1, dtype=np.float64)
    s = cp.cuda.Stream(non_blocking=True)
    comm.Barrier()
    # put + signal to the next rank; wait for the previous one's
    lib.nvshmemx_putmem_signal_on_stream(buf, local.data.ptr, nbytes, sigs + 8 * rank, 1, SIGNAL_SET, peer, s.ptr)
    lib.nvshmemx_signal_wait_until_on_stream(sigs + 8 * src, CMP_GE, 1, s.ptr)
    s.synchronize()
    got = cp.ndarray((nbytes // 8,), np.float64, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(buf, nbytes, None), 0))
    ok = bool((got[:1000] == src + 1).all()) and bool((got[-1000:] == src + 1).all())
    comm.Barrier()
    # bandwidth: puts to the peer vs a CuPy peer copy of the same bytes
    times = []
    for _ in range(5):
        lib.nvshmemx_barrier_all_on_stream(s.ptr)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(s)
        lib.nvshmemx_putmem_on_stream(buf, local.data.ptr, nbytes, peer, s.ptr)
        lib.nvshmemx_quiet_on_stream(s.ptr)
        e1.record(s)
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1))
    lib.nvshmemx_barrier_all_on_stream(s.ptr)
    s.synchronize()
    put_ms = float(np.median(times))
    peer_dev = peer % cp.cuda.runtime.getDeviceCount()
    with cp.cuda.Device(peer_dev):
        dst = cp.empty(nbytes // 8, np.float64)
    copies = []
    for _ in range(5):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(s)
        cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, peer_dev, local.data.ptr, local.device.id, nbytes, s.ptr)
        e1.record(s)
        e1.synchronize()
        copies.append(cp.cuda.get_elapsed_time(e0, e1))
    copy_ms = float(np.median(copies))
    comm.Barrier()
    lib.nvshmem_free(buf)
    lib.nvshmem_free(sigs)
    lib.nvshmemx_hostlib_finalize()
    res = comm.gather((ok, reachable, init_s, put_ms, copy_ms))
    if rank == 0:
        for r, (ok, reach, init, put, copy) in enumerate(res):
            print(
                f"rank {r}: data {'ok' if ok else 'WRONG'}, nvshmem_ptr reaches {reach}, init {init:.2f} s, "
                f"1 GiB put {put:.3f} ms ({nbytes / put / 1e6:.0f} GB/s), peer copy {copy:.3f} ms ({nbytes / copy / 1e6:.0f} GB/s)"
            )


if __name__ == "__main__":
    main()
