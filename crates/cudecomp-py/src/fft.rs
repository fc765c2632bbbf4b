//! The local FFTs of the core ([`cudecomp_core::fft`]) on NumPy arrays: what
//! `cudecomp.fft` runs per rank with ``fft_library="rustfft"`` (the CPU variant's
//! default).

use cudecomp_core::fft::{self, Complex, Float, Options};
use cudecomp_core::DataType;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::array::{numpy_name, parse_interface, ArrayArg};
use crate::errors::{invalid, IntoPy};
use crate::handle::Handle;

/// Reads a C-contiguous NumPy array (any number of axes).
fn host_array(py: Python<'_>, v: &Bound<'_, PyAny>, what: &'static str) -> PyResult<ArrayArg> {
    let iface = v
        .getattr("__array_interface__")
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: expected a NumPy array, got {}",
                v.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?
        .cast_into::<PyDict>()?;
    let a = parse_interface(py, &iface, what, true)?;
    if a.dtype.is_none() {
        return Err(invalid(
            py,
            format!(
                "{what}: expected float32, float64, complex64 or complex128 data, got {:?}",
                a.typestr
            ),
        ));
    }
    let align = match a.dtype {
        Some(DataType::Double) | Some(DataType::DoubleComplex) => 8,
        _ => 4,
    };
    if a.ptr % align != 0 && a.nbytes() > 0 {
        return Err(invalid(
            py,
            format!("{what}: the array's data is not aligned to its element size"),
        ));
    }
    Ok(a)
}

fn shape_of(a: &ArrayArg) -> Vec<usize> {
    a.shape.iter().map(|&n| n.max(0) as usize).collect()
}

/// What one call transforms, checked; pointers as integers so that it can cross into
/// the thread that runs without the GIL.
struct Call {
    kind: Kind,
    input: usize,
    output: usize,
    /// Real-space shape (c2c: the shape).
    shape: Vec<usize>,
    axes: Vec<usize>,
    double: bool,
    inverse: bool,
    opts: Options,
    in_place: bool,
    overwrite: bool,
    in_len: usize,
    out_len: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    C2c,
    R2c,
    C2r,
}

fn run<T: Float>(c: &Call) -> cudecomp_core::Result<()> {
    let (inp, out) = (c.input, c.output);
    // SAFETY (every block below): the arrays were read from live NumPy arrays that the
    // caller holds for the whole call; their element types, lengths and alignment were
    // checked; the output is writable; input and output are the same memory only for
    // an in-place c2c, and otherwise do not overlap (checked).
    match c.kind {
        Kind::C2c if c.in_place => {
            // SAFETY: see above.
            let d = unsafe { std::slice::from_raw_parts_mut(out as *mut Complex<T>, c.out_len) };
            fft::c2c_in_place(d, &c.shape, &c.axes, c.inverse, c.opts)
        }
        Kind::C2c => {
            // SAFETY: see above.
            let (s, d) = unsafe {
                (
                    std::slice::from_raw_parts(inp as *const Complex<T>, c.in_len),
                    std::slice::from_raw_parts_mut(out as *mut Complex<T>, c.out_len),
                )
            };
            fft::c2c(s, d, &c.shape, &c.axes, c.inverse, c.opts)
        }
        Kind::R2c => {
            // SAFETY: see above.
            let (s, d) = unsafe {
                (
                    std::slice::from_raw_parts(inp as *const T, c.in_len),
                    std::slice::from_raw_parts_mut(out as *mut Complex<T>, c.out_len),
                )
            };
            fft::r2c(s, d, &c.shape, &c.axes, c.opts)
        }
        Kind::C2r if c.overwrite => {
            // SAFETY: see above; the input was checked writable.
            let (s, d) = unsafe {
                (
                    std::slice::from_raw_parts_mut(inp as *mut Complex<T>, c.in_len),
                    std::slice::from_raw_parts_mut(out as *mut T, c.out_len),
                )
            };
            fft::c2r_overwriting(s, d, &c.shape, &c.axes, c.opts)
        }
        Kind::C2r => {
            // SAFETY: see above.
            let (s, d) = unsafe {
                (
                    std::slice::from_raw_parts(inp as *const Complex<T>, c.in_len),
                    std::slice::from_raw_parts_mut(out as *mut T, c.out_len),
                )
            };
            fft::c2r(s, d, &c.shape, &c.axes, c.opts)
        }
    }
}

