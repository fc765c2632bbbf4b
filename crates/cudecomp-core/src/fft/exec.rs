//! The passes of a transform over raw memory, and the driver that runs them block by
//! block.
//!
//! A pass transforms along one axis of a C-contiguous array viewed as `(outer, n,
//! inner)`. Along the contiguous axis (`inner == 1`) it hands RustFFT whole rows, a
//! unit of [`UNIT_BYTES`] at a time, and scales each unit while it is still in cache.
//! Along any other axis it copies a tile of `w` neighbouring columns (`w` elements of
//! every one of the `n` rows, so each read covers whole cache lines) into a buffer of
//! `w` contiguous rows, transforms them there, and writes them back, scaled, in the same
//! tiles. The driver cuts the array into blocks, one per index of the axes before the
//! first transformed one (the planes of a 2-D transform over the two fastest axes), so
//! that all passes of a block run while it is in cache; blocks run on the thread pool
//! when there are at least as many as threads, otherwise the units of each pass do.

use std::sync::Arc;

use rayon::prelude::*;
use rustfft::num_complex::Complex;
use rustfft::Fft;

use super::plans::Planners;
use super::real::{c2r_pass, r2c_pass, RealPlan};
use super::Float;
use crate::{Error, Result};

/// Bytes of one unit of work: the rows a pass transforms and scales while they stay in
/// the core's L1/L2 cache, and the size of a column tile.
const UNIT_BYTES: usize = 64 << 10;

/// Bytes of a block: the passes of a transform over several axes run over one block
/// after another, each in the core's L2 cache while its passes run.
const BLOCK_BYTES: usize = 1 << 20;

/// Columns of a tile at least: two cache lines of single-precision complex values.
const MIN_TILE: usize = 8;

/// A pointer that threads may share: every use writes disjoint elements.
#[derive(Clone, Copy)]
pub(super) struct Ptr<T>(pub(super) *mut T);

// SAFETY: a `Ptr` is only dereferenced inside one transform, whose units touch disjoint
// elements; the caller of the transform guarantees the memory outlives it and is not
// accessed by anything else meanwhile.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as for `Send`: shared between the units of one transform only.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    /// The pointer `i` elements further.
    ///
    /// # Safety
    /// `i` elements further must stay within the allocation.
    pub(super) unsafe fn at(self, i: usize) -> *mut T {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.add(i) }
    }
}

/// An axis of a C-contiguous array seen as `(outer, n, inner)`.
#[derive(Clone, Copy, Debug)]
struct Geom {
    outer: usize,
    n: usize,
    inner: usize,
}

impl Geom {
    fn of(shape: &[usize], axis: usize) -> Geom {
        Geom {
            outer: shape[..axis].iter().product(),
            n: shape[axis],
            inner: shape[axis + 1..].iter().product(),
        }
    }
}

/// Runs units `0..units`, on `pool` when given, each worker with scratch made by `init`.
pub(super) fn for_units<S, I, F>(
    units: usize,
    pool: Option<&rayon::ThreadPool>,
    init: I,
    f: F,
) -> Result<()>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize) -> Result<()> + Sync + Send,
{
    match pool {
        Some(p) if units > 1 => {
            p.install(|| (0..units).into_par_iter().try_for_each_init(&init, &f))
        }
        _ => {
            let mut s = init();
            (0..units).try_for_each(|u| f(&mut s, u))
        }
    }
}

/// The complex zero.
pub(super) fn zero<T: Float>() -> Complex<T> {
    Complex::new(T::zero(), T::zero())
}

pub(super) fn scale_all<T: Float>(v: &mut [Complex<T>], s: Option<T>) {
    if let Some(s) = s {
        v.iter_mut().for_each(|x| *x = x.scale(s));
    }
}

pub(super) fn scale_real<T: Float>(v: &mut [T], s: Option<T>) {
    if let Some(s) = s {
        v.iter_mut().for_each(|x| *x = *x * s);
    }
}

/// Rows of `row_bytes` in one unit of work (at least one).
pub(super) fn rows_per_unit(row_bytes: usize) -> usize {
    (UNIT_BYTES / row_bytes.max(1)).max(1)
}

