"""NCCL send/recv between two GPUs: one large message per group against many run-sized ones.

Run with two ranks, one GPU each: ``mpirun -np 2 python3 bench/probes/nccl_runs.py``.
A transpose chunk that is dense in the receiver's output only run by run (X→Y: one run of
``nx/2 * ny/2`` cells per z-plane) could land there without unpacking if each run were its
own NCCL message. This prints, for 2 GiB and 4 GiB per rank in 8 groups, the exchange time
with messages of the whole group's size and of 1-8 MiB, alone and beside a copy kernel on
half the SMs (what packing beside NCCL looks like).
"""

from __future__ import annotations

import cupy as cp
from nccl_pair import pair


def main() -> None:
    """Print the table on rank 0."""
    p = pair()
    for total in (2 << 30, 4 << 30):
        sb = cp.ones(total, cp.uint8)
        rb = cp.empty(total, cp.uint8)
        a = cp.ones(total // 8, cp.float64)
        beside = (a, cp.empty_like(a))
        groups = 8
        for msg in (total // groups, 8 << 20, 4 << 20, 2 << 20, 1 << 20):
            for copy in (False, True):
                t = p.timed(sb.data.ptr, rb.data.ptr, total, groups, msg, beside if copy else None)
                p.say(f"{total >> 20:5d} MiB, {groups} groups, messages of {msg >> 10:7d} KiB, beside copy {copy!s:5}: {t:7.3f} ms")
        del sb, rb, a, beside


if __name__ == "__main__":
    main()
