//! Timing one candidate: transpose rounds or halo rounds on scratch buffers, each rank's
//! mean averaged over the ranks.

use std::time::Instant;

use crate::comm::allgather_f64;
use crate::cuda::vmm::DeviceArray;
use crate::cuda::{self, DeviceAlloc, Stream};
use crate::engine::Exec;
use crate::handle::grid::TransposeOp;
use crate::handle::{GridDesc, Handle};
use crate::mem::shm::SharedArray;
use crate::mem::Buf;
use crate::plan::{Direction, HaloSpec, TransposeLayouts};
use crate::Result;

use super::AutotuneOptions;

/// Scratch data for timing (contents never matter).
enum Scratch {
    Host(Vec<u64>),
    /// Node-shared and registered, like the CPU variant's library arrays.
    Shared(SharedArray),
    Device(DeviceAlloc),
    /// Exported and registered, like the GPU variant's library arrays.
    Exported(DeviceArray),
}

impl Scratch {
    fn new(handle: &Handle, bytes: usize) -> Result<Scratch> {
        Ok(if handle.is_gpu() {
            Scratch::Device(DeviceAlloc::new(&handle.device()?.device, bytes)?)
        } else {
            Scratch::Host(vec![0u64; bytes.div_ceil(8).max(1)])
        })
    }

    /// As [`Scratch::new`], registered like library arrays when `library` (see
    /// [`AutotuneOptions::transpose_use_library_arrays`]).
    fn like_user(handle: &Handle, bytes: usize, library: bool) -> Result<Scratch> {
        match (library, handle.is_gpu()) {
            (false, _) => Scratch::new(handle, bytes),
            (true, false) => Ok(Scratch::Shared(SharedArray::new(bytes)?)),
            (true, true) => Ok(Scratch::Exported(DeviceArray::new(
                &handle.device()?.device,
                bytes,
            )?)),
        }
    }

    fn buf(&mut self) -> Buf {
        match self {
            Scratch::Host(v) => {
                let len = v.len() * 8;
                // SAFETY: the vector is owned here and outlives every use of the buffer.
                unsafe { Buf::new(v.as_mut_ptr().cast(), len) }
            }
            // SAFETY: the mapping is owned here and outlives every use of the buffer.
            Scratch::Shared(a) => unsafe { Buf::new(a.ptr(), a.len()) },
            // SAFETY: as above, for the device allocation.
            Scratch::Device(d) => unsafe { Buf::new(d.ptr() as usize as *mut u8, d.bytes()) },
            // SAFETY: as above.
            Scratch::Exported(d) => unsafe { Buf::new(d.ptr() as usize as *mut u8, d.len()) },
        }
    }
}

/// Mean time over ranks of each rank's mean, and the skip-rule helper.
fn cross_rank_mean(grid: &GridDesc, local_mean: f64) -> Result<f64> {
    let all = allgather_f64(grid.handle().comm(), local_mean)?;
    Ok(all.iter().sum::<f64>() / all.len() as f64)
}

pub(super) struct Measured {
    pub(super) weighted_ms: f64,
    pub(super) per_op_ms: [f64; 4],
    pub(super) skipped: bool,
}

/// Where the search's operations run: the host, or the default stream of a GPU handle
/// (each timed operation then synchronises it).
fn exec_of(handle: &Handle) -> Exec {
    if handle.is_gpu() {
        Exec::Device(Stream::from_handle(0))
    } else {
        Exec::Host
    }
}

