//! The one place that decides which backend module runs an operation, and how: from the
//! memory space it runs in, the grid's backend, whether MPI takes device memory, and the
//! plan. The backend modules under [`super::backend`] execute the route they are given.

use crate::config::{HaloBackend, TransposeBackend};
use crate::cuda::Stream;
use crate::engine::Exec;
use crate::plan::{HaloPlan, TransposePlan};
use crate::{unsupported, Result};

/// How MPI moves a transpose's chunks (host memory, or device memory MPI can read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Messages {
    /// MPI_P2P: every chunk packed, then all sent and received at once.
    PointToPoint,
    /// MPI_P2P_PL: peer by peer, each chunk packed and sent in turn and unpacked as it lands.
    Pipelined,
    /// MPI_A2A: one `MPI_Alltoallv`.
    AllToAll,
}

/// How a host-staged MPI transpose runs (MPI that cannot read device memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Staging {
    /// MPI_P2P and MPI_P2P_PL, one path: slices go down to the host on the library's
    /// stream, through MPI and back up, overlapping the three.
    Sliced,
    /// MPI_A2A: the packed chunks go down whole, through one `MPI_Alltoallv`, back up.
    AllToAll,
}

/// The NVSHMEM transpose backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nvshmem {
    /// NVSHMEM: slices put into the peers' symmetric workspaces.
    Puts,
    /// NVSHMEM_PL: the same, peer by peer.
    PerPeer,
    /// NVSHMEM_SM: slices packed by the copy kernels straight into the peers' memory.
    Packed,
}

/// How a transpose's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransposeRoute {
    /// Nothing leaves the rank (one member): its copies alone, on the host or the stream,
    /// whatever the backend.
    Local(Exec),
    /// Host memory through MPI.
    HostMpi(Messages),
    /// Device memory handed straight to a CUDA-aware MPI.
    CudaAwareMpi(Stream, Messages),
    /// Device memory staged through page-locked host memory for MPI.
    StagedMpi(Stream, Staging),
    /// Device memory through NCCL, slices on the library's stream (`per_peer`: NCCL_PL).
    Nccl {
        /// The user's stream.
        stream: Stream,
        /// One peer per unit (NCCL_PL).
        per_peer: bool,
    },
    /// Host DIRECT: chunks copied into peers' node-shared workspaces (or, between library
    /// arrays, straight into their outputs).
    DirectHost,
    /// Device DIRECT: the copy engine writes into peers' workspaces (or outputs) mapped
    /// with CUDA IPC, signalled with interprocess events.
    DirectDevice(Stream),
    /// Device NVSHMEM.
    Nvshmem(Stream, Nvshmem),
}

/// How a halo update's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HaloRoute {
    /// Nothing to exchange (the periodic wrap onto this rank): the copies alone.
    Local(Exec),
    /// Host memory through MPI.
    HostMpi,
    /// Device memory handed straight to a CUDA-aware MPI.
    CudaAwareMpi(Stream),
    /// Device memory staged through page-locked host memory for MPI.
    StagedMpi(Stream),
    /// Device memory through NCCL.
    Nccl(Stream),
    /// Host DIRECT: faces copied into neighbours' node-shared workspaces.
    DirectHost,
    /// Device DIRECT: faces copied by the copy engine into neighbours' workspaces.
    DirectDevice(Stream),
    /// Device NVSHMEM (`blocking`: whole faces, NVSHMEM_BLOCKING).
    Nvshmem(Stream, bool),
}

/// Whether an operation may be captured into a CUDA graph: stream-ordered routes that
/// never synchronise with the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capture {
    /// Capturable.
    Allowed,
    /// Not capturable, and why.
    Refused(&'static str),
}

/// Why MPI routes cannot be captured.
pub(crate) const MPI_ON_HOST: &str = "MPI runs on the host and synchronises the stream";
/// Why DIRECT on GPUs cannot be captured.
pub(crate) const DIRECT_BARRIER: &str =
    "DIRECT signals its peers through interprocess events after a host barrier";

/// Largest element count MPI's `int` counts and displacements of an all-to-all can
/// address, in bytes.
const ALLTOALL_MAX_BYTES: i64 = i32::MAX as i64;

