//! One module per backend: each implements [`Backend`]: it says where its operations run,
//! sets up what its exchange needs (its share of the workspace, the single-copy
//! negotiation of DIRECT), runs the one transpose pipeline ([`super::pipeline`]) or the
//! halo pipeline ([`super::halo`]) with its exchange, and says whether its operations may
//! be captured into a CUDA graph. [`transpose`] and [`update_halos`] hand each operation
//! to the module its route names, inside the frame ([`frame`]) that module asks for.

mod direct_device;
mod direct_host;
mod frame;
mod local;
mod mpi;
mod nccl;
mod nvshmem;
pub(super) mod single_copy;
mod staged;

use direct_device::DirectDeviceBackend;
pub(crate) use direct_host::single_copies;
use direct_host::DirectHostBackend;
use local::LocalBackend;
use mpi::{DeviceMpiBackend, HostMpiBackend};
use nccl::NcclBackend;
use nvshmem::NvshmemBackend;
use staged::StagedMpiBackend;

use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::{work_bytes, Context, PerfSample};
use crate::engine::route::{halo_route, transpose_route, Capture, HaloRoute, TransposeRoute};
use crate::engine::workspace::Workspace;
use crate::engine::Exec;
use crate::perf::{halo_bytes, halo_key, transpose_bytes, transpose_key};
use crate::plan::TransposePlan;
use crate::{cuda, unsupported, Result};
use frame::{framed, Op, Place, Stage};

