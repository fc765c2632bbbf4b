//! Plans cached per length and precision, and the thread pools of the transforms.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftDirection, FftNum, FftPlanner};

use crate::{Error, Result};

/// The planners of one precision. Each caches its plans by length (RustFFT's and
/// RealFFT's planners keep every plan they made), so a length is planned once per
/// process and every later transform of it is a table lookup.
pub(crate) struct Planners<T: FftNum> {
    complex: Mutex<FftPlanner<T>>,
    real: Mutex<RealFftPlanner<T>>,
}

impl<T: FftNum> Planners<T> {
    pub(crate) fn new() -> Self {
        Planners {
            complex: Mutex::new(FftPlanner::new()),
            real: Mutex::new(RealFftPlanner::new()),
        }
    }

    /// The complex plan of `n` points in one direction.
    pub(crate) fn complex(&self, n: usize, inverse: bool) -> Arc<dyn Fft<T>> {
        let dir = if inverse {
            FftDirection::Inverse
        } else {
            FftDirection::Forward
        };
        lock(&self.complex).plan_fft(n, dir)
    }

    /// The real-to-complex plan of `n` real points.
    pub(crate) fn r2c(&self, n: usize) -> Arc<dyn RealToComplex<T>> {
        lock(&self.real).plan_fft_forward(n)
    }

    /// The complex-to-real plan of `n` real points.
    pub(crate) fn c2r(&self, n: usize) -> Arc<dyn ComplexToReal<T>> {
        lock(&self.real).plan_fft_inverse(n)
    }
}

/// A planner's lock; a panic elsewhere while it was held leaves the cache usable (plans
/// are only ever added whole).
pub(super) fn lock<P>(m: &Mutex<P>) -> MutexGuard<'_, P> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pools made so far, by thread count.
type Pools = Vec<(usize, Arc<rayon::ThreadPool>)>;

/// The pool of `threads` threads (more than one) for the transforms, made on first use
/// and kept for the process; a few counts at most are ever asked for.
pub(crate) fn pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<Pools>> = OnceLock::new();
    let mut pools = lock(POOLS.get_or_init(|| Mutex::new(Vec::new())));
    if let Some((_, p)) = pools.iter().find(|(t, _)| *t == threads) {
        return Ok(Arc::clone(p));
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("cudecomp-fft-{i}"))
        .build()
        .map_err(|e| Error::Internal(format!("FFT thread pool of {threads} threads: {e}")))?;
    let p = Arc::new(p);
    pools.push((threads, Arc::clone(&p)));
    Ok(p)
}