/// Local FFT of a NumPy array into another (or in place), on the core's transforms.
///
/// ``kind`` is ``"c2c"``, ``"r2c"`` or ``"c2r"``; ``axes`` the axes to transform (for
/// the real kinds the last must be the array's last, the halved one); ``inverse`` the
/// direction of ``c2c``; every output value is multiplied by ``scale``; ``threads``
/// above 1 runs on that many threads. ``output`` has the input's shape (``c2c``), its
/// shape with the last axis halved to ``n // 2 + 1`` (``r2c``), or the real shape whose
/// last axis halves to the input's (``c2r``). A ``c2c`` whose output is its input runs
/// in place; ``overwrite`` lets ``c2r`` use its input as scratch. C-contiguous arrays of
/// one precision only; the GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (kind, input, output, axes, inverse = false, scale = 1.0, threads = 1, overwrite = false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _local_fft(
    py: Python<'_>,
    kind: &str,
    input: &Bound<'_, PyAny>,
    output: &Bound<'_, PyAny>,
    axes: Vec<i64>,
    inverse: bool,
    scale: f64,
    threads: usize,
    overwrite: bool,
) -> PyResult<()> {
    let kind = match kind {
        "c2c" => Kind::C2c,
        "r2c" => Kind::R2c,
        "c2r" => Kind::C2r,
        _ => {
            return Err(invalid(
                py,
                format!("kind {kind:?}: expected 'c2c', 'r2c' or 'c2r'"),
            ))
        }
    };
    let a = host_array(py, input, "input")?;
    let o = host_array(py, output, "output")?;
    let read_only = |x: &ArrayArg| -> PyResult<()> {
        match x.readonly {
            true => Err(invalid(
                py,
                format!("{}: expected a writable array, got a read-only one", x.what),
            )),
            false => Ok(()),
        }
    };
    read_only(&o)?;
    if overwrite && kind == Kind::C2r {
        read_only(&a)?;
    }
    let (ad, od) = (a.dtype, o.dtype);
    let complex = |d: Option<DataType>| {
        matches!(
            d,
            Some(DataType::FloatComplex) | Some(DataType::DoubleComplex)
        )
    };
    let double = matches!(ad, Some(DataType::Double) | Some(DataType::DoubleComplex));
    let (want_in_complex, want_out_complex) = match kind {
        Kind::C2c => (true, true),
        Kind::R2c => (false, true),
        Kind::C2r => (true, false),
    };
    let same_precision =
        double == matches!(od, Some(DataType::Double) | Some(DataType::DoubleComplex));
    if complex(ad) != want_in_complex || complex(od) != want_out_complex || !same_precision {
        let name = |d: Option<DataType>| d.map_or("?", numpy_name);
        return Err(PyTypeError::new_err(format!(
            "{}: input {} and output {} do not fit (c2c: one complex type; r2c: float32 -> complex64 or float64 -> complex128; c2r the reverse)",
            match kind {
                Kind::C2c => "c2c",
                Kind::R2c => "r2c",
                Kind::C2r => "c2r",
            },
            name(ad),
            name(od)
        )));
    }
    let (ashape, oshape) = (shape_of(&a), shape_of(&o));
    let nd = ashape.len();
    let mut ax = Vec::with_capacity(axes.len());
    for &v in &axes {
        let w = if v < 0 { v + nd as i64 } else { v };
        if w < 0 || w >= nd as i64 {
            return Err(invalid(
                py,
                format!("axes {axes:?}: axis {v} is out of range for an array of {nd} axes"),
            ));
        }
        ax.push(w as usize);
    }
    let shape = if kind == Kind::C2r {
        oshape.clone()
    } else {
        ashape.clone()
    };
    let halved_ok = |real: &[usize], cplx: &[usize]| {
        real.len() == cplx.len()
            && !real.is_empty()
            && real[..nd - 1] == cplx[..nd - 1]
            && real[nd - 1] / 2 + 1 == cplx[nd - 1]
    };
    let fits = match kind {
        Kind::C2c => ashape == oshape,
        Kind::R2c => halved_ok(&ashape, &oshape),
        Kind::C2r => halved_ok(&oshape, &ashape),
    };
    if !fits {
        return Err(invalid(
            py,
            format!(
                "output: shape {oshape:?} does not fit input shape {ashape:?} for this transform (r2c halves the last axis to n // 2 + 1, c2r restores it)"
            ),
        ));
    }
    let (ab, ob) = (a.nbytes(), o.nbytes());
    let in_place = a.ptr == o.ptr && ab > 0;
    let overlap = a.ptr < o.ptr + ob && o.ptr < a.ptr + ab;
    if overlap && !(in_place && kind == Kind::C2c) {
        return Err(invalid(
            py,
            "output: overlaps the input (only a c2c transform runs in place, with the output the input itself)".into(),
        ));
    }
    let call = Call {
        kind,
        input: a.ptr,
        output: o.ptr,
        shape,
        axes: ax,
        double,
        inverse,
        opts: Options {
            scale,
            threads: threads.max(1),
        },
        in_place,
        overwrite,
        in_len: ab / a.itemsize.max(1),
        out_len: ob / o.itemsize.max(1),
    };
    py.detach(move || {
        if call.double {
            run::<f64>(&call)
        } else {
            run::<f32>(&call)
        }
    })
    .py(py)
}

