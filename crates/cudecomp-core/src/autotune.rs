//! Autotuning of the process grid and backends (reference §4): candidates, timing of
//! transpose rounds or halo rounds on scratch buffers, selection by (weighted) mean time.

use std::time::Instant;

use crate::comm::allgather_f64;
use crate::config::{CommBackend, DataType, GridConfig, HaloBackend, TransposeBackend};
use crate::cuda::{self, DeviceAlloc, Stream};
use crate::geometry::{split_axes, Grid};
use crate::handle::{GridDesc, Handle, MemorySpace};
use crate::mem::Buf;
use crate::plan::{Direction, HaloSpec, TransposeLayouts};
use crate::{invalid, unsupported, Error, Result};

/// `cudecompGridDescAutotuneOptions_t`.
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneOptions {
    pub n_warmup_trials: i32,
    pub n_trials: i32,
    /// Halo mode (`AutotuneGridMode.HALO`) chooses the grid by halo time.
    pub grid_mode_halo: bool,
    pub dtype: DataType,
    pub allow_uneven_decompositions: bool,
    pub disable_mpi_backends: bool,
    pub disable_nccl_backends: bool,
    pub disable_nvshmem_backends: bool,
    pub skip_threshold: f64,
    pub autotune_transpose_backend: bool,
    pub transpose_use_inplace_buffers: [bool; 4],
    pub transpose_op_weights: [f64; 4],
    pub transpose_input_halo_extents: [[i64; 3]; 4],
    pub transpose_output_halo_extents: [[i64; 3]; 4],
    pub transpose_input_padding: [[i64; 3]; 4],
    pub transpose_output_padding: [[i64; 3]; 4],
    pub autotune_halo_backend: bool,
    pub halo_extents: [i64; 3],
    pub halo_periods: [bool; 3],
    pub halo_axis: i64,
    pub halo_padding: [i64; 3],
}

impl AutotuneOptions {
    /// True when creating a grid from `cfg` with these options runs any search.
    pub fn wants_tuning(&self, cfg: &GridConfig) -> bool {
        cfg.pdims == [0, 0] || self.autotune_transpose_backend || self.autotune_halo_backend
    }

    /// A canonical encoding for the cross-rank agreement check.
    pub fn to_bytes(&self) -> Vec<u8> {
        format!("{self:?}").into_bytes()
    }
}

