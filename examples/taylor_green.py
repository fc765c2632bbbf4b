"""Taylor-Green vortex at Re = 1600: a pseudo-spectral DNS on cudecomp.fft, checked against a 512^3 reference.

Run under MPI with any number of ranks, e.g.
``mpiexec -n 4 python examples/taylor_green.py -n 32 --t-end 1 --check``.

The flow: u = sin x cos y cos z, v = -cos x sin y cos z, w = 0 on [0, 2 pi)^3, periodic,
viscosity nu = 1/1600. The incompressible Navier-Stokes equations in rotational form,

    du/dt = P[u x omega] - nu k^2 u,    omega = curl u,

are advanced in Fourier space: P projects onto divergence-free fields (the pressure),
the product u x omega is formed on the grid and dealiased with the 2/3 rule, and time
advances with the classical fourth-order Runge-Kutta scheme and a CFL time step (or a
fixed ``--dt``). Transforms are real-to-complex (``cudecomp.fft.FFT``, ``kind="r2c"``,
``norm="forward"`` so that the spectral arrays are the Fourier coefficients) with the
spectral data left in the transposed pencil. The CPU variant runs on NumPy, the GPU
variant on CuPy (one GPU per rank, by local rank).

Every 0.1 time units rank 0 writes a row ``time energy -dE/dt enstrophy 2*nu*enstrophy``
(the reference file's four columns and one more) to stdout and, with ``--out``, to a
file. Energy is 1/2 <|u|^2> and enstrophy 1/2 <|omega|^2> (grid averages); -dE/dt is the
instantaneous energy budget of the discrete equations, -sum Re(conj(u_k) . du_k/dt)
(which equals 2*nu*enstrophy up to rounding, since the dealiased nonlinear term
conserves energy exactly).

Checkpoints (``--checkpoint FILE``) are one HDF5 file (``cudecomp.io``): the spectral
velocity as three global arrays ``u``, ``v``, ``w`` of Fourier coefficients, with the
time, the step count and the diagnostics written so far as attributes; ``--restart FILE``
continues from it on any rank count, process grid and backend (the coefficients are
read into this run's spectral pencil), and the diagnostics after the restart are those
of an uninterrupted run. The file opens with h5py alone. ``--check`` compares energy and -dE/dt with the
reference at every output time and exits with status 1 when one deviates by more than
``--tolerance``; ``--png FILE`` draws the dissipation rate against the reference (needs
matplotlib, checked before the run starts).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

import cudecomp
from cudecomp.fft import FFT

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "data", "taylor_green", "spectral_Re1600_512.gdiag")
NU = 1.0 / 1600.0
OUTPUT_EVERY = 0.1

if cudecomp.CPU_ONLY:
    xp: Any = np
else:  # pragma: no cover - needs a GPU
    import cupy as xp  # type: ignore[import-not-found,no-redef]

    _local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    xp.cuda.Device(_local.rank % xp.cuda.runtime.getDeviceCount()).use()
    _local.Free()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("-n", type=int, default=64, help="grid points per axis (default: 64)")
    p.add_argument("--t-end", type=float, default=20.0, help="final time (default: 20)")
    p.add_argument("--cfl", type=float, default=0.5, help="CFL number of the adaptive time step (default: 0.5)")
    p.add_argument("--dt", type=float, default=None, help="fixed time step instead of the CFL one (default: CFL)")
    p.add_argument("--pdims", default="auto", help="process grid RxC, or auto (the FFT plan times every usable one) (default: auto)")
    p.add_argument(
        "--backend",
        default=None,
        choices=[b.name for b in cudecomp.TransposeCommBackend],
        help="transpose backend (default: the FFT plan times DIRECT, NCCL where each rank has its own GPU, and MPI_P2P)",
    )
    p.add_argument("--precision", default="float64", choices=["float64", "float32"], help="floating-point precision (default: float64)")
    p.add_argument("--out", default=None, help="write the diagnostics to this file too (default: stdout only)")
    p.add_argument("--png", default=None, help="plot the dissipation rate beside the reference into this PNG (needs matplotlib)")
    p.add_argument("--reference", default=REFERENCE, help="reference diagnostics (default: the 512^3 DNS in examples/data)")
    p.add_argument("--check", action="store_true", help="exit 1 if energy or -dE/dt deviate from the reference beyond --tolerance")
    p.add_argument("--tolerance", type=float, default=0.01, help="relative tolerance of --check (default: 0.01)")
    p.add_argument("--checkpoint", default=None, metavar="FILE", help="write checkpoints into one HDF5 file (replaced each time)")
    p.add_argument("--checkpoint-every", type=float, default=1.0, help="time between checkpoints (default: 1.0)")
    p.add_argument("--restart", default=None, metavar="FILE", help="continue from a checkpoint file, on any rank count and process grid")
    p.add_argument("--quiet", action="store_true", help="no progress lines, only the diagnostics rows")
    p.add_argument("--no-fuse", action="store_true", help="GPU: run the element-wise steps unfused (default: cupy.fuse kernels)")
    return p.parse_args(argv)


def load_reference(path: str) -> np.ndarray:
    """Rows (time, energy, -dE/dt, enstrophy) of a .gdiag file."""
    return np.loadtxt(path, comments="#", usecols=(0, 1, 2, 3), ndmin=2)


def fail(comm: MPI.Comm, message: str | None) -> None:
    """Exit on every rank with ``message`` (decided on rank 0) when it is not None."""
    message = comm.bcast(message, root=0)
    if message:
        if comm.rank == 0:
            print(f"taylor_green.py: error: {message}", file=sys.stderr)
        sys.exit(2)


def preflight(args: argparse.Namespace, comm: MPI.Comm) -> None:
    """Check, before any work, what the end of the run needs (collective)."""
    problem = None
    if comm.rank == 0:
        if args.png:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                problem = "--png needs matplotlib, which is not installed (pip install matplotlib)"
        if (args.check or args.png) and not os.path.exists(args.reference):
            problem = problem or f"reference file {args.reference} not found"
        for path in (args.out, args.png):
            if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                problem = problem or f"{path}: the directory does not exist"
        if args.n < 4 or args.t_end < 0 or (args.dt is not None and args.dt <= 0) or args.cfl <= 0:
            problem = problem or "need -n >= 4, --t-end >= 0, --dt > 0 and --cfl > 0"
    fail(comm, problem)
    if args.checkpoint or args.restart:
        missing = importlib.util.find_spec("h5py") is None
        fail(comm, "--checkpoint and --restart need h5py (pip install h5py)" if missing else None)
    if args.checkpoint:
        where = os.path.dirname(os.path.abspath(args.checkpoint))
        error = None
        if comm.rank == 0:
            try:
                os.makedirs(where, exist_ok=True)
            except OSError as e:
                error = f"--checkpoint {args.checkpoint}: cannot make the directory {where} ({e.strerror})"
        fail(comm, error)


def _curl(ikx: Any, iky: Any, ikz: Any, u0: Any, u1: Any, u2: Any) -> tuple[Any, Any, Any]:
    """Fourier coefficients of omega = curl u, given i*k."""
    return iky * u2 - ikz * u1, ikz * u0 - ikx * u2, ikx * u1 - iky * u0


def _cross(a0: Any, a1: Any, a2: Any, b0: Any, b1: Any, b2: Any) -> tuple[Any, Any, Any]:
    """Return the cross product a x b, point by point."""
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


def _project(
    kx: Any, ky: Any, kz: Any, inv_k2: Any, mask: Any, nu_k2: Any, n0: Any, n1: Any, n2: Any, u0: Any, u1: Any, u2: Any
) -> tuple[Any, Any, Any]:
    """du/dt = P[dealiased (u x omega)] - nu k^2 u in Fourier space."""
    n0, n1, n2 = n0 * mask, n1 * mask, n2 * mask
    div = (kx * n0 + ky * n1 + kz * n2) * inv_k2
    return n0 - kx * div - nu_k2 * u0, n1 - ky * div - nu_k2 * u1, n2 - kz * div - nu_k2 * u2


def _axpy(y: Any, x: Any, a: Any) -> Any:
    """Return y + a * x."""
    return y + a * x


def _stage_update(u: Any, k: Any, acc: Any, a: Any, w: Any) -> tuple[Any, Any]:
    """Return u + a * k and acc + w * k: the next Runge-Kutta stage and the running sum, in one pass."""
    return u + a * k, acc + w * k


def _rk4_end(u: Any, acc: Any, k: Any, h: Any) -> Any:
    """Return u + h * (acc + k)."""
    return u + h * (acc + k)


class TaylorGreen:
    """State and right-hand side of the spectral solver on one FFT plan.

    The velocity is a list of three spectral arrays. On GPUs the element-wise steps run as
    fused CuPy kernels (``cupy.fuse``; ``fuse=False`` runs them as separate operations).
    """

    def __init__(self, plan: FFT, n: int, comm: MPI.Comm, fuse: bool = True) -> None:
        self.plan, self.n, self.comm = plan, n, comm
        real = plan.input_dtype
        kx, ky, kz = plan.wavenumbers()  # integer modes as floats on [0, 2 pi)^3
        mx, my, mz = plan.modes()
        self.k = (kx, ky, kz)
        self.ik = tuple((1j * k).astype(plan.output_dtype) for k in self.k)
        k2 = kx * kx + ky * ky + kz * kz
        self.nu_k2 = (NU * k2).astype(real)
        self.inv_k2 = xp.where(k2 == 0, 0, 1 / xp.where(k2 == 0, 1, k2)).astype(real)
        cut = n / 3.0  # 2/3 rule: keep |m| < N/3 along each axis
        self.dealias = ((xp.abs(mx) < cut) & (xp.abs(my) < cut) & (xp.abs(mz) < cut)).astype(real)
        # Weights of the half spectrum (r2c along X): interior kx modes stand for two.
        w = xp.where(mx == 0, 1.0, 2.0)
        if n % 2 == 0:
            w = xp.where(mx == n // 2, 1.0, w)
        self.weight = w.astype(real)
        fused = (lambda f: xp.fuse()(f)) if (xp is not np and fuse) else (lambda f: f)
        self.curl, self.cross, self.project, self.axpy, self.stage_update, self.rk4_end = (
            fused(f) for f in (_curl, _cross, _project, _axpy, _stage_update, _rk4_end)
        )

    def initial(self) -> list[Any]:
        """Fourier coefficients of the Taylor-Green velocity."""
        x, y, z = self.plan.coordinates()
        u0 = [xp.sin(x) * xp.cos(y) * xp.cos(z), -xp.cos(x) * xp.sin(y) * xp.cos(z), 0 * x * y * z]
        return [self.plan.forward(xp.ascontiguousarray(c)) for c in u0]

    def rhs(self, U: list[Any], diagnostics: bool = False, want_umax: bool = False) -> tuple[list[Any], dict[str, float]]:
        """du/dt in Fourier space, and (on request) energy, enstrophy and max |u|+|v|+|w| of this state."""
        plan = self.plan
        # Velocity and vorticity on the grid (transforms return new arrays: no copies).
        u = [plan.backward(c) for c in U]
        w = [plan.backward(c) for c in self.curl(*self.ik, *U)]
        info: dict[str, float] = {}
        if diagnostics:
            npts = float(self.n) ** 3
            local = [float(sum((c * c).sum() for c in u)), float(sum((c * c).sum() for c in w))]
            energy, enstrophy = sum_pairs(local, self.comm)
            info["energy"], info["enstrophy"] = 0.5 * energy / npts, 0.5 * enstrophy / npts
        if want_umax:
            info["umax"] = self.comm.allreduce(float((xp.abs(u[0]) + xp.abs(u[1]) + xp.abs(u[2])).max()), op=MPI.MAX)
        # u x omega, back to Fourier space, dealiased (2/3 rule) and projected (pressure).
        N = [plan.forward(c) for c in self.cross(*u, *w)]
        del u, w
        return list(self.project(*self.k, self.inv_k2, self.dealias, self.nu_k2, *N, *U)), info

    def dissipation(self, U: list[Any], dU: list[Any]) -> float:
        """-dE/dt = -sum over all modes of Re(conj(u_k) . du_k/dt) (collective)."""
        local = sum(float((self.weight * (a.real * b.real + a.imag * b.imag)).sum()) for a, b in zip(U, dU, strict=True))
        return -self.comm.allreduce(local)


def sum_pairs(values: list[float], comm: MPI.Comm) -> list[float]:
    """Element-wise sum of a short list over ranks."""
    return list(comm.allreduce(np.asarray(values, dtype=np.float64), op=MPI.SUM))


def backends(args: argparse.Namespace, handle: cudecomp.Handle) -> Any:
    """Return the transpose backend(s) the FFT plan chooses from: ``--backend``, else the fast ones here.

    Without ``--backend`` the plan times ``DIRECT`` (and, where every rank has a GPU of
    its own, ``NCCL``) against ``MPI_P2P`` and keeps the fastest (collective); a single
    rank transposes nothing.
    """
    if args.backend:
        return cudecomp.TransposeCommBackend[args.backend]
    if handle.nranks == 1:
        return None
    B = cudecomp.TransposeCommBackend
    cands = [B.DIRECT, B.MPI_P2P]
    if handle.one_gpu_per_rank():
        cands.insert(1, B.NCCL)
    return cands


def main(argv: list[str] | None = None) -> int:
    """Run the simulation (all ranks); the exit status of ``--check``."""
    args = parse_args(argv)
    comm = MPI.COMM_WORLD
    preflight(args, comm)
    n = args.n
    pdims = None
    if args.pdims != "auto":
        try:
            r, c = (int(v) for v in args.pdims.lower().split("x"))
            pdims = (r, c)
        except ValueError:
            fail(comm, f"--pdims {args.pdims}: expected RxC or auto")
    state: dict[str, Any] | None = None
    if args.restart:
        state = read_state(args, comm)
    ref = load_reference(args.reference) if (args.check or args.png) else None

    with cudecomp.Handle(comm) as handle:
        backend = backends(args, handle)
        plan = FFT(handle, (n, n, n), pdims, kind="r2c", dtype=args.precision, norm="forward", transposed_out=True, backend=backend)
        with plan:
            tg = TaylorGreen(plan, n, comm, fuse=not args.no_fuse)
            rows: list[tuple[float, ...]] = []
            if state is not None:
                import cudecomp.io as cio

                # The coefficients land in this run's spectral pencil, whatever the writer's was.
                spectral = plan.spectral_grid.pencil(plan.output_axis)
                U = [cio.read(args.restart, name, spectral) for name in ("u", "v", "w")]
                t, steps, rows, n_out = state["t"], state["steps"], state["rows"], state["n_out"]
            else:
                U, t, steps, n_out = tg.initial(), 0.0, 0, 0
            rc = run(args, comm, plan, tg, U, t, steps, n_out, rows, ref)
    return rc


def run(
    args: argparse.Namespace,
    comm: MPI.Comm,
    plan: FFT,
    tg: TaylorGreen,
    U: Any,
    t: float,
    steps: int,
    n_out: int,
    rows: list[tuple[float, ...]],
    ref: np.ndarray | None,
) -> int:
    """Advance to ``--t-end``, writing diagnostics, checkpoints and progress; the exit status."""
    root = comm.rank == 0
    out = None
    if root:
        variant = "CPU (NumPy)" if cudecomp.CPU_ONLY else "GPU (CuPy)"
        header = [
            f"# Taylor-Green vortex Re=1600, pseudo-spectral {args.n}^3 (cudecomp.fft r2c, {plan.schedule} on pdims "
            f"{plan.pdims[0]}x{plan.pdims[1]}, {comm.size} ranks, {variant}), RK4, " + (f"dt={args.dt}" if args.dt else f"CFL={args.cfl}"),
            "# Time  -  Energy  -  Dissipation rate (-dE/dt) - Enstrophy - 2*nu*Enstrophy",
        ]
        if not args.quiet:
            print(f"{header[0][2:]}; {plan!r}", flush=True)
        if args.out:
            out = open(args.out, "w")
            out.write("\n".join(header) + "\n")
            for r in rows:
                out.write(format_row(r) + "\n")
    dx = 2 * math.pi / args.n
    next_ckpt = (math.floor(t / args.checkpoint_every + 1e-9) + 1) * args.checkpoint_every if args.checkpoint else math.inf
    t_wall, steps_wall = time.perf_counter(), steps
    tiny = 1e-9
    try:
        while True:
            t_out = n_out * OUTPUT_EVERY
            at_output = abs(t - t_out) < tiny
            k1, info = tg.rhs(U, diagnostics=at_output, want_umax=args.dt is None)
            if at_output:
                eps = tg.dissipation(U, k1)
                row = (round(t_out, 10), info["energy"], eps, info["enstrophy"], 2 * NU * info["enstrophy"])
                rows.append(row)
                if root:
                    line = format_row(row)
                    if out:
                        out.write(line + "\n")
                        out.flush()
                    now = time.perf_counter()
                    rate = (steps - steps_wall) / max(now - t_wall, 1e-12)
                    print(line if args.quiet else f"{line}    [step {steps}, {rate:.1f} steps/s]", flush=True)
                n_out += 1
                t_out = n_out * OUTPUT_EVERY
            if t >= args.t_end - tiny:
                break
            dt = args.dt if args.dt else args.cfl * dx / max(info["umax"], 1e-12)
            stop = min(t_out, args.t_end, next_ckpt)
            if t + dt > stop - tiny:
                dt = stop - t
            U = rk4(tg, U, k1, dt)
            steps += 1
            t = stop if abs(t + dt - stop) < tiny else t + dt
            if abs(t - next_ckpt) < tiny:
                write_checkpoint(args.checkpoint, comm, plan, U, t, steps, n_out, rows, args)
                next_ckpt += args.checkpoint_every
    finally:
        if out:
            out.close()
    if args.checkpoint:
        write_checkpoint(args.checkpoint, comm, plan, U, t, steps, n_out, rows, args)
    rc = 0
    if root and ref is not None:
        rc = report(args, rows, ref)
    return int(comm.bcast(rc, root=0))


def rk4(tg: TaylorGreen, U: list[Any], k1: list[Any], dt: float) -> list[Any]:
    """One classical Runge-Kutta step from ``U`` whose right-hand side ``k1`` is known.

    Each stage's state and the running sum k1 + 2 k2 + 2 k3 come out of one fused pass.
    """

    def stage(u: list[Any], k: list[Any], acc: list[Any], a: float, w: float) -> tuple[list[Any], list[Any]]:
        pairs = [tg.stage_update(*t, a, w) for t in zip(u, k, acc, strict=True)]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    k = tg.rhs([tg.axpy(u, d, 0.5 * dt) for u, d in zip(U, k1, strict=True)])[0]
    s, acc = stage(U, k, k1, 0.5 * dt, 2.0)
    k = tg.rhs(s)[0]
    s, acc = stage(U, k, acc, dt, 2.0)
    k = tg.rhs(s)[0]
    del s
    return [tg.rk4_end(u, a, d, dt / 6.0) for u, a, d in zip(U, acc, k, strict=True)]


def format_row(r: tuple[float, ...]) -> str:
    """One diagnostics line in the reference file's style."""
    return f"{r[0]:.10g} {r[1]:.12g} {r[2]:.12g} {r[3]:.12g} {r[4]:.12g}"


