//! Argument parsing shared by the bound methods: enum members, integer and boolean
//! triples, configuration objects.

use cudecomp_core::{AutotuneOptions, DataType, GridConfig};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyString, PyType};

use crate::errors::invalid;

/// A class of the Python package, imported once.
pub(crate) fn class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    module: &str,
    name: &str,
) -> PyResult<Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        Ok::<_, PyErr>(
            py.import(module)?
                .getattr(name)?
                .cast_into::<PyType>()?
                .unbind(),
        )
    })
    .map(|c| c.bind(py).clone())
}

static DATA_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static GRID_CONFIG: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static AUTOTUNE_OPTIONS: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `cudecomp.DataType`.
pub(crate) fn data_type_class(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    class(py, &DATA_TYPE, "cudecomp._enums", "DataType")
}

/// `cudecomp.GridDescConfig`.
pub(crate) fn grid_config_class(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    class(py, &GRID_CONFIG, "cudecomp._config", "GridDescConfig")
}

/// `cudecomp.GridDescAutotuneOptions`.
pub(crate) fn autotune_options_class(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    class(
        py,
        &AUTOTUNE_OPTIONS,
        "cudecomp._config",
        "GridDescAutotuneOptions",
    )
}

/// Python name of a data type, for messages.
pub(crate) fn dtype_name(d: DataType) -> &'static str {
    match d {
        DataType::Float => "DataType.FLOAT",
        DataType::Double => "DataType.DOUBLE",
        DataType::FloatComplex => "DataType.FLOAT_COMPLEX",
        DataType::DoubleComplex => "DataType.DOUBLE_COMPLEX",
    }
}

/// `dtype=` argument: `None` or a `cudecomp.DataType` member; anything else is a TypeError.
pub(crate) fn parse_dtype(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<DataType>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if !v.is_instance(data_type_class(py)?.as_any())? {
        return Err(PyTypeError::new_err(format!(
            "dtype: expected a cudecomp.DataType member or None, got {} ({})",
            v.repr()?,
            v.get_type().name()?
        )));
    }
    let code: i32 = v.extract()?;
    DataType::from_i32(code)
        .map(Some)
        .ok_or_else(|| invalid(py, format!("dtype: unknown DataType value {code}")))
}

/// A Python int (not a bool) as i64; `what` names the argument in the TypeError.
pub(crate) fn int_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected an int, got a bool"
        )));
    }
    let index = v.call_method0("__index__").map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: expected an int, got {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    index.extract::<i64>().map_err(|_| {
        invalid(
            v.py(),
            format!(
                "{what}: expected an int that fits in 64 bits (-2**63 to 2**63 - 1), got {index}"
            ),
        )
    })
}

/// An axis or dimension index: an int in 0..=2 (TypeError for other types,
/// InvalidUsageError for other ints).
pub(crate) fn index_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let i = int_arg(v, what)?;
    match usize::try_from(i) {
        Ok(u) if u < 3 => Ok(u),
        _ => Err(invalid(
            v.py(),
            format!("{what}: expected 0 (X), 1 (Y) or 2 (Z), got {i}"),
        )),
    }
}

fn sequence<'py>(
    py: Python<'py>,
    v: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if v.is_instance_of::<PyString>() || v.hasattr("keys")? {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected a sequence of 3 values, got {}",
            v.get_type().name()?
        )));
    }
    let items: Vec<Bound<'py, PyAny>> = v
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: expected a sequence of 3 values, got {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?
        .collect::<PyResult<_>>()?;
    if items.len() != 3 {
        return Err(invalid(
            py,
            format!(
                "{what}: expected 3 values (one per axis X, Y, Z), got {}",
                items.len()
            ),
        ));
    }
    Ok(items)
}

/// Optional triple of ints (halos, padding): `None` means zeros.
pub(crate) fn int_triple(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<[i64; 3]> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok([0; 3]);
    };
    let items = sequence(py, v, what)?;
    let mut out = [0i64; 3];
    for (o, it) in out.iter_mut().zip(&items) {
        *o = int_arg(it, what)?;
    }
    Ok(out)
}

/// Optional triple of bools (halo periods): `None` means all false.
pub(crate) fn bool_triple(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<[bool; 3]> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok([false; 3]);
    };
    let items = sequence(py, v, what)?;
    let mut out = [false; 3];
    for (o, it) in out.iter_mut().zip(&items) {
        *o = bool_arg(it, what)?;
    }
    Ok(out)
}

