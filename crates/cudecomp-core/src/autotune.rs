//! Autotuning of the process grid and backends (reference §4): candidates, timing of
//! transpose rounds or halo rounds on scratch buffers, selection by (weighted) mean time.
//! Built on the handle: [`create_grid`] searches, then creates the chosen grid.

use std::time::Instant;

use crate::comm::allgather_f64;
use crate::config::{CommBackend, DataType, GridConfig, HaloBackend, TransposeBackend};
use crate::cuda::vmm::DeviceArray;
use crate::cuda::{self, DeviceAlloc, Stream};
use crate::engine::Exec;
use crate::geometry::{split_axes, Grid};
use crate::handle::grid::TransposeOp;
use crate::handle::{GridDesc, Handle};
use crate::mem::shm::SharedArray;
use crate::mem::Buf;
use crate::plan::{Direction, HaloSpec, TransposeLayouts};
use crate::settings::{AutotuneFilters, NameFilter};
use crate::Fields;
use crate::{invalid, unsupported, Error, Result};

/// `cudecompGridDescAutotuneOptions_t`.
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneOptions {
    /// Untimed rounds run for each candidate before the timed ones.
    pub n_warmup_trials: i32,
    /// Timed rounds per candidate (at least 1); the candidate's score is their mean.
    pub n_trials: i32,
    /// Halo mode (`AutotuneGridMode.HALO`) chooses the grid by halo time.
    pub grid_mode_halo: bool,
    /// Element type of the scratch buffers the rounds run on.
    pub dtype: DataType,
    /// Also try process grids that split a distributed axis unevenly.
    pub allow_uneven_decompositions: bool,
    /// Leave the MPI backends out of the candidates.
    pub disable_mpi_backends: bool,
    /// Leave the NCCL backends out of the candidates.
    pub disable_nccl_backends: bool,
    /// Upstream's NVSHMEM switch: NVSHMEM backends are never tried here; only counts when
    /// every family is disabled (InvalidUsage).
    pub disable_nvshmem_backends: bool,
    /// When above 0, a candidate whose first timed round times this factor exceeds the
    /// best score so far is abandoned.
    pub skip_threshold: f64,
    /// Search the transpose backend too (otherwise the configured one is timed).
    pub autotune_transpose_backend: bool,
    /// Per transpose (X→Y, Y→Z, Z→Y, Y→X): run it in place.
    pub transpose_use_inplace_buffers: [bool; 4],
    /// Time the transposes between library arrays (as `GridDesc.empty_pencil` returns on
    /// DIRECT grids: node-shared host memory, exported device memory), where DIRECT then
    /// copies once (on GPUs where the copy engine carries every chunk, or with
    /// `CUDECOMP_SINGLE_COPY=1`).
    pub transpose_use_library_arrays: bool,
    /// Per transpose: weight of its mean time in the score (0: not run).
    pub transpose_op_weights: [f64; 4],
    /// Per transpose: halo extents (X, Y, Z) of its input pencil.
    pub transpose_input_halo_extents: [[i64; 3]; 4],
    /// Per transpose: halo extents (X, Y, Z) of its output pencil.
    pub transpose_output_halo_extents: [[i64; 3]; 4],
    /// Per transpose: padding (X, Y, Z) of its input pencil.
    pub transpose_input_padding: [[i64; 3]; 4],
    /// Per transpose: padding (X, Y, Z) of its output pencil.
    pub transpose_output_padding: [[i64; 3]; 4],
    /// Search the halo backend too (otherwise the configured one is timed).
    pub autotune_halo_backend: bool,
    /// Halo extents (X, Y, Z) of the pencil a halo round updates.
    pub halo_extents: [i64; 3],
    /// Periodic boundaries (X, Y, Z) of a halo round.
    pub halo_periods: [bool; 3],
    /// Which pencil (0 X, 1 Y, 2 Z) a halo round updates along dimensions 0, 1 and 2.
    pub halo_axis: i64,
    /// Padding (X, Y, Z) of the pencil a halo round updates.
    pub halo_padding: [i64; 3],
}

