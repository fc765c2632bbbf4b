//! The library handle (`cudecompHandle_t`): a private duplicate of the user's
//! communicator, the workspace its operations share, the GPU state of a GPU handle, and
//! the collective facts about its ranks ([`capabilities`]). Grids are created from it
//! ([`GridDesc`], in [`grid`]).

pub(crate) mod capabilities;
pub(crate) mod file_io;
pub(crate) mod grid;
mod memory;
pub(crate) mod redistribution;
pub(crate) mod runner;
mod tiling;

pub use memory::{DeviceBuffer, LibraryArray};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::comm::dynmpi::{self, MpiDescription};
use crate::comm::{settle, Call, Communicator};
use crate::config::{GridConfig, HaloBackend, TransposeBackend};
use crate::cuda::nvshmem::SymmetricBuffer;
use crate::cuda::Device;
use crate::engine::device::{lock, DeviceState};
use crate::engine::workspace::{Lease, Pool, Workspace};
use crate::geometry::Grid;
use crate::settings::Settings;
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

/// Where a handle's operations run.
#[derive(Clone, Debug, Default)]
pub enum Memory {
    /// Host memory (the CPU variant): every operation completes before it returns.
    #[default]
    Host,
    /// CUDA device memory of the device current on the creating thread: operations are
    /// enqueued on CUDA streams. NCCL and NVSHMEM are loaded from the given libraries
    /// when a grid first needs them.
    Cuda(CudaLibraries),
}

struct Shared {
    comm: Box<dyn Communicator>,
    settings: Settings,
    /// Grids created so far (numbers them alike on every rank).
    grids: AtomicU64,
    pool: Pool,
    /// GPU handles run one operation at a time (their DIRECT signals and NCCL
    /// communicator are shared): this lock orders them.
    device_ops: Mutex<()>,
    device: Option<DeviceState>,
    caps: Capabilities,
    /// Calls settled so far ([`Handle::settle`]): the number of the next one, the same on
    /// every rank that made the same calls. Held during the settling, so that threads
    /// settle one at a time over the handle's communicator.
    settled_calls: Mutex<u64>,
}