/// A complex pass along the middle axis of `g`, from `src` into `dst` (the same memory
/// for in place), every output multiplied by `scale`.
///
/// # Safety
/// `src` must be readable and `dst` writable for `g.outer * g.n * g.inner` elements;
/// they are the same pointer or do not overlap; nothing else accesses them meanwhile.
unsafe fn c2c_pass<T: Float>(
    src: Ptr<Complex<T>>,
    dst: Ptr<Complex<T>>,
    g: Geom,
    fft: &dyn Fft<T>,
    scale: Option<T>,
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    let esize = std::mem::size_of::<Complex<T>>();
    let in_place = std::ptr::eq(src.0, dst.0);
    if g.inner == 1 {
        let rows = g.outer;
        let rpu = rows_per_unit(g.n * esize);
        let units = rows.div_ceil(rpu);
        let scratch_len = if in_place {
            fft.get_inplace_scratch_len()
        } else {
            fft.get_immutable_scratch_len()
        };
        return for_units(
            units,
            pool,
            || vec![zero::<T>(); scratch_len],
            |scratch, u| {
                let r0 = u * rpu;
                let len = (rows.min(r0 + rpu) - r0) * g.n;
                // SAFETY: rows r0.. of this unit lie within the arrays (the caller's
                // bounds); units cover disjoint rows; `src` and `dst` are equal (then
                // only `d` is formed) or disjoint.
                let d = unsafe { std::slice::from_raw_parts_mut(dst.at(r0 * g.n), len) };
                if in_place {
                    fft.process_with_scratch(d, scratch);
                } else {
                    // SAFETY: as above; `src` is only read.
                    let s = unsafe { std::slice::from_raw_parts(src.at(r0 * g.n), len) };
                    fft.process_immutable_with_scratch(s, d, scratch);
                }
                scale_all(d, scale);
                Ok(())
            },
        );
    }
    let tile = (UNIT_BYTES / (g.n * esize).max(1))
        .max(MIN_TILE)
        .min(g.inner);
    let tiles = g.inner.div_ceil(tile);
    let scratch_len = fft.get_inplace_scratch_len();
    for_units(
        g.outer * tiles,
        pool,
        || {
            (
                vec![zero::<T>(); tile * g.n],
                vec![zero::<T>(); scratch_len],
            )
        },
        |(buf, scratch), u| {
            let (o, j0) = (u / tiles, (u % tiles) * tile);
            let w = tile.min(g.inner - j0);
            let base = o * g.n * g.inner + j0;
            for k in 0..g.n {
                // SAFETY: row k of this tile: `w` elements from `base + k * inner`,
                // within the array; only read here.
                let row = unsafe { std::slice::from_raw_parts(src.at(base + k * g.inner), w) };
                for (b, v) in row.iter().enumerate() {
                    buf[b * g.n + k] = *v;
                }
            }
            let buf = &mut buf[..w * g.n];
            fft.process_with_scratch(buf, scratch);
            let s = scale.unwrap_or_else(T::one);
            for k in 0..g.n {
                // SAFETY: the same tile of `dst`; tiles of different units are disjoint,
                // and this unit read its tile of `src` (which may be `dst`) completely
                // before writing.
                let row = unsafe { std::slice::from_raw_parts_mut(dst.at(base + k * g.inner), w) };
                for (b, v) in row.iter_mut().enumerate() {
                    *v = if scale.is_some() {
                        buf[b * g.n + k].scale(s)
                    } else {
                        buf[b * g.n + k]
                    };
                }
            }
            Ok(())
        },
    )
}

/// What one transform reads and writes.
#[derive(Clone, Copy)]
pub(super) enum Job<T> {
    /// Complex to complex, `src == dst` in place.
    C2c {
        src: Ptr<Complex<T>>,
        dst: Ptr<Complex<T>>,
        inverse: bool,
    },
    /// Real to complex along the last axis (then complex along the others).
    R2c { src: Ptr<T>, dst: Ptr<Complex<T>> },
    /// Complex to real along the last axis (after complex along the others); `destroy`
    /// lets it overwrite `src`.
    C2r {
        src: Ptr<Complex<T>>,
        dst: Ptr<T>,
        destroy: bool,
    },
}

/// The plans of one transform, made before any block runs.
struct Plans<T: Float> {
    /// Per axis of the block (`None` where the axis is not transformed as complex).
    complex: Vec<Option<Arc<dyn Fft<T>>>>,
    /// The real pass (the real kinds), its scale folded in when it is the last pass.
    real: Option<RealPlan<T>>,
}

