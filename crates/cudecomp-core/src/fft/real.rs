//! Real-to-complex and complex-to-real passes along the contiguous axis.
//!
//! An even length `n = 2m` runs as a batch of complex `m`-point transforms: a real row
//! is `m` complex values `z[j] = x[2j] + i x[2j+1]` in memory already, so whole units of
//! rows go through RustFFT at once, and one pass over each row in cache separates the
//! even and odd halves with the twiddles `w^k = exp(-2 pi i k / n)` (the norm's scale
//! folded into the table): forward `X[k] = (a + b) / 2 - i w^k (a - b) / 2` with
//! `a = Z[k]`, `b = conj(Z[m - k])`; inverse `Z[k] = (a + b) + i conj(w^k) (a - b)` with
//! `a = X[k]`, `b = conj(X[m - k])`, whose `m`-point inverse is `z` times `n`. The
//! inverse reads its input without writing it. Odd lengths use RealFFT row by row.

use std::sync::Arc;

use realfft::{ComplexToReal, FftError, RealToComplex};
use rustfft::num_complex::Complex;
use rustfft::Fft;

use super::exec::{for_units, rows_per_unit, scale_all, scale_real, zero, Ptr};
use super::plans::Planners;
use super::{simd, Float};
use crate::{Error, Result};

/// The plan of a real pass of `n` points in one direction.
pub(super) enum RealPlan<T: Float> {
    /// Even `n`: the `n / 2`-point complex plan and the twiddles, scale included.
    Even {
        fft: Arc<dyn Fft<T>>,
        /// Forward: `-i s w^k / 2`; inverse: `i s conj(w^k)`, for `k` in `0..=m`.
        tw: Vec<Complex<T>>,
        /// Forward `s / 2`, inverse `s`.
        half: T,
    },
    /// Odd `n`, forward; the scale applied after each row.
    OddR2c(Arc<dyn RealToComplex<T>>, Option<T>),
    /// Odd `n`, inverse; the scale applied after each row.
    OddC2r(Arc<dyn ComplexToReal<T>>, Option<T>),
}

fn cast<T: Float>(v: f64) -> Result<T> {
    T::from_f64(v)
        .ok_or_else(|| Error::InvalidUsage(format!("FFT scale {v} does not fit the element type")))
}

impl<T: Float> RealPlan<T> {
    /// The plan of `n` real points, forward (r2c) or inverse (c2r), scaled by `scale`.
    pub(super) fn new(planners: &Planners<T>, n: usize, inverse: bool, scale: f64) -> Result<Self> {
        if n % 2 == 1 {
            let s = if scale == 1.0 {
                None
            } else {
                Some(cast(scale)?)
            };
            return Ok(if inverse {
                RealPlan::OddC2r(planners.c2r(n), s)
            } else {
                RealPlan::OddR2c(planners.r2c(n), s)
            });
        }
        let m = n / 2;
        let mut tw = Vec::with_capacity(m + 1);
        for k in 0..=m {
            let ang = -2.0 * std::f64::consts::PI * k as f64 / n as f64;
            let (sin, cos) = ang.sin_cos();
            // Forward: -i s w / 2 = s/2 (sin - i cos); inverse: i s conj(w) = s (sin + i cos).
            let (re, im) = if inverse {
                (scale * sin, scale * cos)
            } else {
                (0.5 * scale * sin, -0.5 * scale * cos)
            };
            tw.push(Complex::new(cast(re)?, cast(im)?));
        }
        Ok(RealPlan::Even {
            fft: planners.complex(m, inverse),
            tw,
            half: cast(if inverse { scale } else { 0.5 * scale })?,
        })
    }
}

fn real_error(e: FftError) -> Error {
    Error::Internal(format!("real FFT: {e}"))
}

/// A real-to-complex pass over `rows` contiguous rows of `n` reals into rows of
/// `n / 2 + 1` complex values; `src` is never written.
///
/// # Safety
/// `src` readable for `rows * n` reals, `dst` writable for `rows * (n / 2 + 1)` complex
/// values, not overlapping; nothing else accesses them meanwhile.
pub(super) unsafe fn r2c_pass<T: Float>(
    src: Ptr<T>,
    dst: Ptr<Complex<T>>,
    rows: usize,
    n: usize,
    plan: &RealPlan<T>,
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    let nc = n / 2 + 1;
    let rpu = rows_per_unit(n * std::mem::size_of::<T>());
    match plan {
        RealPlan::Even { fft, tw, half } => {
            let m = n / 2;
            let scratch_len = fft.get_immutable_scratch_len();
            for_units(
                rows.div_ceil(rpu),
                pool,
                || vec![zero::<T>(); scratch_len],
                |scratch, u| {
                    let r0 = u * rpu;
                    for r in r0..rows.min(r0 + rpu) {
                        // SAFETY: row r of the real input, read as complex pairs (a complex
                        // value is two reals, alignment of one), and row r of the output;
                        // units write disjoint rows.
                        let (s, d) = unsafe {
                            (
                                std::slice::from_raw_parts(src.at(r * n).cast::<Complex<T>>(), m),
                                std::slice::from_raw_parts_mut(dst.at(r * nc), nc),
                            )
                        };
                        fft.process_immutable_with_scratch(s, &mut d[..m], scratch);
                        split_forward_in_place(d, tw, *half);
                    }
                    Ok(())
                },
            )
        }
        RealPlan::OddR2c(plan, scale) => for_units(
            rows.div_ceil(rpu),
            pool,
            || (vec![T::zero(); n], plan.make_scratch_vec()),
            |(row, scratch), u| {
                let r0 = u * rpu;
                for r in r0..rows.min(r0 + rpu) {
                    // SAFETY: row r of both arrays, within the caller's bounds; rows of
                    // different units are disjoint.
                    let (s, d) = unsafe {
                        (
                            std::slice::from_raw_parts(src.at(r * n), n),
                            std::slice::from_raw_parts_mut(dst.at(r * nc), nc),
                        )
                    };
                    // RealFFT uses its input as scratch: the row is copied first (in cache).
                    row.copy_from_slice(s);
                    plan.process_with_scratch(row, d, scratch)
                        .map_err(real_error)?;
                    scale_all(d, *scale);
                }
                Ok(())
            },
        ),
        RealPlan::OddC2r(..) => Err(Error::Internal(
            "FFT: an inverse plan in a forward pass".into(),
        )),
    }
}

