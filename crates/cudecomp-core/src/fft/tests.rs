//! The transforms against a naive DFT in double precision.

use super::*;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn cvalues(n: usize, seed: u64) -> Vec<Complex<f64>> {
    let v = values(2 * n, seed);
    (0..n)
        .map(|i| Complex::new(v[2 * i], v[2 * i + 1]))
        .collect()
}

/// Naive DFT along one axis of a C-contiguous complex array.
fn dft_axis(a: &[Complex<f64>], shape: &[usize], axis: usize, inverse: bool) -> Vec<Complex<f64>> {
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = vec![Complex::new(0.0, 0.0); a.len()];
    for o in 0..outer {
        for j in 0..inner {
            for k in 0..n {
                let mut acc = Complex::new(0.0, 0.0);
                for m in 0..n {
                    let ang = sign * 2.0 * std::f64::consts::PI * ((k * m) % n) as f64 / n as f64;
                    acc += a[(o * n + m) * inner + j] * Complex::new(ang.cos(), ang.sin());
                }
                out[(o * n + k) * inner + j] = acc;
            }
        }
    }
    out
}

fn dft(a: &[Complex<f64>], shape: &[usize], axes: &[usize], inverse: bool) -> Vec<Complex<f64>> {
    let mut v = a.to_vec();
    for &ax in axes {
        v = dft_axis(&v, shape, ax, inverse);
    }
    v
}

/// The first `n / 2 + 1` values of the last axis.
fn halve(a: &[Complex<f64>], shape: &[usize]) -> Vec<Complex<f64>> {
    let n = shape[shape.len() - 1];
    let nc = n / 2 + 1;
    a.chunks(n).flat_map(|r| r[..nc].to_vec()).collect()
}

fn err(a: &[Complex<f64>], b: &[Complex<f64>]) -> f64 {
    let m = b.iter().map(|x| x.norm()).fold(1e-300, f64::max);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, f64::max)
        / m
}

fn to32(v: &[Complex<f64>]) -> Vec<Complex<f32>> {
    v.iter()
        .map(|c| Complex::new(c.re as f32, c.im as f32))
        .collect()
}

fn from32(v: &[Complex<f32>]) -> Vec<Complex<f64>> {
    v.iter()
        .map(|c| Complex::new(c.re as f64, c.im as f64))
        .collect()
}

const LENGTHS: [usize; 12] = [1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 30, 17];

fn cases() -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut v = Vec::new();
    for &n in &LENGTHS {
        v.push((vec![3, n], vec![1]));
        v.push((vec![n, 5], vec![0]));
        v.push((vec![2, n, 3], vec![1]));
    }
    v.push((vec![4, 6, 10], vec![1, 2]));
    v.push((vec![3, 7, 5], vec![1, 2]));
    v.push((vec![5, 4, 6], vec![0, 1, 2]));
    v.push((vec![6, 5, 4], vec![0, 2]));
    v.push((vec![2, 3, 4, 5], vec![2, 3]));
    v.push((vec![9, 2], vec![0, 1]));
    v
}

#[test]
fn c2c_matches_dft_both_precisions_threads_and_places() {
    for (shape, axes) in cases() {
        let n: usize = shape.iter().product();
        let npts: usize = axes.iter().map(|&a| shape[a]).product();
        let x = cvalues(n, n as u64);
        for inverse in [false, true] {
            let want = dft(&x, &shape, &axes, inverse);
            for threads in [1, 3] {
                for norm in [Norm::Backward, Norm::Ortho, Norm::Forward] {
                    let scale = norm.scale(inverse, npts);
                    let opts = Options { scale, threads };
                    let want_s: Vec<_> = want.iter().map(|v| v * scale).collect();
                    let mut y = vec![Complex::new(0.0, 0.0); n];
                    c2c(&x, &mut y, &shape, &axes, inverse, opts).unwrap();
                    assert!(
                        err(&y, &want_s) < 1e-12,
                        "{shape:?} {axes:?} {inverse} {threads}"
                    );
                    let mut z = x.clone();
                    c2c_in_place(&mut z, &shape, &axes, inverse, opts).unwrap();
                    assert!(err(&z, &want_s) < 1e-12, "in place {shape:?} {axes:?}");
                    let x32 = to32(&x);
                    let mut y32 = vec![Complex::new(0.0f32, 0.0); n];
                    c2c(&x32, &mut y32, &shape, &axes, inverse, opts).unwrap();
                    assert!(err(&from32(&y32), &want_s) < 2e-5, "f32 {shape:?} {axes:?}");
                }
            }
        }
    }
}