def read_state(args: argparse.Namespace, comm: MPI.Comm) -> dict[str, Any]:
    """Return the scalars of a checkpoint on every rank (rank 0 reads them), after the checks a restart needs."""
    state: dict[str, Any] | None = None
    error = None
    if comm.rank == 0:
        import cudecomp.io as cio

        try:
            a = cio.attributes(args.restart)
            state = {
                "t": float(a["time"]),
                "steps": int(a["steps"]),
                "n_out": int(a["n_out"]),
                "rows": [tuple(float(v) for v in r) for r in np.asarray(a["rows"]).reshape(-1, 5)],
                "n": int(a["n"]),
                "precision": str(a["precision"]),
            }
            if state["n"] != args.n or state["precision"] != args.precision:
                error = f"--restart: the checkpoint is {state['n']}^3 {state['precision']}, not {args.n}^3 {args.precision}"
        except (OSError, KeyError) as e:
            error = f"--restart {args.restart}: not a checkpoint of this program ({e})"
    fail(comm, error)
    return comm.bcast(state, root=0)  # type: ignore[no-any-return]


def write_checkpoint(
    path: str,
    comm: MPI.Comm,
    plan: FFT,
    U: Any,
    t: float,
    steps: int,
    n_out: int,
    rows: list[tuple[float, ...]],
    args: argparse.Namespace,
) -> None:
    """Write the checkpoint into one file, replacing the last one only once it is complete (collective)."""
    import cudecomp.io as cio

    attrs = {
        "time": t,
        "steps": steps,
        "n_out": n_out,
        "rows": np.asarray(rows, dtype=np.float64).reshape(-1, 5),
        "n": args.n,
        "precision": args.precision,
        "nu": NU,
    }
    spectral = plan.spectral_grid.pencil(plan.output_axis)
    cio.write(path, dict(zip(("u", "v", "w"), U, strict=True)), spectral, attrs=attrs, overwrite=True)


