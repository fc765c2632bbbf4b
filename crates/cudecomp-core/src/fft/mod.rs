//! Local batched FFTs of host arrays: the transforms `cudecomp.fft` runs on each rank's
//! pencils in the CPU variant, usable from Rust alone.
//!
//! Complex-to-complex ([`c2c`], [`c2c_in_place`]), real-to-complex ([`r2c`]) and
//! complex-to-real ([`c2r`], [`c2r_overwriting`]) transforms in single and double
//! precision ([`Float`]: `f32`, `f64`) over any axes of a C-contiguous array, batched
//! over the others. They run on RustFFT (and RealFFT for the real kinds), which picks
//! AVX, SSE or NEON code at run time, the even-length real kinds' own pass over each row
//! with AVX2/FMA where the CPU has it; plans are made once per length and precision and
//! cached for the process.
//!
//! Conventions, those of `numpy.fft`:
//! - `shape` lists the extents slowest axis first (a NumPy array's `shape`); axis
//!   `shape.len() - 1` is contiguous. Axes are indices into `shape`.
//! - The forward transform is `X[k] = sum_j x[j] exp(-2 pi i j k / n)`, the inverse has
//!   `+` in the exponent; neither normalises: every output is multiplied by
//!   [`Options::scale`] instead, within the transform (no separate pass over the array).
//!   [`Norm::scale`] gives the factor of `numpy.fft`'s `norm` argument.
//! - The real kinds transform the last axis of `shape` as real data, halved to
//!   `n / 2 + 1` complex values (the last of `axes` must be that axis); `shape` is the
//!   real array's. Complex-to-real ignores the imaginary parts of the values that must
//!   be real (index 0 and, for even `n`, index `n / 2` of the last axis, after the other
//!   axes' inverse transforms), as `numpy.fft.irfftn` does.
//!
//! How it runs: along the contiguous axis RustFFT transforms whole rows, 64 KiB of them
//! at a time, scaled while in cache. Along any other axis, tiles of neighbouring columns
//! are copied into a buffer of contiguous rows, transformed and written back. The array
//! is processed in blocks, one per index of the axes before the first transformed one
//! (e.g. per plane for a 2-D transform over the two fastest axes), so every pass over a
//! block finds it in cache. [`Options::threads`] above one runs blocks (or, where there
//! are fewer blocks than threads, the rows and tiles of each pass) on a pool of that
//! many threads; one thread runs on the caller's.
//!
//! ```
//! use cudecomp_core::fft::{self, Complex, Norm, Options};
//!
//! // 4 rows of 8 points: a batch of 1-D transforms along the contiguous axis.
//! let shape = [4, 8];
//! let x: Vec<Complex<f64>> = (0..32).map(|i| Complex::new(i as f64, 0.0)).collect();
//! let mut y = vec![Complex::default(); 32];
//! let forward = Options { scale: Norm::Backward.scale(false, 8), threads: 1 };
//! fft::c2c(&x, &mut y, &shape, &[1], false, forward)?;
//! assert!((y[0].re - 28.0).abs() < 1e-12); // the sum of row 0
//! let inverse = Options { scale: Norm::Backward.scale(true, 8), threads: 1 };
//! fft::c2c_in_place(&mut y, &shape, &[1], true, inverse)?;
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).norm() < 1e-12));
//! # Ok::<(), cudecomp_core::Error>(())
//! ```

mod exec;
mod plans;
mod r2r;
mod r2r_pairs;
mod real;
mod simd;

use std::any::Any;
use std::sync::OnceLock;

pub use r2r::{r2r, r2r_fields, R2r};
pub use rustfft::num_complex::Complex;

use crate::{invalid, Result};
use exec::{Job, Ptr};
use plans::Planners;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The real element types of the transforms: `f32` and `f64` (complex values are
/// [`Complex`] of them, laid out as NumPy's `complex64` and `complex128`).
pub trait Float: rustfft::FftNum + rustdct::DctNum + sealed::Sealed {}
impl Float for f32 {}
impl Float for f64 {}

/// The planners of `T`, one set per precision for the process.
fn planners<T: Float>() -> Result<&'static Planners<T>> {
    static F32: OnceLock<Planners<f32>> = OnceLock::new();
    static F64: OnceLock<Planners<f64>> = OnceLock::new();
    if let Some(p) = (&F32 as &dyn Any).downcast_ref::<OnceLock<Planners<T>>>() {
        return Ok(p.get_or_init(Planners::new));
    }
    if let Some(p) = (&F64 as &dyn Any).downcast_ref::<OnceLock<Planners<T>>>() {
        return Ok(p.get_or_init(Planners::new));
    }
    Err(crate::Error::Internal(
        "FFT: no planner for this element type".into(),
    ))
}

