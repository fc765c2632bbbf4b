//! One module per backend: each sets up what its exchange needs (its share of the
//! workspace, the library's stream, the single-copy negotiation of DIRECT) and runs the
//! one transpose pipeline ([`super::pipeline`]) or the halo pipeline ([`super::halo`])
//! with its exchange. [`transpose`] and [`update_halos`] hand each operation to the module
//! its route names.

mod direct_device;
mod direct_host;
mod local;
mod mpi;
mod nccl;
mod nvshmem;
mod staged;

pub(crate) use direct_host::single_copies;

use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::{work_bytes, Context, PerfSample};
use crate::engine::route::{halo_route, transpose_route, Capture, HaloRoute, TransposeRoute};
use crate::engine::Exec;
use crate::mem::Buf;
use crate::perf::{halo_bytes, halo_key, transpose_bytes, transpose_key};
use crate::plan::TransposePlan;
use crate::settings::SingleCopy;
use crate::{cuda, unsupported, Result};

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
    let need = work_bytes(c.work, c.workspace_elems, elem, TRANSPOSE_QUERY)?;
    let key = || transpose_key(plan, c.dtype, c.input.ptr() == c.output.ptr());
    let sample = PerfSample {
        key: &key,
        bytes: transpose_bytes(plan, elem),
    };
    let route = transpose_route(exec, c.backend, cx.mpi_cuda_aware(), plan, elem)?;
    let capturing = capturing(cx, exec, route.capture(), c.backend.enum_name())?;
    // Only DIRECT's single copies move the input, and write the output, in steps; every
    // other route waits for the whole input and says the output landed at its end.
    let whole = match (route, exec) {
        (TransposeRoute::DirectDevice(_), _) | (_, Exec::Host) => None,
        (_, Exec::Device(stream)) => Some(stream),
    };
    if let Some(stream) = whole {
        c.steps.input.wait_all(stream)?;
    }
    match route {
        TransposeRoute::Local(exec) => local::transpose(cx, c, need, exec, capturing, sample),
        TransposeRoute::HostMpi(m) => mpi::transpose_host(cx, c, need, m, sample),
        TransposeRoute::CudaAwareMpi(stream, m) => {
            mpi::transpose_device(cx, c, need, m, stream, sample)
        }
        TransposeRoute::StagedMpi(stream, s) => staged::transpose(cx, c, need, s, stream, sample),
        TransposeRoute::Nccl { stream, per_peer } => {
            nccl::transpose(cx, c, need, per_peer, stream, capturing, sample)
        }
        TransposeRoute::DirectHost => direct_host::transpose(cx, c, need, sample),
        TransposeRoute::DirectDevice(stream) => {
            direct_device::transpose(cx, c, need, stream, sample)
        }
        TransposeRoute::Nvshmem(stream, mode) => {
            nvshmem::transpose(cx, c, need, mode, stream, capturing, sample)
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
    let need = work_bytes(c.work, c.workspace_elems, elem, HALO_QUERY)?;
    let key = || halo_key(&plan.spec, c.dtype);
    let sample = PerfSample {
        key: &key,
        bytes: halo_bytes(plan, cx.rank, elem),
    };
    let route = halo_route(exec, c.backend, cx.mpi_cuda_aware(), plan)?;
    let capturing = capturing(cx, exec, route.capture(), c.backend.enum_name())?;
    match route {
        HaloRoute::Local(exec) => local::halo(cx, c, exec, capturing, sample),
        HaloRoute::HostMpi => mpi::halo_host(cx, c, need, sample),
        HaloRoute::CudaAwareMpi(stream) => mpi::halo_device(cx, c, need, stream, sample),
        HaloRoute::StagedMpi(stream) => staged::halo(cx, c, need, stream, sample),
        HaloRoute::Nccl(stream) => nccl::halo(cx, c, need, stream, capturing, sample),
        HaloRoute::DirectHost => direct_host::halo(cx, c, need, sample),
        HaloRoute::DirectDevice(stream) => direct_device::halo(cx, c, need, stream, sample),
        HaloRoute::Nvshmem(stream, blocking) => {
            nvshmem::halo(cx, c, need, blocking, stream, capturing, sample)
        }
    }
}

/// Whether this rank offers its output for a DIRECT single copy: out of place, with
/// peers, and allowed by `CUDECOMP_SINGLE_COPY` (`0`: never, `1`: always; unset: where
/// `by_default` says). It then publishes where its output lies when that is a library
/// array, in the collective at the operation's start.
fn single_copy_wanted(
    cx: &Context<'_>,
    c: &TransposeCall<'_>,
    by_default: impl FnOnce() -> bool,
) -> bool {
    let allowed = match cx.settings.single_copy {
        SingleCopy::Never => false,
        SingleCopy::Always => true,
        SingleCopy::Auto => by_default(),
    };
    allowed && !c.input.overlaps(&c.output)
}

/// The outputs of every member of `plan`'s sub-communicator, mapped here by `map`, when
/// every member published one (`published`, by handle rank; the same answer on every
/// member: all see the same notes); `None` when some member did not, and the two-copy
/// exchange runs.
fn peer_outputs<R>(
    published: impl Fn(usize) -> Option<R>,
    plan: &TransposePlan,
    elem: usize,
    mut map: impl FnMut(usize, &R, usize) -> Result<Buf>,
) -> Result<Option<Vec<Buf>>> {
    let refs: Option<Vec<R>> = plan.members.iter().map(|&r| published(r)).collect();
    let Some(refs) = refs else {
        return Ok(None);
    };
    refs.iter()
        .enumerate()
        .map(|(p, a)| {
            let bytes = plan.peer_out_elems[p] as usize * elem;
            if p == plan.me {
                // This rank's own output is the operation's; the entry keeps indices aligned.
                return Ok(Buf::empty());
            }
            map(plan.members[p], a, bytes)
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Byte offset, in each peer's workspace, of the slot this rank's chunk goes to.
fn peer_slots(plan: &TransposePlan, elem: i64) -> Vec<u64> {
    plan.peer_recv_offsets
        .iter()
        .map(|&o| (o * elem) as u64)
        .collect()
}
