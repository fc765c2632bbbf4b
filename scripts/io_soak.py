"""Kill soak of cudecomp.io's appends: every step reported complete stays readable.

Each round starts a job of ``--ranks`` ranks under ``--mpiexec`` that appends steps to one
time-series file (step ``n`` holds ``n`` times the global-index oracle) and logs each step
once ``cudecomp.io.write`` returned; after a random time, one random rank gets SIGKILL or
SIGTERM. Then every logged step must be listed by ``cudecomp.io.steps`` and hold its
values, and the next round goes on appending to the same file. Exit status 1 at the
first step lost.

    python scripts/io_soak.py --rounds 200 --ranks 2 --mpiexec "mpiexec" --dir /tmp/soak
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import subprocess
import sys
import time

import numpy as np

GDIMS = (8, 6, 5)


def oracle() -> np.ndarray:
    """Return the global array ``[z, y, x]`` of the global index."""
    return np.arange(int(np.prod(GDIMS)), dtype=np.float64).reshape(GDIMS[::-1])


def append(path: str, log: str, pids: str, first: int) -> None:
    """Append steps ``first, first + 1, ...`` until killed (the job; every rank)."""
    from mpi4py import MPI

    import cudecomp
    import cudecomp.io as cio

    comm = MPI.COMM_WORLD
    with open(f"{pids}.{comm.rank}.new", "w") as f:
        f.write(str(os.getpid()))
    os.replace(f"{pids}.{comm.rank}.new", f"{pids}.{comm.rank}")
    with cudecomp.Handle(comm) as h:
        nz = GDIMS[2]
        z0, z1 = nz * comm.rank // comm.size, nz * (comm.rank + 1) // comm.size
        box = cudecomp.BoxLayout((0, 0, z0), (GDIMS[0] - 1, GDIMS[1] - 1, z1 - 1)) if z1 > z0 else cudecomp.BoxLayout.empty()
        mine = np.ascontiguousarray(oracle()[z0:z1]) if z1 > z0 else np.zeros((0, 0, 0))
        step = first
        with open(log, "a") as out:
            while True:
                cio.write(path, {"u": step * mine}, box, handle=h, gdims=GDIMS, step=step, attrs={"t": 0.5 * step})
                if comm.rank == 0:
                    out.write(f"{step}\n")
                    out.flush()
                step += 1


def check(path: str, reported: list[int], new: set[int], rng: random.Random) -> str:
    """Return what is wrong with the file against the steps reported complete ("" when nothing).

    Every reported step must be listed; the values of those listed since the last check
    (``new``) and of a sample of the others are compared.
    """
    import h5py  # type: ignore[import-untyped]

    import cudecomp.io as cio
    from cudecomp.io import _journal

    if not os.path.exists(path) and not reported:
        # Killed before its first write created the file: no step was reported, none is lost.
        return ""
    try:
        listed = cio.steps(path)
    except Exception as e:
        return f"steps() failed: {type(e).__name__}: {e}"
    missing = sorted(set(reported) - set(listed))
    if missing:
        return f"steps reported complete but not listed: {missing[:10]}"
    want = oracle()
    sample = set(rng.sample(listed, min(len(listed), 64))) | (new & set(listed))
    with _journal.view(h5py, path) as f:
        for s in sorted(sample):
            got = f[f"steps/{s:010d}/u"][...]
            if not np.array_equal(got, s * want):
                return f"step {s} holds wrong values"
            if f[f"steps/{s:010d}"].attrs["t"] != 0.5 * s:
                return f"step {s} holds a wrong attribute"
    return ""


def main(argv: list[str] | None = None) -> int:
    """Run the soak (or, with ``--append``, one job of it); 1 at the first step lost."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mpiexec", default="mpiexec", help="the launcher, e.g. 'mpirun --oversubscribe' (default: mpiexec)")
    p.add_argument("--dir", required=True, help="a directory for the file and the logs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-wait", type=float, default=1.5, help="longest time before the kill, in seconds (default: 1.5)")
    p.add_argument("--append", nargs=4, metavar=("PATH", "LOG", "PIDS", "FIRST"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.append:
        path, log, pids, first = args.append
        append(path, log, pids, int(first))
        return 0
    import cudecomp.io as cio

    rng = random.Random(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    path, log, pids = (os.path.join(args.dir, n) for n in ("series.h5", "complete.log", "pid"))
    for f in (path, log):
        if os.path.exists(f):
            os.remove(f)
    appended = kills = 0
    started = time.time()
    for rnd in range(args.rounds):
        reported = [int(s) for s in open(log).read().split()] if os.path.exists(log) else []
        # A step whose write was killed after it completed, before the job logged it, is
        # in the file: go on after it.
        listed = cio.steps(path) if os.path.exists(path) else []
        first = max(reported + listed, default=0) + 1
        for r in range(args.ranks):
            if os.path.exists(f"{pids}.{r}"):
                os.remove(f"{pids}.{r}")
        cmd = [*shlex.split(args.mpiexec), "-n", str(args.ranks), sys.executable, os.path.abspath(__file__), "--dir", args.dir]
        job = subprocess.Popen(
            [*cmd, "--append", path, log, pids, str(first)], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        # Wait until every rank is up, then a random time into its appends.
        deadline = time.time() + 60
        while not all(os.path.exists(f"{pids}.{r}") for r in range(args.ranks)) and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, args.max_wait))
        victim = rng.randrange(args.ranks)
        sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
        try:
            with open(f"{pids}.{victim}") as f:
                os.kill(int(f.read()), sig)
            kills += 1
        except (OSError, ValueError):
            pass
        try:
            job.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        done = [int(s) for s in open(log).read().split()] if os.path.exists(log) else []
        appended = len(done)
        problem = check(path, done, set(done) - set(reported), rng)
        status = f"round {rnd + 1}/{args.rounds}: {sig.name} to rank {victim}, {appended} steps reported complete"
        if problem:
            print(f"{status}: {problem}", file=sys.stderr)
            return 1
        print(status, flush=True)
    elapsed = time.time() - started
    print(f"{kills} kills, {appended} appended steps all readable ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
