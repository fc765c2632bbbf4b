//! The arguments of a grid's transposes and halo updates: parsed into the core's types
//! (arrays, ready marks, layouts), and in checking mode shared with the other ranks when
//! parsing fails, so that every rank raises.

use cudecomp_core as core;
use cudecomp_core::{
    Array, DataType, Direction, Error, EventRef, Exec, HaloSpec, ReadyMark, TransposeLayouts,
    TransposeOp,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyString, PyTuple};

use crate::args::{bool_triple, index_arg, int_triple, parse_dtype};
use crate::array::{resolve_dtype, ArrayArg};
use crate::errors::{invalid, IntoPy};
use crate::variant;

/// Array and layout arguments of one transpose.
pub(crate) struct TransposeCall<'a, 'py> {
    pub input: &'a Bound<'py, PyAny>,
    pub out: Option<&'a Bound<'py, PyAny>>,
    pub work: Option<&'a Bound<'py, PyAny>>,
    pub dtype: Option<&'a Bound<'py, PyAny>>,
    pub input_halo_extents: Option<&'a Bound<'py, PyAny>>,
    pub output_halo_extents: Option<&'a Bound<'py, PyAny>>,
    pub input_padding: Option<&'a Bound<'py, PyAny>>,
    pub output_padding: Option<&'a Bound<'py, PyAny>>,
    pub stream: Option<&'a Bound<'py, PyAny>>,
    pub input_ready: Option<&'a Bound<'py, PyAny>>,
    pub input_ready_axis: Option<&'a Bound<'py, PyAny>>,
    pub output_ready: Option<&'a Bound<'py, PyAny>>,
    pub output_ready_axis: Option<&'a Bound<'py, PyAny>>,
    /// `None`: the default, `True`.
    pub own_cells: Option<&'a Bound<'py, PyAny>>,
}

/// `input_ready` or `output_ready` (`name`): `(event, planes)` pairs; an event is an int
/// handle, or an object with an int `ptr` (CuPy) or `cuda_event` (PyTorch). TypeError for
/// anything else; the planes are checked by the core (collectively).
fn parse_ready(
    py: Python<'_>,
    v: Option<&Bound<'_, PyAny>>,
    name: &str,
) -> PyResult<Vec<ReadyMark>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let bad = |what: String| {
        PyTypeError::new_err(format!(
            "{name}: expected a sequence of (event, planes) pairs, an event being an int handle or an object with an int .ptr or .cuda_event, got {what}"
        ))
    };
    if v.is_instance_of::<PyString>() {
        return Err(bad(format!("the str {}", v.repr()?)));
    }
    let mut marks = Vec::new();
    for item in v.try_iter().map_err(|_| {
        bad(v
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default())
    })? {
        let item = item?;
        let pair: (Bound<'_, PyAny>, i64) = item
            .extract()
            .map_err(|_| bad(item.repr().map(|r| r.to_string()).unwrap_or_default()))?;
        let (e, planes) = pair;
        let handle = ["ptr", "cuda_event"]
            .iter()
            .find_map(|a| e.getattr(*a).ok().filter(|h| h.is_instance_of::<PyInt>()))
            .unwrap_or_else(|| e.clone());
        let h: i128 = handle.extract().map_err(|_| {
            bad(format!(
                "an event of type {}",
                e.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let h = u64::try_from(h).map_err(|_| {
            invalid(
                py,
                format!("{name}: expected a non-negative event handle, got {h}"),
            )
        })?;
        marks.push(ReadyMark {
            event: EventRef::from_handle(h),
            planes,
        });
    }
    Ok(marks)
}

/// Arguments of one halo update.
pub(crate) struct HaloCall<'a, 'py> {
    pub input: &'a Bound<'py, PyAny>,
    pub halo_extents: &'a Bound<'py, PyAny>,
    pub halo_periods: Option<&'a Bound<'py, PyAny>>,
    pub dim: &'a Bound<'py, PyAny>,
    pub padding: Option<&'a Bound<'py, PyAny>>,
    pub work: Option<&'a Bound<'py, PyAny>>,
    pub dtype: Option<&'a Bound<'py, PyAny>>,
    pub stream: Option<&'a Bound<'py, PyAny>>,
}

/// In checking mode (`CUDECOMP_CHECK_COLLECTIVES=1`), an argument error found here is
/// shared with the other ranks, which wait in the operation's agreement, so that they
/// raise too instead of hanging; the error itself is returned unchanged.
pub(crate) fn agreed<T>(
    py: Python<'_>,
    gd: &core::GridDesc,
    what: &str,
    ready: PyResult<T>,
) -> PyResult<T> {
    if let Err(e) = &ready {
        if gd.checks_collectives() {
            let local = Err(Error::InvalidUsage(e.to_string()));
            // The agreement fails (this rank failed); its own error is the one to raise.
            let _ = py.detach(|| gd.agree(what, local));
        }
    }
    ready
}

/// A transpose's arguments, parsed.
pub(crate) struct PreparedTranspose<'py> {
    pub(crate) op: TransposeOp,
    pub(crate) input: Array,
    pub(crate) output: Array,
    /// The output object, returned to the caller.
    pub(crate) out_obj: Bound<'py, PyAny>,
    pub(crate) work: Option<Array>,
    pub(crate) exec: Exec,
    pub(crate) input_marks: Vec<ReadyMark>,
    pub(crate) input_axis: Option<usize>,
    pub(crate) output_marks: Vec<ReadyMark>,
    pub(crate) output_axis: Option<usize>,
}

/// `True` or `False` (NumPy's too), nothing else (TypeError naming `what`).
pub(crate) fn strict_bool(v: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    if v.is_instance_of::<PyBool>() || v.get_type().name()? == "bool" {
        return v.is_truthy();
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected True or False, got {} ({})",
        v.repr()?,
        v.get_type().name()?
    )))
}

/// An operation's data array: one pencil (3-D) or a batch of pencils along a leading axis
/// (4-D); a sequence of arrays is refused with the form to use instead.
pub(crate) fn batch_array(
    py: Python<'_>,
    v: &Bound<'_, PyAny>,
    what: &'static str,
) -> PyResult<ArrayArg> {
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: a batch of fields is one array with a leading batch axis, shape (k, *array_shape) (stack the fields, or allocate the batch so), got a {}",
            v.get_type().name()?
        )));
    }
    let a = variant::array(py, v, what, true)?;
    if !matches!(a.shape.len(), 3 | 4) {
        return Err(invalid(
            py,
            format!(
                "{what}: expected a 3-dimensional array (one pencil) or a 4-dimensional one (a batch of pencils along its leading axis), got {} dimensions",
                a.shape.len()
            ),
        ));
    }
    Ok(a)
}

