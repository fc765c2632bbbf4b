//! Real-to-real transforms along one axis: the cosine and sine transforms of types 1 to 4
//! with `scipy.fft`'s definitions and norms ([`R2r`], [`r2r`]). Types 2 and 3 run two rows
//! to one complex FFT ([`r2r_pairs`](super::r2r_pairs)); types 1 and 4 on RustDCT (which
//! runs each on a complex FFT of RustFFT's).
//!
//! RustDCT's transforms are `scipy.fft`'s unnormalised ones halved; the factor 2, the
//! norm's scale and the orthonormal mode's end-point factors are applied while a row is
//! in cache. Along the contiguous axis whole rows are transformed in place; along any
//! other, tiles of neighbouring columns are copied into contiguous rows, transformed and
//! written back.

use std::sync::Arc;

use std::any::Any;
use std::sync::{Mutex, OnceLock};

use rustdct::{Dct1, DctPlanner, Dst1, TransformType4};

use super::exec::{for_units, rows_per_unit, Ptr};
use super::plans::lock;
use super::plans::pool;
use super::r2r_pairs::{PairWork, Pairs};
use super::{Float, Norm};
use crate::{invalid, Error, Result};

/// RustDCT's planner of `T` for the process (it keeps every plan it made, by length).
fn dct_planner<T: Float>() -> Result<&'static Mutex<DctPlanner<T>>> {
    static F32: OnceLock<Mutex<DctPlanner<f32>>> = OnceLock::new();
    static F64: OnceLock<Mutex<DctPlanner<f64>>> = OnceLock::new();
    if let Some(p) = (&F32 as &dyn Any).downcast_ref::<OnceLock<Mutex<DctPlanner<T>>>>() {
        return Ok(p.get_or_init(|| Mutex::new(DctPlanner::new())));
    }
    if let Some(p) = (&F64 as &dyn Any).downcast_ref::<OnceLock<Mutex<DctPlanner<T>>>>() {
        return Ok(p.get_or_init(|| Mutex::new(DctPlanner::new())));
    }
    Err(Error::Internal(
        "r2r: no planner for this element type".into(),
    ))
}

/// A real-to-real transform of `scipy.fft`: `dct` or `dst` of type 1 to 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum R2r {
    /// DCT-I (even around both end points; needs 2 points or more).
    Dct1,
    /// DCT-II (even around both half points; the "DCT").
    Dct2,
    /// DCT-III (the inverse of DCT-II, up to a factor).
    Dct3,
    /// DCT-IV.
    Dct4,
    /// DST-I (odd around both end points).
    Dst1,
    /// DST-II.
    Dst2,
    /// DST-III (the inverse of DST-II, up to a factor).
    Dst3,
    /// DST-IV.
    Dst4,
}

impl R2r {
    /// Every type, in `scipy.fft`'s order.
    pub const ALL: [R2r; 8] = [
        R2r::Dct1,
        R2r::Dct2,
        R2r::Dct3,
        R2r::Dct4,
        R2r::Dst1,
        R2r::Dst2,
        R2r::Dst3,
        R2r::Dst4,
    ];

    /// The name: `dct1` ... `dst4`.
    pub fn name(self) -> &'static str {
        match self {
            R2r::Dct1 => "dct1",
            R2r::Dct2 => "dct2",
            R2r::Dct3 => "dct3",
            R2r::Dct4 => "dct4",
            R2r::Dst1 => "dst1",
            R2r::Dst2 => "dst2",
            R2r::Dst3 => "dst3",
            R2r::Dst4 => "dst4",
        }
    }

    /// The type of `name` (`dct1` ... `dst4`), or `None`.
    pub fn from_name(name: &str) -> Option<R2r> {
        R2r::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The type whose transform inverts this one, up to the norm's factor (`idct` of
    /// type 2 is a DCT-III, and so on; types 1 and 4 invert themselves).
    pub fn inverse(self) -> R2r {
        match self {
            R2r::Dct2 => R2r::Dct3,
            R2r::Dct3 => R2r::Dct2,
            R2r::Dst2 => R2r::Dst3,
            R2r::Dst3 => R2r::Dst2,
            k => k,
        }
    }

    /// The fewest points the type is defined on.
    pub fn min_len(self) -> usize {
        if self == R2r::Dct1 {
            2
        } else {
            1
        }
    }

    /// The length of the periodic extension of `n` points (`scipy.fft`'s `N`): what the
    /// norms divide by.
    pub fn logical_len(self, n: usize) -> usize {
        match self {
            R2r::Dct1 => 2 * (n.max(2) - 1),
            R2r::Dst1 => 2 * (n + 1),
            _ => 2 * n,
        }
    }
}