#[test]
fn r2c_and_c2r_match_dft() {
    for (shape, axes) in cases() {
        let last = shape.len() - 1;
        if axes.last() != Some(&last) {
            continue;
        }
        let n: usize = shape.iter().product();
        let npts: usize = axes.iter().map(|&a| shape[a]).product();
        let x = values(n, 7 + n as u64);
        let xc: Vec<_> = x.iter().map(|&v| Complex::new(v, 0.0)).collect();
        let full = dft(&xc, &shape, &axes, false);
        let half = halve(&full, &shape);
        for threads in [1, 2] {
            for norm in [Norm::Backward, Norm::Ortho, Norm::Forward] {
                let (fs, bs) = (norm.scale(false, npts), norm.scale(true, npts));
                let mut y = vec![Complex::new(0.0, 0.0); half.len()];
                r2c(&x, &mut y, &shape, &axes, Options { scale: fs, threads }).unwrap();
                let want: Vec<_> = half.iter().map(|v| v * fs).collect();
                assert!(err(&y, &want) < 1e-12, "r2c {shape:?} {axes:?} {threads}");
                // Back to the real array: the inverse of the (unscaled) forward is x * npts.
                let kept = half.clone();
                let mut back = vec![0.0; n];
                c2r(
                    &half,
                    &mut back,
                    &shape,
                    &axes,
                    Options { scale: bs, threads },
                )
                .unwrap();
                assert_eq!(half, kept, "c2r modified its input");
                let f = npts as f64 * bs;
                let bc: Vec<_> = back.iter().map(|&v| Complex::new(v, 0.0)).collect();
                let want: Vec<_> = xc.iter().map(|v| v * f).collect();
                assert!(err(&bc, &want) < 1e-12, "c2r {shape:?} {axes:?}");
                let mut scratch = half.clone();
                let mut back2 = vec![0.0; n];
                c2r_overwriting(
                    &mut scratch,
                    &mut back2,
                    &shape,
                    &axes,
                    Options { scale: bs, threads },
                )
                .unwrap();
                assert!(back2
                    .iter()
                    .zip(&back)
                    .all(|(a, b)| (a - b).abs() < 1e-12 * f.max(1.0)));
                // Single precision.
                let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let mut y32 = vec![Complex::new(0.0f32, 0.0); half.len()];
                r2c(
                    &x32,
                    &mut y32,
                    &shape,
                    &axes,
                    Options { scale: fs, threads },
                )
                .unwrap();
                let want: Vec<_> = half.iter().map(|v| v * fs).collect();
                assert!(
                    err(&from32(&y32), &want) < 2e-5,
                    "r2c f32 {shape:?} {axes:?}"
                );
                let mut b32 = vec![0.0f32; n];
                c2r(
                    &to32(&half),
                    &mut b32,
                    &shape,
                    &axes,
                    Options { scale: bs, threads },
                )
                .unwrap();
                assert!(b32
                    .iter()
                    .zip(&x)
                    .all(|(a, b)| (*a as f64 - b * f).abs() < 2e-5 * f.max(1.0)));
            }
        }
    }
}

#[test]
fn c2r_ignores_the_imaginary_parts_that_must_be_real() {
    // n = 8: index 0 and 4 of the half spectrum are real for a real signal.
    let shape = [8];
    let x = values(8, 3);
    let mut y = vec![Complex::new(0.0, 0.0); 5];
    r2c(&x, &mut y, &shape, &[0], Options::default()).unwrap();
    y[0].im = 5.0;
    y[4].im = -2.0;
    let mut b = vec![0.0; 8];
    c2r(
        &y,
        &mut b,
        &shape,
        &[0],
        Options {
            scale: 1.0 / 8.0,
            threads: 1,
        },
    )
    .unwrap();
    assert!(b.iter().zip(&x).all(|(a, b)| (a - b).abs() < 1e-12));
    assert_eq!(y[0].im, 5.0, "the input is kept");
}

