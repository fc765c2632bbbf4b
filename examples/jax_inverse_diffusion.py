"""cudecomp.jax: recover an initial field from the field it diffused into, by gradient descent.

Run under MPI, e.g.::

    mpiexec -n 4 python examples/jax_inverse_diffusion.py
    mpiexec -n 4 python examples/jax_inverse_diffusion.py -n 64 --steps 4 --iterations 80

The forward model takes a periodic field ``u0`` on [0, 2 pi)^3 through ``--steps`` steps
of the heat equation, each exact in Fourier space (``u_hat *= exp(-nu k^2 dt)``), with
the distributed FFTs of ``cudecomp.jax`` inside one ``jax.jit``. Given the final field of
a known smooth ``u0``, the example starts from zero and descends the gradient of
``0.5 * ||model(u) - final||^2`` (``jax.grad`` through the transforms: the reverse pass
runs the inverse transposes on every rank). Each rank differentiates its own part of the
misfit; the reverse pass's transposes are collective, so every rank gets its part of the
gradient of the global misfit. It prints the global misfit and the error of the
recovered field, and exits with status 1 unless the misfit falls by 1e6 or more.

Either variant: the CPU variant on JAX's CPU devices, the GPU variant on its CUDA
devices; needs ``pip install jax``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
import cudecomp.fft


def on_host(a: Any) -> np.ndarray:
    """Return ``a`` (a NumPy or CuPy array) as a NumPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def main() -> int:
    """Run the descent; return the exit status (1 unless the misfit fell by 1e6 or more)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=32, help="grid points per axis (default: 32)")
    p.add_argument("--steps", type=int, default=3, help="time steps of the forward model (default: 3)")
    p.add_argument("--dt", type=float, default=0.02, help="time step (default: 0.02)")
    p.add_argument("--nu", type=float, default=1.0, help="diffusivity (default: 1)")
    p.add_argument("--iterations", type=int, default=60, help="gradient descent iterations (default: 60)")
    args = p.parse_args()
    import jax
    import jax.numpy as jnp

    import cudecomp.jax as cj

    jax.config.update("jax_enable_x64", True)
    comm = MPI.COMM_WORLD
    handle = cudecomp.Handle(comm)
    n = args.n
    with cudecomp.fft.FFT(handle, (n, n, n), kind="r2c", comm=comm) as plan:
        # The plan's coordinates are NumPy or CuPy arrays, as its variant's pencils.
        kx, ky, kz = (on_host(k) for k in plan.wavenumbers())
        decay = jnp.asarray(np.exp(-args.nu * (kx * kx + ky * ky + kz * kz) * args.dt))
        x, y, z = (on_host(c) for c in plan.coordinates())
        u_true = np.sin(x) * np.cos(2 * y) + 0.5 * np.cos(z + x) * np.sin(y)

        @jax.jit
        def model(u: Any) -> Any:
            spectrum = cj.rfft(plan, u)
            for _ in range(args.steps):
                spectrum = spectrum * decay
            return cj.irfft(plan, spectrum)

        final = model(jnp.asarray(u_true))

        @jax.jit
        def step(u: Any) -> tuple[Any, Any]:
            # This rank's part of the misfit; its gradient is this rank's part of the global one.
            misfit, grad = jax.value_and_grad(lambda v: 0.5 * jnp.sum((model(v) - final) ** 2))(u)
            return misfit, u - grad

        u = jnp.zeros_like(final)
        first = last = 0.0
        for i in range(args.iterations):
            local, u = step(u)
            last = comm.allreduce(float(local))
            first = first or last
            if comm.rank == 0 and i % 20 == 0:
                print(f"iteration {i:3d}: misfit {last:.3e}")
        error = comm.allreduce(float(jnp.max(jnp.abs(u - u_true))), op=MPI.MAX)
    handle.finalize()
    if comm.rank == 0:
        print(f"misfit {first:.3e} -> {last:.3e} after {args.iterations} iterations; largest error of the recovered field {error:.2e}")
    ok = last <= 1e-6 * first
    if comm.rank == 0 and not ok:
        print("FAILED: the misfit fell by less than 1e6", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
