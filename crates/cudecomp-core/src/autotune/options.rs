//! What a caller asks of the autotuner ([`AutotuneOptions`]) and what it gets back
//! ([`AutotuneReport`] of [`Trial`]s).

use crate::config::{DataType, GridConfig};
use crate::Fields;
use crate::{invalid, Result};

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