/// One prepared transform of `n` points.
enum Plan<T: Float> {
    /// Types 2 and 3: two rows to one complex FFT, the factor included.
    Pairs(Pairs<T>),
    /// Types 1 and 4: RustDCT one row at a time, then every output times the factor.
    Single(Single<T>, T),
}

/// RustDCT's transforms (half of `scipy.fft`'s unnormalised ones).
enum Single<T: Float> {
    Dct1(Arc<dyn Dct1<T>>),
    Dst1(Arc<dyn Dst1<T>>),
    Four(Arc<dyn TransformType4<T>>, bool),
}

impl<T: Float> Single<T> {
    fn scratch_len(&self) -> usize {
        match self {
            Single::Dct1(p) => p.get_scratch_len(),
            Single::Dst1(p) => p.get_scratch_len(),
            Single::Four(p, _) => p.get_scratch_len(),
        }
    }

    fn run(&self, row: &mut [T], scratch: &mut [T]) {
        match self {
            Single::Dct1(p) => p.process_dct1_with_scratch(row, scratch),
            Single::Dst1(p) => p.process_dst1_with_scratch(row, scratch),
            Single::Four(p, false) => p.process_dct4_with_scratch(row, scratch),
            Single::Four(p, true) => p.process_dst4_with_scratch(row, scratch),
        }
    }
}

/// What one row goes through: the transform and its factors.
struct Row<T: Float> {
    plan: Plan<T>,
    /// Orthonormal mode: input end points multiplied by `sqrt 2` first (first, last).
    pre: (bool, bool),
    /// Orthonormal mode: output end points divided by `sqrt 2` after (first, last).
    post: (bool, bool),
}

/// A worker's buffers for [`Row::apply`], of the row's plan.
enum Work<T> {
    Pairs(PairWork<T>),
    Single(Vec<T>),
}

impl<T: Float> Row<T> {
    fn work(&self) -> Work<T> {
        match &self.plan {
            Plan::Pairs(p) => Work::Pairs(p.work()),
            Plan::Single(p, _) => Work::Single(vec![T::zero(); p.scratch_len()]),
        }
    }

    /// Transforms the whole rows of `n` points in `rows` in place, with buffers `work`
    /// made by [`Row::work`].
    fn apply(&self, rows: &mut [T], n: usize, work: &mut Work<T>) {
        let sqrt2 = T::from_f64(std::f64::consts::SQRT_2).unwrap_or_else(T::one);
        let ends = |rows: &mut [T], (first, last): (bool, bool), f: &dyn Fn(T) -> T| {
            if first || last {
                for row in rows.chunks_exact_mut(n) {
                    if first {
                        row[0] = f(row[0]);
                    }
                    if last {
                        row[n - 1] = f(row[n - 1]);
                    }
                }
            }
        };
        ends(rows, self.pre, &|v| v * sqrt2);
        match (&self.plan, work) {
            (Plan::Pairs(p), Work::Pairs(w)) => p.apply(rows, w),
            (Plan::Single(p, scale), Work::Single(scratch)) => {
                for row in rows.chunks_exact_mut(n) {
                    p.run(row, scratch);
                    for v in row.iter_mut() {
                        *v = *v * *scale;
                    }
                }
            }
            // `work` always comes from this row's `work()`.
            _ => {}
        }
        ends(rows, self.post, &|v| v / sqrt2);
    }
}