/// The half spectrum of a row in place: `x[..m]` holds its `m`-point transform `Z` on
/// entry, the `m + 1` values `X` on return (see the module's doc). Each pair `k`,
/// `m - k` is read before either is written: for `m - k`, `a + b` is the conjugate of
/// `k`'s and `a - b` its negated conjugate.
fn split_forward_in_place<T: Float>(x: &mut [Complex<T>], tw: &[Complex<T>], half: T) {
    if simd::split_forward(x, tw, half) {
        return;
    }
    let m = x.len() - 1;
    let z0 = x[0];
    let s = half + half;
    // k = 0 and k = m: a = b* = Z[0].
    x[0] = Complex::new((z0.re + z0.im) * s, T::zero());
    x[m] = Complex::new((z0.re - z0.im) * s, T::zero());
    simd::split_pairs(x, tw, half, 1);
}

/// The `m`-point input `z` of the inverse from the half spectrum `x` of a row, ignoring
/// the imaginary parts of `x[0]` and `x[m]` (pairs as in [`split_forward_in_place`]).
fn merge_inverse<T: Float>(x: &[Complex<T>], z: &mut [Complex<T>], tw: &[Complex<T>], s: T) {
    if simd::merge_inverse(x, z, tw, s) {
        return;
    }
    let m = z.len();
    let (a, b) = (x[0].re, x[m].re);
    // k = 0: (a + b) + i (a - b), both real.
    z[0] = Complex::new((a + b) * s, (a - b) * s);
    simd::merge_pairs(x, z, tw, s, 1);
}

/// A complex-to-real pass over `rows` contiguous rows of `n / 2 + 1` complex values
/// into rows of `n` reals. The imaginary parts of the first value of each row and (even
/// `n`) the last are ignored, as `numpy.fft.irfft` ignores them. Even lengths only read
/// `src`; odd ones copy each row first unless `destroy` lets them overwrite it.
///
/// # Safety
/// `src` readable (and writable when `destroy`) for `rows * (n / 2 + 1)` complex values,
/// `dst` writable for `rows * n` reals, not overlapping; nothing else accesses them
/// meanwhile.
pub(super) unsafe fn c2r_pass<T: Float>(
    src: Ptr<Complex<T>>,
    dst: Ptr<T>,
    rows: usize,
    n: usize,
    plan: &RealPlan<T>,
    destroy: bool,
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    let nc = n / 2 + 1;
    let rpu = rows_per_unit(n * std::mem::size_of::<T>());
    match plan {
        RealPlan::Even { fft, tw, half } => {
            let m = n / 2;
            let scratch_len = fft.get_outofplace_scratch_len();
            for_units(
                rows.div_ceil(rpu),
                pool,
                || (vec![zero::<T>(); m], vec![zero::<T>(); scratch_len]),
                |(z, scratch), u| {
                    let r0 = u * rpu;
                    for r in r0..rows.min(r0 + rpu) {
                        // SAFETY: row r of the input, only read, and row r of the real
                        // output written as complex pairs; units write disjoint rows.
                        let (s, d) = unsafe {
                            (
                                std::slice::from_raw_parts(src.at(r * nc), nc),
                                std::slice::from_raw_parts_mut(
                                    dst.at(r * n).cast::<Complex<T>>(),
                                    m,
                                ),
                            )
                        };
                        merge_inverse(s, z, tw, *half);
                        fft.process_outofplace_with_scratch(z, d, scratch);
                    }
                    Ok(())
                },
            )
        }
        RealPlan::OddC2r(plan, scale) => for_units(
            rows.div_ceil(rpu),
            pool,
            || {
                let row = if destroy {
                    Vec::new()
                } else {
                    vec![zero::<T>(); nc]
                };
                (row, plan.make_scratch_vec())
            },
            |(row, scratch), u| {
                let r0 = u * rpu;
                for r in r0..rows.min(r0 + rpu) {
                    // SAFETY: row r of `dst`, within the caller's bounds; rows of
                    // different units are disjoint.
                    let d = unsafe { std::slice::from_raw_parts_mut(dst.at(r * n), n) };
                    let input: &mut [Complex<T>] = if destroy {
                        // SAFETY: row r of `src`, which the caller lets us overwrite.
                        unsafe { std::slice::from_raw_parts_mut(src.at(r * nc), nc) }
                    } else {
                        // SAFETY: row r of `src`, only read.
                        let s = unsafe { std::slice::from_raw_parts(src.at(r * nc), nc) };
                        row.copy_from_slice(s);
                        row
                    };
                    match plan.process_with_scratch(input, d, scratch) {
                        Ok(()) | Err(FftError::InputValues(..)) => {}
                        Err(e) => return Err(real_error(e)),
                    }
                    scale_real(d, *scale);
                }
                Ok(())
            },
        ),
        RealPlan::OddR2c(..) => Err(Error::Internal(
            "FFT: a forward plan in an inverse pass".into(),
        )),
    }
}