/// One boolean argument: `True`/`False` (NumPy's too) or the integers 0 and 1.
pub(crate) fn bool_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    let is_bool = v.is_instance_of::<PyBool>() || v.get_type().name()? == "bool";
    if is_bool || matches!(int_arg(v, what), Ok(0 | 1)) {
        return v.is_truthy();
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected a boolean (or 0/1), got {}",
        v.repr()?
    )))
}

/// Reads a `GridDescConfig` (TypeError for anything else).
pub(crate) fn grid_config(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<GridConfig> {
    if !v.is_instance(grid_config_class(py)?.as_any())? {
        return Err(PyTypeError::new_err(format!(
            "config: expected a cudecomp.GridDescConfig, got {}",
            v.get_type().name()?
        )));
    }
    let d = v.call_method0("_export")?;
    let get = |k: &str| d.get_item(k);
    Ok(GridConfig {
        gdims: get("gdims")?.extract()?,
        gdims_dist: get("gdims_dist")?.extract()?,
        pdims: get("pdims")?.extract()?,
        rank_order: get("rank_order")?.extract()?,
        transpose_comm_backend: get("transpose_comm_backend")?.extract()?,
        transpose_axis_contiguous: get("transpose_axis_contiguous")?.extract()?,
        transpose_mem_order: get("transpose_mem_order")?.extract()?,
        halo_comm_backend: get("halo_comm_backend")?.extract()?,
    })
}

/// A `GridDescConfig` Python object holding `cfg`.
pub(crate) fn config_object<'py>(py: Python<'py>, cfg: &GridConfig) -> PyResult<Bound<'py, PyAny>> {
    let d = pyo3::types::PyDict::new(py);
    d.set_item("gdims", cfg.gdims)?;
    d.set_item("gdims_dist", cfg.gdims_dist)?;
    d.set_item("pdims", cfg.pdims)?;
    d.set_item("rank_order", cfg.rank_order)?;
    d.set_item("transpose_comm_backend", cfg.transpose_comm_backend)?;
    d.set_item("transpose_axis_contiguous", cfg.transpose_axis_contiguous)?;
    d.set_item("transpose_mem_order", cfg.transpose_mem_order)?;
    d.set_item("halo_comm_backend", cfg.halo_comm_backend)?;
    grid_config_class(py)?.call_method1("_from_export", (d,))
}

/// Reads a `GridDescAutotuneOptions` (already type-checked by the caller).
pub(crate) fn read_autotune_options(v: &Bound<'_, PyAny>) -> PyResult<AutotuneOptions> {
    let d = v.call_method0("_export")?;
    let get = |k: &str| d.get_item(k);
    let dtype: i32 = get("dtype")?.extract()?;
    Ok(AutotuneOptions {
        n_warmup_trials: get("n_warmup_trials")?.extract()?,
        n_trials: get("n_trials")?.extract()?,
        grid_mode_halo: get("grid_mode")?.extract::<i32>()? == 1,
        dtype: DataType::from_i32(dtype).unwrap_or(DataType::Double),
        allow_uneven_decompositions: get("allow_uneven_decompositions")?.extract()?,
        disable_mpi_backends: get("disable_mpi_backends")?.extract()?,
        disable_nccl_backends: get("disable_nccl_backends")?.extract()?,
        disable_nvshmem_backends: get("disable_nvshmem_backends")?.extract()?,
        skip_threshold: get("skip_threshold")?.extract()?,
        autotune_transpose_backend: get("autotune_transpose_backend")?.extract()?,
        transpose_use_inplace_buffers: get("transpose_use_inplace_buffers")?.extract()?,
        transpose_use_library_arrays: get("transpose_use_library_arrays")?.extract()?,
        transpose_op_weights: get("transpose_op_weights")?.extract()?,
        transpose_input_halo_extents: get("transpose_input_halo_extents")?.extract()?,
        transpose_output_halo_extents: get("transpose_output_halo_extents")?.extract()?,
        transpose_input_padding: get("transpose_input_padding")?.extract()?,
        transpose_output_padding: get("transpose_output_padding")?.extract()?,
        autotune_halo_backend: get("autotune_halo_backend")?.extract()?,
        halo_extents: get("halo_extents")?.extract()?,
        halo_periods: get("halo_periods")?.extract()?,
        halo_axis: get("halo_axis")?.extract()?,
        halo_padding: get("halo_padding")?.extract()?,
    })
}