/// The row transform of `scipy.fft.dct(x, type, norm=norm)` over `n` points
/// (`inverse`: of `idct`).
fn row<T: Float>(kind: R2r, n: usize, inverse: bool, norm: Norm) -> Result<Row<T>> {
    let applied = if inverse { kind.inverse() } else { kind };
    let big_n = kind.logical_len(n) as f64;
    // RustDCT computes half of scipy's unnormalised transform.
    let factor = 2.0
        * match (norm, inverse) {
            (Norm::Ortho, _) => 1.0 / big_n.sqrt(),
            (Norm::Backward, true) | (Norm::Forward, false) => 1.0 / big_n,
            _ => 1.0,
        };
    let ortho = norm == Norm::Ortho;
    let (pre, post) = match applied {
        R2r::Dct1 if ortho => ((true, true), (true, true)),
        R2r::Dct2 if ortho => ((false, false), (true, false)),
        R2r::Dct3 if ortho => ((true, false), (false, false)),
        R2r::Dst2 if ortho => ((false, false), (false, true)),
        R2r::Dst3 if ortho => ((false, true), (false, false)),
        _ => ((false, false), (false, false)),
    };
    let two_three = match applied {
        R2r::Dct2 => Some((false, false)),
        R2r::Dct3 => Some((false, true)),
        R2r::Dst2 => Some((true, false)),
        R2r::Dst3 => Some((true, true)),
        _ => None,
    };
    if let Some((sine, three)) = two_three {
        return Ok(Row {
            plan: Plan::Pairs(Pairs::new(n, sine, three, factor / 2.0)?),
            pre,
            post,
        });
    }
    let mut planner = lock(dct_planner::<T>()?);
    let single = match applied {
        R2r::Dct1 => Single::Dct1(planner.plan_dct1(n)),
        R2r::Dst1 => Single::Dst1(planner.plan_dst1(n)),
        R2r::Dct4 => Single::Four(planner.plan_dct4(n), false),
        // DST-IV: types 2 and 3 returned above.
        _ => Single::Four(planner.plan_dst4(n), true),
    };
    let scale = T::from_f64(factor).ok_or_else(|| {
        Error::InvalidUsage(format!(
            "r2r: the scale {factor} does not fit the element type"
        ))
    })?;
    Ok(Row {
        plan: Plan::Single(single, scale),
        pre,
        post,
    })
}

/// Columns copied together into contiguous rows along a strided axis.
const TILE: usize = 16;

