"""cudecomp's operations as JAX operations: usable inside ``jax.jit``, differentiable, batched by ``vmap``.

One process per rank, as with mpi4jax: each process holds its own pencil as a
``jax.Array`` of the grid's ``array_shape`` (see ``GridDesc.get_pencil_info``), and
grids are made with the usual ``Handle`` and ``GridDesc``. Each function checks its
arguments when it is traced and lowers to an XLA FFI custom call whose handler, in the
package's Rust core, runs the same transpose as ``GridDesc.transpose_*``: the CPU
variant's host path, with no Python callback and no copy of the data through the host
interpreter.

- ``jax.jit``: shapes are static per grid; a jitted step traces once.
- ``jax.grad`` / ``jax.vjp`` / ``jax.jvp``: a transpose is linear; its derivative is
  itself and its linear transpose the transpose the other way.
- ``update_halos_x/y/z(grid, x, halo_extents, halo_periods, dim)``: a halo update along
  ``dim`` of a pencil with halos; its linear transpose is the halo accumulation (each
  halo cell's cotangent added to the owned cell it was copied from, on its owner).
- ``Redistribution(handle, src, dst).run(x)``: a redistribution between any two
  decompositions; its linear transpose is the redistribution the other way.
- FFTs of a ``cudecomp.fft.FFT`` plan (``fft``/``ifft`` for ``c2c``, ``rfft``/``irfft``
  for ``r2c``): the plan's schedule with these transposes and ``jax.numpy.fft`` along
  the axes each pencil holds whole, the plan's norm applied once.
- JAX's multi-process model (``jax.distributed``, one device per process): with
  ``mesh=pencil_mesh(grid)`` a transpose, a halo update or an FFT takes the globally
  sharded array whose shards are the pencils (``pencil_spec``), as jaxDecomp's users
  write it; a redistribution between two grids' pencils takes both grids' meshes.
- ``jax.vmap``: the mapped axis becomes a batch of fields, moved in one exchange (see
  "Several fields in one exchange" in the docs); an array of shape ``(k, *array_shape)``
  is such a batch already.

Every rank must call the same operations in the same order, as with the eager ones.
After a compiled program fails on the GPU, call ``reset_after_failure()`` on every rank
before the next one (JAX would hand the failure on to it).
Needs JAX (``pip install jax``). The CPU variant serves JAX's CPU devices, the GPU variant
its CUDA devices (on XLA's stream of the call).
"""

from __future__ import annotations

from typing import Any

from .._cudecomp import GridDesc
from . import _fft
from ._halo import update_halos
from ._redistribute import Redistribution
from ._sharded import pencil_mesh, pencil_spec, sharded
from ._targets import reset_after_failure
from ._transpose import AXES, transpose

__all__ = [
    "Redistribution",
    "pencil_mesh",
    "pencil_spec",
    "reset_after_failure",
    "fft",
    "ifft",
    "irfft",
    "rfft",
    "transpose_x_to_y",
    "transpose_x_to_z",
    "transpose_y_to_x",
    "transpose_y_to_z",
    "transpose_z_to_x",
    "transpose_z_to_y",
    "update_halos_x",
    "update_halos_y",
    "update_halos_z",
]


def transpose_x_to_y(grid: GridDesc, x: Any, *, mesh: Any = None) -> Any:
    """Return the Y-pencil of ``grid`` holding the X-pencil ``x`` (one pencil, or a batch ``(k, *array_shape)``).

    With ``mesh`` (``pencil_mesh(grid)``, under ``jax.distributed``), ``x`` is the global
    array ``[z, y, x]`` (or a batch of them) sharded as ``pencil_spec(0)`` over it, and the
    result the global Y-pencil array sharded as ``pencil_spec(1)``: each process's shard
    is its pencil.

    Raises:
        TypeError: ``grid`` is no ``GridDesc``, ``x`` no array or of another dtype than
            float32, float64, complex64, complex128 (when traced).
        InvalidUsageError: ``x`` is not of this rank's X-pencil shape, or the grid was
            destroyed (when traced; a program compiled earlier raises when it runs);
            with ``mesh``, on every rank, a mesh that is not the grid's.
    """
    return _transpose_on(grid, x, 0, "transpose_x_to_y", mesh)


def transpose_y_to_z(grid: GridDesc, x: Any, *, mesh: Any = None) -> Any:
    """Return the Z-pencil of ``grid`` holding the Y-pencil ``x`` (as ``transpose_x_to_y``)."""
    return _transpose_on(grid, x, 1, "transpose_y_to_z", mesh)


def transpose_z_to_y(grid: GridDesc, x: Any, *, mesh: Any = None) -> Any:
    """Return the Y-pencil of ``grid`` holding the Z-pencil ``x`` (as ``transpose_x_to_y``)."""
    return _transpose_on(grid, x, 2, "transpose_z_to_y", mesh)


def transpose_y_to_x(grid: GridDesc, x: Any, *, mesh: Any = None) -> Any:
    """Return the X-pencil of ``grid`` holding the Y-pencil ``x`` (as ``transpose_x_to_y``)."""
    return _transpose_on(grid, x, 3, "transpose_y_to_x", mesh)


def transpose_x_to_z(grid: GridDesc, x: Any, *, mesh: Any = None) -> Any:
    """Return the Z-pencil of ``grid`` holding the X-pencil ``x``, in one exchange (as ``transpose_x_to_y``)."""
    return _transpose_on(grid, x, 4, "transpose_x_to_z", mesh)


def transpose_z_to_x(grid: GridDesc, x: Any, *, mesh: Any = None) -> Any:
    """Return the X-pencil of ``grid`` holding the Z-pencil ``x``, in one exchange (as ``transpose_x_to_y``)."""
    return _transpose_on(grid, x, 5, "transpose_z_to_x", mesh)


