"""Pencil-info and shifted-rank golden tables of the reference, through the Python API (4 ranks)."""

from __future__ import annotations

import pytest
from mpi4py import MPI

import cudecomp

pytestmark = pytest.mark.mpi(ranks=(4,))  # the golden tables are for 4 ranks

# axis -> rank -> (shape, lo, hi, size); gdims (9,10,11), pdims 2x2, halo (1,2,1), padding (1,0,2).
GOLDEN = {
    0: [((12, 9, 10), (0, 0, 0), (8, 4, 5), 1080), ((12, 9, 9), (0, 0, 6), (8, 4, 10), 972),
        ((12, 9, 10), (0, 5, 0), (8, 9, 5), 1080), ((12, 9, 9), (0, 5, 6), (8, 9, 10), 972)],
    1: [((8, 14, 10), (0, 0, 0), (4, 9, 5), 1120), ((8, 14, 9), (0, 0, 6), (4, 9, 10), 1008),
        ((7, 14, 10), (5, 0, 0), (8, 9, 5), 980), ((7, 14, 9), (5, 0, 6), (8, 9, 10), 882)],
    2: [((8, 9, 15), (0, 0, 0), (4, 4, 10), 1080), ((8, 9, 15), (0, 5, 0), (4, 9, 10), 1080),
        ((7, 9, 15), (5, 0, 0), (8, 4, 10), 945), ((7, 9, 15), (5, 5, 0), (8, 9, 10), 945)],
}  # fmt: skip


@pytest.mark.parametrize("order", [cudecomp.RankOrder.ROW_MAJOR, cudecomp.RankOrder.COL_MAJOR])
def test_pencil_info_golden(handle: cudecomp.Handle, comm: MPI.Comm, order: cudecomp.RankOrder) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims, cfg.rank_order = (9, 10, 11), (2, 2), order
    g = handle.create_grid(cfg)
    row = comm.rank if order == cudecomp.RankOrder.ROW_MAJOR else [0, 2, 1, 3][comm.rank]
    for axis in range(3):
        info = g.get_pencil_info(axis, (1, 2, 1), (1, 0, 2))
        assert (info.shape, info.lo, info.hi, info.size) == GOLDEN[axis][row]
    g.destroy()


def test_shifted_rank_golden(handle: cudecomp.Handle, comm: MPI.Comm) -> None:
    cfg = cudecomp.GridDescConfig()
    cfg.gdims, cfg.pdims = (9, 10, 11), (2, 2)
    g = handle.create_grid(cfg)
    expect = {
        (1, 1, False): [2, 3, -1, -1],
        (1, -1, False): [-1, -1, 0, 1],
        (1, 1, True): [2, 3, 0, 1],
        (2, 1, False): [1, -1, 3, -1],
        (2, -1, False): [-1, 0, -1, 2],
        (2, 1, True): [1, 0, 3, 2],
    }
    for (dim, disp, periodic), ranks in expect.items():
        assert g.get_shifted_rank(0, dim, disp, periodic) == ranks[comm.rank]
    assert g.get_transpose_workspace_size() == 620
    if comm.rank == 0:
        assert g.get_halo_workspace_size(0, (1, 3, 2)) == 1536
    g.destroy()