/// How a transform runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Factor applied to every output value (1: unnormalised); see [`Norm::scale`].
    pub scale: f64,
    /// Threads (at least 1). More than one runs on a pool of that many threads (made
    /// once per count and kept); give more only where the rank owns more than one core.
    pub threads: usize,
}

impl Default for Options {
    /// Unnormalised, one thread.
    fn default() -> Self {
        Options {
            scale: 1.0,
            threads: 1,
        }
    }
}

/// `numpy.fft`'s normalisation modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// The inverse transform scales by `1 / n` (NumPy's default).
    Backward,
    /// Both directions scale by `1 / sqrt(n)`.
    Ortho,
    /// The forward transform scales by `1 / n`.
    Forward,
}

impl Norm {
    /// The factor of a transform over `n` points in all (the product of the transformed
    /// axes' real-space extents) in the direction `inverse`.
    pub fn scale(self, inverse: bool, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match (self, inverse) {
            (Norm::Ortho, _) => 1.0 / n.sqrt(),
            (Norm::Backward, true) | (Norm::Forward, false) => 1.0 / n,
            _ => 1.0,
        }
    }
}

/// Checks a transform's shape, axes, buffer lengths and options; returns whether there
/// is nothing to do (an empty array).
fn check(
    what: &str,
    shape: &[usize],
    axes: &[usize],
    real: bool,
    lens: (usize, usize),
    expect: (usize, usize),
    opts: &Options,
) -> Result<bool> {
    if shape.is_empty() {
        invalid!("{what}: expected an array of at least one axis, got shape []");
    }
    if axes.is_empty() {
        invalid!("{what}: expected at least one axis to transform, got none");
    }
    for (i, &a) in axes.iter().enumerate() {
        if a >= shape.len() {
            invalid!(
                "{what}: axis {a} is out of range for an array of {} axes",
                shape.len()
            );
        }
        if axes[..i].contains(&a) {
            invalid!("{what}: axis {a} is given twice in {axes:?}");
        }
    }
    if real && axes.last() != Some(&(shape.len() - 1)) {
        invalid!(
            "{what}: the real axis (the last of axes {axes:?}) must be the contiguous one, {}",
            shape.len() - 1
        );
    }
    if opts.threads == 0 {
        invalid!("{what}: expected at least one thread, got 0");
    }
    if !opts.scale.is_finite() {
        invalid!("{what}: expected a finite scale, got {}", opts.scale);
    }
    if lens != expect {
        invalid!(
            "{what}: shape {shape:?} needs {} input and {} output values, got {} and {}",
            expect.0,
            expect.1,
            lens.0,
            lens.1
        );
    }
    Ok(shape.contains(&0))
}

fn halved(shape: &[usize]) -> usize {
    let mut n: usize = shape[..shape.len() - 1].iter().product();
    n *= shape[shape.len() - 1] / 2 + 1;
    n
}

/// Complex-to-complex transform of `input` into `output` (the same shape) along `axes`;
/// `inverse` selects the sign `+` in the exponent. `input` is only read.
pub fn c2c<T: Float>(
    input: &[Complex<T>],
    output: &mut [Complex<T>],
    shape: &[usize],
    axes: &[usize],
    inverse: bool,
    opts: Options,
) -> Result<()> {
    let n: usize = shape.iter().product();
    if check(
        "c2c",
        shape,
        axes,
        false,
        (input.len(), output.len()),
        (n, n),
        &opts,
    )? {
        return Ok(());
    }
    let job = Job::C2c {
        src: Ptr(input.as_ptr().cast_mut()),
        dst: Ptr(output.as_mut_ptr()),
        inverse,
    };
    // SAFETY: both slices hold the whole array (checked), are distinct borrows (so
    // disjoint), `input` is only read, and the borrows last until the transform is done.
    unsafe { exec::execute(planners::<T>()?, shape, axes, job, opts.scale, opts.threads) }
}