/// Cosine or sine transform of a real NumPy array in place along ``axis``, on the core's transforms.
///
/// ``kind`` is ``"dct1"`` ... ``"dct4"`` or ``"dst1"`` ... ``"dst4"``; ``inverse`` runs
/// ``scipy.fft.idct`` (``idst``) instead of ``dct`` (``dst``); ``norm`` is
/// ``scipy.fft``'s (``"backward"``, ``"ortho"``, ``"forward"``); ``threads`` above 1 runs
/// on that many threads. A writable C-contiguous float32 or float64 array (a complex
/// array's values as real ones with a last axis of 2 transform its real and imaginary
/// parts); the GIL is released while it runs. ``batch``: the array's leading axis is a
/// batch of fields, each transformed exactly as alone (``axis`` counts that axis).
#[pyfunction]
#[pyo3(signature = (kind, array, axis, inverse = false, norm = "backward", threads = 1, batch = false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _local_r2r(
    py: Python<'_>,
    kind: &str,
    array: &Bound<'_, PyAny>,
    axis: i64,
    inverse: bool,
    norm: &str,
    threads: usize,
    batch: bool,
) -> PyResult<()> {
    let Some(kind) = fft::R2r::from_name(kind) else {
        let names: Vec<&str> = fft::R2r::ALL.iter().map(|k| k.name()).collect();
        return Err(invalid(
            py,
            format!("kind {kind:?}: expected one of {names:?}"),
        ));
    };
    let norm = match norm {
        "backward" => fft::Norm::Backward,
        "ortho" => fft::Norm::Ortho,
        "forward" => fft::Norm::Forward,
        _ => {
            return Err(invalid(
                py,
                format!("norm {norm:?}: expected 'backward', 'ortho' or 'forward'"),
            ))
        }
    };
    let a = host_array(py, array, "array")?;
    if a.readonly {
        return Err(invalid(
            py,
            "array: expected a writable array, got a read-only one".into(),
        ));
    }
    let double = match a.dtype {
        Some(DataType::Double) => true,
        Some(DataType::Float) => false,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "array: expected float32 or float64 values, got {:?}",
                a.typestr
            )))
        }
    };
    let mut shape = shape_of(&a);
    let nd = shape.len() as i64;
    let ax = if axis < 0 { axis + nd } else { axis };
    if ax < 0 || ax >= nd || (batch && ax == 0) {
        return Err(invalid(
            py,
            format!(
                "axis {axis}: out of range for an array of {nd} axes{}",
                if batch {
                    " (the first is the batch's)"
                } else {
                    ""
                }
            ),
        ));
    }
    let (fields, ax) = match batch {
        true => (shape.remove(0), ax as usize - 1),
        false => (1, ax as usize),
    };
    let (ptr, len) = (a.ptr, a.nbytes() / a.itemsize.max(1));
    let threads = threads.max(1);
    py.detach(move || {
        // SAFETY: the array is writable, C-contiguous, aligned (checked) and of `len`
        // elements; the caller keeps it alive and untouched for the call.
        unsafe {
            if double {
                let d = std::slice::from_raw_parts_mut(ptr as *mut f64, len);
                fft::r2r_fields(d, fields, &shape, ax, kind, inverse, norm, threads)
            } else {
                let d = std::slice::from_raw_parts_mut(ptr as *mut f32, len);
                fft::r2r_fields(d, fields, &shape, ax, kind, inverse, norm, threads)
            }
        }
    })
    .py(py)
}

/// Threads this rank uses for host work (collective the first time on a handle; the
/// handle's grids have computed it already): ``CUDECOMP_HOST_THREADS``, or the cores it
/// may run on shared among the ranks of its node.
#[pyfunction]
pub(crate) fn _host_threads(py: Python<'_>, handle: &Handle) -> PyResult<usize> {
    let h = handle.live(py)?;
    py.detach(|| h.host_threads()).py(py)
}