/// What every backend module implements: where its operations run, how each runs in its
/// frame (given what the route says of it: streams, message kinds, modes), and whether
/// they may be captured into a CUDA graph. The frame is set up, and the pipeline run and
/// timed, in [`frame`]: a module chooses its workspace and builds its exchange.
trait Backend {
    /// What a transpose's route tells this module.
    type TransposeHow;
    /// What a halo update's route tells this module.
    type HaloHow;
    /// Whether its operations may run inside a CUDA graph capture.
    const CAPTURE: Capture;
    /// Where a transpose runs.
    fn transpose_place(c: &TransposeCall<'_>, how: &Self::TransposeHow) -> Place;
    /// Where a halo update runs.
    fn halo_place(c: &HaloCall<'_>, how: &Self::HaloHow) -> Place;
    /// Runs a transpose in its frame (host: synchronously; device: enqueued on the stream).
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        how: Self::TransposeHow,
    ) -> Result<()>;
    /// Runs a halo update in its frame.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, how: Self::HaloHow) -> Result<()>;
}

/// A transpose through module `B`, in the frame it asks for.
fn transpose_with<B: Backend>(op: Op<'_, TransposeCall<'_>>, how: B::TransposeHow) -> Result<()> {
    let place = B::transpose_place(op.call, &how);
    framed(op, place, |s, ws| B::transpose(s, ws, how))
}

/// A halo update through module `B`, in the frame it asks for.
fn halo_with<B: Backend>(op: Op<'_, HaloCall<'_>>, how: B::HaloHow) -> Result<()> {
    let place = B::halo_place(op.call, &how);
    framed(op, place, |s, ws| B::halo(s, ws, how))
}

/// Whether a transpose on `route` may be captured: its module's rule.
fn transpose_capture(route: TransposeRoute) -> Capture {
    use TransposeRoute as R;
    match route {
        R::Local(_) => LocalBackend::CAPTURE,
        R::HostMpi(_) => HostMpiBackend::CAPTURE,
        R::CudaAwareMpi(..) => DeviceMpiBackend::CAPTURE,
        R::StagedMpi(..) => StagedMpiBackend::CAPTURE,
        R::Nccl { .. } => NcclBackend::CAPTURE,
        R::DirectHost => DirectHostBackend::CAPTURE,
        R::DirectDevice(_) => DirectDeviceBackend::CAPTURE,
        R::Nvshmem(..) => NvshmemBackend::CAPTURE,
    }
}

/// Whether a halo update on `route` may be captured: its module's rule.
fn halo_capture(route: HaloRoute) -> Capture {
    use HaloRoute as R;
    match route {
        R::Local(_) => LocalBackend::CAPTURE,
        R::HostMpi => HostMpiBackend::CAPTURE,
        R::CudaAwareMpi(_) => DeviceMpiBackend::CAPTURE,
        R::StagedMpi(_) => StagedMpiBackend::CAPTURE,
        R::Nccl(_) => NcclBackend::CAPTURE,
        R::DirectHost => DirectHostBackend::CAPTURE,
        R::DirectDevice(_) => DirectDeviceBackend::CAPTURE,
        R::Nvshmem(..) => NvshmemBackend::CAPTURE,
    }
}

const TRANSPOSE_QUERY: &str = "get_transpose_workspace_size()";
const HALO_QUERY: &str = "get_halo_workspace_size()";

/// Whether `exec`'s stream is being captured into a CUDA graph; if so, NotSupported
/// unless the route can be captured and the performance report is off.
fn capturing(cx: &Context<'_>, exec: Exec, capture: Capture, backend: &str) -> Result<bool> {
    let Exec::Device(stream) = exec else {
        return Ok(false);
    };
    if !cuda::capturing(stream)? {
        return Ok(false);
    }
    if cx.perf.is_some() {
        unsupported!("CUDA graph capture with the performance report on (CUDECOMP_ENABLE_PERFORMANCE_REPORT=1): it times each operation by synchronising its stream; turn the report off while capturing");
    }
    match capture {
        Capture::Allowed => Ok(true),
        Capture::Refused(why) => unsupported!(
            "{backend} cannot be captured into a CUDA graph: {why}; capturable backends are NCCL, NCCL_PL and the NVSHMEM family (transposes) and NCCL, NVSHMEM and NVSHMEM_BLOCKING (halo updates)"
        ),
    }
}

/// Runs a transpose (host: synchronously; device: enqueued on the stream, MPI routes
/// synchronising it on the host).
pub(crate) fn transpose(cx: &Context<'_>, c: &TransposeCall<'_>, exec: Exec) -> Result<()> {
    let plan = c.plan;
    let elem = c.dtype.size();
    let need = work_bytes(
        c.work,
        c.workspace_elems * c.fields.count,
        elem,
        TRANSPOSE_QUERY,
    )?;
    let fields = c.fields.count;
    let key = || transpose_key(plan, c.dtype, c.in_place(), fields);
    let sample = PerfSample {
        key: &key,
        bytes: transpose_bytes(plan, elem) * fields as f64,
    };
    // Messages carry every field's chunk: the all-to-all's bound counts them all.
    let cell_bytes = elem * c.fields.count as usize;
    let route = transpose_route(exec, c.backend, cx.mpi_cuda_aware(), plan, cell_bytes)?;
    let capturing = capturing(cx, exec, transpose_capture(route), c.backend.enum_name())?;
    // Only DIRECT's single copies move the input, and write the output, in steps; every
    // other route waits for the whole input and says the output landed at its end.
    let whole = match (route, exec) {
        (TransposeRoute::DirectDevice(_), _) | (_, Exec::Host) => None,
        (_, Exec::Device(stream)) => Some(stream),
    };
    if let Some(stream) = whole {
        c.steps.input.wait_all(stream)?;
    }
    let op = Op {
        cx,
        call: c,
        need,
        capturing,
        sample,
    };
    match route {
        TransposeRoute::Local(exec) => transpose_with::<LocalBackend>(op, exec),
        TransposeRoute::HostMpi(m) => transpose_with::<HostMpiBackend>(op, m),
        TransposeRoute::CudaAwareMpi(stream, m) => {
            transpose_with::<DeviceMpiBackend>(op, (stream, m))
        }
        TransposeRoute::StagedMpi(stream, s) => transpose_with::<StagedMpiBackend>(op, (stream, s)),
        TransposeRoute::Nccl { stream, per_peer } => {
            transpose_with::<NcclBackend>(op, (stream, per_peer))
        }
        TransposeRoute::DirectHost => transpose_with::<DirectHostBackend>(op, ()),
        TransposeRoute::DirectDevice(stream) => transpose_with::<DirectDeviceBackend>(op, stream),
        TransposeRoute::Nvshmem(stream, mode) => {
            transpose_with::<NvshmemBackend>(op, (stream, mode))
        }
    }?;
    match whole {
        Some(stream) => c.steps.output.record_all(stream),
        None => Ok(()),
    }
}

/// Runs a halo update (host: synchronously; device: enqueued on the stream).
pub(crate) fn update_halos(cx: &Context<'_>, c: &HaloCall<'_>, exec: Exec) -> Result<()> {
    let plan = c.plan;
    let elem = c.dtype.size();
    let need = work_bytes(c.work, c.workspace_elems * c.fields.count, elem, HALO_QUERY)?;
    let fields = c.fields.count;
    let key = || halo_key(&plan.spec, c.dtype, fields);
    let sample = PerfSample {
        key: &key,
        bytes: halo_bytes(plan, cx.rank, elem) * fields as f64,
    };
    let route = halo_route(exec, c.backend, cx.mpi_cuda_aware(), plan)?;
    let capturing = capturing(cx, exec, halo_capture(route), c.backend.enum_name())?;
    let op = Op {
        cx,
        call: c,
        need,
        capturing,
        sample,
    };
    match route {
        HaloRoute::Local(exec) => halo_with::<LocalBackend>(op, exec),
        HaloRoute::HostMpi => halo_with::<HostMpiBackend>(op, ()),
        HaloRoute::CudaAwareMpi(stream) => halo_with::<DeviceMpiBackend>(op, stream),
        HaloRoute::StagedMpi(stream) => halo_with::<StagedMpiBackend>(op, stream),
        HaloRoute::Nccl(stream) => halo_with::<NcclBackend>(op, stream),
        HaloRoute::DirectHost => halo_with::<DirectHostBackend>(op, ()),
        HaloRoute::DirectDevice(stream) => halo_with::<DirectDeviceBackend>(op, stream),
        HaloRoute::Nvshmem(stream, blocking) => halo_with::<NvshmemBackend>(op, (stream, blocking)),
    }
}

/// Byte offset, in each peer's workspace, of the slot this rank's chunk goes to.
fn peer_slots(plan: &TransposePlan, elem: i64, fields: i64) -> Vec<u64> {
    plan.peer_recv_offsets
        .iter()
        .map(|&o| (o * fields * elem) as u64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::Stream;
    use crate::engine::route::{Messages, Nvshmem, Staging};

    #[test]
    fn stream_ordered_routes_alone_may_be_captured() {
        let s = Stream::from_handle(0);
        use HaloRoute as H;
        use TransposeRoute as T;
        for (route, capturable) in [
            (T::Local(Exec::Device(s)), true),
            (
                T::Nccl {
                    stream: s,
                    per_peer: true,
                },
                true,
            ),
            (T::Nvshmem(s, Nvshmem::Packed), true),
            (T::HostMpi(Messages::AllToAll), false),
            (T::CudaAwareMpi(s, Messages::Pipelined), false),
            (T::StagedMpi(s, Staging::Sliced), false),
            (T::DirectHost, false),
            (T::DirectDevice(s), false),
        ] {
            assert_eq!(
                transpose_capture(route) == Capture::Allowed,
                capturable,
                "{route:?}"
            );
        }
        for (route, capturable) in [
            (H::Local(Exec::Host), true),
            (H::Nccl(s), true),
            (H::Nvshmem(s, true), true),
            (H::HostMpi, false),
            (H::CudaAwareMpi(s), false),
            (H::StagedMpi(s), false),
            (H::DirectHost, false),
            (H::DirectDevice(s), false),
        ] {
            assert_eq!(
                halo_capture(route) == Capture::Allowed,
                capturable,
                "{route:?}"
            );
        }
    }
}