/// A library handle bound to a (private duplicate of a) communicator. Cloning shares it.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// Collective over the communicator `mpi` describes: binds to its MPI library at run
    /// time, works on a private duplicate of it from now on, and runs operations on
    /// `memory`. `settings` are this rank's (usually [`Settings::from_env`]): the ranks
    /// agree on those that must be alike, and a rank whose settings, or CUDA device,
    /// failed makes every rank fail (it with its own error, the others with
    /// `InvalidUsage` naming it) instead of leaving them waiting.
    pub fn from_mpi(
        mpi: &MpiDescription,
        memory: Memory,
        settings: Result<Settings>,
    ) -> Result<Handle> {
        let comm = dynmpi::duplicate(mpi)?;
        Handle::from_communicator(comm, memory, settings)
    }

    /// As [`Handle::from_mpi`], over a communicator the handle owns from now on (an
    /// in-process one in tests); freed again when the creation fails.
    pub fn from_communicator(
        comm: Box<dyn Communicator>,
        memory: Memory,
        settings: Result<Settings>,
    ) -> Result<Handle> {
        let device = match &memory {
            Memory::Host => Ok(None),
            Memory::Cuda(libs) => Device::current().map(|d| Some((d, libs.clone()))),
        };
        let local = settings.and_then(|s| device.map(|d| (s, d)));
        let fields = match &local {
            Ok((s, _)) => s.agreed_fields(),
            Err(_) => Fields::new(),
        };
        let call = Call {
            what: "Handle(comm): the CUDECOMP_* settings",
            fields: &fields,
        };
        let agreed = settle(
            comm.as_ref(),
            0,
            call,
            &local.as_ref().map(|_| ()).map_err(Error::clone),
        );
        let (settings, device) = match (local, agreed) {
            (Ok(l), Ok(())) => l,
            (Err(e), _) | (Ok(_), Err(e)) => {
                comm.free()?;
                return Err(e);
            }
        };
        let device = device.map(|(device, libs)| {
            let aware = settings.mpi_cuda_aware.unwrap_or_else(|| comm.cuda_aware());
            DeviceState::new(
                device,
                libs.nccl,
                libs.nvshmem,
                aware,
                settings.nccl_registration,
            )
        });
        Ok(Handle {
            shared: Arc::new(Shared {
                comm,
                settings,
                grids: AtomicU64::new(0),
                pool: Pool::default(),
                device_ops: Mutex::new(()),
                device,
                caps: Capabilities::default(),
                settled_calls: Mutex::new(1),
            }),
        })
    }

    /// The settings the handle was created with.
    pub fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// InvalidUsage once MPI has been finalised: every MPI call would then abort the job
    /// (MPICH and Open MPI alike), so operations refuse before making one.
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.shared.comm.finalized() {
            return Err(Error::InvalidUsage(
                "MPI was finalized: expected destroy() and finalize() to be called before MPI.Finalize()".into(),
            ));
        }
        Ok(())
    }

    /// True when `other` is this handle (or a clone of it).
    pub fn same_as(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
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
        self.check_alive()?;
        capabilities::one_node(self.comm(), &self.settings().nodes)
    }

    /// Collective (first call): threads this rank uses for host copies: the
    /// `CUDECOMP_HOST_THREADS` setting, or the cores it may run on shared among the ranks
    /// of its node (at most [`MAX_HOST_THREADS`]).
    pub fn host_threads(&self) -> Result<usize> {
        let s = self.settings();
        self.shared
            .caps
            .host_threads(self.comm(), &s.nodes, s.host_threads)
    }

    /// Collective (first call): true when every rank can write into every other's
    /// node-shared memory (the host DIRECT backend).
    pub(crate) fn host_direct_ok(&self) -> Result<bool> {
        self.shared
            .caps
            .host_direct_ok(self.comm(), &self.settings().nodes)
    }

    /// Collective (first call on the host): true when DIRECT can run here, every rank
    /// able to write into every other: CUDA IPC within one node on GPUs, node-shared
    /// memory on the host. Grid creation and the autotuner's candidates both ask this.
    pub(crate) fn direct_usable(&self) -> Result<bool> {
        if self.is_gpu() {
            self.one_node()
        } else {
            self.host_direct_ok()
        }
    }

    /// Collective: true when every rank drives its own GPU (what NCCL requires).
    pub fn one_gpu_per_rank(&self) -> Result<bool> {
        self.check_alive()?;
        capabilities::one_gpu_per_rank(self.comm(), &self.settings().nodes, &self.device()?.device)
    }

    /// Collective (first call): this handle's share of the NVSHMEM runtime.
    fn start_nvshmem(&self, dev: &DeviceState) -> Result<()> {
        let same_node = capabilities::same_node(self.comm(), &self.settings().nodes)?;
        if same_node.iter().all(|&s| s) {
            // The unique-ID bootstrap needs a socket interface; on one node the loopback
            // always serves.
            crate::settings::default_nvshmem_bootstrap_interface("lo");
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

    /// Collective over the handle's ranks: the outcome of one collective call, the same
    /// on every rank. `what` names the call, `fields` are
    /// its arguments that every rank must pass alike, and `local` is this rank's result
    /// so far (its own argument check, its share of the work). A rank that failed gets its
    /// error back; every other rank gets `InvalidUsage` naming it, its call and its error,
    /// or the first argument (or the call) that differs. The handle's calls form one
    /// sequence: each settled call has the next number, so ranks at different calls of
    /// different objects (a grid destroyed on one rank while another runs a
    /// redistribution) fail too, naming both. Threads settle one at a time.
    pub fn settle(&self, what: &str, fields: &Fields, local: Result<()>) -> Result<()> {
        self.check_alive()?;
        let mut next = lock(&self.shared.settled_calls);
        let seq = *next;
        *next += 1;
        settle(self.comm(), seq, Call { what, fields }, &local)
    }

    /// Collective: validates `cfg` (the same on all ranks: checked) and builds a grid
    /// descriptor with its row and column communicators. Backends this handle cannot run
    /// raise `NotSupported` on every rank.
    pub fn create_grid(&self, cfg: &GridConfig) -> Result<GridDesc> {
        self.check_alive()?;
        self.settle("create_grid", &cfg.fields(), Ok(()))?;
        let grid = Grid::new(cfg, self.nranks(), self.settings().col_major_rank_order)?;
        // Grids whose pencils the library cannot address are refused now, not at the
        // first query (the same on every rank).
        grid.max_pencil_sizes()?;
        self.check_backends(grid.transpose_backend, grid.halo_backend)?;
        let host_threads = if self.is_gpu() {
            1
        } else {
            self.host_threads()?
        };
        GridDesc::new(self.clone(), grid, host_threads)
    }

    /// Collective: `NotSupported` on every rank unless this handle can run these
    /// backends; creates NCCL when they need it.
    pub(crate) fn check_backends(&self, t: TransposeBackend, h: HaloBackend) -> Result<()> {
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
            if !self.direct_usable()? {
                if self.is_gpu() {
                    unsupported!("{what} DIRECT needs every rank's GPU in one node (CUDA IPC)");
                }
                unsupported!("{what} DIRECT needs every rank on one node, sharing memory");
            }
        }
        Ok(())
    }

    /// Collective: releases NCCL and the handle's communicator.
    pub fn finalize(&self) -> Result<()> {
        self.check_alive()?;
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