def report(args: argparse.Namespace, rows: list[tuple[float, ...]], ref: np.ndarray) -> int:
    """Compare with the reference (rank 0): print deviations, draw the PNG; 1 when --check fails."""
    data = np.asarray(rows)
    rt, re, rd = ref[:, 0], ref[:, 1], ref[:, 2]
    inside = data[:, 0] <= rt[-1] + 1e-9
    t = data[inside, 0]
    dev_e = data[inside, 1] / np.interp(t, rt, re) - 1
    dev_d = data[inside, 2] / np.interp(t, rt, rd) - 1
    rc = 0
    if t.size:
        ie, id_ = int(np.argmax(abs(dev_e))), int(np.argmax(abs(dev_d)))
        print(
            f"relative deviation from the reference over {t.size} output times up to t={t[-1]:g}: "
            f"energy max {dev_e[ie]:+.2e} (t={t[ie]:g}), -dE/dt max {dev_d[id_]:+.2e} (t={t[id_]:g}); "
            f"at t={t[-1]:g}: energy {dev_e[-1]:+.2e}, -dE/dt {dev_d[-1]:+.2e}"
        )
        rpeak = int(np.argmax(rd))
        if data[-1, 0] >= rt[rpeak] + 1:  # the run covers the reference's dissipation peak
            peak = int(np.argmax(data[:, 2]))
            print(
                f"dissipation peak {data[peak, 2]:.6g} at t={data[peak, 0]:g}; reference {rd[rpeak]:.6g} at t={rt[rpeak]:g}: "
                f"{data[peak, 2] / rd[rpeak] - 1:+.2%}, {data[peak, 0] - rt[rpeak]:+.2f} in time"
            )
        if args.check:
            bad = max(abs(dev_e).max(), abs(dev_d).max()) > args.tolerance
            print(f"check against the reference ({args.tolerance:.2%}): {'FAILED' if bad else 'passed'}")
            rc = 1 if bad else 0
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
        shown = rt <= float(data[-1, 0]) + 1e-9
        ax.plot(rt[shown], rd[shown], "k-", lw=1.5, label="reference 512³ (−dE/dt)")
        ax.plot(data[:, 0], data[:, 2], "C0-", lw=1.2, label=f"cudecomp.fft {args.n}³ (−dE/dt)")
        ax.plot(data[:, 0], data[:, 4], "C1--", lw=1.0, label=f"cudecomp.fft {args.n}³ (2ν·enstrophy)")
        ax.set_xlabel("time")
        ax.set_ylabel("dissipation rate")
        ax.set_title("Taylor–Green vortex, Re = 1600")
        ax.set_xlim(0, max(float(data[-1, 0]), 1e-9))
        ax.set_ylim(0, None)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.savefig(args.png, dpi=120)
        plt.close(fig)
        print(f"wrote {args.png}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
