"""Benchmark CLI: ``mpiexec -n N python -m cudecomp.bench [options]``.

Sweeps grids, process grids, backends, dtypes and layouts; times the four transposes and
halo updates (``--warmup`` calls, then ``--reps`` timed ones, 10 by default; CUDA events on GPU, wall clock on
CPU; the median per rank, then the slowest rank); and reports, per row, the achieved
bandwidth per rank next to a same-run ceiling, and for distributed X->Y rows the same-run
peer baselines on the same data.

Distributed operations (bytes leave the rank) count the bytes that leave the rank and are
compared with the copy bandwidth between the places those bytes go: peer copy between
GPUs, else device memory copy (ranks sharing a GPU) or host memory copy (CPU), measured
once per run on one node; a run spanning several nodes reports no percentage for them
(the network is not measured). Local operations (a process grid dimension of 1 along the
exchange: nothing leaves the rank) count the bytes of their input and are compared with a
device or host memory copy of the same bytes (read and written once), timed on every rank
at once like the operation itself, so that caches and shared memory bandwidth weigh alike;
where ranks share a GPU they get none (the processes' copy kernels take turns on it).

Peer baselines (X->Y, default layout, only where X->Y is distributed): on GPU a raw NCCL
all-to-all of the same bytes and the straightforward CuPy pack -> all-to-all -> unpack a
user would write (NCCL when every rank has its own GPU, host-staged MPI otherwise); on CPU
the MPI ``Alltoallw`` of subarray datatypes that mpi4py-fft's pencil ``Transfer``
performs, and NumPy pack -> ``Alltoallv`` -> unpack. ``--ops fft`` times a
``cudecomp.fft`` plan's forward and backward transform beside the same transform of the
whole array on one device (rank 0), measured in the same run. ``--graph N`` (GPU) adds
rows ``op-graph``: N operations captured into one CUDA graph, the replay's wall clock per
operation beside N eager calls'. ``--floor`` adds beside distributed transposes the copy
floor (every rank copying its own pencil once, all at once); ``--fft-stages`` times each
stage of an FFT plan's forward transform alone. Writes JSON and CSV; ``--record FILE``
appends every figure to a history file, from which ``cudecomp.bench.history`` makes the
record page; ``--plot DIR``
(needs matplotlib) renders heatmaps (backend x process grid) and bandwidth-versus-size
small multiples. Progress (``--progress``): by default a tqdm bar, only when stderr is a
terminal and tqdm is installed.
"""

from ._cli import main, parser
from ._common import Row
from ._progress import Progress
from ._report import text_colour

__all__ = ["Progress", "Row", "main", "parser", "text_colour"]
