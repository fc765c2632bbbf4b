//! The user's configuration: backend, data-type and rank-order enums with their C
//! values, and `GridConfig` (`cudecompGridDescConfig_t`) with the checks that do not
//! depend on the process grid.

use crate::{invalid, Fields, Result};

/// Transpose communication backends with their C values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransposeBackend {
    /// MPI point-to-point: every peer's chunk posted at once (`MPI_Isend`/`MPI_Irecv`).
    MpiP2p = 1,
    /// MPI point-to-point, pipelined: one peer at a time, unpacking while the next arrives.
    MpiP2pPl = 2,
    /// One `MPI_Alltoallv` over the sub-communicator.
    MpiA2a = 3,
    /// NCCL send/receive groups on device memory (GPU variant only).
    Nccl = 4,
    /// NCCL, pipelined peer by peer on the library's stream (GPU variant only).
    NcclPl = 5,
    /// NVSHMEM: every peer's chunk packed locally and put into its symmetric workspace by
    /// the copy engine, each followed by a signal (GPU variant, NVSHMEM's host library).
    Nvshmem = 6,
    /// NVSHMEM, pipelined peer by peer so unpacking overlaps the next put.
    NvshmemPl = 7,
    /// NVSHMEM, with the packing kernels writing straight into the peers' workspaces (SMs
    /// do the copies, not the copy engine), then signalling.
    NvshmemSm = 8,
    /// Beyond upstream: ranks on one node pack their chunks straight into each other's
    /// workspaces (CPU: node-shared memory; GPU: CUDA IPC and the copy engine), with no
    /// MPI or NCCL data movement.
    Direct = 9,
}

impl TransposeBackend {
    /// Every backend in C-value order (the autotuner's candidate order).
    pub const ALL: [TransposeBackend; 9] = [
        Self::MpiP2p,
        Self::MpiP2pPl,
        Self::MpiA2a,
        Self::Nccl,
        Self::NcclPl,
        Self::Nvshmem,
        Self::NvshmemPl,
        Self::NvshmemSm,
        Self::Direct,
    ];

    /// The backend with C value `v`, if any.
    pub fn from_i32(v: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|b| *b as i32 == v)
    }

    /// Upstream's `cudecompTransposeCommBackendToString` text.
    pub fn display_name(self) -> &'static str {
        match self {
            Self::MpiP2p => "MPI_P2P",
            Self::MpiP2pPl => "MPI_P2P (pipelined)",
            Self::MpiA2a => "MPI_A2A",
            Self::Nccl => "NCCL",
            Self::NcclPl => "NCCL (pipelined)",
            Self::Nvshmem => "NVSHMEM",
            Self::NvshmemPl => "NVSHMEM (pipelined)",
            Self::NvshmemSm => "NVSHMEM_SM",
            Self::Direct => "DIRECT",
        }
    }

    /// Upper-case enum name used by the autotuner's environment filters.
    pub fn enum_name(self) -> &'static str {
        match self {
            Self::MpiP2p => "MPI_P2P",
            Self::MpiP2pPl => "MPI_P2P_PL",
            Self::MpiA2a => "MPI_A2A",
            Self::Nccl => "NCCL",
            Self::NcclPl => "NCCL_PL",
            Self::Nvshmem => "NVSHMEM",
            Self::NvshmemPl => "NVSHMEM_PL",
            Self::NvshmemSm => "NVSHMEM_SM",
            Self::Direct => "DIRECT",
        }
    }

    /// True for the MPI family.
    pub fn is_mpi(self) -> bool {
        matches!(self, Self::MpiP2p | Self::MpiP2pPl | Self::MpiA2a)
    }

    /// True for the NCCL family.
    pub fn is_nccl(self) -> bool {
        matches!(self, Self::Nccl | Self::NcclPl)
    }

    /// True for the NVSHMEM family.
    pub fn is_nvshmem(self) -> bool {
        matches!(self, Self::Nvshmem | Self::NvshmemPl | Self::NvshmemSm)
    }
}

/// What the autotuner needs to know of a backend family (transpose or halo).
pub(crate) trait CommBackend: Copy + 'static {
    /// Every backend in C-value order.
    const EVERY: &'static [Self];
    /// Upper-case enum name (environment filters).
    fn enum_name(self) -> &'static str;
    /// True for the MPI family.
    fn is_mpi(self) -> bool;
    /// True for the NCCL family.
    fn is_nccl(self) -> bool;
    /// True for the NVSHMEM family.
    fn is_nvshmem(self) -> bool;
    /// True for DIRECT.
    fn is_direct(self) -> bool;
}

impl CommBackend for TransposeBackend {
    const EVERY: &'static [Self] = &Self::ALL;
    fn enum_name(self) -> &'static str {
        TransposeBackend::enum_name(self)
    }
    fn is_mpi(self) -> bool {
        TransposeBackend::is_mpi(self)
    }
    fn is_nccl(self) -> bool {
        TransposeBackend::is_nccl(self)
    }
    fn is_nvshmem(self) -> bool {
        TransposeBackend::is_nvshmem(self)
    }
    fn is_direct(self) -> bool {
        self == Self::Direct
    }
}

