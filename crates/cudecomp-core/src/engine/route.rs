//! The one place that decides how an operation's data moves: from the memory space it
//! runs in, the grid's backend, what MPI can do and the plan, to a [`Route`]. Everything
//! else in the engine executes the route it is given.

use crate::config::{HaloBackend, TransposeBackend};
use crate::engine::Exec;
use crate::plan::{HaloPlan, TransposePlan};
use crate::{unsupported, Result};

/// How one operation exchanges data, and whether it runs as a pipeline of slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Host memory through MPI (point-to-point or all-to-all), completing on the host.
    HostMpi,
    /// Host DIRECT: chunks or faces copied into peers' node-shared workspaces, signalled
    /// through shared memory.
    HostShared {
        /// Cut into slices unpacked as they land (transposes with peers; halo faces).
        sliced: bool,
    },
    /// Device memory through NCCL on the handle's communicator.
    Nccl {
        /// Run as a pipeline of slices on the library's stream.
        sliced: bool,
    },
    /// Device memory handed straight to a CUDA-aware MPI.
    CudaAwareMpi,
    /// Device memory staged through page-locked host memory for MPI.
    StagedMpi {
        /// Each slice goes down to the host, through MPI and back up on the library's stream.
        sliced: bool,
    },
    /// Device DIRECT: the copy engine writes into peers' workspaces mapped with CUDA IPC,
    /// signalled with interprocess events.
    Ipc {
        /// Cut into slices, each signalled with its own event.
        sliced: bool,
    },
    /// Device NVSHMEM: puts (or copy kernels through `nvshmem_ptr`) into peers' copies of
    /// the symmetric workspace, each followed by an NVSHMEM signal.
    Nvshmem {
        /// Cut into slices, each signalled.
        sliced: bool,
        /// Stepping peer by peer (NVSHMEM_PL).
        per_peer: bool,
        /// Packed by the copy kernels straight into peers' memory (NVSHMEM_SM).
        direct: bool,
    },
    /// Device NVSHMEM halo updates: faces put into the neighbours' symmetric workspaces.
    NvshmemFaces {
        /// Whole faces, no slices (NVSHMEM_BLOCKING).
        blocking: bool,
    },
    /// Nothing to exchange (a transpose within one rank on the device, a halo's periodic
    /// wrap onto this rank): the copies alone, on the host or the stream, whatever the
    /// backend.
    Local,
}

/// The route of a transpose; `mpi_cuda_aware` says whether MPI takes device pointers.
pub fn transpose_route(
    exec: Exec,
    backend: TransposeBackend,
    mpi_cuda_aware: bool,
    plan: &TransposePlan,
) -> Result<Route> {
    let peers = plan.npeers() > 1;
    let route = match (exec, backend) {
        (Exec::Host, TransposeBackend::Direct) => Route::HostShared { sliced: peers },
        (Exec::Host, b) if b.is_mpi() => Route::HostMpi,
        (Exec::Device(_), TransposeBackend::Direct) => Route::Ipc { sliced: peers },
        (Exec::Device(_), b) if b.is_nvshmem() => Route::Nvshmem {
            sliced: peers,
            per_peer: b == TransposeBackend::NvshmemPl,
            direct: b == TransposeBackend::NvshmemSm,
        },
        (Exec::Device(_), b) if b.is_nccl() => Route::Nccl { sliced: peers },
        (Exec::Device(_), b) if b.is_mpi() && mpi_cuda_aware => Route::CudaAwareMpi,
        (Exec::Device(_), b) if b.is_mpi() => Route::StagedMpi {
            // Point-to-point messages overlap their copies to and from the host; an
            // all-to-all is one call.
            sliced: peers && b != TransposeBackend::MpiA2a,
        },
        (exec, b) => unsupported!(
            "transpose_comm_backend {} cannot run on {}",
            b.enum_name(),
            exec.describe()
        ),
    };
    // A transpose within one rank exchanges nothing on the device, whatever the backend
    // (checked above): its copies alone, on the stream (no NCCL communicator, no staging,
    // no interprocess signals; capturable).
    Ok(match exec {
        Exec::Device(_) if !peers => Route::Local,
        _ => route,
    })
}

/// The route of a halo update.
pub fn halo_route(
    exec: Exec,
    backend: HaloBackend,
    mpi_cuda_aware: bool,
    plan: &HaloPlan,
) -> Result<Route> {
    let direct = backend == HaloBackend::Direct;
    let nvshmem = backend.is_nvshmem();
    let mpi = backend.is_mpi() || direct || nvshmem;
    let route = match exec {
        // Faces always go in slices, each signalled on its own.
        Exec::Host if direct => Route::HostShared { sliced: true },
        Exec::Host if mpi => Route::HostMpi,
        Exec::Device(_) if direct => Route::Ipc { sliced: true },
        Exec::Device(_) if nvshmem => Route::NvshmemFaces {
            blocking: backend == HaloBackend::NvshmemBlocking,
        },
        Exec::Device(_) if backend == HaloBackend::Nccl => Route::Nccl { sliced: false },
        Exec::Device(_) if mpi && mpi_cuda_aware => Route::CudaAwareMpi,
        Exec::Device(_) if mpi => Route::StagedMpi { sliced: false },
        _ => unsupported!(
            "halo_comm_backend {} cannot run on {}",
            backend.enum_name(),
            exec.describe()
        ),
    };
    // The backend is checked above even where it has nothing to do.
    Ok(if plan.local_wrap { Route::Local } else { route })
}
