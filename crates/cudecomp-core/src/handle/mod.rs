//! The library handle (`cudecompHandle_t`): a private duplicate of the user's
//! communicator, the workspace its operations share, the GPU state of a GPU handle, and
//! the collective facts about its ranks ([`capabilities`]). Grids are created from it
//! ([`GridDesc`], in [`grid`]).

pub mod capabilities;
pub mod grid;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::comm::{agree_on, Communicator};
use crate::config::{GridConfig, HaloBackend, TransposeBackend};
use crate::cuda::nvshmem::SymmetricBuffer;
use crate::cuda::Device;
use crate::engine::device::{lock, DeviceState};
use crate::engine::workspace::{Lease, Pool, Workspace};
use crate::geometry::Grid;
use crate::Fields;
use crate::{unsupported, Error, Result};
use capabilities::Capabilities;

pub use capabilities::MAX_HOST_THREADS;
pub use grid::GridDesc;

/// Where a GPU handle loads its communication libraries from (paths or sonames).
#[derive(Clone, Debug, Default)]
pub struct CudaLibraries {
    /// NCCL's `libnccl.so.2`.
    pub nccl: String,
    /// NVSHMEM's `libnvshmem_host.so.3`.
    pub nvshmem: String,
}

struct Shared {
    comm: Box<dyn Communicator>,
    /// Grids created so far (numbers them alike on every rank).
    grids: AtomicU64,
    pool: Pool,
    /// GPU handles run one operation at a time (their DIRECT signals and NCCL
    /// communicator are shared): this lock orders them.
    device_ops: Mutex<()>,
    col_major_default: bool,
    device: Option<DeviceState>,
    caps: Capabilities,
}

