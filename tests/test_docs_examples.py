"""The documentation's example programs (docs/snippets) and the README's example run as shown.

They are complete programs written for 4 ranks and NumPy arrays: they run under
``mpiexec -n 4`` with the CPU variant and skip otherwise. The GPU examples run where the
GPU variant has a GPU for every rank (one rank on one GPU, too), and are compiled
everywhere.
"""

from __future__ import annotations

import os
import re
import runpy

import pytest
from mpi4py import MPI

import cudecomp
from conftest import gpu_available

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SNIPPETS = os.path.join(ROOT, "docs", "snippets")
GPU_EXAMPLES = ["gpu.py", "gpu_buffers.py"]
CPU_EXAMPLES = [
    "quickstart.py",
    "layout.py",
    "halos.py",
    "gather.py",
    "redistribute.py",
    "io.py",
    "workspaces.py",
    "library_arrays.py",
    "autotune.py",
    "errors.py",
    "threads.py",
    "fft.py",
]


def test_every_example_is_covered() -> None:
    on_disk = {f for f in os.listdir(SNIPPETS) if f.endswith(".py")}
    assert on_disk == set(CPU_EXAMPLES) | set(GPU_EXAMPLES)


@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_gpu_example_compiles(name: str) -> None:
    path = os.path.join(SNIPPETS, name)
    with open(path) as f:
        compile(f.read(), path, "exec")


def _gpu_per_rank() -> bool:
    """Whether the GPU variant runs here with a GPU for every rank (what NCCL needs)."""
    if cudecomp.CPU_ONLY or not gpu_available():
        return False
    with cudecomp.Handle(MPI.COMM_WORLD) as h:
        return MPI.COMM_WORLD.size == 1 or h.one_gpu_per_rank()


@pytest.mark.parametrize("name", GPU_EXAMPLES)
@pytest.mark.gpu
@pytest.mark.mpi(ranks=(1, 2))
def test_gpu_example_runs(name: str) -> None:
    if not _gpu_per_rank():
        pytest.skip("the GPU examples need the GPU variant and a GPU for every rank")
    runpy.run_path(os.path.join(SNIPPETS, name), run_name="__main__")
    MPI.COMM_WORLD.Barrier()


def readme_blocks() -> list[str]:
    with open(os.path.join(ROOT, "README.md")) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def readme_example() -> str:
    """The README's main example (its first Python block), which runs on the CPU variant."""
    blocks = readme_blocks()
    assert blocks, "the README has a Python example"
    return blocks[0]


def test_readme_examples_compile() -> None:
    for block in readme_blocks():
        compile(block, "README.md", "exec")


# The CPU examples use NumPy arrays (CPU variant) and are written for 4 ranks.
on_4_ranks = pytest.mark.mpi(ranks=(4,))
numpy_arrays = pytest.mark.skipif(not cudecomp.CPU_ONLY, reason="the examples use NumPy arrays (CPU variant)")


@pytest.mark.parametrize("name", CPU_EXAMPLES)
@on_4_ranks
@numpy_arrays
def test_cpu_example_runs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "threads.py":
        # As users run it: the checking mode settles a handle's operations as one
        # sequence, which threads on distinct grids do not make (threading.md).
        monkeypatch.setenv("CUDECOMP_CHECK_COLLECTIVES", "0")
    runpy.run_path(os.path.join(SNIPPETS, name), run_name="__main__")
    MPI.COMM_WORLD.Barrier()


@on_4_ranks
@numpy_arrays
def test_readme_example_runs() -> None:
    exec(compile(readme_example(), "README.md", "exec"), {"__name__": "__main__"})
    MPI.COMM_WORLD.Barrier()