/// Runs `job` over the C-contiguous array of (real-space) `shape` along `axes` (checked
/// by the caller: distinct, in range, the last axis last for the real kinds, no zero
/// extent), every output multiplied by `scale`, on `threads` threads.
///
/// # Safety
/// The job's pointers must be valid for the whole arrays of `shape` (complex arrays
/// with the last axis halved for the real kinds), `src` and `dst` the same memory (C2c
/// only) or disjoint, and untouched by anything else until this returns.
pub(super) unsafe fn execute<T: Float>(
    planners: &Planners<T>,
    shape: &[usize],
    axes: &[usize],
    job: Job<T>,
    scale: f64,
    threads: usize,
) -> Result<()> {
    let first = axes.iter().copied().min().unwrap_or(0);
    let lead: usize = shape[..first].iter().product();
    // A block's shape: a leading count of indices of the untransformed axes before the
    // first transformed one, then the rest of the array; its axes follow.
    let mut bshape = vec![1];
    bshape.extend_from_slice(&shape[first..]);
    let last = bshape.len() - 1;
    let baxes: Vec<usize> = axes.iter().map(|a| a - first + 1).collect();
    let real = !matches!(job, Job::C2c { .. });
    // The complex block's shape: the real kinds halve the last axis.
    let mut cshape = bshape.to_vec();
    if real {
        cshape[last] = bshape[last] / 2 + 1;
    }
    let inverse = match job {
        Job::C2c { inverse, .. } => inverse,
        Job::R2c { .. } => false,
        Job::C2r { .. } => true,
    };
    let complex = (0..bshape.len())
        .map(|a| {
            (baxes.contains(&a) && !(real && a == last))
                .then(|| planners.complex(cshape[a], inverse))
        })
        .collect();
    let scale_t = if scale == 1.0 {
        None
    } else {
        Some(T::from_f64(scale).ok_or_else(|| {
            Error::InvalidUsage(format!("FFT scale {scale} does not fit the element type"))
        })?)
    };
    // The complex passes, the contiguous axis first (it reads the input as whole rows),
    // then the others from the slowest in.
    let mut order: Vec<usize> = baxes.iter().copied().filter(|&a| a != last).collect();
    order.sort_unstable();
    order.reverse();
    if baxes.contains(&last) && !real {
        order.insert(0, last);
    }
    // The scale goes to the last pass: r2c's real pass when it is alone, c2r's always.
    let real_plan = match job {
        Job::C2c { .. } => None,
        Job::R2c { .. } => {
            let s = if order.is_empty() { scale } else { 1.0 };
            Some(RealPlan::new(planners, bshape[last], false, s)?)
        }
        Job::C2r { .. } => Some(RealPlan::new(planners, bshape[last], true, scale)?),
    };
    let plans = Plans {
        complex,
        real: real_plan,
    };
    let real_len: usize = bshape.iter().product();
    let complex_len: usize = cshape.iter().product();
    // Blocks of about BLOCK_BYTES, so that all passes over one find it in cache; a
    // transform along the contiguous axis alone is one block (its rows are units).
    let per = if baxes == [last] {
        lead
    } else {
        let bytes = complex_len * std::mem::size_of::<Complex<T>>();
        (BLOCK_BYTES / bytes.max(1)).clamp(1, lead.max(1))
    };
    let nblocks = lead.div_ceil(per);
    let pool = if threads > 1 {
        Some(super::plans::pool(threads)?)
    } else {
        None
    };
    let ctx = Block {
        plans: &plans,
        cshape: &cshape,
        order: &order,
        scale: scale_t,
        real_len,
        complex_len,
        lead,
        per,
        nlast: bshape[last],
        job,
    };
    match pool.as_deref() {
        Some(p) if nblocks >= threads => for_units(nblocks, Some(p), Vec::new, |sb, b| {
            // SAFETY: block b of the arrays (the caller's bounds); blocks are disjoint.
            unsafe { ctx.run(b, sb, None) }
        }),
        p => {
            let mut sb = Vec::new();
            (0..nblocks).try_for_each(|b| {
                // SAFETY: as above, one block after another.
                unsafe { ctx.run(b, &mut sb, p) }
            })
        }
    }
}

/// One block's part of a transform.
struct Block<'a, T: Float> {
    plans: &'a Plans<T>,
    /// The complex block's shape for one leading index.
    cshape: &'a [usize],
    /// Complex passes in order (block axes).
    order: &'a [usize],
    scale: Option<T>,
    /// Real and complex values per leading index.
    real_len: usize,
    complex_len: usize,
    /// Leading indices in all, and per block.
    lead: usize,
    per: usize,
    /// Real-space extent of the last axis.
    nlast: usize,
    job: Job<T>,
}

