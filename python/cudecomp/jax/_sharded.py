"""JAX's multi-process model: a globally sharded ``jax.Array`` whose shards are the pencils.

With ``jax.distributed`` (one device per process) the global array ``[z, y, x]`` of a
grid's pencil is sharded over a 2-D mesh ``("rows", "cols")`` of the process grid: the
X-pencil splits Y over the rows and Z over the columns, the Y-pencil X and Z, the
Z-pencil X and Y, as cuDecomp's pencils do. Each device's shard is then exactly its
process's pencil, and a transpose is the per-process primitive inside ``jax.shard_map``.
A redistribution between two grids' pencils runs on one mesh that both process grids are
views of (``sharded_between``).
Only the default layout (no axis-contiguous pencils) and extents the process grid
divides have such shards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._cudecomp import GridDesc
from .._errors import InvalidUsageError, NotSupportedError

#: Per pencil, the mesh axis that splits each array axis of ``[z, y, x]``.
_SPLITS = {0: ("cols", "rows", None), 1: ("cols", None, "rows"), 2: (None, "cols", "rows")}


def _position(grid: GridDesc) -> tuple[int, int]:
    """Return the (row, column) of this rank in the process grid, from its X-pencil."""
    pr, pc = (int(v) for v in grid.config.pdims)
    _, y, z = (int(v) for v in grid.config.gdims)
    info = grid.get_pencil_info(0)
    lo = dict(zip(info.order, info.lo, strict=True))
    return lo[1] // (y // pr), lo[2] // (z // pc)


def _check_grid(grid: GridDesc, what: str) -> tuple[int, int]:
    """Return the process grid, after the checks that make each shard a pencil (the same answer on every rank)."""
    if not isinstance(grid, GridDesc):
        raise TypeError(f"{what}: grid: expected a cudecomp.GridDesc, got {type(grid).__name__}")
    cfg = grid.config
    pr, pc = (int(v) for v in cfg.pdims)
    x, y, z = (int(v) for v in cfg.gdims)
    if any(bool(v) for v in cfg.transpose_axis_contiguous):
        raise NotSupportedError(f"{what}: sharded arrays need the default layout (transpose_axis_contiguous all False)")
    if x % pr or y % pr or y % pc or z % pc:
        raise NotSupportedError(
            f"{what}: sharded arrays need pencils of one shape: gdims {(x, y, z)} with X and Y divisible by P_rows = {pr}, "
            f"Y and Z by P_cols = {pc}"
        )
    return pr, pc


def pencil_mesh(grid: GridDesc, comm: Any = None) -> Any:
    """Return the ``jax.sharding.Mesh`` ``("rows", "cols")`` of ``grid``'s process grid over every process's device (collective).

    Args:
        grid: The grid (default layout; extents the process grid divides).
        comm: The handle's ``mpi4py`` communicator (``None``: ``MPI.COMM_WORLD``).

    Raises:
        InvalidUsageError: On every rank: a process with more or fewer than one JAX
            device, or processes that are not the handle's ranks.
        NotSupportedError: A layout or extents whose pencils are not the shards of one
            global array.
    """
    import jax
    import numpy as np
    from mpi4py import MPI

    pr, pc = _check_grid(grid, "pencil_mesh")
    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.size != pr * pc:
        raise InvalidUsageError(f"pencil_mesh: the communicator has {comm.size} ranks; the grid's process grid {pr}x{pc} needs {pr * pc}")
    local = jax.local_devices()
    mine = (*_position(grid), local[0].id if local else -1, len(local))
    every = comm.allgather(mine)
    counts = sorted({n for *_, n in every})
    if counts != [1]:
        raise InvalidUsageError(
            f"pencil_mesh: expected one JAX device per process, got {counts} (set one device per process, e.g. CUDA_VISIBLE_DEVICES)"
        )
    by_id = {d.id: d for d in jax.devices()}
    devices = np.empty((pr, pc), dtype=object)
    for row, col, device, _ in every:
        devices[row, col] = by_id[device]
    return jax.sharding.Mesh(devices, ("rows", "cols"))


def pencil_spec(axis: int, batched: bool = False) -> Any:
    """Return the ``PartitionSpec`` of the global array of pencil ``axis`` (``batched``: with a leading batch axis, not split)."""
    from jax.sharding import PartitionSpec

    return PartitionSpec(*((None,) if batched else ()), *_SPLITS[axis])


def check_mesh(grid: GridDesc, mesh: Any, what: str) -> None:
    """Raise unless ``mesh`` is ``grid``'s (``pencil_mesh``): its axes, shape and this rank's device at its place.

    The answer is settled among the handle's ranks, so that every rank raises alike.
    """
    from .._collective import collective

    with collective(grid.handle, f"cudecomp.jax.{what}: the mesh"):
        pr, pc = _check_grid(grid, what)
        names = tuple(getattr(mesh, "axis_names", ()))
        shape = tuple(getattr(mesh, "devices", np.empty(0)).shape)
        if names != ("rows", "cols") or shape != (pr, pc):
            raise InvalidUsageError(
                f"{what}: expected the mesh of the process grid, axes ('rows', 'cols') of shape {(pr, pc)} (cudecomp.jax.pencil_mesh), "
                f"got axes {names} of shape {shape}"
            )
        import jax

        row, col = _position(grid)
        local = jax.local_devices()
        if mesh.devices[row, col] not in local:
            raise InvalidUsageError(f"{what}: this rank's device is not at its place ({row}, {col}) of the mesh")


def sharded(grid: GridDesc, mesh: Any, x: Any, a: int, b: int, body: Any, what: str) -> Any:
    """Run ``body`` (a per-process operation from pencil ``a`` to ``b``) on the globally sharded ``x`` (no ``mesh``: on ``x``)."""
    import jax

    if mesh is None:
        return body(x)
    check_mesh(grid, mesh, what)
    batched = getattr(x, "ndim", 3) == 4
    return jax.shard_map(body, mesh=mesh, in_specs=pencil_spec(a, batched), out_specs=pencil_spec(b, batched), check_vma=False)(x)


def _on_axes(spec: Any, rows: tuple[str, ...], cols: tuple[str, ...]) -> Any:
    """Return ``spec`` (a ``pencil_spec``) with its process-grid axes named by the mesh axes ``rows`` and ``cols``."""
    from jax.sharding import PartitionSpec

    return PartitionSpec(*(rows if s == "rows" else cols if s == "cols" else s for s in spec))


def sharded_between(handle: Any, sides: tuple[Any, Any], meshes: tuple[Any, Any], x: Any, body: Any, what: str) -> Any:
    """Run ``body`` (a per-process redistribution between pencils ``sides``) on the globally sharded ``x`` (collective).

    ``x`` is sharded as the source pencil over ``meshes[0]`` (its grid's ``pencil_mesh``),
    the result as the destination pencil over ``meshes[1]``. Where the process grids
    differ, both are views of one mesh ``("hi", "mid", "lo")`` of the ranks in their
    process-grid order, split at both grids' column counts (the larger a multiple of the
    smaller): each grid's rows and columns are groups of its axes, so both arrays keep
    their shards and the body runs once per process, with no data moved by XLA.
    """
    import jax
    from jax.sharding import Mesh, NamedSharding

    from .._collective import collective

    src, dst = sides
    mesh, out_mesh = meshes
    with collective(handle, f"cudecomp.jax.{what}: its sides"):
        if not all(hasattr(s, "grid") and hasattr(s, "axis") for s in sides):
            raise NotSupportedError(
                f"{what}: a sharded redistribution moves between pencils of grids (GridDesc.pencil); "
                "a BoxLayout side has the per-process form only"
            )
    check_mesh(src.grid, mesh, what)
    check_mesh(dst.grid, out_mesh, what)
    cols = [int(s.grid.config.pdims[1]) for s in sides]
    big, small = max(cols), min(cols)
    with collective(handle, f"cudecomp.jax.{what}: the meshes"):
        if big % small:
            raise NotSupportedError(
                f"{what}: a sharded redistribution needs one grid's P_cols to divide the other's, got P_cols {cols[0]} and {cols[1]}"
            )
    # Both meshes list the processes in rank order (row-major, as every grid numbers them;
    # check_mesh placed each device), so one reshape of either serves both.
    n = mesh.devices.size
    fine = Mesh(mesh.devices.reshape(n // big, big // small, small), ("hi", "mid", "lo"))
    batched = getattr(x, "ndim", 3) == 4

    def spec(side: Any) -> Any:
        pc = int(side.grid.config.pdims[1])
        rows, cols = (("hi",), ("mid", "lo")) if pc == big else (("hi", "mid"), ("lo",))
        return _on_axes(pencil_spec(side.axis, batched), rows, cols)

    y = jax.shard_map(body, mesh=fine, in_specs=spec(src), out_specs=spec(dst), check_vma=False)(x)
    return jax.lax.with_sharding_constraint(y, NamedSharding(out_mesh, pencil_spec(dst.axis, batched)))