/// A library handle bound to a (private duplicate of a) communicator. Cloning shares it.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// A host handle (the CPU variant) over a communicator it owns from now on.
    /// `col_major_default` is the deprecated `CUDECOMP_USE_COL_MAJOR_RANK_ORDER=1` switch.
    pub fn new(comm: Box<dyn Communicator>, col_major_default: bool) -> Handle {
        Handle::with_device(comm, col_major_default, None)
    }

    /// A GPU handle on `device`. `libs` locates `libnccl.so.2` and
    /// `libnvshmem_host.so.3`; `mpi_cuda_aware` overrides what MPI reports
    /// (`CUDECOMP_MPI_CUDA_AWARE`).
    pub fn new_cuda(
        comm: Box<dyn Communicator>,
        col_major_default: bool,
        device: Arc<Device>,
        libs: CudaLibraries,
        mpi_cuda_aware: Option<bool>,
    ) -> Handle {
        let aware = mpi_cuda_aware.unwrap_or_else(|| comm.cuda_aware());
        let state = DeviceState::new(device, libs.nccl, libs.nvshmem, aware);
        Handle::with_device(comm, col_major_default, Some(state))
    }

    fn with_device(
        comm: Box<dyn Communicator>,
        col_major_default: bool,
        device: Option<DeviceState>,
    ) -> Handle {
        Handle {
            shared: Arc::new(Shared {
                comm,
                grids: AtomicU64::new(0),
                pool: Pool::default(),
                device_ops: Mutex::new(()),
                col_major_default,
                device,
                caps: Capabilities::default(),
            }),
        }
    }

    /// True for a GPU handle (operations run on device memory).
    pub fn is_gpu(&self) -> bool {
        self.shared.device.is_some()
    }

    /// The GPU state (InvalidUsage on a host handle).
    pub fn device(&self) -> Result<&DeviceState> {
        self.shared
            .device
            .as_ref()
            .ok_or_else(|| Error::InvalidUsage("this handle has no CUDA device".into()))
    }

    /// This process's rank in the handle's communicator.
    pub fn rank(&self) -> usize {
        self.shared.comm.rank()
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.shared.comm.size()
    }

    /// The handle's communicator.
    pub fn comm(&self) -> &dyn Communicator {
        self.shared.comm.as_ref()
    }

    /// Whether `RANK_ORDER_DEFAULT` resolves to column-major (deprecated environment switch).
    pub fn col_major_default(&self) -> bool {
        self.shared.col_major_default
    }

    pub(crate) fn next_grid_serial(&self) -> u64 {
        self.shared.grids.fetch_add(1, Ordering::Relaxed)
    }

    /// A workspace slot for one operation (see [`Pool`]). Host handles lend concurrent
    /// operations (threads on distinct grids) slots of their own; a GPU handle's
    /// operations take turns.
    pub(crate) fn lease(&self) -> (Option<MutexGuard<'_, ()>>, Lease) {
        let turn = self.is_gpu().then(|| lock(&self.shared.device_ops));
        (turn, self.shared.pool.lease())
    }

    /// Collective: true when every rank runs on this rank's node.
    pub fn one_node(&self) -> Result<bool> {
        capabilities::one_node(self.comm())
    }

    /// Collective (first call): threads this rank uses for host copies (see
    /// [`capabilities`]).
    pub fn host_threads(&self) -> Result<usize> {
        self.shared.caps.host_threads(self.comm())
    }

    /// Collective (first call): true when every rank can write into every other's
    /// node-shared memory (the host DIRECT backend).
    pub fn host_direct_ok(&self) -> Result<bool> {
        self.shared.caps.host_direct_ok(self.comm())
    }

    /// Collective: true when every rank drives its own GPU (what NCCL requires).
    pub fn one_gpu_per_rank(&self) -> Result<bool> {
        capabilities::one_gpu_per_rank(self.comm(), &self.device()?.device)
    }

    /// Collective (first call): this handle's share of the NVSHMEM runtime.
    fn start_nvshmem(&self, dev: &DeviceState) -> Result<()> {
        let same_node = capabilities::same_node(self.comm())?;
        if same_node.iter().all(|&s| s)
            && std::env::var_os("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME").is_none()
        {
            // The unique-ID bootstrap needs a socket interface; on one node the loopback
            // always serves.
            std::env::set_var("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo");
        }
        dev.start_nvshmem(self.comm(), &same_node)
    }

    /// Collective: `bytes` (the most any rank asks for) of NVSHMEM symmetric memory, for
    /// the `work` of NVSHMEM operations on this handle's grids (which then exchange through
    /// it instead of the handle's symmetric workspace). Needs the runtime, started by the
    /// creation of a grid with an NVSHMEM backend. Free it with
    /// [`Handle::free_symmetric`]; what is left is freed at [`Handle::finalize`].
    pub fn malloc_symmetric(&self, bytes: usize) -> Result<SymmetricBuffer> {
        let dev = self.device()?;
        let _one = lock(&self.shared.device_ops);
        dev.lend_symmetric(self.comm(), bytes)
    }

    /// Collective: frees a buffer of [`Handle::malloc_symmetric`] once the device is idle
    /// (`InvalidUsage` on every rank when the ranks free different buffers, or one freed
    /// already).
    pub fn free_symmetric(&self, b: &SymmetricBuffer) -> Result<()> {
        let dev = self.device()?;
        let _one = lock(&self.shared.device_ops);
        b.free(&dev.device, self.comm())
    }

    /// Collective: true when this GPU handle can run NVSHMEM backends (one GPU per rank,
    /// NVSHMEM's host library on every rank); starts the runtime when so.
    pub fn nvshmem_usable(&self) -> Result<bool> {
        let Some(dev) = &self.shared.device else {
            return Ok(false);
        };
        if !self.one_gpu_per_rank()? {
            return Ok(false);
        }
        match self.start_nvshmem(dev) {
            Ok(()) => Ok(true),
            Err(Error::NotSupported(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Collective: fails on every rank, without hanging, unless all ranks pass the same
    /// `fields`; the message names the first field that differs and both values. `what`
    /// names the call. A rank that failed before it could describe its part joins through
    /// [`Handle::refuse_agreement`] instead: the others then fail naming it.
    pub fn check_agreement(&self, what: &str, fields: &Fields) -> Result<()> {
        agree_on(self.comm(), what, Ok(fields))
    }

    /// Collective: the part of [`Handle::check_agreement`] for a rank whose arguments
    /// failed before they could be described (`why`: the error it raises itself), so that
    /// the other ranks raise too instead of waiting for it.
    pub fn refuse_agreement(&self, why: &str) -> Result<()> {
        match agree_on(self.comm(), "", Err(why)) {
            Err(Error::InvalidUsage(_)) => Ok(()), // (what every rank learns: this one failed)
            other => other,
        }
    }

    /// Collective: validates `cfg` (the same on all ranks: checked) and builds a grid
    /// descriptor with its row and column communicators. Backends this handle cannot run
    /// raise `NotSupported` on every rank.
    pub fn create_grid(&self, cfg: &GridConfig) -> Result<GridDesc> {
        self.check_agreement("grid configurations", &cfg.fields())?;
        // Agreed on before a bad value raises, so that a rank alone with a typo does not
        // leave the others waiting in the collective.
        let slice_bytes = grid::slice_bytes_from_env();
        let token = slice_bytes.as_ref().map_or(-1, |b| b.unwrap_or(0));
        let f = Fields::new().with("CUDECOMP_PIPELINE_SLICE_BYTES", token);
        self.check_agreement("settings", &f)?;
        let slice_bytes = slice_bytes?;
        let check = grid::check_collectives_from_env();
        let token = check.as_ref().map_or(2, |&c| u8::from(c));
        let f = Fields::new().with("CUDECOMP_CHECK_COLLECTIVES", token);
        self.check_agreement("settings", &f)?;
        let check = check?;
        let grid = Grid::new(cfg, self.nranks(), self.shared.col_major_default)?;
        // Grids whose pencils the library cannot address are refused now, not at the
        // first query (the same on every rank).
        grid.max_pencil_sizes()?;
        self.check_backends(&grid)?;
        let host_threads = if self.is_gpu() {
            1
        } else {
            self.host_threads()?
        };
        GridDesc::new(self.clone(), grid, slice_bytes, host_threads, check)
    }

    /// Collective: `NotSupported` on every rank unless this handle can run the grid's
    /// backends; creates NCCL when they need it.
    fn check_backends(&self, grid: &Grid) -> Result<()> {
        let (t, h) = (grid.transpose_backend, grid.halo_backend);
        let nvshmem = t.is_nvshmem() || h.is_nvshmem();
        match &self.shared.device {
            Some(dev) => {
                if t.is_nccl() || h == HaloBackend::Nccl {
                    dev.nccl(self.comm())?;
                }
                if nvshmem {
                    // NVSHMEM's limited mode for ranks sharing a GPU ends the process in
                    // team and signal calls: refuse it here instead.
                    if !self.one_gpu_per_rank()? {
                        unsupported!(
                            "NVSHMEM backends (transpose {}, halo {}) need one GPU per rank; ranks here share a GPU (NVSHMEM would run in its limited mode, which exits the process): choose NCCL, DIRECT or MPI backends",
                            t.enum_name(),
                            h.enum_name()
                        );
                    }
                    self.start_nvshmem(dev)?;
                }
            }
            None => {
                if nvshmem {
                    unsupported!(
                        "NVSHMEM backends (transpose {}, halo {}) need the GPU variant: the CPU variant supports MPI and DIRECT backends",
                        t.enum_name(),
                        h.enum_name()
                    );
                }
                if !(t.is_mpi() || t == TransposeBackend::Direct) {
                    unsupported!(
                        "transpose_comm_backend {}: the CPU variant supports MPI_P2P, MPI_P2P_PL, MPI_A2A and DIRECT only",
                        t.enum_name()
                    );
                }
                if !(h.is_mpi() || h == HaloBackend::Direct) {
                    unsupported!(
                        "halo_comm_backend {}: the CPU variant supports MPI, MPI_BLOCKING and DIRECT only",
                        h.enum_name()
                    );
                }
            }
        }
        for (what, direct) in [
            ("transpose_comm_backend", t == TransposeBackend::Direct),
            ("halo_comm_backend", h == HaloBackend::Direct),
        ] {
            if !direct {
                continue;
            }
            if self.is_gpu() {
                if !self.one_node()? {
                    unsupported!("{what} DIRECT needs every rank's GPU in one node (CUDA IPC)");
                }
            } else if !self.host_direct_ok()? {
                unsupported!("{what} DIRECT needs every rank on one node, sharing memory");
            }
        }
        Ok(())
    }

    /// Collective: releases NCCL and the handle's communicator.
    pub fn finalize(&self) -> Result<()> {
        if let Some(dev) = &self.shared.device {
            // Deregistered while the communicator lives; symmetric memory freed while the
            // NVSHMEM runtime lives.
            self.shared.pool.each(Workspace::drop_registered)?;
            self.shared.pool.each(Workspace::drop_symmetric)?;
            dev.destroy_nccl()?;
            dev.release_nvshmem()?;
        }
        self.comm().free()
    }
}