def update_halos_x(grid: GridDesc, x: Any, halo_extents: Any, halo_periods: Any, dim: int, *, padding: Any = None, mesh: Any = None) -> Any:
    """Return the X-pencil ``x`` (with halos, or a batch ``(k, *array_shape)``) with its halos along ``dim`` updated.

    As ``GridDesc.update_halos_x``: the ``halo_extents[dim]`` owned layers next to each end
    of ``dim`` are copied into the neighbouring ranks' halos (halo cells of the other
    dimensions included, so updating ``dim`` 0, 1 and 2 in turn fills edges and corners);
    at a non-periodic boundary the halo keeps its contents. ``x`` has the shape
    ``grid.get_pencil_info(0, halo_extents, padding).array_shape``. With ``mesh``
    (``pencil_mesh(grid)``), ``x`` is the global array sharded as ``pencil_spec(0)`` whose
    shards are the processes' pencils with their halos and padding (each ``array_shape``),
    and so is the result.

    Raises:
        TypeError: ``grid`` is no ``GridDesc``, ``x`` no array or of another dtype than
            float32, float64, complex64, complex128 (when traced).
        InvalidUsageError: ``x`` of another shape, ``halo_extents``, ``halo_periods``,
            ``padding`` not 3 values, ``dim`` outside 0-2, or a destroyed grid (when
            traced); a halo wider than the cells a rank owns (on every rank, when the
            program runs); with ``mesh``, on every rank, a mesh that is not the grid's.
    """
    return _halos_on(grid, x, 0, halo_extents, halo_periods, dim, padding, "update_halos_x", mesh)


def update_halos_y(grid: GridDesc, x: Any, halo_extents: Any, halo_periods: Any, dim: int, *, padding: Any = None, mesh: Any = None) -> Any:
    """Return the Y-pencil ``x`` with its halos along ``dim`` updated (as ``update_halos_x``)."""
    return _halos_on(grid, x, 1, halo_extents, halo_periods, dim, padding, "update_halos_y", mesh)


def update_halos_z(grid: GridDesc, x: Any, halo_extents: Any, halo_periods: Any, dim: int, *, padding: Any = None, mesh: Any = None) -> Any:
    """Return the Z-pencil ``x`` with its halos along ``dim`` updated (as ``update_halos_x``)."""
    return _halos_on(grid, x, 2, halo_extents, halo_periods, dim, padding, "update_halos_z", mesh)


def fft(plan: Any, x: Any, *, mesh: Any = None) -> Any:
    """Forward transform of a ``c2c`` plan: this rank's spectral pencil (``plan.output_info``) of the X-pencil ``x``.

    Equals ``plan.forward(x)`` to rounding (the local FFTs are JAX's); ``x`` may be a batch
    ``(k, *plan.input_info.array_shape)``. With ``mesh`` (``pencil_mesh(plan.spectral_grid)``),
    ``x`` is the global array sharded as ``pencil_spec(0)`` and the result the global
    spectrum sharded as ``pencil_spec(plan.output_axis)``; the backward transforms take
    and give them the other way.

    Raises:
        TypeError: ``plan`` is no ``FFT``, or ``x`` not of the plan's input dtype (when traced).
        InvalidUsageError: A plan of another kind, or ``x`` of another shape (when traced);
            with ``mesh``, on every rank, a mesh that is not the plan's grid's.
        NotSupportedError: A plan with cosine or sine axes.
    """
    return _fft_on(plan, x, False, ("c2c",), "fft", mesh)


def ifft(plan: Any, x: Any, *, mesh: Any = None) -> Any:
    """Backward transform of a ``c2c`` plan (as ``plan.backward``); see ``fft``."""
    return _fft_on(plan, x, True, ("c2c",), "ifft", mesh)


def rfft(plan: Any, x: Any, *, mesh: Any = None) -> Any:
    """Forward transform of an ``r2c`` plan: the half spectrum of the real X-pencil ``x`` (as ``plan.forward``); see ``fft``."""
    return _fft_on(plan, x, False, ("r2c",), "rfft", mesh)


def irfft(plan: Any, x: Any, *, mesh: Any = None) -> Any:
    """Backward transform of an ``r2c`` plan: the real X-pencil of the half spectrum ``x`` (as ``plan.backward``); see ``fft``."""
    return _fft_on(plan, x, True, ("r2c",), "irfft", mesh)


def _transpose_on(grid: GridDesc, x: Any, direction: int, name: str, mesh: Any) -> Any:
    """Transpose one process's pencil, or (``mesh``) the globally sharded array."""
    a, b = AXES[direction]
    return sharded(grid, mesh, x, a, b, lambda v: transpose(grid, v, direction, name), name)


def _halos_on(grid: GridDesc, x: Any, axis: int, halo_extents: Any, halo_periods: Any, dim: int, padding: Any, name: str, mesh: Any) -> Any:
    """Update the halos of one process's pencil, or (``mesh``) of the globally sharded array's shards."""
    return sharded(grid, mesh, x, axis, axis, lambda v: update_halos(grid, v, axis, halo_extents, halo_periods, dim, padding, name), name)


def _fft_on(plan: Any, x: Any, inverse: bool, kinds: tuple[str, ...], name: str, mesh: Any) -> Any:
    """Transform one process's pencil, or (``mesh``) the globally sharded array."""
    if mesh is None:
        return _fft.run(plan, x, inverse, kinds, name)
    _fft.check_plan(plan, name)  # before the plan's axes and grid are read
    a, b = (plan.output_axis, 0) if inverse else (0, plan.output_axis)
    return sharded(plan.spectral_grid, mesh, x, a, b, lambda v: _fft.run(plan, v, inverse, kinds, name), name)