impl AutotuneOptions {
    /// True when creating a grid from `cfg` with these options runs any search.
    pub fn wants_tuning(&self, cfg: &GridConfig) -> bool {
        cfg.pdims == [0, 0] || self.autotune_transpose_backend || self.autotune_halo_backend
    }

    /// Every field by name, for the check that all ranks pass the same options.
    pub fn fields(&self) -> Fields {
        Fields::new()
            .with("n_warmup_trials", self.n_warmup_trials)
            .with("n_trials", self.n_trials)
            .with(
                "grid_mode",
                if self.grid_mode_halo {
                    "HALO"
                } else {
                    "TRANSPOSE"
                },
            )
            .with("dtype", self.dtype)
            .with(
                "allow_uneven_decompositions",
                self.allow_uneven_decompositions,
            )
            .with("disable_mpi_backends", self.disable_mpi_backends)
            .with("disable_nccl_backends", self.disable_nccl_backends)
            .with("disable_nvshmem_backends", self.disable_nvshmem_backends)
            .with("skip_threshold", self.skip_threshold)
            .with(
                "autotune_transpose_backend",
                self.autotune_transpose_backend,
            )
            .with(
                "transpose_use_inplace_buffers",
                self.transpose_use_inplace_buffers,
            )
            .with(
                "transpose_use_library_arrays",
                self.transpose_use_library_arrays,
            )
            .with("transpose_op_weights", self.transpose_op_weights)
            .with(
                "transpose_input_halo_extents",
                self.transpose_input_halo_extents,
            )
            .with(
                "transpose_output_halo_extents",
                self.transpose_output_halo_extents,
            )
            .with("transpose_input_padding", self.transpose_input_padding)
            .with("transpose_output_padding", self.transpose_output_padding)
            .with("autotune_halo_backend", self.autotune_halo_backend)
            .with("halo_extents", self.halo_extents)
            .with("halo_periods", self.halo_periods)
            .with("halo_axis", self.halo_axis)
            .with("halo_padding", self.halo_padding)
    }

    /// Checks the options' values (InvalidUsage naming the field).
    pub fn validate(&self) -> Result<()> {
        if self.n_warmup_trials < 0 {
            invalid!(
                "n_warmup_trials: expected 0 or more, got {}",
                self.n_warmup_trials
            );
        }
        if self.n_trials < 1 {
            invalid!("n_trials: expected 1 or more, got {}", self.n_trials);
        }
        if !(self.skip_threshold.is_finite() && self.skip_threshold >= 0.0) {
            invalid!(
                "skip_threshold: expected a finite value >= 0, got {}",
                self.skip_threshold
            );
        }
        let w = &self.transpose_op_weights;
        if w.iter().any(|x| !(x.is_finite() && *x >= 0.0)) || w.iter().all(|&x| x == 0.0) {
            invalid!("transpose_op_weights: expected finite weights >= 0, not all zero, got {w:?}");
        }
        if !(0..3).contains(&self.halo_axis) {
            invalid!("halo_axis: expected 0, 1 or 2, got {}", self.halo_axis);
        }
        let tables = [
            (
                "transpose_input_halo_extents",
                &self.transpose_input_halo_extents,
            ),
            (
                "transpose_output_halo_extents",
                &self.transpose_output_halo_extents,
            ),
            ("transpose_input_padding", &self.transpose_input_padding),
            ("transpose_output_padding", &self.transpose_output_padding),
        ];
        for (name, t) in tables {
            if t.iter().flatten().any(|&x| x < 0) {
                invalid!("{name}: expected non-negative values, got {t:?}");
            }
        }
        for (name, t) in [
            ("halo_extents", &self.halo_extents),
            ("halo_padding", &self.halo_padding),
        ] {
            if t.iter().any(|&x| x < 0) {
                invalid!("{name}: expected non-negative values, got {t:?}");
            }
        }
        Ok(())
    }
}

