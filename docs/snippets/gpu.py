"""GPU variant: CuPy arrays, one GPU per rank, work ordered on a CuPy stream.

Run with one rank per GPU:  mpiexec -n 2 python gpu.py
"""

import cupy as cp
from mpi4py import MPI

import cudecomp

comm = MPI.COMM_WORLD
# Select this rank's GPU *before* creating the handle: the handle binds the current device.
local = comm.Split_type(MPI.COMM_TYPE_SHARED)
cp.cuda.Device(local.rank % cp.cuda.runtime.getDeviceCount()).use()
local.Free()

with cudecomp.Handle(comm) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = (256, 256, 256)
    config.pdims = (comm.size, 1)
    # NCCL needs one GPU per rank; where ranks share a GPU, use DIRECT or an MPI backend.
    config.transpose_comm_backend = cudecomp.TransposeCommBackend.NCCL
    with handle.create_grid(config) as grid:
        x_info = grid.get_pencil_info(0)
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:  # CuPy's current stream is what stream=None means for CuPy inputs
            x = cp.random.standard_normal(x_info.array_shape)
            y = grid.transpose_x_to_y(x)  # enqueued on `stream`; y allocated on it
            back = cp.empty_like(x)
            grid.transpose_y_to_x(y, back, stream=stream)  # or name the stream explicitly
        stream.synchronize()  # operations are asynchronous: wait before the host looks
        assert bool((back == x).all())
        if handle.rank == 0:
            print(f"X->Y->X round trip exact on {handle.nranks} GPUs")