impl CommBackend for HaloBackend {
    const EVERY: &'static [Self] = &Self::ALL;
    fn enum_name(self) -> &'static str {
        HaloBackend::enum_name(self)
    }
    fn is_mpi(self) -> bool {
        HaloBackend::is_mpi(self)
    }
    fn is_nccl(self) -> bool {
        self == Self::Nccl
    }
    fn is_nvshmem(self) -> bool {
        HaloBackend::is_nvshmem(self)
    }
    fn is_direct(self) -> bool {
        self == Self::Direct
    }
}

/// Halo communication backends with their C values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HaloBackend {
    /// MPI point-to-point, both neighbours' faces in flight at once.
    Mpi = 1,
    /// MPI point-to-point, one neighbour after the other.
    MpiBlocking = 2,
    /// NCCL send/receive on device memory (GPU variant only).
    Nccl = 3,
    /// NVSHMEM: both neighbours' faces put into their symmetric workspaces at once.
    Nvshmem = 4,
    /// NVSHMEM, one neighbour after the other.
    NvshmemBlocking = 5,
    /// Beyond upstream: ranks on one node copy faces straight into their neighbours'
    /// workspaces (CPU: node-shared memory; GPU: CUDA IPC and the copy engine).
    Direct = 6,
}

impl HaloBackend {
    /// Every backend in C-value order.
    pub const ALL: [HaloBackend; 6] = [
        Self::Mpi,
        Self::MpiBlocking,
        Self::Nccl,
        Self::Nvshmem,
        Self::NvshmemBlocking,
        Self::Direct,
    ];

    /// The backend with C value `v`, if any.
    pub fn from_i32(v: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|b| *b as i32 == v)
    }

    /// Upstream's `cudecompHaloCommBackendToString` text.
    pub fn display_name(self) -> &'static str {
        match self {
            Self::Mpi => "MPI",
            Self::MpiBlocking => "MPI (blocking)",
            Self::Nccl => "NCCL",
            Self::Nvshmem => "NVSHMEM",
            Self::NvshmemBlocking => "NVSHMEM (blocking)",
            Self::Direct => "DIRECT",
        }
    }

    /// Upper-case enum name used by the autotuner's environment filters.
    pub fn enum_name(self) -> &'static str {
        match self {
            Self::Mpi => "MPI",
            Self::MpiBlocking => "MPI_BLOCKING",
            Self::Nccl => "NCCL",
            Self::Nvshmem => "NVSHMEM",
            Self::NvshmemBlocking => "NVSHMEM_BLOCKING",
            Self::Direct => "DIRECT",
        }
    }

    /// True for the MPI family.
    pub fn is_mpi(self) -> bool {
        matches!(self, Self::Mpi | Self::MpiBlocking)
    }

    /// True for the NVSHMEM family.
    pub fn is_nvshmem(self) -> bool {
        matches!(self, Self::Nvshmem | Self::NvshmemBlocking)
    }
}

/// Element types with their C values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `f32`, 4 bytes.
    Float = -1,
    /// `f64`, 8 bytes.
    Double = -2,
    /// Two `f32` (real, imaginary), 8 bytes.
    FloatComplex = -3,
    /// Two `f64` (real, imaginary), 16 bytes.
    DoubleComplex = -4,
}

impl DataType {
    /// The type with C value `v`, if any.
    pub fn from_i32(v: i32) -> Option<Self> {
        [
            Self::Float,
            Self::Double,
            Self::FloatComplex,
            Self::DoubleComplex,
        ]
        .into_iter()
        .find(|d| *d as i32 == v)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::Float => 4,
            Self::Double | Self::FloatComplex => 8,
            Self::DoubleComplex => 16,
        }
    }

    /// Upper-case enum name (`DataType.DOUBLE` is `DOUBLE`), for messages.
    pub fn enum_name(self) -> &'static str {
        match self {
            Self::Float => "FLOAT",
            Self::Double => "DOUBLE",
            Self::FloatComplex => "FLOAT_COMPLEX",
            Self::DoubleComplex => "DOUBLE_COMPLEX",
        }
    }

    /// One-letter BLAS-style name used in performance reports.
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Float => "S",
            Self::Double => "D",
            Self::FloatComplex => "C",
            Self::DoubleComplex => "Z",
        }
    }
}

/// Resolved process-grid rank order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RankOrder {
    /// Rank `r` sits in row `r / P_cols`, column `r % P_cols`.
    RowMajor = 1,
    /// Rank `r` sits in row `r % P_rows`, column `r / P_rows`.
    ColMajor = 2,
}

