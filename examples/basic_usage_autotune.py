"""cudecomp basic usage with autotuning: the library picks the process grid and the transpose backend.

Run under MPI, e.g.::

    mpiexec -n 4 python examples/basic_usage_autotune.py
    mpiexec -n 4 python examples/basic_usage_autotune.py --gdims 64 64 64 --trials 5

The example asks for ``pdims = (0, 0)`` and passes ``GridDescAutotuneOptions`` with
transpose backend autotuning on to ``Handle.create_grid``: every process grid of the
ranks and every transpose backend this variant can run (MPI_P2P, MPI_P2P_PL, MPI_A2A,
DIRECT; NCCL ones too in the GPU variant when each rank has its own GPU) is timed for a
few trials on the transposes the example then runs (the per-operation halo extents are
given to the autotuner), and the fastest is kept. ``create_grid`` writes the choice back
into the config. The example prints it (rank 0), then runs X->Y->Z->Y->X with and
without halos exactly as ``basic_usage.py`` does (whose functions it imports), checking
every cell, and exits with status 1 if any cell was wrong.

Works with the CPU variant (NumPy arrays) and the GPU variant (CuPy arrays; each rank
uses GPU ``local rank % GPU count``).
"""

from __future__ import annotations

import argparse
import sys
import time

from mpi4py import MPI

import cudecomp
from basic_usage import DTYPES, VARIANTS, Variant, run_cycle, select_gpu

DATA_TYPES = {
    "float32": cudecomp.DataType.FLOAT,
    "float64": cudecomp.DataType.DOUBLE,
    "complex64": cudecomp.DataType.FLOAT_COMPLEX,
    "complex128": cudecomp.DataType.DOUBLE_COMPLEX,
}


def autotune_options(variant: Variant, dtype: str, trials: int, warmup: int) -> cudecomp.GridDescAutotuneOptions:
    """Return options that tune the process grid and transpose backend for the transposes of ``variant``."""
    options = cudecomp.GridDescAutotuneOptions()
    options.grid_mode = cudecomp.AutotuneGridMode.TRANSPOSE  # choose the grid by transpose time (the default)
    options.autotune_transpose_backend = True
    options.dtype = DATA_TYPES[dtype]
    options.n_warmup_trials = warmup
    options.n_trials = trials
    # Operations in the order X->Y, Y->Z, Z->Y, Y->X: which pencil each reads and writes.
    reads, writes = (0, 1, 2, 1), (1, 2, 1, 0)
    options.transpose_input_halo_extents = [variant.halos[a] for a in reads]
    options.transpose_output_halo_extents = [variant.halos[b] for b in writes]
    options.transpose_input_padding = [variant.padding[a] for a in reads]
    options.transpose_output_padding = [variant.padding[b] for b in writes]
    return options


def parse_args() -> argparse.Namespace:
    """Command-line options (same on every rank)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--gdims", type=int, nargs=3, default=(40, 36, 32), metavar=("X", "Y", "Z"), help="global grid extents (default: %(default)s)"
    )
    ap.add_argument("--dtype", default="complex128", choices=list(DTYPES), help="element type (default: %(default)s)")
    ap.add_argument("--trials", type=int, default=2, help="timed trials per candidate (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up trials per candidate (default: %(default)s)")
    ap.add_argument("--axis-contiguous", action="store_true", help="store each pencil's own axis contiguously")
    return ap.parse_args()


def main() -> int:
    """Run the example on every rank; return the exit status (0: every cell right)."""
    comm = MPI.COMM_WORLD
    args = parse_args()
    select_gpu(comm)
    variants = [v for v in VARIANTS if v.name in ("plain", "halos")]

    with cudecomp.Handle(comm) as handle:
        config = cudecomp.GridDescConfig()
        config.gdims = args.gdims
        config.pdims = (0, 0)  # let the autotuner choose
        config.transpose_axis_contiguous = (args.axis_contiguous,) * 3
        t0 = time.perf_counter()
        with handle.create_grid(config, autotune_options(variants[1], args.dtype, args.trials, args.warmup)) as grid:
            seconds = time.perf_counter() - t0
            # The choice is written back into `config` (and `grid.config` returns a copy of it).
            results = {v.name: run_cycle(grid, args.gdims, DTYPES[args.dtype], v) for v in variants}
    results = {name: [bool(comm.allreduce(ok, op=MPI.LAND)) for ok in oks] for name, oks in results.items()}
    passed = all(all(oks) for oks in results.values())

    if comm.rank == 0:
        variant = "CPU (NumPy)" if cudecomp.CPU_ONLY else "GPU (CuPy)"
        gx, gy, gz = args.gdims
        print(f"cudecomp {cudecomp.__version__} [{variant}], {comm.size} ranks, gdims {gx}x{gy}x{gz}, {args.dtype}")
        print(
            f"autotuned in {seconds:.2f} s: pdims {config.pdims[0]}x{config.pdims[1]}, "
            f"transpose backend {cudecomp.transpose_comm_backend_to_string(config.transpose_comm_backend)}"
        )
        print(f"{'variant':<15}" + "".join(f"{s:>7}" for s in ("X->Y", "Y->Z", "Z->Y", "Y->X")))
        for name, oks in results.items():
            print(f"{name:<15}" + "".join(f"{'ok' if ok else 'WRONG':>7}" for ok in oks))
        print("basic_usage_autotune", "PASSED" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