fn run_timed(exec: Exec, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    let t0 = Instant::now();
    f()?;
    if let Exec::Device(stream) = exec {
        cuda::synchronize(stream)?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

pub(super) fn time_transposes(grid: &GridDesc, o: &AutotuneOptions, best: f64) -> Result<Measured> {
    let exec = exec_of(grid.handle());
    let elem = o.dtype.size();
    let layouts: [TransposeLayouts; 4] = std::array::from_fn(|i| TransposeLayouts {
        input_halo: o.transpose_input_halo_extents[i],
        input_padding: o.transpose_input_padding[i],
        output_halo: o.transpose_output_halo_extents[i],
        output_padding: o.transpose_output_padding[i],
    });
    let mut largest = 0i64;
    for (i, d) in Direction::ALL.iter().enumerate() {
        let (a, b) = d.axes();
        let g = grid.grid();
        largest = largest
            .max(
                g.pencil_info(
                    a as i64,
                    grid.rank(),
                    layouts[i].input_halo,
                    layouts[i].input_padding,
                )?
                .size,
            )
            .max(
                g.pencil_info(
                    b as i64,
                    grid.rank(),
                    layouts[i].output_halo,
                    layouts[i].output_padding,
                )?
                .size,
            );
    }
    let bytes = largest as usize * elem;
    let library = o.transpose_use_library_arrays;
    let mut a = Scratch::like_user(grid.handle(), bytes, library)?;
    let mut b = Scratch::like_user(grid.handle(), bytes, library)?;
    let (ab, bb) = (a.buf(), b.buf());
    let round = |record: &mut [f64; 4]| -> Result<()> {
        for (i, d) in Direction::ALL.iter().enumerate() {
            if o.transpose_op_weights[i] == 0.0 {
                continue;
            }
            let out = if o.transpose_use_inplace_buffers[i] {
                ab
            } else {
                bb
            };
            let op = TransposeOp {
                direction: *d,
                layouts: layouts[i],
                dtype: o.dtype,
                own_cells: true,
                fields: 1,
            };
            record[i] += run_timed(exec, &mut || {
                grid.transpose(&op, ab.into(), out.into(), None, exec)
            })?;
        }
        Ok(())
    };
    let mut scratch = [0.0; 4];
    for _ in 0..o.n_warmup_trials.max(0) {
        round(&mut scratch)?;
    }
    let mut totals = [0.0; 4];
    let trials = o.n_trials.max(1);
    for t in 0..trials {
        grid.handle().comm().barrier()?;
        let mut this = [0.0; 4];
        round(&mut this)?;
        for i in 0..4 {
            totals[i] += this[i];
        }
        if t == 0 && o.skip_threshold > 0.0 {
            let first: f64 = (0..4).map(|i| this[i] * o.transpose_op_weights[i]).sum();
            if o.skip_threshold * cross_rank_mean(grid, first)? > best {
                return Ok(Measured {
                    weighted_ms: f64::INFINITY,
                    per_op_ms: this,
                    skipped: true,
                });
            }
        }
    }
    let mut per_op_ms = [0.0; 4];
    for i in 0..4 {
        per_op_ms[i] = cross_rank_mean(grid, totals[i] / trials as f64)?;
    }
    let weighted_ms = (0..4)
        .map(|i| per_op_ms[i] * o.transpose_op_weights[i])
        .sum();
    Ok(Measured {
        weighted_ms,
        per_op_ms,
        skipped: false,
    })
}

pub(super) fn time_halos(grid: &GridDesc, o: &AutotuneOptions, best: f64) -> Result<Measured> {
    let exec = exec_of(grid.handle());
    let axis = o.halo_axis as usize;
    let info = grid
        .grid()
        .pencil_info(o.halo_axis, grid.rank(), o.halo_extents, o.halo_padding)?;
    let mut a = Scratch::new(grid.handle(), info.size as usize * o.dtype.size())?;
    let ab = a.buf();
    let round = || -> Result<f64> {
        let mut t = 0.0;
        for dim in 0..3 {
            let spec = HaloSpec {
                axis,
                dim,
                halo: o.halo_extents,
                periods: o.halo_periods,
                padding: o.halo_padding,
            };
            t += run_timed(exec, &mut || {
                grid.update_halos(&spec, o.dtype, ab.into(), None, exec)
            })?;
        }
        Ok(t)
    };
    for _ in 0..o.n_warmup_trials.max(0) {
        round()?;
    }
    let trials = o.n_trials.max(1);
    let mut total = 0.0;
    for t in 0..trials {
        grid.handle().comm().barrier()?;
        let this = round()?;
        total += this;
        if t == 0
            && o.skip_threshold > 0.0
            && o.skip_threshold * cross_rank_mean(grid, this)? > best
        {
            return Ok(Measured {
                weighted_ms: f64::INFINITY,
                per_op_ms: [this, 0.0, 0.0, 0.0],
                skipped: true,
            });
        }
    }
    let mean = cross_rank_mean(grid, total / trials as f64)?;
    Ok(Measured {
        weighted_ms: mean,
        per_op_ms: [mean, 0.0, 0.0, 0.0],
        skipped: false,
    })
}
