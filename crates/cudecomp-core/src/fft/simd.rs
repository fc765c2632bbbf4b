//! AVX2/FMA kernels of the real passes' split (forward) and merge (inverse), chosen at run
//! time on x86-64 CPUs that have them.
//!
//! Each pairs a row's values `k` and `m - k` (see [`super::real`]); the portable code
//! walks the pairs one at a time, and the compiler cannot vectorise a loop that reads one
//! end of the row forwards and the other backwards. These kernels load a vector of
//! consecutive `k` and the matching vector from the far end, reverse the latter's values
//! in registers, and do the arithmetic of several pairs at once; the pairs left in the
//! middle of the row run through the portable code. They compute the same expressions in
//! the same order as the portable code, but with fused multiply-adds, so results agree
//! to rounding, not bit for bit.

use rustfft::num_complex::Complex;

use super::Float;

/// Runs the forward split of `x` (see [`super::real`]) with AVX2/FMA when `T` is `f32` or
/// `f64` and the CPU has them; returns whether it did.
pub(super) fn split_forward<T: Float>(x: &mut [Complex<T>], tw: &[Complex<T>], half: T) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !x86::usable() || x.len() < 2 || tw.len() < x.len() {
            return false;
        }
        if let (Some(x), Some(tw), Some(h)) = (as_f64_mut(x), as_f64(tw), scalar_f64(half)) {
            // SAFETY: the CPU has AVX2 and FMA (checked above); `tw` holds `x.len()`
            // values at least.
            unsafe { x86::split_f64(x, tw, h) };
            return true;
        }
        if let (Some(x), Some(tw), Some(h)) = (as_f32_mut(x), as_f32(tw), scalar_f32(half)) {
            // SAFETY: as above.
            unsafe { x86::split_f32(x, tw, h) };
            return true;
        }
    }
    let _ = (x, tw, half);
    false
}

/// Runs the inverse merge of `x` into `z` (see [`super::real`]) with AVX2/FMA when `T` is
/// `f32` or `f64` and the CPU has them; returns whether it did.
pub(super) fn merge_inverse<T: Float>(
    x: &[Complex<T>],
    z: &mut [Complex<T>],
    tw: &[Complex<T>],
    s: T,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let m = z.len();
        if !x86::usable() || m < 1 || x.len() < m + 1 || tw.len() < m + 1 {
            return false;
        }
        if let (Some(x), Some(z), Some(tw), Some(s)) =
            (as_f64(x), as_f64_mut(z), as_f64(tw), scalar_f64(s))
        {
            // SAFETY: the CPU has AVX2 and FMA (checked above); `x` and `tw` hold
            // `z.len() + 1` values at least.
            unsafe { x86::merge_f64(x, z, tw, s) };
            return true;
        }
        if let (Some(x), Some(z), Some(tw), Some(s)) =
            (as_f32(x), as_f32_mut(z), as_f32(tw), scalar_f32(s))
        {
            // SAFETY: as above.
            unsafe { x86::merge_f32(x, z, tw, s) };
            return true;
        }
    }
    let _ = (x, z, tw, s);
    false
}

/// `v` as `Complex<U>` values when `T` is `U`.
fn cast<T: Float, U: Float>(v: &[Complex<T>]) -> Option<&[Complex<U>]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<U>()).then(|| {
        // SAFETY: `T` and `U` are the same type, so the slices are the same.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<Complex<U>>(), v.len()) }
    })
}

/// `v` as mutable `Complex<U>` values when `T` is `U`.
fn cast_mut<T: Float, U: Float>(v: &mut [Complex<T>]) -> Option<&mut [Complex<U>]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<U>()).then(|| {
        // SAFETY: `T` and `U` are the same type; the borrow of `v` moves into the result.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<Complex<U>>(), v.len()) }
    })
}

fn as_f64<T: Float>(v: &[Complex<T>]) -> Option<&[Complex<f64>]> {
    cast(v)
}
fn as_f64_mut<T: Float>(v: &mut [Complex<T>]) -> Option<&mut [Complex<f64>]> {
    cast_mut(v)
}
fn as_f32<T: Float>(v: &[Complex<T>]) -> Option<&[Complex<f32>]> {
    cast(v)
}
fn as_f32_mut<T: Float>(v: &mut [Complex<T>]) -> Option<&mut [Complex<f32>]> {
    cast_mut(v)
}
fn scalar_f64<T: Float>(v: T) -> Option<f64> {
    (&v as &dyn std::any::Any).downcast_ref::<f64>().copied()
}
fn scalar_f32<T: Float>(v: T) -> Option<f32> {
    (&v as &dyn std::any::Any).downcast_ref::<f32>().copied()
}

/// The portable forward split of the pairs `k` in `from..=m / 2` of a row of `m + 1`
/// values (the kernels' middle; [`super::real`] runs the whole row this way).
pub(super) fn split_pairs<T: Float>(x: &mut [Complex<T>], tw: &[Complex<T>], half: T, from: usize) {
    let m = x.len() - 1;
    for k in from..=m / 2 {
        let (a, b) = (x[k], x[m - k].conj());
        let (sum, diff) = (a + b, a - b);
        let (t, u) = (tw[k] * diff, tw[m - k] * diff.conj());
        x[k] = sum.scale(half) + t;
        x[m - k] = sum.conj().scale(half) - u;
    }
}