/// How MPI moves chunks for `backend` (an MPI backend). An all-to-all whose counts or
/// displacements would overflow MPI's `int` runs point to point, whose messages are cut
/// into pieces: decided from a bound every member shares, since a rank that chose
/// differently from its peers would wait in a collective forever.
fn messages(backend: TransposeBackend, plan: &TransposePlan, elem: usize) -> Messages {
    match backend {
        TransposeBackend::MpiP2pPl => Messages::Pipelined,
        TransposeBackend::MpiA2a if plan.max_member_elems * (elem as i64) < ALLTOALL_MAX_BYTES => {
            Messages::AllToAll
        }
        _ => Messages::PointToPoint,
    }
}

/// The route of a transpose of `elem`-byte elements; `mpi_cuda_aware` says whether MPI
/// takes device pointers.
pub(crate) fn transpose_route(
    exec: Exec,
    backend: TransposeBackend,
    mpi_cuda_aware: bool,
    plan: &TransposePlan,
    elem: usize,
) -> Result<TransposeRoute> {
    let route = match (exec, backend) {
        (Exec::Host, TransposeBackend::Direct) => TransposeRoute::DirectHost,
        (Exec::Host, b) if b.is_mpi() => TransposeRoute::HostMpi(messages(b, plan, elem)),
        (Exec::Device(s), TransposeBackend::Direct) => TransposeRoute::DirectDevice(s),
        (Exec::Device(s), b) if b.is_nvshmem() => TransposeRoute::Nvshmem(
            s,
            match b {
                TransposeBackend::NvshmemPl => Nvshmem::PerPeer,
                TransposeBackend::NvshmemSm => Nvshmem::Packed,
                _ => Nvshmem::Puts,
            },
        ),
        (Exec::Device(stream), b) if b.is_nccl() => TransposeRoute::Nccl {
            stream,
            per_peer: b == TransposeBackend::NcclPl,
        },
        (Exec::Device(s), b) if b.is_mpi() && mpi_cuda_aware => {
            TransposeRoute::CudaAwareMpi(s, messages(b, plan, elem))
        }
        (Exec::Device(s), b) if b.is_mpi() => TransposeRoute::StagedMpi(
            s,
            match b {
                TransposeBackend::MpiA2a => Staging::AllToAll,
                _ => Staging::Sliced,
            },
        ),
        (exec, b) => unsupported!(
            "transpose_comm_backend {} cannot run on {}",
            b.enum_name(),
            exec.describe()
        ),
    };
    // A transpose within one rank exchanges nothing, whatever the backend (checked
    // above): no NCCL communicator, no staging, no signals; capturable on the device.
    Ok(if plan.npeers() > 1 {
        route
    } else {
        TransposeRoute::Local(exec)
    })
}