impl<T: Float> Block<'_, T> {
    fn plan(&self, axis: usize) -> Result<&dyn Fft<T>> {
        self.plans
            .complex
            .get(axis)
            .and_then(|p| p.as_deref())
            .ok_or_else(|| Error::Internal(format!("FFT: no complex plan for axis {axis}")))
    }

    /// Runs block `b`; `sb` is scratch for a copy of a complex block (c2r keeping its
    /// input), grown on first use.
    ///
    /// # Safety
    /// As [`execute`], for block `b`; no other thread works on block `b`.
    unsafe fn run(
        &self,
        b: usize,
        sb: &mut Vec<Complex<T>>,
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let n = self.order.len();
        let (i0, cnt) = (b * self.per, self.per.min(self.lead - b * self.per));
        let mut cshape = self.cshape.to_vec();
        cshape[0] = cnt;
        let (real_len, complex_len) = (cnt * self.real_len, cnt * self.complex_len);
        let nlast = self.nlast;
        match self.job {
            Job::C2c { src, dst, .. } => {
                // SAFETY: offsets of block b, within the arrays.
                let (src, dst) = unsafe {
                    (
                        Ptr(src.at(i0 * self.complex_len)),
                        Ptr(dst.at(i0 * self.complex_len)),
                    )
                };
                for (i, &a) in self.order.iter().enumerate() {
                    let from = if i == 0 { src } else { dst };
                    let s = if i + 1 == n { self.scale } else { None };
                    // SAFETY: the block's arrays; `from` is `src` (equal to or disjoint
                    // from `dst`) or `dst` itself.
                    unsafe { c2c_pass(from, dst, Geom::of(&cshape, a), self.plan(a)?, s, pool)? };
                }
                Ok(())
            }
            Job::R2c { src, dst } => {
                // SAFETY: offsets of block b.
                let (src, dst) = unsafe {
                    (
                        Ptr(src.at(i0 * self.real_len)),
                        Ptr(dst.at(i0 * self.complex_len)),
                    )
                };
                let plan = self
                    .plans
                    .real
                    .as_ref()
                    .ok_or_else(|| Error::Internal("FFT: no real plan".into()))?;
                // SAFETY: the block's rows; real input and complex output are disjoint.
                unsafe { r2c_pass(src, dst, real_len / nlast, nlast, plan, pool)? };
                for (i, &a) in self.order.iter().enumerate() {
                    let s = if i + 1 == n { self.scale } else { None };
                    // SAFETY: in place on the block's output.
                    unsafe { c2c_pass(dst, dst, Geom::of(&cshape, a), self.plan(a)?, s, pool)? };
                }
                Ok(())
            }
            Job::C2r { src, dst, destroy } => {
                // SAFETY: offsets of block b.
                let (src, dst) = unsafe {
                    (
                        Ptr(src.at(i0 * self.complex_len)),
                        Ptr(dst.at(i0 * self.real_len)),
                    )
                };
                let plan = self
                    .plans
                    .real
                    .as_ref()
                    .ok_or_else(|| Error::Internal("FFT: no real plan".into()))?;
                let mut rows_from = src;
                let mut destroy_rows = destroy;
                if n > 0 {
                    // The complex passes land in place when the input may be overwritten,
                    // else in the scratch block (the first pass copying as it goes).
                    let work = if destroy {
                        src
                    } else {
                        sb.resize(complex_len, zero::<T>());
                        Ptr(sb.as_mut_ptr())
                    };
                    for (i, &a) in self.order.iter().enumerate() {
                        let from = if i == 0 { src } else { work };
                        // SAFETY: `from` is the block's input or `work`, `work` the input
                        // itself (destroy) or our scratch block, disjoint from the input.
                        unsafe {
                            c2c_pass(from, work, Geom::of(&cshape, a), self.plan(a)?, None, pool)?
                        };
                    }
                    rows_from = work;
                    destroy_rows = true;
                }
                let rows = real_len / nlast;
                // SAFETY: the block's rows; `rows_from` may be overwritten when
                // `destroy_rows` (the caller allowed it, or it is our scratch).
                unsafe { c2r_pass(rows_from, dst, rows, nlast, plan, destroy_rows, pool) }
            }
        }
    }
}
