//! Python bindings of cudecomp: the extension module `cudecomp._cudecomp`.
//!
//! A thin layer: argument parsing, array protocols, GIL release and error mapping.
//! Everything else lives in `cudecomp-core`.
//!
//! The doc comments of the Python-visible items are their Python docstrings, the text of
//! the stub `python/cudecomp/_cudecomp.pyi`; its ``[`name`][cudecomp.Class.member]`` links
//! are for the documentation site (mkdocstrings), not rustdoc paths.
#![allow(rustdoc::broken_intra_doc_links)]

mod args;
mod array;
mod errors;
mod fft;
mod grid;
mod handle;
mod operation_args;
mod owned;
mod pencil;
mod redistribution;
mod shared;
mod variant;
mod xla;

use cudecomp_core::{DataType, HaloBackend, TransposeBackend};
use pyo3::prelude::*;

/// Display name of a transpose backend value (``"ERROR"`` when unknown).
#[pyfunction]
fn transpose_comm_backend_to_string(backend: i64) -> &'static str {
    i32::try_from(backend)
        .ok()
        .and_then(TransposeBackend::from_i32)
        .map_or("ERROR", |b| b.display_name())
}

/// Display name of a halo backend value (``"ERROR"`` when unknown).
#[pyfunction]
fn halo_comm_backend_to_string(backend: i64) -> &'static str {
    i32::try_from(backend)
        .ok()
        .and_then(HaloBackend::from_i32)
        .map_or("ERROR", |b| b.display_name())
}

/// Bytes per element of a ``DataType`` value.
#[pyfunction]
fn get_data_type_size(py: Python<'_>, dtype: i64) -> PyResult<usize> {
    i32::try_from(dtype)
        .ok()
        .and_then(DataType::from_i32)
        .map(|d| d.size())
        .ok_or_else(|| errors::invalid(py, format!("dtype: unknown DataType value {dtype}")))
}

/// Compiles the copy kernels with NVRTC for `sm_<major><minor>` and returns the CUBIN
/// size (a check that needs no GPU; NVRTC must be loadable).
#[pyfunction]
fn _compile_kernels(py: Python<'_>, major: i32, minor: i32) -> PyResult<usize> {
    use errors::IntoPy;
    py.detach(|| cudecomp_core::compile_kernels((major, minor)))
        .py(py)
}

/// Transposes this process ran as single copies into peers' registered arrays (a testing
/// aid for the CPU variant's DIRECT backend).
#[pyfunction]
fn _single_copy_count() -> u64 {
    cudecomp_core::single_copy_count()
}

/// Queues `text` as the library's advice (a testing aid: the next `create_grid` warns).
#[pyfunction]
fn _queue_notice(text: String) {
    cudecomp_core::notice(text);
}

#[pymodule]
fn _cudecomp(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<handle::Handle>()?;
    m.add_class::<grid::GridDesc>()?;
    m.add_class::<pencil::PencilInfo>()?;
    m.add_class::<redistribution::Redistribution>()?;
    m.add_class::<redistribution::PencilLayout>()?;
    m.add_class::<redistribution::BoxLayout>()?;
    m.add_class::<shared::SharedMemory>()?;
    m.add_class::<shared::DeviceMemory>()?;
    m.add_function(wrap_pyfunction!(transpose_comm_backend_to_string, m)?)?;
    m.add_function(wrap_pyfunction!(halo_comm_backend_to_string, m)?)?;
    m.add_function(wrap_pyfunction!(get_data_type_size, m)?)?;
    m.add_function(wrap_pyfunction!(_compile_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(_single_copy_count, m)?)?;
    m.add_function(wrap_pyfunction!(_queue_notice, m)?)?;
    m.add_function(wrap_pyfunction!(fft::_local_fft, m)?)?;
    m.add_function(wrap_pyfunction!(fft::_local_r2r, m)?)?;
    m.add_function(wrap_pyfunction!(fft::_host_threads, m)?)?;
    m.add_function(wrap_pyfunction!(xla::_xla_grid_id, m)?)?;
    m.add_function(wrap_pyfunction!(xla::_xla_redistribution_id, m)?)?;
    m.add_function(wrap_pyfunction!(xla::_xla_targets, m)?)?;
    m.add_function(wrap_pyfunction!(xla::_xla_ffi_layout, m)?)?;
    #[cfg(not(cpu_only))]
    m.add_class::<variant::DeviceBuffer>()?;
    m.add("CPU_ONLY", variant::CPU_ONLY)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
