"""cudecomp demo: a distributed 3-D FFT of the Taylor-Green vortex, checked two ways.

Run under MPI, e.g. ``mpiexec -n 4 python examples/demo.py``. It

1. creates a pencil decomposition of an N^3 grid over all ranks,
2. runs the four transposes on global-index data and checks every cell,
3. computes the kinetic energy and enstrophy of the Taylor-Green initial field with a
   distributed spectral derivative (FFTs along each pencil, transposes in between) and
   compares them with the reference DNS diagnostics in examples/data (t = 0 row),
4. prints a short table (rank 0).

Works with the CPU variant (NumPy) and the GPU variant (CuPy).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import cudecomp

if cudecomp.CPU_ONLY:
    xp = np
else:  # pragma: no cover - needs a GPU
    import cupy as xp  # type: ignore[import-not-found,no-redef]

    xp.cuda.Device(MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED).rank % xp.cuda.runtime.getDeviceCount()).use()

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "taylor_green", "spectral_Re1600_512.gdiag")


def global_coords(info: cudecomp.PencilInfo) -> list[np.ndarray]:
    """Global index of every array cell along X, Y and Z (array axes are memory order reversed)."""
    grids = np.meshgrid(*[np.arange(info.lo[p], info.hi[p] + 1) for p in (2, 1, 0)], indexing="ij")
    out: list[np.ndarray] = [np.empty(0)] * 3
    for p in range(3):
        out[info.order[p]] = grids[2 - p]
    return out


def reference_t0() -> tuple[float, float] | None:
    """(energy, enstrophy) at t = 0 from the reference DNS file, if present."""
    try:
        with open(REFERENCE) as f:
            for line in f:
                if not line.startswith("#"):
                    t, e, _, z = (float(v) for v in line.split()[:4])
                    return e, z
    except OSError:
        return None
    return None


def main() -> None:
    """Run the demo (all ranks)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=64, help="grid points per axis")
    ap.add_argument("--backend", default="MPI_P2P", choices=[b.name for b in cudecomp.TransposeCommBackend])
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    n = args.n
    rows = next(r for r in range(int(comm.size**0.5), 0, -1) if comm.size % r == 0)

    with cudecomp.Handle(comm) as handle:
        cfg = cudecomp.GridDescConfig()
        cfg.gdims = (n, n, n)
        cfg.pdims = (rows, comm.size // rows)
        cfg.transpose_comm_backend = cudecomp.TransposeCommBackend[args.backend]
        cfg.transpose_axis_contiguous = (True, True, True)
        grid = handle.create_grid(cfg)
        info = [grid.get_pencil_info(a) for a in range(3)]
        ops = [
            ("X->Y", grid.transpose_x_to_y, 0, 1),
            ("Y->Z", grid.transpose_y_to_z, 1, 2),
            ("Z->Y", grid.transpose_z_to_y, 2, 1),
            ("Y->X", grid.transpose_y_to_x, 1, 0),
        ]

        # 1. Global-index oracle through all four transposes.
        table = []
        for name, fn, a, b in ops:
            g = global_coords(info[a])
            data = xp.asarray((g[0] + n * (g[1] + n * g[2])).astype(np.complex128))
            out = fn(data)  # warm-up allocates the workspace
            comm.Barrier()
            t0 = time.perf_counter()
            reps = 10
            for _ in range(reps):
                out = fn(data, out)
            if not cudecomp.CPU_ONLY:
                xp.cuda.get_current_stream().synchronize()
            dt = (time.perf_counter() - t0) / reps
            gb = info[a].size * 16 / max(dt, 1e-12) / 1e9
            gb_all = comm.allreduce(float(gb), op=MPI.SUM) / comm.size
            ge = global_coords(info[b])
            ok = bool(np.array_equal(xp.asnumpy(out) if xp is not np else out, ge[0] + n * (ge[1] + n * ge[2])))
            ok = comm.allreduce(ok, op=MPI.LAND)
            dt_max = comm.allreduce(dt, op=MPI.MAX)
            table.append((name, dt_max * 1e3, gb_all, ok))

        # 2. Taylor-Green: u = (sin x cos y cos z, -cos x sin y cos z, 0) on [0, 2pi)^3.
        h = 2 * np.pi / n
        x, y, z = (c * h for c in global_coords(info[0]))
        u = [np.sin(x) * np.cos(y) * np.cos(z), -np.cos(x) * np.sin(y) * np.cos(z), np.zeros_like(x)]
        k = np.fft.fftfreq(n, 1.0 / n)

        def forward(f: np.ndarray) -> np.ndarray:
            a = xp.fft.fft(xp.asarray(f.astype(np.complex128)), axis=2)  # X contiguous in the X-pencil
            a = xp.fft.fft(grid.transpose_x_to_y(a), axis=2)
            return xp.fft.fft(grid.transpose_y_to_z(a), axis=2)

        def backward(f: np.ndarray) -> np.ndarray:
            a = xp.fft.ifft(f, axis=2)
            a = xp.fft.ifft(grid.transpose_z_to_y(a), axis=2)
            return xp.fft.ifft(grid.transpose_y_to_x(a), axis=2)

        kz = global_coords(info[2])
        wave = [xp.asarray(k[c]) for c in kz]
        uh = [forward(c) for c in u]
        # vorticity = curl u, spectrally: i k x u_hat
        wh = [
            1j * (wave[1] * uh[2] - wave[2] * uh[1]),
            1j * (wave[2] * uh[0] - wave[0] * uh[2]),
            1j * (wave[0] * uh[1] - wave[1] * uh[0]),
        ]
        w = [backward(c).real for c in wh]
        local_e = sum(float((c**2).sum()) for c in u)
        local_z = sum(float((c**2).sum()) for c in w)
        energy = 0.5 * comm.allreduce(local_e) / n**3
        enstrophy = 0.5 * comm.allreduce(local_z) / n**3
        grid.destroy()

    if comm.rank == 0:
        variant = "CPU (NumPy)" if cudecomp.CPU_ONLY else "GPU (CuPy)"
        print(
            f"cudecomp {cudecomp.__version__} [{variant}], {comm.size} ranks, grid {n}^3, "
            f"pdims {rows}x{comm.size // rows}, backend {args.backend}, complex128, axis-contiguous pencils"
        )
        print(f"{'transpose':<10}{'time [ms]':>12}{'GB/s/rank':>12}  check")
        for name, ms, gbs, ok in table:
            print(f"{name:<10}{ms:>12.3f}{gbs:>12.2f}  {'exact' if ok else 'WRONG'}")
        ref = reference_t0()
        ref_e, ref_z = ref if ref else (0.125, 0.375)
        print(f"Taylor-Green t=0: energy {energy:.6f} (reference {ref_e}), enstrophy {enstrophy:.6f} (reference {ref_z})")
        good = all(r[3] for r in table) and abs(energy - ref_e) < 1e-6 and abs(enstrophy - ref_z) < 1e-6
        print("demo", "PASSED" if good else "FAILED")
        if not good:
            comm.Abort(1)


if __name__ == "__main__":
    main()
