//! Cosine and sine transforms of types 2 and 3 of real rows, two rows at a time: each
//! pair is the real and imaginary parts of one complex FFT of RustFFT's.
//!
//! A DCT-II of `n` points is the FFT of the input reordered (even-indexed elements
//! ascending, then odd-indexed ones descending), each output `k` being twice the real
//! part of the spectrum at `k` times `exp(-i pi k / 2n)` (Makhoul's algorithm). The
//! spectra of two real rows are the even and odd parts of the spectrum of the complex
//! row that holds them as its real and imaginary parts, so one complex FFT serves both.
//! The DCT-III runs the same steps backwards: each row's half spectrum is rebuilt from its
//! inputs at `k` and `n - k`, the two spectra combined into one complex row, one inverse
//! FFT. The sine transforms are the cosine ones of the input with alternating signs, read
//! backwards, which the reordering folds in.

use std::sync::Arc;

use rustfft::num_complex::Complex;
use rustfft::Fft;

use super::exec::zero;
use super::Float;
use crate::{Error, Result};

/// One length's type-II or type-III transform of pairs of rows.
pub(super) struct Pairs<T: Float> {
    n: usize,
    fft: Arc<dyn Fft<T>>,
    /// `exp(-i pi k / 2n)` for `k < n`.
    twiddle: Vec<Complex<T>>,
    sine: bool,
    /// Type III (the inverse direction of the FFT).
    three: bool,
    /// Factor of every output value.
    scale: T,
}

/// A worker's buffers for [`Pairs::apply`].
pub(super) struct PairWork<T> {
    row: Vec<Complex<T>>,
    fft: Vec<Complex<T>>,
    spare: Vec<T>,
}