/// One measured candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// `"transpose"` or `"halo"`.
    pub mode: &'static str,
    /// The candidate process grid.
    pub pdims: [i32; 2],
    /// The backend's C value (transpose or halo family, per `mode`).
    pub backend: i32,
    /// Upstream's display name of the backend.
    pub backend_name: &'static str,
    /// Weighted mean over the four transposes, or the mean of a halo round (ms).
    pub time_ms: f64,
    /// Mean of each transpose (X→Y, Y→Z, Z→Y, Y→X), or the halo round first (ms).
    pub per_op_ms: [f64; 4],
    /// Stopped after its first trial (over the skip threshold).
    pub skipped: bool,
}

/// What a search measured and chose, and the log it wrote (upstream's lines).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutotuneReport {
    /// Every candidate, in the order measured.
    pub trials: Vec<Trial>,
    /// Messages, one per line, as upstream prints them (rank 0 shows them).
    pub lines: Vec<String>,
}

/// Process grids in upstream's order, filtered by the row and column ranges of `f`.
pub(crate) fn candidate_grids(
    nranks: usize,
    col_major: bool,
    f: &AutotuneFilters,
) -> Result<Vec<[i32; 2]>> {
    let n = nranks as i32;
    let (rows, cols) = (f.p_row_range, f.p_col_range);
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

/// The backends of one family the search tries, in C-value order: MPI always, NCCL,
/// DIRECT and NVSHMEM where usable (`[nccl, direct, nvshmem]`), then the `filter` of the
/// environment and the `disable_*` options.
fn backend_candidates<B: CommBackend>(
    o: &AutotuneOptions,
    [nccl, direct, nvshmem]: [bool; 3],
    filter: Option<&NameFilter>,
    what: &str,
) -> Result<Vec<B>> {
    let all: Vec<B> = B::EVERY
        .iter()
        .copied()
        .filter(|b| {
            b.is_mpi()
                || nccl && b.is_nccl()
                || direct && b.is_direct()
                || nvshmem && b.is_nvshmem()
        })
        .collect();
    let names = |v: &[B]| -> Vec<&str> { v.iter().map(|b| b.enum_name()).collect() };
    let kept: Vec<B> = all
        .iter()
        .copied()
        .filter(|b| filter.is_none_or(|f| f.keeps(b.enum_name())))
        .collect();
    let list: Vec<B> = kept
        .iter()
        .copied()
        .filter(|b| {
            !(o.disable_mpi_backends && b.is_mpi()
                || o.disable_nccl_backends && b.is_nccl()
                || o.disable_nvshmem_backends && b.is_nvshmem())
        })
        .collect();
    if list.is_empty() {
        let var = format!("CUDECOMP_AUTOTUNE_{}_BACKENDS", what.to_uppercase());
        let why = if kept.is_empty() {
            format!("{var} keeps none of them")
        } else {
            let filtered = if filter.is_some() {
                format!("{var} keeps {:?}", names(&kept))
            } else {
                format!("{var} is unset")
            };
            format!(
                "{filtered}, and the options disable_mpi_backends={}, disable_nccl_backends={}, disable_nvshmem_backends={} remove the rest",
                o.disable_mpi_backends,
                o.disable_nccl_backends,
                o.disable_nvshmem_backends
            )
        };
        invalid!(
            "autotuning: no {what} backend left to try: this handle can run {:?}, and {why}",
            names(&all)
        );
    }
    Ok(list)
}

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

struct Measured {
    weighted_ms: f64,
    per_op_ms: [f64; 4],
    skipped: bool,
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

fn time_transposes(grid: &GridDesc, o: &AutotuneOptions, best: f64) -> Result<Measured> {
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

fn time_halos(grid: &GridDesc, o: &AutotuneOptions, best: f64) -> Result<Measured> {
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

/// Collective: creates a grid from `cfg`, running first the searches `o` asks for
/// (process grid when `pdims` is `[0, 0]`, transpose and/or halo backends). Returns the
/// grid and what the search measured (`None` when the options ask for no search; they
/// are checked all the same).
pub(crate) fn create_grid(
    handle: &Handle,
    cfg: &GridConfig,
    o: &AutotuneOptions,
) -> Result<(GridDesc, Option<AutotuneReport>)> {
    let mine = cfg.fields().extended(o.fields());
    handle.settle("create_grid(autotune_options)", &mine, Ok(()))?;
    cfg.validate_static()?;
    o.validate()?;
    if !o.wants_tuning(cfg) {
        return Ok((handle.create_grid(cfg)?, None));
    }
    let mut report = AutotuneReport::default();
    let chosen = search(handle, cfg, o, &mut report)?;
    Ok((handle.create_grid(&chosen)?, Some(report)))
}

/// Runs the searches and returns the configuration to build (process grid and backends
/// resolved). Collective.
fn search(
    handle: &Handle,
    cfg: &GridConfig,
    o: &AutotuneOptions,
    report: &mut AutotuneReport,
) -> Result<GridConfig> {
    if o.disable_nvshmem_backends && o.disable_mpi_backends && o.disable_nccl_backends {
        invalid!("autotuning: every backend family is disabled");
    }
    let col_major = cfg.resolved_rank_order(handle.settings().col_major_rank_order)
        == crate::config::RankOrder::ColMajor;
    let tune_grid = cfg.pdims == [0, 0];
    let grids = if tune_grid {
        candidate_grids(handle.nranks(), col_major, &handle.settings().autotune)?
    } else {
        vec![cfg.pdims]
    };
    let searching = o.autotune_transpose_backend || o.autotune_halo_backend;
    // NCCL candidates only where every rank has its own GPU (NCCL refuses shared GPUs).
    let nccl = handle.is_gpu() && searching && handle.one_gpu_per_rank()?;
    // NVSHMEM where every rank has its own GPU and the library.
    let nvshmem = nccl && !o.disable_nvshmem_backends && handle.nvshmem_usable()?;
    // DIRECT only where every rank can write into every other: node-shared memory on
    // the host, CUDA IPC (one node) on GPUs.
    let direct = searching
        && if handle.is_gpu() {
            handle.one_node()?
        } else {
            handle.host_direct_ok()?
        };
    let mut chosen = cfg.clone();
    let transpose_first = !o.grid_mode_halo;
    let mut grid_fixed = !tune_grid;
    for step in 0..2 {
        let transpose_step = (step == 0) == transpose_first;
        let mode = if transpose_step { "transpose" } else { "halo" };
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
                [nccl, direct, nvshmem],
                handle.settings().autotune.transpose_backends.as_ref(),
                "transpose",
            )?
            .into_iter()
            .map(|b| b as i32)
            .collect(),
            (false, true) => backend_candidates::<HaloBackend>(
                o,
                [nccl, direct, nvshmem],
                handle.settings().autotune.halo_backends.as_ref(),
                "halo",
            )?
            .into_iter()
            .map(|b| b as i32)
            .collect(),
            (true, false) => vec![chosen.transpose_comm_backend],
            (false, false) => vec![chosen.halo_comm_backend],
        };
        report
            .lines
            .push(format!("CUDECOMP: Running {mode} autotuning..."));
        if !transpose_step {
            report.lines.push(format!(
                "CUDECOMP: Autotune halo axis: {}",
                ["x", "y", "z"][o.halo_axis as usize]
            ));
        }
        let t_start = Instant::now();
        let mut best: Option<(f64, [i32; 2], i32)> = None;
        for pd in &candidates {
            let mut trial = chosen.clone();
            trial.pdims = *pd;
            let g = Grid::new(
                &trial,
                handle.nranks(),
                handle.settings().col_major_rank_order,
            )?;
            if !usable(&g, o, !transpose_step) {
                continue;
            }
            for &b in &backends {
                if transpose_step {
                    trial.transpose_comm_backend = b;
                } else {
                    trial.halo_comm_backend = b;
                }
                let gd = handle.create_grid(&trial)?;
                let bound = best.map_or(f64::INFINITY, |x| x.0);
                let m = if transpose_step {
                    time_transposes(&gd, o, bound)
                } else {
                    time_halos(&gd, o, bound)
                };
                gd.destroy()?;
                let m = m?;
                let t = Trial {
                    mode,
                    pdims: *pd,
                    backend: b,
                    backend_name: if transpose_step { name_t(b) } else { name_h(b) },
                    time_ms: m.weighted_ms,
                    per_op_ms: m.per_op_ms,
                    skipped: m.skipped,
                };
                report_lines(&t, &mut report.lines);
                report.trials.push(t);
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
        let (name, what) = if transpose_step {
            chosen.transpose_comm_backend = b;
            (
                format!("backend: {}", name_t(b)),
                "Avg. time (weighted) [ms]",
            )
        } else {
            chosen.halo_comm_backend = b;
            (format!("halo backend: {}", name_h(b)), "Avg. time [ms]")
        };
        grid_fixed = true;
        report.lines.push(format!(
            "CUDECOMP: SELECTED: grid: {} x {}, {name}, {what}: {t:.3}",
            pd[0], pd[1]
        ));
        report.lines.push(format!(
            "CUDECOMP: {mode} autotuning time [s]: {:.3}",
            t_start.elapsed().as_secs_f64()
        ));
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

/// Upstream's lines for one measured candidate.
fn report_lines(t: &Trial, out: &mut Vec<String>) {
    let [r, c] = t.pdims;
    if t.mode == "transpose" {
        out.push(format!(
            "CUDECOMP:\tgrid: {r} x {c}, backend: {}",
            t.backend_name
        ));
    } else {
        out.push(format!(
            "CUDECOMP:\tgrid: {r} x {c}, halo backend: {}",
            t.backend_name
        ));
    }
    if t.skipped {
        out.push("CUDECOMP:\tskipped (first trial over the skip threshold)".into());
        return;
    }
    if t.mode == "transpose" {
        out.push(format!(
            "CUDECOMP:\tAvg. time (weighted) [ms]: {:.3}",
            t.time_ms
        ));
        for (i, n) in ["TransposeXY", "TransposeYZ", "TransposeZY", "TransposeYX"]
            .iter()
            .enumerate()
        {
            out.push(format!(
                "CUDECOMP:\t{n} avg. time [ms]: {:.3}",
                t.per_op_ms[i]
            ));
        }
    } else {
        out.push(format!("CUDECOMP:\tAvg. time [ms]: {:.3}", t.time_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;
    use crate::handle::Memory;
    use crate::settings::Settings;

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
            transpose_use_library_arrays: false,
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
        assert_eq!(
            candidate_grids(4, false, &AutotuneFilters::default()).unwrap(),
            [[4, 1], [2, 2], [1, 4]]
        );
        assert_eq!(
            candidate_grids(4, true, &AutotuneFilters::default()).unwrap(),
            [[1, 4], [2, 2], [4, 1]]
        );
    }

    #[test]
    fn tunes_grid_and_backends_on_mock() {
        let chosen = mock::run(4, |c| {
            let h = Handle::from_communicator(
                c.split(0, c.rank() as i32).unwrap(),
                Memory::Host,
                Ok(Settings::default()),
            )
            .unwrap();
            let cfg = GridConfig {
                gdims: [8, 12, 6],
                ..Default::default()
            };
            let (gd, report) = create_grid(&h, &cfg, &options()).unwrap();
            assert!(report.is_some_and(|r| !r.trials.is_empty()));
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
            let h = Handle::from_communicator(
                c.split(0, c.rank() as i32).unwrap(),
                Memory::Host,
                Ok(Settings::default()),
            )
            .unwrap();
            // 1 cell along X and Y: only 1 x 4 avoids empty pencils, and uneven splits are refused.
            let cfg = GridConfig {
                gdims: [1, 1, 7],
                ..Default::default()
            };
            let mut o = options();
            o.allow_uneven_decompositions = false;
            let r = create_grid(&h, &cfg, &o).map(|(g, _)| g);
            assert!(matches!(r, Err(Error::NotSupported(_))), "{:?}", r.err());
        });
    }
}