fn env_list(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

/// Applies an include (or `^`-exclude) list of upper-case names (reference §4.2).
fn filter_names<T: Copy>(
    var: &str,
    all: Vec<T>,
    name: impl Fn(T) -> &'static str,
    known: &[&str],
) -> Result<Vec<T>> {
    let Some(spec) = env_list(var) else {
        return Ok(all);
    };
    let (exclude, body) = match spec.strip_prefix('^') {
        Some(b) => (true, b),
        None => (false, spec.as_str()),
    };
    let names: Vec<&str> = body.split(',').map(str::trim).collect();
    if names.iter().any(|n| n.is_empty() || !known.contains(n)) {
        invalid!("{var}={spec:?}: expected a comma-separated list of {known:?}, optionally starting with '^'");
    }
    Ok(all
        .into_iter()
        .filter(|b| names.contains(&name(*b)) != exclude)
        .collect())
}

fn range_filter(var: &str) -> Result<Option<(i32, i32)>> {
    let Some(spec) = env_list(var) else {
        return Ok(None);
    };
    let parts: Vec<Option<i32>> = spec.split(',').map(|v| v.trim().parse().ok()).collect();
    match parts.as_slice() {
        [Some(lo), Some(hi)] if *lo >= 0 && *hi > 0 && lo <= hi => Ok(Some((*lo, *hi))),
        _ => invalid!("{var}={spec:?}: expected 'min,max' with 0 <= min <= max and max > 0"),
    }
}

/// Process grids in upstream's order, filtered by the environment ranges.
pub fn candidate_grids(nranks: usize, col_major: bool) -> Result<Vec<[i32; 2]>> {
    let n = nranks as i32;
    let rows = range_filter("CUDECOMP_AUTOTUNE_P_ROW_RANGE")?;
    let cols = range_filter("CUDECOMP_AUTOTUNE_P_COL_RANGE")?;
    let within = |v: i32, r: Option<(i32, i32)>| r.is_none_or(|(lo, hi)| (lo..=hi).contains(&v));
    let grids: Vec<[i32; 2]> = (1..=n)
        .filter(|f| n % f == 0)
        .map(|f| if col_major { [f, n / f] } else { [n / f, f] })
        .filter(|g| within(g[0], rows) && within(g[1], cols))
        .collect();
    if grids.is_empty() {
        invalid!("autotuning: the CUDECOMP_AUTOTUNE_P_ROW_RANGE / _P_COL_RANGE filters leave no process grid for {nranks} ranks");
    }
    Ok(grids)
}

/// The backends of one family the search tries, in C-value order: MPI always, NCCL and
/// DIRECT where usable, then the `var` environment filter and the `disable_*` options.
fn backend_candidates<B: CommBackend>(
    o: &AutotuneOptions,
    nccl: bool,
    direct: bool,
    var: &str,
    what: &str,
) -> Result<Vec<B>> {
    let all: Vec<B> = B::EVERY
        .iter()
        .copied()
        .filter(|b| b.is_mpi() || nccl && b.is_nccl() || direct && b.is_direct())
        .collect();
    let known: Vec<&str> = B::EVERY.iter().map(|b| b.enum_name()).collect();
    let list: Vec<B> = filter_names(var, all, |b| b.enum_name(), &known)?
        .into_iter()
        .filter(|b| {
            !(o.disable_mpi_backends && b.is_mpi() || o.disable_nccl_backends && b.is_nccl())
        })
        .collect();
    if list.is_empty() {
        invalid!(
            "autotuning: no {what} backend left to try (environment filter and disable_* options)"
        );
    }
    Ok(list)
}

/// Scratch data for timing (contents never matter).
enum Scratch {
    Host(Vec<u64>),
    Device(DeviceAlloc),
}

impl Scratch {
    fn new(handle: &Handle, space: MemorySpace, bytes: usize) -> Result<Scratch> {
        Ok(match space {
            MemorySpace::Host => Scratch::Host(vec![0u64; bytes.div_ceil(8).max(1)]),
            MemorySpace::Cuda => Scratch::Device(DeviceAlloc::new(&handle.cuda()?.device, bytes)?),
        })
    }

    fn buf(&mut self) -> Buf {
        match self {
            Scratch::Host(v) => {
                let len = v.len() * 8;
                // SAFETY: the vector is owned here and outlives every use of the buffer.
                unsafe { Buf::new(v.as_mut_ptr().cast(), len) }
            }
            // SAFETY: as above, for the device allocation.
            Scratch::Device(d) => unsafe { Buf::new(d.ptr() as usize as *mut u8, d.bytes()) },
        }
    }
}

/// Mean time over ranks of each rank's mean, and the skip-rule helper.
fn cross_rank_mean(grid: &GridDesc, local_mean: f64) -> Result<f64> {
    let all = allgather_f64(grid.handle().comm(), local_mean)?;
    Ok(all.iter().sum::<f64>() / all.len() as f64)
}

struct Measured {
    weighted_ms: f64,
    per_op_ms: [f64; 4],
    skipped: bool,
}

fn run_timed(space: MemorySpace, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    let t0 = Instant::now();
    f()?;
    if space == MemorySpace::Cuda {
        cuda::synchronize(Stream::from_handle(0))?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

fn time_transposes(
    grid: &GridDesc,
    o: &AutotuneOptions,
    space: MemorySpace,
    best: f64,
) -> Result<Measured> {
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
    let mut a = Scratch::new(grid.handle(), space, bytes)?;
    let mut b = Scratch::new(grid.handle(), space, bytes)?;
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
            let mut op = || match space {
                MemorySpace::Host => grid.transpose_host(*d, &layouts[i], o.dtype, ab, out, None),
                MemorySpace::Cuda => grid.transpose_device(
                    *d,
                    &layouts[i],
                    o.dtype,
                    ab,
                    out,
                    None,
                    Stream::from_handle(0),
                ),
            };
            record[i] += run_timed(space, &mut op)?;
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

fn time_halos(
    grid: &GridDesc,
    o: &AutotuneOptions,
    space: MemorySpace,
    best: f64,
) -> Result<Measured> {
    let axis = o.halo_axis as usize;
    let info = grid
        .grid()
        .pencil_info(o.halo_axis, grid.rank(), o.halo_extents, o.halo_padding)?;
    let mut a = Scratch::new(grid.handle(), space, info.size as usize * o.dtype.size())?;
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
            let mut op = || match space {
                MemorySpace::Host => grid.update_halos_host(&spec, o.dtype, ab, None),
                MemorySpace::Cuda => {
                    grid.update_halos_device(&spec, o.dtype, ab, None, Stream::from_handle(0))
                }
            };
            t += run_timed(space, &mut op)?;
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

/// True when the grid gives every rank cells in the pencils the search needs.
fn usable(grid: &Grid, o: &AutotuneOptions, halo_search: bool) -> bool {
    let axes: Vec<usize> = if halo_search {
        vec![o.halo_axis as usize]
    } else {
        vec![0, 1, 2]
    };
    if axes.iter().any(|&a| grid.has_empty_pencil(a)) {
        return false;
    }
    if !o.allow_uneven_decompositions {
        for a in axes {
            for (k, &g) in split_axes(a).iter().enumerate() {
                if grid.gdims_dist[g] % grid.pdims[k] as i64 != 0 {
                    return false;
                }
            }
        }
    }
    true
}

/// Runs the searches `opts` asks for and returns the configuration to build (process grid
/// and backends resolved). Collective.
pub fn autotune(
    handle: &Handle,
    cfg: &GridConfig,
    o: &AutotuneOptions,
    space: MemorySpace,
) -> Result<GridConfig> {
    if o.disable_nvshmem_backends && o.disable_mpi_backends && o.disable_nccl_backends {
        invalid!("autotuning: every backend family is disabled");
    }
    if !(0..3).contains(&o.halo_axis) {
        invalid!("halo_axis: expected 0, 1 or 2, got {}", o.halo_axis);
    }
    let root = handle.comm().rank() == 0;
    let col_major =
        cfg.resolved_rank_order(handle.col_major_default()) == crate::config::RankOrder::ColMajor;
    let tune_grid = cfg.pdims == [0, 0];
    let grids = if tune_grid {
        candidate_grids(handle.nranks(), col_major)?
    } else {
        vec![cfg.pdims]
    };
    // NCCL candidates only where every rank has its own GPU (NCCL refuses shared GPUs).
    let nccl = space == MemorySpace::Cuda
        && (o.autotune_transpose_backend || o.autotune_halo_backend)
        && handle.one_gpu_per_rank()?;
    // DIRECT only where every rank can write into every other: node-shared memory on
    // the host, CUDA IPC (one node) on GPUs.
    let direct = (o.autotune_transpose_backend || o.autotune_halo_backend)
        && match space {
            MemorySpace::Host => handle.host_direct_ok()?,
            MemorySpace::Cuda => handle.one_node()?,
        };
    let mut chosen = cfg.clone();
    let transpose_first = !o.grid_mode_halo;
    let mut grid_fixed = !tune_grid;
    for step in 0..2 {
        let transpose_step = (step == 0) == transpose_first;
        let wanted = if transpose_step {
            o.autotune_transpose_backend
        } else {
            o.autotune_halo_backend
        };
        if !wanted && (grid_fixed || step == 1) {
            continue;
        }
        let candidates = if grid_fixed {
            vec![chosen.pdims]
        } else {
            grids.clone()
        };
        let backends: Vec<i32> = match (transpose_step, wanted) {
            (true, true) => backend_candidates::<TransposeBackend>(
                o,
                nccl,
                direct,
                "CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS",
                "transpose",
            )?
            .into_iter()
            .map(|b| b as i32)
            .collect(),
            (false, true) => backend_candidates::<HaloBackend>(
                o,
                nccl,
                direct,
                "CUDECOMP_AUTOTUNE_HALO_BACKENDS",
                "halo",
            )?
            .into_iter()
            .map(|b| b as i32)
            .collect(),
            (true, false) => vec![chosen.transpose_comm_backend],
            (false, false) => vec![chosen.halo_comm_backend],
        };
        if root {
            println!(
                "CUDECOMP: Running {} autotuning...",
                if transpose_step { "transpose" } else { "halo" }
            );
            if !transpose_step {
                println!(
                    "CUDECOMP: Autotune halo axis: {}",
                    ["x", "y", "z"][o.halo_axis as usize]
                );
            }
        }
        let t_start = Instant::now();
        let mut best: Option<(f64, [i32; 2], i32)> = None;
        for pd in &candidates {
            let mut trial = chosen.clone();
            trial.pdims = *pd;
            let g = Grid::new(&trial, handle.nranks(), handle.col_major_default())?;
            if !usable(&g, o, !transpose_step) {
                continue;
            }
            for &b in &backends {
                if transpose_step {
                    trial.transpose_comm_backend = b;
                } else {
                    trial.halo_comm_backend = b;
                }
                let gd = handle.create_grid(&trial, space)?;
                let bound = best.map_or(f64::INFINITY, |x| x.0);
                let m = if transpose_step {
                    time_transposes(&gd, o, space, bound)
                } else {
                    time_halos(&gd, o, space, bound)
                };
                gd.destroy()?;
                let m = m?;
                if root {
                    report_line(transpose_step, pd, b, &m);
                }
                if !m.skipped && best.is_none_or(|x| m.weighted_ms < x.0) {
                    best = Some((m.weighted_ms, *pd, b));
                }
            }
        }
        let Some((t, pd, b)) = best else {
            unsupported!(
                "autotuning: no valid decomposition found for gdims {:?} on {} ranks",
                cfg.gdims,
                handle.nranks()
            );
        };
        chosen.pdims = pd;
        if transpose_step {
            chosen.transpose_comm_backend = b;
        } else {
            chosen.halo_comm_backend = b;
        }
        grid_fixed = true;
        if root {
            let name = if transpose_step {
                format!("backend: {}", name_t(b))
            } else {
                format!("halo backend: {}", name_h(b))
            };
            let what = if transpose_step {
                "Avg. time (weighted) [ms]"
            } else {
                "Avg. time [ms]"
            };
            println!(
                "CUDECOMP: SELECTED: grid: {} x {}, {name}, {what}: {t:.3}",
                pd[0], pd[1]
            );
            println!(
                "CUDECOMP: {} autotuning time [s]: {:.3}",
                if transpose_step { "transpose" } else { "halo" },
                t_start.elapsed().as_secs_f64()
            );
        }
    }
    if chosen.pdims == [0, 0] {
        return Err(Error::Internal("autotuning left pdims unset".into()));
    }
    Ok(chosen)
}

fn name_t(b: i32) -> &'static str {
    TransposeBackend::from_i32(b).map_or("ERROR", |b| b.display_name())
}

fn name_h(b: i32) -> &'static str {
    HaloBackend::from_i32(b).map_or("ERROR", |b| b.display_name())
}

fn report_line(transpose: bool, pd: &[i32; 2], b: i32, m: &Measured) {
    if transpose {
        println!(
            "CUDECOMP:\tgrid: {} x {}, backend: {}",
            pd[0],
            pd[1],
            name_t(b)
        );
        if m.skipped {
            println!("CUDECOMP:\tskipped (first trial over the skip threshold)");
            return;
        }
        println!("CUDECOMP:\tAvg. time (weighted) [ms]: {:.3}", m.weighted_ms);
        for (i, n) in ["TransposeXY", "TransposeYZ", "TransposeZY", "TransposeYX"]
            .iter()
            .enumerate()
        {
            println!("CUDECOMP:\t{n} avg. time [ms]: {:.3}", m.per_op_ms[i]);
        }
    } else {
        println!(
            "CUDECOMP:\tgrid: {} x {}, halo backend: {}",
            pd[0],
            pd[1],
            name_h(b)
        );
        if m.skipped {
            println!("CUDECOMP:\tskipped (first trial over the skip threshold)");
        } else {
            println!("CUDECOMP:\tAvg. time [ms]: {:.3}", m.weighted_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;

    fn options() -> AutotuneOptions {
        AutotuneOptions {
            n_warmup_trials: 1,
            n_trials: 2,
            grid_mode_halo: false,
            dtype: DataType::Double,
            allow_uneven_decompositions: true,
            disable_mpi_backends: false,
            disable_nccl_backends: false,
            disable_nvshmem_backends: false,
            skip_threshold: 0.0,
            autotune_transpose_backend: true,
            transpose_use_inplace_buffers: [false, true, false, true],
            transpose_op_weights: [1.0; 4],
            transpose_input_halo_extents: [[0; 3]; 4],
            transpose_output_halo_extents: [[0; 3]; 4],
            transpose_input_padding: [[0; 3]; 4],
            transpose_output_padding: [[0; 3]; 4],
            autotune_halo_backend: true,
            halo_extents: [1, 1, 1],
            halo_periods: [true; 3],
            halo_axis: 1,
            halo_padding: [0; 3],
        }
    }

    #[test]
    fn grid_order_matches_upstream() {
        assert_eq!(candidate_grids(4, false).unwrap(), [[4, 1], [2, 2], [1, 4]]);
        assert_eq!(candidate_grids(4, true).unwrap(), [[1, 4], [2, 2], [4, 1]]);
    }

    #[test]
    fn tunes_grid_and_backends_on_mock() {
        let chosen = mock::run(4, |c| {
            let h = Handle::new(c.split(0, c.rank() as i32).unwrap(), false);
            let cfg = GridConfig {
                gdims: [8, 12, 6],
                ..Default::default()
            };
            let gd = h
                .create_grid_tuned(&cfg, &options(), MemorySpace::Host)
                .unwrap();
            let g = gd.grid().clone();
            gd.destroy().unwrap();
            (g.pdims, g.transpose_backend, g.halo_backend)
        });
        assert!(chosen.iter().all(|c| *c == chosen[0]));
        assert_eq!(chosen[0].0[0] * chosen[0].0[1], 4);
        assert!(chosen[0].1.is_mpi() && chosen[0].2.is_mpi());
    }

    #[test]
    fn empty_grid_list_is_not_supported() {
        mock::run(4, |c| {
            let h = Handle::new(c.split(0, c.rank() as i32).unwrap(), false);
            // 1 cell along X and Y: only 1 x 4 avoids empty pencils, and uneven splits are refused.
            let cfg = GridConfig {
                gdims: [1, 1, 7],
                ..Default::default()
            };
            let mut o = options();
            o.allow_uneven_decompositions = false;
            let r = h.create_grid_tuned(&cfg, &o, MemorySpace::Host);
            assert!(matches!(r, Err(Error::NotSupported(_))), "{:?}", r.err());
        });
    }
}