#[test]
fn bad_arguments_are_invalid_usage() {
    let x = vec![Complex::new(0.0, 0.0); 12];
    let mut y = vec![Complex::new(0.0, 0.0); 12];
    let o = Options::default();
    let is_invalid = |r: Result<()>| matches!(r, Err(crate::Error::InvalidUsage(_)));
    assert!(is_invalid(c2c(&x, &mut y, &[3, 4], &[], false, o)));
    assert!(is_invalid(c2c(&x, &mut y, &[3, 4], &[2], false, o)));
    assert!(is_invalid(c2c(&x, &mut y, &[3, 4], &[1, 1], false, o)));
    assert!(is_invalid(c2c(&x, &mut y, &[3, 5], &[1], false, o)));
    assert!(is_invalid(c2c(&x, &mut y, &[], &[0], false, o)));
    assert!(is_invalid(c2c(
        &x,
        &mut y,
        &[3, 4],
        &[1],
        false,
        Options { threads: 0, ..o }
    )));
    assert!(is_invalid(c2c(
        &x,
        &mut y,
        &[3, 4],
        &[1],
        false,
        Options {
            scale: f64::NAN,
            ..o
        }
    )));
    let r = vec![0.0; 12];
    let mut h = vec![Complex::new(0.0, 0.0); 9];
    assert!(
        is_invalid(r2c(&r, &mut h, &[3, 4], &[0], o)),
        "real axis not last"
    );
    assert!(r2c(&r, &mut h, &[3, 4], &[1], o).is_ok());
    assert!(is_invalid(r2c(&r, &mut h[..8], &[3, 4], &[1], o)));
    // An empty array is nothing to do.
    assert!(c2c::<f64>(&[], &mut [], &[0, 4], &[1], false, o).is_ok());
}

/// The portable split and merge of a row of `m + 1` values, beside [`simd`]'s kernels.
fn portable_split<T: Float>(x: &mut [Complex<T>], tw: &[Complex<T>], half: T) {
    let m = x.len() - 1;
    let z0 = x[0];
    x[0] = Complex::new((z0.re + z0.im) * (half + half), T::zero());
    x[m] = Complex::new((z0.re - z0.im) * (half + half), T::zero());
    simd::split_pairs(x, tw, half, 1);
}

fn portable_merge<T: Float>(x: &[Complex<T>], z: &mut [Complex<T>], tw: &[Complex<T>], s: T) {
    let m = z.len();
    let (a, b) = (x[0].re, x[m].re);
    z[0] = Complex::new((a + b) * s, (a - b) * s);
    simd::merge_pairs(x, z, tw, s, 1);
}

/// The vector kernels agree with the portable code on every row length, both precisions
/// (where the CPU has no vector kernel, both sides are the portable code).
#[test]
fn vector_split_and_merge_match_the_portable_code() {
    let lengths: Vec<usize> = (1..=40).chain([63, 64, 65, 127, 128, 129, 256]).collect();
    for &m in &lengths {
        let x = cvalues(m + 1, m as u64);
        let tw = cvalues(m + 1, 1000 + m as u64);
        let (half, s) = (0.5, 1.0 / (2 * m) as f64);
        // Double precision.
        let (mut a, mut b) = (x.clone(), x.clone());
        simd::split_forward(&mut a, &tw, half);
        portable_split(&mut b, &tw, half);
        assert!(err(&a, &b) < 1e-14, "split f64, m = {m}: {}", err(&a, &b));
        let (mut za, mut zb) = (vec![Complex::default(); m], vec![Complex::default(); m]);
        simd::merge_inverse(&x, &mut za, &tw, s);
        portable_merge(&x, &mut zb, &tw, s);
        assert!(
            err(&za, &zb) < 1e-14,
            "merge f64, m = {m}: {}",
            err(&za, &zb)
        );
        // Single precision.
        let (x32, tw32) = (to32(&x), to32(&tw));
        let (mut a, mut b) = (x32.clone(), x32.clone());
        simd::split_forward(&mut a, &tw32, half as f32);
        portable_split(&mut b, &tw32, half as f32);
        assert!(err(&from32(&a), &from32(&b)) < 1e-6, "split f32, m = {m}");
        let (mut za, mut zb) = (vec![Complex::default(); m], vec![Complex::default(); m]);
        simd::merge_inverse(&x32, &mut za, &tw32, s as f32);
        portable_merge(&x32, &mut zb, &tw32, s as f32);
        assert!(err(&from32(&za), &from32(&zb)) < 1e-6, "merge f32, m = {m}");
    }
}
