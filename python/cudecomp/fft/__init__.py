"""Distributed 3-D FFTs over cudecomp grid descriptors.

[`FFT`][cudecomp.fft.FFT] is a plan: it owns the grid descriptor(s) of one global grid and
process grid, and runs forward and backward complex-to-complex (``c2c``) or
real-to-complex / complex-to-real (``r2c``) transforms of this rank's pencils, local
one-, two- or three-dimensional FFTs along contiguous axes with the global transposes in
between. The CPU variant transforms NumPy arrays with the package's own local FFTs
(RustFFT in the Rust core, ``fft_library="rustfft"``; ``scipy.fft`` and ``numpy.fft`` on
request); the GPU variant transforms CuPy arrays with
cuFFT through CuPy (plans cached by CuPy's plan cache), on the operation's stream (with no
host synchronisation on the NCCL, NVSHMEM and DIRECT backends).

Real space is always the X-pencil (array ``a[z, y, x]``, X contiguous). Spectral space is
the same X-pencil of the spectral grid (the default), or, with ``transposed_out=True``,
the Z-pencil where the forward transform ends, which saves the return transposes (on
pencils one Z→X exchange, ``GridDesc.transpose_z_to_x``). Which
schedule runs depends on the process grid ``(P_rows, P_cols)``:

| schedule | when | forward |
| --- | --- | --- |
| ``local`` | one rank | one 3-D FFT, no transpose |
| ``slab-xy`` | ``P_rows == 1`` | 2-D FFT over (Y, X), Y→Z, 1-D FFT along Z |
| ``slab-yz`` | ``P_cols == 1`` | 1-D FFT along X, X→Y, 2-D FFT over (Z, Y) |
| ``pencil`` | otherwise | FFT along X, X→Y, FFT along Y, Y→Z, FFT along Z |

On GPUs where every rank has a GPU of its own, ``slab-xy`` on ``DIRECT`` streams its
slabs (``CUDECOMP_FFT_STREAM`` overrides): the 2-D FFTs run in slabs of Z
planes (backward: the FFTs along Z in slabs of Y rows, or with
``CUDECOMP_FFT_BACKWARD=planes`` the 2-D FFTs of each slab of Z planes as it lands), each
sent to the peers by the copy engine while the next is transformed (pencils keep X
fastest; a transposed output is then indexed ``a[kz, ky, kx]``).

Example (any number of ranks):

```python
with cudecomp.Handle(MPI.COMM_WORLD) as handle, cudecomp.fft.FFT(handle, (64, 64, 64), kind="r2c") as plan:
    x, y, z = plan.coordinates()          # this rank's grid points on [0, 2 pi)^3
    u = np.sin(x) * np.cos(y) * np.cos(z) # float64, this rank's X-pencil
    u_hat = plan.forward(u)               # complex128, this rank's spectral pencil
    kx, ky, kz = plan.wavenumbers()       # broadcastable against u_hat
    du_dx = plan.backward(1j * kx * u_hat)
```
"""

from ._args import Kind, Norm, Transform
from ._plan import FFT
from ._poisson import Poisson
from ._schedule import Schedule, schedule_of

__all__ = ["FFT", "Kind", "Norm", "Poisson", "Schedule", "Transform", "schedule_of"]

# Shown where it is imported from (e.g. in type(plan) and tracebacks), not from its private module.
FFT.__module__ = Poisson.__module__ = schedule_of.__module__ = __name__