/// The user's grid configuration, field for field `cudecompGridDescConfig_t`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GridConfig {
    /// Cells of the global grid along X, Y, Z (each at least 1).
    pub gdims: [i32; 3],
    /// Extents the axes are split as if they had (the rest goes to the last rank); takes
    /// effect only when all three are non-zero.
    pub gdims_dist: [i32; 3],
    /// Process grid `[P_rows, P_cols]`, whose product is the number of ranks; `[0, 0]`
    /// lets the autotuner choose.
    pub pdims: [i32; 2],
    /// C value of the rank order: 0 default, 1 row-major, 2 column-major ([`RankOrder`]).
    pub rank_order: i32,
    /// C value of the [`TransposeBackend`].
    pub transpose_comm_backend: i32,
    /// Per pencil axis: store the pencil's complete axis fastest, the other two following
    /// cyclically.
    pub transpose_axis_contiguous: [bool; 3],
    /// Per pencil axis, the global axes in memory order (fastest first); all -1 when
    /// unset, and then it overrides nothing.
    pub transpose_mem_order: [[i32; 3]; 3],
    /// C value of the [`HaloBackend`].
    pub halo_comm_backend: i32,
}

impl Default for GridConfig {
    fn default() -> Self {
        GridConfig {
            gdims: [0; 3],
            gdims_dist: [0; 3],
            pdims: [0; 2],
            rank_order: 0,
            transpose_comm_backend: TransposeBackend::MpiP2p as i32,
            transpose_axis_contiguous: [false; 3],
            transpose_mem_order: [[-1; 3]; 3],
            halo_comm_backend: HaloBackend::Mpi as i32,
        }
    }
}

impl GridConfig {
    /// Every field by name, for the check that all ranks pass the same configuration.
    pub fn fields(&self) -> Fields {
        Fields::new()
            .with("gdims", self.gdims)
            .with("gdims_dist", self.gdims_dist)
            .with("pdims", self.pdims)
            .with("rank_order", self.rank_order)
            .with("transpose_comm_backend", self.transpose_comm_backend)
            .with("transpose_axis_contiguous", self.transpose_axis_contiguous)
            .with("transpose_mem_order", self.transpose_mem_order)
            .with("halo_comm_backend", self.halo_comm_backend)
    }

    /// True when `transpose_mem_order` is entirely set.
    pub fn mem_order_set(&self) -> bool {
        self.transpose_mem_order.iter().flatten().all(|&v| v >= 0)
    }

    /// Checks everything that does not depend on the process grid (reference §2.4).
    pub fn validate_static(&self) -> Result<()> {
        if TransposeBackend::from_i32(self.transpose_comm_backend).is_none() {
            invalid!(
                "transpose_comm_backend: expected a TransposeCommBackend value (1..9), got {}",
                self.transpose_comm_backend
            );
        }
        if HaloBackend::from_i32(self.halo_comm_backend).is_none() {
            invalid!(
                "halo_comm_backend: expected a HaloCommBackend value (1..6), got {}",
                self.halo_comm_backend
            );
        }
        if !(0..=2).contains(&self.rank_order) {
            invalid!(
                "rank_order: expected a RankOrder value (0, 1 or 2), got {}",
                self.rank_order
            );
        }
        for (i, &g) in self.gdims.iter().enumerate() {
            if g < 1 {
                invalid!(
                    "gdims[{i}]: expected a positive extent, got {g} (gdims = {:?})",
                    self.gdims
                );
            }
        }
        for (i, (&d, &g)) in self.gdims_dist.iter().zip(&self.gdims).enumerate() {
            if d < 0 || d > g {
                invalid!("gdims_dist[{i}]: expected 0 <= gdims_dist <= gdims ({g}), got {d}");
            }
        }
        let any_set = self.transpose_mem_order.iter().flatten().any(|&v| v >= 0);
        if any_set && !self.mem_order_set() {
            invalid!(
                "transpose_mem_order is only partially set: expected all entries -1 or every row a permutation of (0, 1, 2), got {:?}",
                self.transpose_mem_order
            );
        }
        if self.mem_order_set() {
            for (a, row) in self.transpose_mem_order.iter().enumerate() {
                let mut seen = [false; 3];
                for &v in row {
                    if !(0..3).contains(&v) || seen[v as usize] {
                        invalid!(
                            "transpose_mem_order setting is invalid: row {a} must be a permutation of (0, 1, 2), got {row:?}"
                        );
                    }
                    seen[v as usize] = true;
                }
            }
        }
        let [r, c] = self.pdims;
        if r < 0 || c < 0 || ((r == 0) != (c == 0)) {
            invalid!(
                "pdims: expected both entries positive (or both 0 to autotune), got [{r}, {c}]"
            );
        }
        Ok(())
    }

    /// Resolves `RANK_ORDER_DEFAULT` (0) using the deprecated column-major environment switch.
    pub fn resolved_rank_order(&self, default_col_major: bool) -> RankOrder {
        match self.rank_order {
            2 => RankOrder::ColMajor,
            1 => RankOrder::RowMajor,
            _ if default_col_major => RankOrder::ColMajor,
            _ => RankOrder::RowMajor,
        }
    }
}
