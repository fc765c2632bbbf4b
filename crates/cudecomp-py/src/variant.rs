//! What differs between the CPU variant (NumPy arrays, host engine) and the GPU variant
//! (CUDA arrays): array parsing, output allocation and running the operations.

#[cfg(cpu_only)]
pub use cpu::*;
#[cfg(not(cpu_only))]
pub use gpu::*;

#[cfg(cpu_only)]
mod cpu {
    use cudecomp_core::geometry::DataType;
    use cudecomp_core::handle::{GridDesc, MemorySpace};
    use cudecomp_core::plan::{Direction, HaloSpec, TransposeLayouts};
    use pyo3::prelude::*;

    use crate::array::{host_array, numpy_name, ArrayArg};
    use crate::errors::IntoPy;

    /// Memory space of this variant.
    pub const SPACE: MemorySpace = MemorySpace::Host;
    /// True in the CPU variant.
    pub const CPU_ONLY: bool = true;

    /// The CPU variant needs nothing beyond MPI.
    pub fn check_handle_supported(_py: Python<'_>) -> PyResult<()> {
        Ok(())
    }

    /// A pencil array argument (NumPy, C-contiguous, 3-D).
    pub fn data_array(
        py: Python<'_>,
        v: &Bound<'_, PyAny>,
        what: &'static str,
    ) -> PyResult<ArrayArg> {
        host_array(py, v, what, false)
    }

    /// A workspace array argument (any NumPy array, C-contiguous).
    pub fn work_array(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<ArrayArg> {
        host_array(py, v, "work", true)
    }

    /// A new NumPy output array.
    pub fn allocate_output<'py>(
        py: Python<'py>,
        _input: &Bound<'py, PyAny>,
        shape: [i64; 3],
        dtype: DataType,
        _stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?
            .call_method1("empty", (shape, numpy_name(dtype)))
    }

    /// `Handle.malloc`: zeroed host bytes.
    pub fn allocate_bytes(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyAny>> {
        py.import("numpy")?.call_method1("zeros", (n, "uint8"))
    }

    /// `Handle.free`: host buffers are released by Python's reference counting.
    pub fn release_bytes(_py: Python<'_>, _buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(())
    }

    /// Runs a transpose on host arrays with the GIL released. Streams are ignored.
    #[allow(clippy::too_many_arguments)]
    pub fn run_transpose(
        py: Python<'_>,
        gd: &GridDesc,
        direction: Direction,
        layouts: &TransposeLayouts,
        dtype: DataType,
        input: &ArrayArg,
        out: &ArrayArg,
        work: Option<&ArrayArg>,
        _stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // SAFETY: the caller holds references to the array objects for the whole call, and
        // the arrays were checked to be C-contiguous and of the sizes recorded here.
        let (i, o, w) = unsafe { (input.host_buf(), out.host_buf(), work.map(|w| w.host_buf())) };
        py.detach(|| gd.transpose_host(direction, layouts, dtype, i, o, w))
            .py(py)
    }

    /// Runs a halo update on a host array with the GIL released. Streams are ignored.
    pub fn run_halo(
        py: Python<'_>,
        gd: &GridDesc,
        spec: &HaloSpec,
        dtype: DataType,
        data: &ArrayArg,
        work: Option<&ArrayArg>,
        _stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // SAFETY: as in `run_transpose`.
        let (d, w) = unsafe { (data.host_buf(), work.map(|w| w.host_buf())) };
        py.detach(|| gd.update_halos_host(spec, dtype, d, w)).py(py)
    }
}

#[cfg(not(cpu_only))]
mod gpu {
    use cudecomp_core::geometry::DataType;
    use cudecomp_core::handle::{GridDesc, MemorySpace};
    use cudecomp_core::plan::{Direction, HaloSpec, TransposeLayouts};
    use pyo3::prelude::*;

    use crate::array::ArrayArg;
    use crate::errors::unsupported;

    /// Memory space of this variant.
    pub const SPACE: MemorySpace = MemorySpace::Cuda;
    /// False in the GPU variant.
    pub const CPU_ONLY: bool = false;

    fn not_built(py: Python<'_>) -> PyErr {
        unsupported(
            py,
            "the GPU variant's CUDA data path is not available in this build; install the CPU variant with CUDECOMP_BUILD_CPU_ONLY=ON".into(),
        )
    }

    /// The GPU data path is not part of this build yet.
    pub fn check_handle_supported(py: Python<'_>) -> PyResult<()> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    pub fn data_array(
        py: Python<'_>,
        _v: &Bound<'_, PyAny>,
        _what: &'static str,
    ) -> PyResult<ArrayArg> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    pub fn work_array(py: Python<'_>, _v: &Bound<'_, PyAny>) -> PyResult<ArrayArg> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    pub fn allocate_output<'py>(
        py: Python<'py>,
        _input: &Bound<'py, PyAny>,
        _shape: [i64; 3],
        _dtype: DataType,
        _stream: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    pub fn allocate_bytes(py: Python<'_>, _n: usize) -> PyResult<Bound<'_, PyAny>> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    pub fn release_bytes(py: Python<'_>, _buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    #[allow(clippy::too_many_arguments)]
    pub fn run_transpose(
        py: Python<'_>,
        _gd: &GridDesc,
        _direction: Direction,
        _layouts: &TransposeLayouts,
        _dtype: DataType,
        _input: &ArrayArg,
        _out: &ArrayArg,
        _work: Option<&ArrayArg>,
        _stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        Err(not_built(py))
    }

    /// See the CPU variant.
    pub fn run_halo(
        py: Python<'_>,
        _gd: &GridDesc,
        _spec: &HaloSpec,
        _dtype: DataType,
        _data: &ArrayArg,
        _work: Option<&ArrayArg>,
        _stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        Err(not_built(py))
    }
}