impl<T: Float> Pairs<T> {
    /// The transform of `n` points (`sine`: a DST; `three`: of type III) with every
    /// output multiplied by `scale` (`scipy.fft`'s unnormalised transform otherwise).
    pub(super) fn new(n: usize, sine: bool, three: bool, scale: f64) -> Result<Self> {
        let fft = super::planners::<T>()?.complex(n, three);
        let cast = |v: f64| {
            T::from_f64(v)
                .ok_or_else(|| Error::Internal(format!("r2r: {v} does not fit the element type")))
        };
        let twiddle = (0..n)
            .map(|k| {
                let a = -std::f64::consts::PI * k as f64 / (2 * n) as f64;
                Ok(Complex::new(cast(a.cos())?, cast(a.sin())?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Pairs {
            n,
            fft,
            twiddle,
            sine,
            three,
            scale: cast(scale)?,
        })
    }

    /// Buffers for one worker.
    pub(super) fn work(&self) -> PairWork<T> {
        PairWork {
            row: vec![zero(); BATCH * self.n],
            fft: vec![zero(); self.fft.get_inplace_scratch_len()],
            spare: vec![T::zero(); self.n],
        }
    }

    /// Transforms each row of `rows` (whole rows of `n` points) in place: up to `BATCH`
    /// pairs packed, one FFT call over them, unpacked.
    pub(super) fn apply(&self, rows: &mut [T], work: &mut PairWork<T>) {
        let n = self.n;
        let mut spare = std::mem::take(&mut work.spare);
        for group in rows.chunks_mut(2 * BATCH * n) {
            let pairs = group.len().div_ceil(2 * n);
            let z = &mut work.row[..pairs * n];
            for (p, zp) in z.chunks_exact_mut(n).enumerate() {
                let (a, b) = split(group, p, n, &mut spare);
                if self.three {
                    self.pack_three(a, b, zp);
                } else {
                    self.pack_two(a, b, zp);
                }
            }
            self.fft.process_with_scratch(z, &mut work.fft);
            for (p, zp) in z.chunks_exact(n).enumerate() {
                let (a, b) = split(group, p, n, &mut spare);
                if self.three {
                    self.unpack_three(zp, a, b);
                } else {
                    self.unpack_two(zp, a, b);
                }
            }
        }
        work.spare = spare;
    }

    /// The reordered pair `(a, b)` as one complex row; the odd-indexed elements (placed
    /// last) change sign in a sine transform.
    fn pack_two(&self, a: &[T], b: &[T], z: &mut [Complex<T>]) {
        let n = self.n;
        let h = n.div_ceil(2);
        let odd = if self.sine { -T::one() } else { T::one() };
        let (even, rest) = z.split_at_mut(h);
        for (m, v) in even.iter_mut().enumerate() {
            *v = Complex::new(a[2 * m], b[2 * m]);
        }
        for (i, v) in rest.iter_mut().enumerate() {
            let j = 2 * (n - h - i) - 1;
            *v = Complex::new(odd * a[j], odd * b[j]);
        }
    }

    /// Each row's outputs from the pair's spectrum `z`, twiddled; a sine transform's
    /// read backwards.
    fn unpack_two(&self, z: &[Complex<T>], a: &mut [T], b: &mut [T]) {
        let n = self.n;
        let scale = self.scale;
        let at = |k: usize| {
            combine_two(
                self.twiddle[k],
                z[k],
                z[if k == 0 { 0 } else { n - k }].conj(),
                scale,
            )
        };
        // Separate loops for the two writing orders keep the branch out of the inner loop.
        if self.sine {
            for (k, (ak, bk)) in a.iter_mut().rev().zip(b.iter_mut().rev()).enumerate() {
                (*ak, *bk) = at(k);
            }
        } else {
            for (k, (ak, bk)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
                (*ak, *bk) = at(k);
            }
        }
    }

    /// The pair's half spectra (from each row's inputs at `k` and `n - k`, a sine
    /// transform's read backwards) combined into one complex row: with `w` the conjugate
    /// twiddle, `w (a_k - i a_{n-k}) + i w (b_k - i b_{n-k})`.
    fn pack_three(&self, a: &[T], b: &[T], z: &mut [Complex<T>]) {
        let n = self.n;
        let (first, rest) = z.split_at_mut(1);
        let twiddle = &self.twiddle[1..];
        // Separate loops for the two reading orders keep the branch out of the inner loop.
        if self.sine {
            first[0] = Complex::new(a[n - 1], b[n - 1]);
            for (i, (v, w)) in rest.iter_mut().zip(twiddle).enumerate() {
                let k = i + 1;
                *v = combine_three(*w, a[n - 1 - k], a[k - 1], b[n - 1 - k], b[k - 1]);
            }
        } else {
            first[0] = Complex::new(a[0], b[0]);
            for (i, (v, w)) in rest.iter_mut().zip(twiddle).enumerate() {
                let k = i + 1;
                *v = combine_three(*w, a[k], a[n - k], b[k], b[n - k]);
            }
        }
    }

    /// The pair's rows from the inverse FFT `z`: the reordering undone, the odd-indexed
    /// elements of a sine transform's change sign.
    fn unpack_three(&self, z: &[Complex<T>], a: &mut [T], b: &mut [T]) {
        let n = self.n;
        let h = n.div_ceil(2);
        let odd = if self.sine { -self.scale } else { self.scale };
        let (even, rest) = z.split_at(h);
        for (m, v) in even.iter().enumerate() {
            a[2 * m] = v.re * self.scale;
            b[2 * m] = v.im * self.scale;
        }
        for (i, v) in rest.iter().enumerate() {
            let j = 2 * (n - h - i) - 1;
            a[j] = v.re * odd;
            b[j] = v.im * odd;
        }
    }
}

/// Output `k` of both rows of [`Pairs::unpack_two`] from the spectrum at `k` and the
/// conjugate of the spectrum at `n - k`, for the twiddle `t`.
#[inline(always)]
fn combine_two<T: Float>(t: Complex<T>, zk: Complex<T>, zr: Complex<T>, scale: T) -> (T, T) {
    let (p, q) = (zk + zr, zk - zr);
    (
        (t.re * p.re - t.im * p.im) * scale,
        (t.re * q.im + t.im * q.re) * scale,
    )
}

/// One element of [`Pairs::pack_three`] for the twiddle `t`:
/// `conj(t) (ak - i an) + i conj(t) (bk - i bn)`.
#[inline(always)]
fn combine_three<T: Float>(t: Complex<T>, ak: T, an: T, bk: T, bn: T) -> Complex<T> {
    let (s, d) = (ak + bn, an - bk);
    Complex::new(t.re * s - t.im * d, -(t.re * d + t.im * s))
}

/// Pairs packed into one FFT call.
const BATCH: usize = 8;

/// Rows `2 p` and `2 p + 1` of `group` (rows of `n`), the second `spare` (zeroed) where
/// the group has no such row.
fn split<'a, T: Float>(
    group: &'a mut [T],
    p: usize,
    n: usize,
    spare: &'a mut [T],
) -> (&'a mut [T], &'a mut [T]) {
    let end = ((2 * p + 2) * n).min(group.len());
    let pair = &mut group[2 * p * n..end];
    if pair.len() == 2 * n {
        pair.split_at_mut(n)
    } else {
        spare.iter_mut().for_each(|v| *v = T::zero());
        (pair, spare)
    }
}