/// `scipy.fft.dct` / `dst` of type `kind` (or, `inverse`, `idct` / `idst`) with `norm`,
/// of the real C-contiguous array `data` of `shape` (slowest axis first) along `axis`,
/// in place, on `threads` threads. A complex array is transformed as its real and
/// imaginary parts: pass it as real values of `shape` with a last extent of 2 added.
pub fn r2r<T: Float>(
    data: &mut [T],
    shape: &[usize],
    axis: usize,
    kind: R2r,
    inverse: bool,
    norm: Norm,
    threads: usize,
) -> Result<()> {
    if axis >= shape.len() {
        invalid!(
            "r2r: axis {axis} is out of range for an array of {} axes",
            shape.len()
        );
    }
    let total: usize = shape.iter().product();
    if data.len() != total {
        invalid!(
            "r2r: shape {shape:?} needs {total} values, got {}",
            data.len()
        );
    }
    if threads == 0 {
        invalid!("r2r: expected at least one thread, got 0");
    }
    let n = shape[axis];
    if total == 0 {
        return Ok(());
    }
    if n < kind.min_len() {
        invalid!(
            "r2r: {} needs at least {} points along its axis, got {n}",
            kind.name(),
            kind.min_len()
        );
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let row_t = row::<T>(kind, n, inverse, norm)?;
    let pool = if threads > 1 {
        Some(pool(threads)?)
    } else {
        None
    };
    let base = Ptr(data.as_mut_ptr());
    if inner == 1 {
        // Whole rows in place, an even number to a unit of work (pairs share an FFT).
        let rows = outer;
        let per = rows_per_unit(n * std::mem::size_of::<T>()).next_multiple_of(2);
        let units = rows.div_ceil(per);
        return for_units(
            units,
            pool.as_deref(),
            || row_t.work(),
            |work, u| {
                let (r0, r1) = (u * per, ((u + 1) * per).min(rows));
                // SAFETY: rows r0..r1 lie inside `data` (r1 <= outer, n values each), and
                // every unit touches its own rows only.
                let block =
                    unsafe { std::slice::from_raw_parts_mut(base.at(r0 * n), (r1 - r0) * n) };
                row_t.apply(block, n, work);
                Ok(())
            },
        );
    }
    // Tiles of up to TILE neighbouring columns of one block (n rows of `inner` values).
    let tiles = inner.div_ceil(TILE);
    for_units(
        outer * tiles,
        pool.as_deref(),
        || (vec![T::zero(); TILE * n], row_t.work()),
        |(buf, work), u| {
            let (o, t) = (u / tiles, u % tiles);
            let c0 = t * TILE;
            let w = TILE.min(inner - c0);
            // SAFETY: block `o` spans `n * inner` values inside `data`; this unit reads and
            // writes columns c0..c0 + w of it alone.
            let block = unsafe { base.at(o * n * inner) };
            for j in 0..n {
                for c in 0..w {
                    // SAFETY: as above (j < n, c0 + c < inner).
                    buf[c * n + j] = unsafe { *block.add(j * inner + c0 + c) };
                }
            }
            row_t.apply(&mut buf[..w * n], n, work);
            for j in 0..n {
                for c in 0..w {
                    // SAFETY: as above.
                    unsafe { *block.add(j * inner + c0 + c) = buf[c * n + j] };
                }
            }
            Ok(())
        },
    )
}

/// [`r2r`] of each of `fields` arrays of `shape` held one after another in `data` (a
/// batch): each field transforms exactly as it would alone. Rows of one field are never
/// paired with another's (pairs share a complex FFT, whose rounding depends on the
/// partner).
#[allow(clippy::too_many_arguments)]
pub fn r2r_fields<T: Float>(
    data: &mut [T],
    fields: usize,
    shape: &[usize],
    axis: usize,
    kind: R2r,
    inverse: bool,
    norm: Norm,
    threads: usize,
) -> Result<()> {
    let one: usize = shape.iter().product();
    if fields == 0 || data.len() != one * fields {
        invalid!(
            "r2r: {fields} fields of shape {shape:?} need {} values, got {}",
            one * fields,
            data.len()
        );
    }
    if one == 0 {
        return r2r(data, shape, axis, kind, inverse, norm, threads);
    }
    data.chunks_exact_mut(one)
        .try_for_each(|field| r2r(field, shape, axis, kind, inverse, norm, threads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    /// `scipy.fft`'s unnormalised transform of `x`, from its definition.
    fn naive(kind: R2r, x: &[f64]) -> Vec<f64> {
        let n = x.len();
        let nf = n as f64;
        (0..n)
            .map(|k| {
                let kf = k as f64;
                let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
                let sum = |f: &dyn Fn(usize) -> f64, range: std::ops::Range<usize>| -> f64 {
                    range.map(f).sum()
                };
                match kind {
                    R2r::Dct1 => {
                        x[0] + sign * x[n - 1]
                            + 2.0
                                * sum(
                                    &|j| x[j] * (PI * kf * j as f64 / (nf - 1.0)).cos(),
                                    1..n - 1,
                                )
                    }
                    R2r::Dct2 => {
                        2.0 * sum(
                            &|j| x[j] * (PI * kf * (2.0 * j as f64 + 1.0) / (2.0 * nf)).cos(),
                            0..n,
                        )
                    }
                    R2r::Dct3 => {
                        x[0] + 2.0
                            * sum(
                                &|j| x[j] * (PI * (2.0 * kf + 1.0) * j as f64 / (2.0 * nf)).cos(),
                                1..n,
                            )
                    }
                    R2r::Dct4 => {
                        2.0 * sum(
                            &|j| {
                                x[j] * (PI * (2.0 * kf + 1.0) * (2.0 * j as f64 + 1.0) / (4.0 * nf))
                                    .cos()
                            },
                            0..n,
                        )
                    }
                    R2r::Dst1 => {
                        2.0 * sum(
                            &|j| x[j] * (PI * (kf + 1.0) * (j as f64 + 1.0) / (nf + 1.0)).sin(),
                            0..n,
                        )
                    }
                    R2r::Dst2 => {
                        2.0 * sum(
                            &|j| {
                                x[j] * (PI * (kf + 1.0) * (2.0 * j as f64 + 1.0) / (2.0 * nf)).sin()
                            },
                            0..n,
                        )
                    }
                    R2r::Dst3 => {
                        sign * x[n - 1]
                            + 2.0
                                * sum(
                                    &|j| {
                                        x[j] * (PI * (2.0 * kf + 1.0) * (j as f64 + 1.0)
                                            / (2.0 * nf))
                                            .sin()
                                    },
                                    0..n - 1,
                                )
                    }
                    R2r::Dst4 => {
                        2.0 * sum(
                            &|j| {
                                x[j] * (PI * (2.0 * kf + 1.0) * (2.0 * j as f64 + 1.0) / (4.0 * nf))
                                    .sin()
                            },
                            0..n,
                        )
                    }
                }
            })
            .collect()
    }

    fn data(len: usize) -> Vec<f64> {
        (0..len)
            .map(|i| ((i * 37 % 11) as f64 - 5.0) / 3.0)
            .collect()
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
    }

    #[test]
    fn every_type_is_scipys_along_every_axis() {
        // Odd and even row counts, more rows than one packed batch of pairs, short rows.
        for shape in [[3, 7, 5], [2, 19, 1], [3, 1, 2], [1, 37, 3]] {
            along_every_axis(shape);
        }
    }

    fn along_every_axis(shape: [usize; 3]) {
        let x = data(shape.iter().product());
        for kind in R2r::ALL
            .into_iter()
            .filter(|k| shape.iter().all(|&n| n >= k.min_len()))
        {
            for axis in 0..3 {
                let mut y = x.clone();
                r2r(&mut y, &shape, axis, kind, false, Norm::Backward, 1).unwrap();
                let (outer, n, inner) = (
                    shape[..axis].iter().product::<usize>(),
                    shape[axis],
                    shape[axis + 1..].iter().product::<usize>(),
                );
                for o in 0..outer {
                    for c in 0..inner {
                        let line: Vec<f64> = (0..n).map(|j| x[(o * n + j) * inner + c]).collect();
                        let got: Vec<f64> = (0..n).map(|j| y[(o * n + j) * inner + c]).collect();
                        assert!(
                            close(&got, &naive(kind, &line), 1e-12),
                            "{kind:?} axis {axis}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn inverses_and_orthonormal_transforms() {
        let shape = [4, 6, 9];
        let x = data(216);
        for kind in R2r::ALL {
            for norm in [Norm::Backward, Norm::Ortho, Norm::Forward] {
                for (axis, threads) in [(0, 1), (1, 3), (2, 2)] {
                    let mut y = x.clone();
                    r2r(&mut y, &shape, axis, kind, false, norm, threads).unwrap();
                    if norm == Norm::Ortho {
                        let (a, b): (f64, f64) =
                            (x.iter().map(|v| v * v).sum(), y.iter().map(|v| v * v).sum());
                        assert!((a - b).abs() < 1e-9 * a, "{kind:?} keeps the norm");
                    }
                    r2r(&mut y, &shape, axis, kind, true, norm, threads).unwrap();
                    assert!(close(&y, &x, 1e-12), "{kind:?} {norm:?} axis {axis}");
                }
            }
        }
    }

    #[test]
    fn each_field_of_a_batch_transforms_as_alone() {
        // Three rows a field: rows paired across fields would round differently.
        let shape = [1, 3, 8];
        let x = data(3 * 24);
        for kind in [R2r::Dct2, R2r::Dst1] {
            let mut batch = x.clone();
            r2r_fields(&mut batch, 3, &shape, 2, kind, false, Norm::Ortho, 2).unwrap();
            for (f, got) in batch.chunks(24).enumerate() {
                let mut one = x[f * 24..(f + 1) * 24].to_vec();
                r2r(&mut one, &shape, 2, kind, false, Norm::Ortho, 2).unwrap();
                assert_eq!(got, &one[..], "{kind:?} field {f}");
            }
        }
        let e = r2r_fields(
            &mut vec![0.0f64; 70],
            3,
            &shape,
            2,
            R2r::Dct2,
            false,
            Norm::Ortho,
            1,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("3 fields of shape [1, 3, 8] need 72 values, got 70"),
            "{e}"
        );
    }

    #[test]
    fn bad_arguments_are_refused() {
        let mut x = vec![0.0f64; 6];
        assert!(r2r(&mut x, &[2, 3], 2, R2r::Dct2, false, Norm::Backward, 1).is_err());
        assert!(r2r(&mut x, &[2, 2], 0, R2r::Dct2, false, Norm::Backward, 1).is_err());
        let e = r2r(&mut x, &[6, 1], 1, R2r::Dct1, false, Norm::Backward, 1).unwrap_err();
        assert!(
            e.to_string().contains("dct1 needs at least 2 points"),
            "{e}"
        );
        assert!(r2r(&mut x, &[6, 1], 1, R2r::Dst1, false, Norm::Backward, 1).is_ok());
        assert_eq!(R2r::from_name("dst3"), Some(R2r::Dst3));
        assert_eq!(R2r::Dct2.inverse(), R2r::Dct3);
    }
}
