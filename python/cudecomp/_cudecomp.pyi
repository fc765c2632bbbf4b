"""Type stubs of the Rust extension module ``cudecomp._cudecomp``."""

from types import TracebackType
from typing import Any

from ._autotune import AutotuneResult
from ._config import GridDescAutotuneOptions, GridDescConfig
from ._enums import DataType

CPU_ONLY: bool
VERSION: str

def transpose_comm_backend_to_string(backend: int) -> str: ...
def halo_comm_backend_to_string(backend: int) -> str: ...
def get_data_type_size(dtype: int) -> int: ...
def _compile_kernels(major: int, minor: int) -> int: ...

Triple = tuple[int, int, int] | list[int] | Any
Stream = int | Any | None

class PencilInfo:
    """Local layout of one pencil (``cudecompPencilInfo_t``)."""

    @property
    def shape(self) -> tuple[int, int, int]: ...
    @property
    def lo(self) -> tuple[int, int, int]: ...
    @property
    def hi(self) -> tuple[int, int, int]: ...
    @property
    def order(self) -> tuple[int, int, int]: ...
    @property
    def halo_extents(self) -> tuple[int, int, int]: ...
    @property
    def padding(self) -> tuple[int, int, int]: ...
    @property
    def size(self) -> int: ...
    @property
    def array_shape(self) -> tuple[int, int, int]: ...

class Handle:
    """Library handle bound to an MPI communicator."""

    def __init__(self, mpi_comm: Any) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def nranks(self) -> int: ...
    def finalize(self) -> None: ...
    def create_grid(self, config: GridDescConfig, autotune_options: GridDescAutotuneOptions | None = None) -> GridDesc: ...
    def malloc(self, grid: GridDesc, nbytes: int) -> Any: ...
    def free(self, grid: GridDesc, buffer: Any) -> None: ...
    def __enter__(self) -> Handle: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool: ...

class GridDesc:
    """A decomposition created by ``Handle.create_grid``."""

    @property
    def config(self) -> GridDescConfig: ...
    @property
    def handle(self) -> Handle: ...
    @property
    def autotune_result(self) -> AutotuneResult | None: ...
    def destroy(self) -> None: ...
    def __enter__(self) -> GridDesc: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool: ...
    def get_pencil_info(self, axis: int, halo_extents: Triple | None = None, padding: Triple | None = None) -> PencilInfo: ...
    def get_transpose_workspace_size(self) -> int: ...
    def get_halo_workspace_size(self, axis: int, halo_extents: Triple) -> int: ...
    def get_shifted_rank(self, axis: int, dim: int, displacement: int, periodic: bool) -> int: ...
    def transpose_x_to_y(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
    ) -> Any: ...
    def transpose_y_to_z(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
    ) -> Any: ...
    def transpose_z_to_y(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
    ) -> Any: ...
    def transpose_y_to_x(
        self,
        input: Any,
        out: Any | None = None,
        *,
        work: Any | None = None,
        dtype: DataType | None = None,
        input_halo_extents: Triple | None = None,
        output_halo_extents: Triple | None = None,
        input_padding: Triple | None = None,
        output_padding: Triple | None = None,
        stream: Stream = None,
    ) -> Any: ...
    def update_halos_x(
        self,
        input: Any,
        halo_extents: Triple,
        halo_periods: Triple | None,
        dim: int,
        *,
        padding: Triple | None = None,
        work: Any | None = None,
        dtype: DataType | None = None,
        stream: Stream = None,
    ) -> None: ...
    def update_halos_y(
        self,
        input: Any,
        halo_extents: Triple,
        halo_periods: Triple | None,
        dim: int,
        *,
        padding: Triple | None = None,
        work: Any | None = None,
        dtype: DataType | None = None,
        stream: Stream = None,
    ) -> None: ...
    def update_halos_z(
        self,
        input: Any,
        halo_extents: Triple,
        halo_periods: Triple | None,
        dim: int,
        *,
        padding: Triple | None = None,
        work: Any | None = None,
        dtype: DataType | None = None,
        stream: Stream = None,
    ) -> None: ...

class DeviceBuffer:
    """Device memory from ``Handle.malloc`` (GPU variant)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