/// Complex-to-complex transform of `data` in place along `axes`.
pub fn c2c_in_place<T: Float>(
    data: &mut [Complex<T>],
    shape: &[usize],
    axes: &[usize],
    inverse: bool,
    opts: Options,
) -> Result<()> {
    let n: usize = shape.iter().product();
    if check(
        "c2c",
        shape,
        axes,
        false,
        (data.len(), data.len()),
        (n, n),
        &opts,
    )? {
        return Ok(());
    }
    let p = Ptr(data.as_mut_ptr());
    let job = Job::C2c {
        src: p,
        dst: p,
        inverse,
    };
    // SAFETY: `data` holds the whole array and is borrowed exclusively until the
    // transform is done; source and destination are the same memory (in place).
    unsafe { exec::execute(planners::<T>()?, shape, axes, job, opts.scale, opts.threads) }
}

/// Real-to-complex (forward) transform of the real array `input` of `shape` into
/// `output`, whose last axis is halved to `shape[last] / 2 + 1`: along the last axis as
/// real data, then along the other `axes`. `input` is only read.
pub fn r2c<T: Float>(
    input: &[T],
    output: &mut [Complex<T>],
    shape: &[usize],
    axes: &[usize],
    opts: Options,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let nc = if shape.is_empty() { 0 } else { halved(shape) };
    if check(
        "r2c",
        shape,
        axes,
        true,
        (input.len(), output.len()),
        (n, nc),
        &opts,
    )? {
        return Ok(());
    }
    let job = Job::R2c {
        src: Ptr(input.as_ptr().cast_mut()),
        dst: Ptr(output.as_mut_ptr()),
    };
    // SAFETY: both slices hold their whole arrays (checked), are distinct borrows, the
    // input is only read (RealFFT works on copies of its rows).
    unsafe { exec::execute(planners::<T>()?, shape, axes, job, opts.scale, opts.threads) }
}

/// Complex-to-real (inverse) transform of the half spectrum `input` into the real
/// array `output` of `shape`: along the other `axes`, then along the last axis into
/// real data. `input` is only read (a transform over several axes works on a copy of
/// each block; [`c2r_overwriting`] spares it).
pub fn c2r<T: Float>(
    input: &[Complex<T>],
    output: &mut [T],
    shape: &[usize],
    axes: &[usize],
    opts: Options,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let nc = if shape.is_empty() { 0 } else { halved(shape) };
    if check(
        "c2r",
        shape,
        axes,
        true,
        (input.len(), output.len()),
        (nc, n),
        &opts,
    )? {
        return Ok(());
    }
    let job = Job::C2r {
        src: Ptr(input.as_ptr().cast_mut()),
        dst: Ptr(output.as_mut_ptr()),
        destroy: false,
    };
    // SAFETY: both slices hold their whole arrays, are distinct borrows; with `destroy`
    // false the input is only read.
    unsafe { exec::execute(planners::<T>()?, shape, axes, job, opts.scale, opts.threads) }
}

/// [`c2r`] that may overwrite `input` (its contents afterwards are unspecified): no
/// copies of the input's rows or blocks.
pub fn c2r_overwriting<T: Float>(
    input: &mut [Complex<T>],
    output: &mut [T],
    shape: &[usize],
    axes: &[usize],
    opts: Options,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let nc = if shape.is_empty() { 0 } else { halved(shape) };
    if check(
        "c2r",
        shape,
        axes,
        true,
        (input.len(), output.len()),
        (nc, n),
        &opts,
    )? {
        return Ok(());
    }
    let job = Job::C2r {
        src: Ptr(input.as_mut_ptr()),
        dst: Ptr(output.as_mut_ptr()),
        destroy: true,
    };
    // SAFETY: both slices hold their whole arrays, are distinct exclusive borrows; the
    // input may be overwritten.
    unsafe { exec::execute(planners::<T>()?, shape, axes, job, opts.scale, opts.threads) }
}

#[cfg(test)]
mod tests;
