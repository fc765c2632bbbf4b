//! Autotuning of the process grid and backends (reference §4): candidates, timing of
//! transpose rounds or halo rounds on scratch buffers, selection by (weighted) mean time.
//! A layer above the handle: [`Handle::create_grid_with`] searches, then creates the
//! chosen grid; the handle itself knows nothing of the search.

use std::time::Instant;

use crate::config::{CommBackend, GridConfig, HaloBackend, TransposeBackend};
use crate::geometry::{split_axes, Grid};
use crate::handle::{GridDesc, Handle};
use crate::settings::{AutotuneFilters, NameFilter};
use crate::{invalid, unsupported, Error, Result};

mod options;
mod timing;

pub use options::{AutotuneOptions, AutotuneReport, Trial};
use timing::{time_halos, time_transposes};

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

impl Handle {
    /// Collective: creates a grid from `cfg`, running first the searches `options` asks
    /// for (the process grid when `pdims` is `[0, 0]`, transpose and/or halo backends).
    /// Returns the grid and what the search measured (`None` when the options ask for no
    /// search; they are checked all the same).
    pub fn create_grid_with(
        &self,
        cfg: &GridConfig,
        options: &AutotuneOptions,
    ) -> Result<(GridDesc, Option<AutotuneReport>)> {
        self.check_alive()?;
        let mine = cfg.fields().extended(options.fields());
        self.settle("create_grid(autotune_options)", &mine, Ok(()))?;
        cfg.validate_static()?;
        options.validate()?;
        if !options.wants_tuning(cfg) {
            return Ok((self.create_grid(cfg)?, None));
        }
        let mut report = AutotuneReport::default();
        let chosen = search(self, cfg, options, &mut report)?;
        Ok((self.create_grid(&chosen)?, Some(report)))
    }
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
    let direct = searching && handle.direct_usable()?;
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
mod tests;