/// The portable inverse merge of the pairs `k` in `from..=m / 2`, `m = z.len()`.
pub(super) fn merge_pairs<T: Float>(
    x: &[Complex<T>],
    z: &mut [Complex<T>],
    tw: &[Complex<T>],
    s: T,
    from: usize,
) {
    let m = z.len();
    for k in from..=m / 2 {
        let (a, b) = (x[k], x[m - k].conj());
        let (sum, diff) = (a + b, a - b);
        z[k] = sum.scale(s) + tw[k] * diff;
        z[m - k] = sum.conj().scale(s) - tw[m - k] * diff.conj();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use rustfft::num_complex::Complex;

    use super::{merge_pairs, split_pairs};

    /// Whether the CPU has AVX2 and FMA (the standard library caches the answer).
    pub(super) fn usable() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    /// `w * d` for two complex doubles per vector.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn cmul_pd(w: __m256d, d: __m256d) -> __m256d {
        let wr = _mm256_movedup_pd(w);
        let wi = _mm256_permute_pd(w, 0xF);
        let ds = _mm256_permute_pd(d, 0x5);
        _mm256_fmaddsub_pd(wr, d, _mm256_mul_pd(wi, ds))
    }

    /// The two complex doubles of `v` in reverse order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn rev_pd(v: __m256d) -> __m256d {
        _mm256_permute2f128_pd(v, v, 1)
    }

    /// `w * d` for four complex floats per vector.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn cmul_ps(w: __m256, d: __m256) -> __m256 {
        let wr = _mm256_moveldup_ps(w);
        let wi = _mm256_movehdup_ps(w);
        let ds = _mm256_permute_ps(d, 0xB1);
        _mm256_fmaddsub_ps(wr, d, _mm256_mul_ps(wi, ds))
    }

    /// The four complex floats of `v` in reverse order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn rev_ps(v: __m256) -> __m256 {
        let halves = _mm256_permute2f128_ps(v, v, 1);
        _mm256_permute_ps(halves, 0x4E)
    }

    /// The forward split of a row of `x.len()` values (`m + 1`), `tw` of as many.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `tw.len() >= x.len() >= 2`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn split_f64(x: &mut [Complex<f64>], tw: &[Complex<f64>], half: f64) {
        let m = x.len() - 1;
        let z0 = x[0];
        x[0] = Complex::new((z0.re + z0.im) * 2.0 * half, 0.0);
        x[m] = Complex::new((z0.re - z0.im) * 2.0 * half, 0.0);
        let (p, t) = (x.as_mut_ptr().cast::<f64>(), tw.as_ptr().cast::<f64>());
        let conj = _mm256_set_pd(-0.0, 0.0, -0.0, 0.0);
        let h = _mm256_set1_pd(half);
        let mut k = 1;
        // Pairs k, k + 1 against m - k, m - k - 1 while the two blocks are disjoint
        // (k + 1 < m - k - 1).
        while 2 * k + 2 < m {
            let j = m - k - 1;
            // SAFETY: values k..k + 2 and j..j + 2 lie within `x` and `tw` (j + 1 = m - k
            // <= m); every load and store is unaligned.
            unsafe {
                let a = _mm256_loadu_pd(p.add(2 * k));
                let b = _mm256_xor_pd(rev_pd(_mm256_loadu_pd(p.add(2 * j))), conj);
                let (sum, diff) = (_mm256_add_pd(a, b), _mm256_sub_pd(a, b));
                let tk = cmul_pd(_mm256_loadu_pd(t.add(2 * k)), diff);
                let uj = cmul_pd(
                    rev_pd(_mm256_loadu_pd(t.add(2 * j))),
                    _mm256_xor_pd(diff, conj),
                );
                _mm256_storeu_pd(p.add(2 * k), _mm256_fmadd_pd(sum, h, tk));
                let xj = _mm256_fmsub_pd(_mm256_xor_pd(sum, conj), h, uj);
                _mm256_storeu_pd(p.add(2 * j), rev_pd(xj));
            }
            k += 2;
        }
        split_pairs(x, tw, half, k);
    }

    /// As [`split_f64`] in single precision.
    ///
    /// # Safety
    /// As [`split_f64`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn split_f32(x: &mut [Complex<f32>], tw: &[Complex<f32>], half: f32) {
        let m = x.len() - 1;
        let z0 = x[0];
        x[0] = Complex::new((z0.re + z0.im) * 2.0 * half, 0.0);
        x[m] = Complex::new((z0.re - z0.im) * 2.0 * half, 0.0);
        let (p, t) = (x.as_mut_ptr().cast::<f32>(), tw.as_ptr().cast::<f32>());
        let conj = _mm256_set_ps(-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0);
        let h = _mm256_set1_ps(half);
        let mut k = 1;
        // Pairs k..k + 4 against m - k..m - k - 4 while the two blocks are disjoint
        // (k + 3 < m - k - 3).
        while 2 * k + 6 < m {
            let j = m - k - 3;
            // SAFETY: values k..k + 4 and j..j + 4 lie within `x` and `tw` (j + 3 = m - k
            // <= m); every load and store is unaligned.
            unsafe {
                let a = _mm256_loadu_ps(p.add(2 * k));
                let b = _mm256_xor_ps(rev_ps(_mm256_loadu_ps(p.add(2 * j))), conj);
                let (sum, diff) = (_mm256_add_ps(a, b), _mm256_sub_ps(a, b));
                let tk = cmul_ps(_mm256_loadu_ps(t.add(2 * k)), diff);
                let uj = cmul_ps(
                    rev_ps(_mm256_loadu_ps(t.add(2 * j))),
                    _mm256_xor_ps(diff, conj),
                );
                _mm256_storeu_ps(p.add(2 * k), _mm256_fmadd_ps(sum, h, tk));
                let xj = _mm256_fmsub_ps(_mm256_xor_ps(sum, conj), h, uj);
                _mm256_storeu_ps(p.add(2 * j), rev_ps(xj));
            }
            k += 4;
        }
        split_pairs(x, tw, half, k);
    }

    /// The inverse merge of a row `x` of `z.len() + 1` values into `z`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `x.len()` and `tw.len()` at least `z.len() + 1`,
    /// `z` not empty.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn merge_f64(
        x: &[Complex<f64>],
        z: &mut [Complex<f64>],
        tw: &[Complex<f64>],
        s: f64,
    ) {
        let m = z.len();
        let (a, b) = (x[0].re, x[m].re);
        z[0] = Complex::new((a + b) * s, (a - b) * s);
        let (px, pz, t) = (
            x.as_ptr().cast::<f64>(),
            z.as_mut_ptr().cast::<f64>(),
            tw.as_ptr().cast::<f64>(),
        );
        let conj = _mm256_set_pd(-0.0, 0.0, -0.0, 0.0);
        let sv = _mm256_set1_pd(s);
        let mut k = 1;
        while 2 * k + 2 < m {
            let j = m - k - 1;
            // SAFETY: values k..k + 2 and j..j + 2 lie within `x`, `tw` and `z` (j + 1 =
            // m - k < m); every load and store is unaligned.
            unsafe {
                let a = _mm256_loadu_pd(px.add(2 * k));
                let b = _mm256_xor_pd(rev_pd(_mm256_loadu_pd(px.add(2 * j))), conj);
                let (sum, diff) = (_mm256_add_pd(a, b), _mm256_sub_pd(a, b));
                let tk = cmul_pd(_mm256_loadu_pd(t.add(2 * k)), diff);
                let uj = cmul_pd(
                    rev_pd(_mm256_loadu_pd(t.add(2 * j))),
                    _mm256_xor_pd(diff, conj),
                );
                _mm256_storeu_pd(pz.add(2 * k), _mm256_fmadd_pd(sum, sv, tk));
                let zj = _mm256_fmsub_pd(_mm256_xor_pd(sum, conj), sv, uj);
                _mm256_storeu_pd(pz.add(2 * j), rev_pd(zj));
            }
            k += 2;
        }
        merge_pairs(x, z, tw, s, k);
    }

    /// As [`merge_f64`] in single precision.
    ///
    /// # Safety
    /// As [`merge_f64`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn merge_f32(
        x: &[Complex<f32>],
        z: &mut [Complex<f32>],
        tw: &[Complex<f32>],
        s: f32,
    ) {
        let m = z.len();
        let (a, b) = (x[0].re, x[m].re);
        z[0] = Complex::new((a + b) * s, (a - b) * s);
        let (px, pz, t) = (
            x.as_ptr().cast::<f32>(),
            z.as_mut_ptr().cast::<f32>(),
            tw.as_ptr().cast::<f32>(),
        );
        let conj = _mm256_set_ps(-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0);
        let sv = _mm256_set1_ps(s);
        let mut k = 1;
        while 2 * k + 6 < m {
            let j = m - k - 3;
            // SAFETY: values k..k + 4 and j..j + 4 lie within `x`, `tw` and `z` (j + 3 =
            // m - k < m); every load and store is unaligned.
            unsafe {
                let a = _mm256_loadu_ps(px.add(2 * k));
                let b = _mm256_xor_ps(rev_ps(_mm256_loadu_ps(px.add(2 * j))), conj);
                let (sum, diff) = (_mm256_add_ps(a, b), _mm256_sub_ps(a, b));
                let tk = cmul_ps(_mm256_loadu_ps(t.add(2 * k)), diff);
                let uj = cmul_ps(
                    rev_ps(_mm256_loadu_ps(t.add(2 * j))),
                    _mm256_xor_ps(diff, conj),
                );
                _mm256_storeu_ps(pz.add(2 * k), _mm256_fmadd_ps(sum, sv, tk));
                let zj = _mm256_fmsub_ps(_mm256_xor_ps(sum, conj), sv, uj);
                _mm256_storeu_ps(pz.add(2 * j), rev_ps(zj));
            }
            k += 4;
        }
        merge_pairs(x, z, tw, s, k);
    }
}