/// Parses a transpose's arguments (allocating `out` when omitted); the core checks them.
pub(crate) fn prepare_transpose<'py>(
    py: Python<'py>,
    gd: &core::GridDesc,
    direction: Direction,
    c: &TransposeCall<'_, 'py>,
) -> PyResult<PreparedTranspose<'py>> {
    let axis = |a: Option<&Bound<'py, PyAny>>, name: &str| {
        a.filter(|a| !a.is_none())
            .map(|a| index_arg(a, name))
            .transpose()
    };
    let input_marks = parse_ready(py, c.input_ready, "input_ready")?;
    let output_marks = parse_ready(py, c.output_ready, "output_ready")?;
    let input_axis = axis(c.input_ready_axis, "input_ready_axis")?;
    let output_axis = axis(c.output_ready_axis, "output_ready_axis")?;
    let own_cells = c
        .own_cells
        .map_or(Ok(true), |v| strict_bool(v, "own_cells"))?;
    let explicit = parse_dtype(py, c.dtype)?;
    let layouts = TransposeLayouts {
        input_halo: int_triple(py, c.input_halo_extents, "input_halo_extents")?,
        input_padding: int_triple(py, c.input_padding, "input_padding")?,
        output_halo: int_triple(py, c.output_halo_extents, "output_halo_extents")?,
        output_padding: int_triple(py, c.output_padding, "output_padding")?,
    };
    let input = batch_array(py, c.input, "input")?;
    let fields = match input.shape.as_slice() {
        [k, _, _, _] => *k,
        _ => 1,
    };
    let dtype: DataType = resolve_dtype(py, explicit, &[&input])?;
    let exec = variant::exec(py, c.stream, c.input)?;
    let out_obj = match c.out.filter(|o| !o.is_none()) {
        Some(o) => o.clone(),
        // A fresh output per call stays ordinary memory: a node-shared array costs more
        // to make and map than a single copy saves.
        None => {
            let (_, to) = direction.axes();
            let info = gd
                .grid()
                .pencil_info(
                    to as i64,
                    gd.rank(),
                    layouts.output_halo,
                    layouts.output_padding,
                )
                .py(py)?;
            let shape = info.array_shape();
            let shape = match fields {
                1 if input.shape.len() == 3 => shape.to_vec(),
                k => [&[k][..], &shape].concat(),
            };
            variant::allocate_output(py, c.input, shape, dtype, c.stream)?
        }
    };
    let out = batch_array(py, &out_obj, "out")?;
    resolve_dtype(py, Some(dtype), &[&out])?;
    let work = work_arg(py, c.work)?;
    let op = TransposeOp {
        direction,
        layouts,
        dtype,
        own_cells,
        fields,
    };
    // SAFETY: the array objects are referenced by the caller for the whole call and were
    // checked to be C-contiguous; device work is ordered on the operation's stream, which
    // the caller keeps alive as documented.
    let (input, output, work) = unsafe { (input.array(), out.array(), work.map(|w| w.array())) };
    Ok(PreparedTranspose {
        op,
        input,
        output,
        out_obj,
        work,
        exec,
        input_marks,
        input_axis,
        output_marks,
        output_axis,
    })
}

/// Parses a halo update's arguments; the core checks them, the array's shape even where
/// nothing moves.
pub(crate) fn prepare_halo(
    py: Python<'_>,
    axis: usize,
    c: &HaloCall<'_, '_>,
) -> PyResult<(HaloSpec, DataType, Array, Option<Array>, Exec)> {
    let explicit = parse_dtype(py, c.dtype)?;
    if c.halo_extents.is_none() {
        return Err(invalid(
            py,
            "halo_extents: expected 3 non-negative ints, got None".into(),
        ));
    }
    let spec = HaloSpec {
        axis,
        dim: index_arg(c.dim, "dim")?,
        halo: int_triple(py, Some(c.halo_extents), "halo_extents")?,
        periods: bool_triple(py, c.halo_periods, "halo_periods")?,
        padding: int_triple(py, c.padding, "padding")?,
    };
    let data = batch_array(py, c.input, "input")?;
    let dtype = resolve_dtype(py, explicit, &[&data])?;
    let work = work_arg(py, c.work)?;
    let exec = variant::exec(py, c.stream, c.input)?;
    // SAFETY: as in `prepare_transpose`.
    let (data, work) = unsafe { (data.array(), work.map(|w| w.array())) };
    Ok((spec, dtype, data, work, exec))
}

/// Parses the optional `work` argument (any shape, writable).
pub(crate) fn work_arg(py: Python<'_>, w: Option<&Bound<'_, PyAny>>) -> PyResult<Option<ArrayArg>> {
    let Some(w) = w.filter(|w| !w.is_none()) else {
        return Ok(None);
    };
    variant::array(py, w, "work", true).map(Some)
}
