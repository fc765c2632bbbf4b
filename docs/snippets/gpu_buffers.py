"""GPU variant: library arrays (single-copy DIRECT transposes, inputs written in steps) and symmetric NVSHMEM workspaces.

Run with one rank per GPU:  mpiexec -n 2 python gpu_buffers.py
"""

import cupy as cp
from mpi4py import MPI

import cudecomp

comm = MPI.COMM_WORLD
local = comm.Split_type(MPI.COMM_TYPE_SHARED)
cp.cuda.Device(local.rank % cp.cuda.runtime.getDeviceCount()).use()
local.Free()

with cudecomp.Handle(comm) as handle:
    config = cudecomp.GridDescConfig()
    config.gdims = (256, 256, 256)
    config.pdims = (1, comm.size)  # slabs: Y->Z chunks are whole X rows, which the copy engine moves
    config.transpose_comm_backend = cudecomp.TransposeCommBackend.DIRECT
    with handle.create_grid(config) as grid:
        # Device memory the node's other ranks map: with every rank's output such an
        # array, each rank writes its chunks straight into the others' outputs.
        y = grid.empty_pencil(1, cp.complex128)
        z = grid.empty_pencil(2, cp.complex128)
        # Write the input slab by slab on one stream, and let the transpose on another
        # send each slab as soon as its event says it is written.
        writer, mover = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
        steps, n = [], y.shape[0]
        with writer:
            for lo, hi in ((0, n // 2), (n // 2, n)):
                y[lo:hi] = cp.random.standard_normal(y[lo:hi].shape)
                done = cp.cuda.Event(disable_timing=True)
                done.record(writer)
                steps.append((done, hi))  # planes 0..hi of Y's slowest axis (Z) are written
        grid.transpose_y_to_z(y, z, stream=mover, input_ready=steps)
        with mover:
            back = grid.transpose_z_to_y(z, grid.empty_pencil(1, cp.complex128), stream=mover)
            assert bool((back == y).all())

    config.transpose_comm_backend = cudecomp.TransposeCommBackend.NVSHMEM
    config.halo_comm_backend = cudecomp.HaloCommBackend.NVSHMEM
    try:
        grid = handle.create_grid(config)
    except cudecomp.NotSupportedError as e:  # no NVSHMEM library, or ranks sharing a GPU
        grid = None
        if handle.rank == 0:
            print(f"NVSHMEM part skipped: {e}")
    if grid is not None:
        with grid:
            # Symmetric memory (collective; the largest request of any rank): passed as
            # `work` on every rank, NVSHMEM exchanges through it.
            nbytes = grid.get_transpose_workspace_size() * cudecomp.get_data_type_size(cudecomp.DataType.DOUBLE_COMPLEX)
            work = handle.malloc(grid, nbytes)
            assert work.symmetric
            x = cp.random.standard_normal(grid.get_pencil_info(0).array_shape) + 0j
            y = grid.transpose_x_to_y(x, work=work)
            assert bool((grid.transpose_y_to_x(y, work=work) == x).all())
            cp.cuda.get_current_stream().synchronize()
            handle.free(grid, work)  # collective, like the allocation
    if handle.rank == 0:
        print(f"library arrays and symmetric workspaces work on {handle.nranks} rank(s)")