/// The route of a halo update; `mpi_cuda_aware` says whether MPI takes device pointers.
pub(crate) fn halo_route(
    exec: Exec,
    backend: HaloBackend,
    mpi_cuda_aware: bool,
    plan: &HaloPlan,
) -> Result<HaloRoute> {
    let route = match (exec, backend) {
        (Exec::Host, HaloBackend::Direct) => HaloRoute::DirectHost,
        (Exec::Host, b) if b.is_mpi() => HaloRoute::HostMpi,
        (Exec::Device(s), HaloBackend::Direct) => HaloRoute::DirectDevice(s),
        (Exec::Device(s), b) if b.is_nvshmem() => {
            HaloRoute::Nvshmem(s, b == HaloBackend::NvshmemBlocking)
        }
        (Exec::Device(s), HaloBackend::Nccl) => HaloRoute::Nccl(s),
        (Exec::Device(s), b) if b.is_mpi() && mpi_cuda_aware => HaloRoute::CudaAwareMpi(s),
        (Exec::Device(s), b) if b.is_mpi() => HaloRoute::StagedMpi(s),
        (exec, b) => unsupported!(
            "halo_comm_backend {} cannot run on {}",
            b.enum_name(),
            exec.describe()
        ),
    };
    // The backend is checked above even where it has nothing to do.
    Ok(if plan.local_wrap {
        HaloRoute::Local(exec)
    } else {
        route
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridConfig;
    use crate::geometry::Grid;
    use crate::plan::{Direction, HaloSpec, TransposeLayouts};

    fn plan(pdims: [i32; 2]) -> TransposePlan {
        let cfg = GridConfig {
            gdims: [8, 8, 8],
            pdims,
            ..Default::default()
        };
        let g = Grid::new(&cfg, (pdims[0] * pdims[1]) as usize, false).unwrap();
        TransposePlan::new(&g, 0, Direction::XToY, &TransposeLayouts::default()).unwrap()
    }

    #[test]
    fn every_backend_has_one_transpose_route() {
        let p = plan([2, 1]);
        let s = Stream::from_handle(0);
        let d = Exec::Device(s);
        use Messages::*;
        use TransposeBackend as B;
        use TransposeRoute as R;
        let table: [(Exec, B, bool, R); 16] = [
            (Exec::Host, B::MpiP2p, false, R::HostMpi(PointToPoint)),
            (Exec::Host, B::MpiP2pPl, false, R::HostMpi(Pipelined)),
            (Exec::Host, B::MpiA2a, false, R::HostMpi(AllToAll)),
            (Exec::Host, B::Direct, false, R::DirectHost),
            (d, B::MpiP2p, true, R::CudaAwareMpi(s, PointToPoint)),
            (d, B::MpiP2pPl, true, R::CudaAwareMpi(s, Pipelined)),
            (d, B::MpiA2a, true, R::CudaAwareMpi(s, AllToAll)),
            (d, B::MpiP2p, false, R::StagedMpi(s, Staging::Sliced)),
            (d, B::MpiP2pPl, false, R::StagedMpi(s, Staging::Sliced)),
            (d, B::MpiA2a, false, R::StagedMpi(s, Staging::AllToAll)),
            (
                d,
                B::Nccl,
                false,
                R::Nccl {
                    stream: s,
                    per_peer: false,
                },
            ),
            (
                d,
                B::NcclPl,
                false,
                R::Nccl {
                    stream: s,
                    per_peer: true,
                },
            ),
            (d, B::Direct, false, R::DirectDevice(s)),
            (d, B::Nvshmem, false, R::Nvshmem(s, Nvshmem::Puts)),
            (d, B::NvshmemPl, false, R::Nvshmem(s, Nvshmem::PerPeer)),
            (d, B::NvshmemSm, false, R::Nvshmem(s, Nvshmem::Packed)),
        ];
        for (exec, b, aware, want) in table {
            assert_eq!(
                transpose_route(exec, b, aware, &p, 8).unwrap(),
                want,
                "{b:?} {exec:?}"
            );
        }
        // Host memory only moves by MPI or DIRECT.
        for b in [B::Nccl, B::NcclPl, B::Nvshmem, B::NvshmemPl, B::NvshmemSm] {
            assert!(
                transpose_route(Exec::Host, b, false, &p, 8).is_err(),
                "{b:?}"
            );
        }
        // One member: local copies, on the host or the stream, whatever the backend.
        let one = plan([1, 1]);
        for b in TransposeBackend::ALL {
            assert_eq!(
                transpose_route(d, b, false, &one, 8).unwrap(),
                R::Local(d),
                "{b:?}"
            );
        }
        assert_eq!(
            transpose_route(Exec::Host, B::Direct, false, &one, 8).unwrap(),
            R::Local(Exec::Host)
        );
    }

    #[test]
    fn halo_routes_and_capture_rules() {
        let cfg = GridConfig {
            gdims: [8, 8, 8],
            pdims: [2, 1],
            ..Default::default()
        };
        let g = Grid::new(&cfg, 2, false).unwrap();
        let spec = HaloSpec {
            axis: 0,
            dim: 1,
            halo: [1, 1, 1],
            periods: [true; 3],
            padding: [0; 3],
        };
        let p = HaloPlan::new(&g, 0, spec).unwrap().unwrap();
        let s = Stream::from_handle(0);
        let d = Exec::Device(s);
        use HaloBackend as B;
        use HaloRoute as R;
        for (exec, b, aware, want) in [
            (Exec::Host, B::Mpi, false, R::HostMpi),
            (Exec::Host, B::MpiBlocking, false, R::HostMpi),
            (Exec::Host, B::Direct, false, R::DirectHost),
            (d, B::Mpi, true, R::CudaAwareMpi(s)),
            (d, B::Mpi, false, R::StagedMpi(s)),
            (d, B::Nccl, false, R::Nccl(s)),
            (d, B::Direct, false, R::DirectDevice(s)),
            (d, B::Nvshmem, false, R::Nvshmem(s, false)),
            (d, B::NvshmemBlocking, false, R::Nvshmem(s, true)),
        ] {
            assert_eq!(
                halo_route(exec, b, aware, &p).unwrap(),
                want,
                "{b:?} {exec:?}"
            );
        }
        assert!(halo_route(Exec::Host, B::Nccl, false, &p).is_err());
    }
}
