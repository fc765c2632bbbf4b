//! cudecomp's operations as XLA FFI handlers, for `cudecomp.jax`: each handler is a C
//! function XLA calls from a compiled program with the operands' buffers, which runs the
//! core's operation on them (the CPU variant's host path; the GPU variant's on the
//! stream XLA gives). Python registers them with `jax.ffi.register_ffi_target` and names
//! grids and redistributions by the ids of [`_xla_grid_id`] and [`_xla_redistribution_id`].

mod ffi;
mod handlers;

use std::sync::{Arc, Mutex, Weak};

use cudecomp_core as core;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::grid::GridDesc;
use crate::redistribution::Redistribution;

/// Objects compiled programs name by id: weak, so that a destroyed one is reported as
/// such by the program that still names it.
struct Registry<T> {
    entries: Mutex<Vec<(u64, Weak<T>)>>,
    what: &'static str,
}

impl<T> Registry<T> {
    const fn new(what: &'static str) -> Self {
        Registry {
            entries: Mutex::new(Vec::new()),
            what,
        }
    }

    /// The id of `object` (the same for its whole life).
    fn id_of(&self, object: &Arc<T>) -> u64 {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, w)| w.strong_count() > 0);
        if let Some((id, _)) = entries
            .iter()
            .find(|(_, w)| w.as_ptr() == Arc::as_ptr(object))
        {
            return *id;
        }
        let id = entries.iter().map(|(i, _)| *i).max().unwrap_or(0) + 1;
        entries.push((id, Arc::downgrade(object)));
        id
    }

    /// The object of `id`, or why there is none.
    fn get(&self, id: u64) -> Result<Arc<T>, String> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let weak = entries
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, w)| w.clone())
            .ok_or_else(|| format!("cudecomp.jax: no {} has id {id}", self.what))?;
        weak.upgrade().ok_or_else(|| {
            format!(
                "cudecomp.jax: the {} (id {id}) was destroyed: expected a live {}",
                self.what, self.what
            )
        })
    }
}

static GRIDS: Registry<core::GridDesc> = Registry::new("GridDesc");
static REDISTRIBUTIONS: Registry<core::Redistribution> = Registry::new("Redistribution");

/// The id a compiled program names `grid` by (the same for the grid's whole life).
#[pyfunction]
pub(crate) fn _xla_grid_id(py: Python<'_>, grid: &GridDesc) -> PyResult<u64> {
    Ok(GRIDS.id_of(&grid.live(py)?))
}

/// The id a compiled program names `redistribution` by.
#[pyfunction]
pub(crate) fn _xla_redistribution_id(
    py: Python<'_>,
    redistribution: &Redistribution,
) -> PyResult<u64> {
    Ok(REDISTRIBUTIONS.id_of(&redistribution.live(py)?))
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
