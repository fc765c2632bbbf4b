//! cudecomp's operations as XLA FFI handlers, for `cudecomp.jax`: each handler is a C
//! function XLA calls from a compiled program with the operands' buffers, which runs the
//! core's operation on them (the CPU variant's host path; the GPU variant's on the
//! stream XLA gives). Python registers them with `jax.ffi.register_ffi_target` and names
//! grids by the ids of [`_xla_grid_id`].

mod ffi;
mod handlers;

use std::sync::{Arc, Mutex, Weak};

use cudecomp_core as core;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::grid::GridDesc;

/// The grids compiled programs name, by id: weak, so that a destroyed grid is reported
/// as such by the program that still names it.
static GRIDS: Mutex<Vec<(u64, Weak<core::GridDesc>)>> = Mutex::new(Vec::new());

/// The grid of `id`, or why there is none.
fn grid_of(id: u64) -> Result<Arc<core::GridDesc>, String> {
    let grids = GRIDS.lock().unwrap_or_else(|e| e.into_inner());
    let weak = grids
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, w)| w.clone())
        .ok_or_else(|| format!("cudecomp.jax: no grid has id {id}"))?;
    weak.upgrade().ok_or_else(|| {
        format!("cudecomp.jax: the GridDesc (id {id}) was destroyed: expected a live GridDesc")
    })
}

/// The id a compiled program names `grid` by (the same for the grid's whole life).
#[pyfunction]
pub(crate) fn _xla_grid_id(py: Python<'_>, grid: &GridDesc) -> PyResult<u64> {
    let gd = grid.live(py)?;
    let mut grids = GRIDS.lock().unwrap_or_else(|e| e.into_inner());
    grids.retain(|(_, w)| w.strong_count() > 0);
    if let Some((id, _)) = grids.iter().find(|(_, w)| w.as_ptr() == Arc::as_ptr(&gd)) {
        return Ok(*id);
    }
    let id = grids.iter().map(|(i, _)| *i).max().unwrap_or(0) + 1;
    grids.push((id, Arc::downgrade(&gd)));
    Ok(id)
}

/// The handlers, by target name: the addresses of their C functions, for
/// `jax.ffi.pycapsule` and `jax.ffi.register_ffi_target`.
#[pyfunction]
pub(crate) fn _xla_targets(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, f) in handlers::ALL {
        d.set_item(name, f as usize)?;
    }
    Ok(d)
}

/// Every offset, size and constant of the FFI structs this module declares, by the
/// header's names (the test compiles jaxlib's header and compares).
#[pyfunction]
pub(crate) fn _xla_ffi_layout(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in ffi::layout() {
        d.set_item(k, v)?;
    }
    Ok(d)
}
