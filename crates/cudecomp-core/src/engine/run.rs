//! Runs one operation: takes the route [`super::route`] picks, sets up its workspace,
//! mover and exchange, drives the plan's pipeline ([`super::transpose`], [`super::halo`])
//! and records a performance-report sample when the report is on.

use std::cell::{Cell, RefCell};

use crate::comm::{Communicator, Transport};
use crate::config::{DataType, HaloBackend, TransposeBackend};
use crate::cuda::ipc::NOTE;
use crate::cuda::kernels::{on_engine, DeviceMover, Kernels};
use crate::cuda::nccl::NcclTransport;
use crate::cuda::nvshmem::Nvshmem;
use crate::cuda::transport::{Arena, CudaAwareMpi, StagedMpi};
use crate::cuda::vmm::{DeviceArray, DeviceArrayRef, DEVICE_ARRAY_REF_BYTES};
use crate::cuda::{self, EventRef, Stream};
use crate::engine::device::{lock, DeviceState};
use crate::engine::direct::{SharedChunks, SharedFaces, SharedSlices, HOST_RING_PLACES};
use crate::engine::exchange::{ChunkSignals, SliceExchange};
use crate::engine::halo::HaloRun;
use crate::engine::nvshmem::{NvshmemFaces, NvshmemSlices, Symmetric};
use crate::engine::route::{halo_route, transpose_route, Route};
use crate::engine::staged::StagedSlices;
use crate::engine::streamed::{IpcChunks, IpcFaces, IpcSlices, Pipe, TransportSlices};
use crate::engine::transpose::{single_copy_block, Staged, TransposeRun};
use crate::engine::workspace::{Slot, SymmetricWork, Workspace};
use crate::engine::Exec;
use crate::geometry::Axis;
use crate::mem::shm::{ArrayRef, SharedArray};
use crate::mem::{Buf, HostMover, Mover};
use crate::perf::{
    halo_bytes, halo_key, transpose_bytes, transpose_key, Clock, PerfReport, SampleKey,
    TimedTransport,
};
use crate::plan::{
    landing_groups, HaloPlan, Landing, Layout, TransposePlan, LANDING_BYTES, MAX_LANDING_STEPS,
    MAX_SLICES,
};
use crate::{invalid, unsupported, Error, Result};

/// What operations of one grid run with: the grid's communicator, a workspace slot, the
/// GPU state of a GPU handle, the grid's performance report and tuning.
pub struct Runtime<'a> {
    /// The grid's duplicate of the handle's communicator (halo neighbours are its ranks;
    /// DIRECT maps its members; handle ranks and its ranks are the same).
    pub world: &'a dyn Communicator,
    /// This rank in `world`.
    pub rank: usize,
    /// The workspace and stream slot lent to this operation.
    pub slot: &'a Slot,
    /// The GPU state (`None` on a host handle).
    pub device: Option<&'a DeviceState>,
    /// The grid's performance report, when enabled.
    pub perf: Option<&'a PerfReport>,
    /// Slice size set by the user for every pipeline (`None`: each exchange's own).
    pub slice_bytes: Option<i64>,
    /// Threads of host copies.
    pub host_threads: usize,
}

/// One transpose: its plan and buffers.
pub struct TransposeCall<'a> {
    /// This rank's plan of the transpose.
    pub plan: &'a TransposePlan,
    /// The grid's transpose backend.
    pub backend: TransposeBackend,
    /// The plan's sub-communicator (its ranks are the plan's peer indices).
    pub group: &'a dyn Communicator,
    /// Elements of the grid's transpose workspace (`get_transpose_workspace_size()`).
    pub workspace_elems: i64,
    /// Element type of both arrays.
    pub dtype: DataType,
    /// The input pencil; the same start address as `output` means in place.
    pub input: Buf,
    /// The output pencil.
    pub output: Buf,
    /// The caller's workspace (`None`: the handle's).
    pub work: Option<Buf>,
    /// Device operations: where the input is written, and the output wanted, in steps
    /// (none: the stream alone orders them).
    pub steps: TransposeSteps<'a>,
    /// Copy this rank's own cells (see [`crate::handle::grid::TransposeOp::own_cells`]).
    pub own_cells: bool,
}

/// A device transpose's array written, or wanted, in steps along an axis: input steps
/// are the caller's (after each mark's event, the input's cells of index `0..planes`
/// along `axis` are written, and the operation may move them before the rest); output
/// steps are the operation's (it records each mark's event on its stream once the
/// output's cells `0..planes` are written, so that other streams can start on them).
#[derive(Clone, Copy, Debug, Default)]
pub struct Steps<'a> {
    /// The steps, in increasing order of `planes`.
    pub marks: &'a [ReadyMark],
    /// The global axis the steps run along (`None`: the array's slowest in memory).
    pub axis: Option<Axis>,
}

impl Steps<'_> {
    /// The global axis of the steps in the array's layout `l`.
    pub fn axis_in(&self, l: &Layout) -> Axis {
        self.axis
            .unwrap_or_else(|| (0..3).max_by_key(|&g| l.strides[g]).unwrap_or(2))
    }

    /// Makes `stream` wait for every step: for routes that move the input as a whole.
    fn wait_all(&self, stream: Stream) -> Result<()> {
        self.marks.iter().try_for_each(|m| m.event.wait_on(stream))
    }

    /// Records every step's event on `stream`: for routes that write the output as a whole.
    fn record_all(&self, stream: Stream) -> Result<()> {
        self.marks.iter().try_for_each(|m| m.event.record(stream))
    }
}

/// Where a transpose's input is written in steps (`input_ready`) and where its output is
/// wanted in steps (`output_ready`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TransposeSteps<'a> {
    /// The input's steps, events the caller recorded.
    pub input: Steps<'a>,
    /// The output's steps, events the operation records.
    pub output: Steps<'a>,
}

/// One step of a transpose's input or output (see [`Steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyMark {
    /// Recorded once the step is written: by the caller (input), by the operation (output).
    pub event: EventRef,
    /// Cells `0..planes` along the steps' axis of the array (halo cells counted).
    pub planes: i64,
}

/// One halo update: its plan and buffers.
pub struct HaloCall<'a> {
    /// This rank's plan of the update.
    pub plan: &'a HaloPlan,
    /// The grid's halo backend.
    pub backend: HaloBackend,
    /// Elements of this rank's halo workspace (`get_halo_workspace_size()`).
    pub workspace_elems: i64,
    /// Element type of the array.
    pub dtype: DataType,
    /// The pencil whose halos are updated, in place.
    pub data: Buf,
    /// The caller's workspace (`None`: the handle's).
    pub work: Option<Buf>,
}

impl TransposeCall<'_> {
    /// The pipeline of this call with `mover` and `work`.
    fn run<'a>(&'a self, mover: &'a dyn Mover, work: Buf) -> TransposeRun<'a> {
        TransposeRun {
            plan: self.plan,
            backend: self.backend,
            elem: self.dtype.size(),
            mover,
            input: self.input,
            output: self.output,
            work,
            own_cells: self.own_cells,
        }
    }
}

impl HaloCall<'_> {
    /// The pipeline of this call with `mover` and `work`.
    fn run<'a>(&'a self, mover: &'a dyn Mover, work: Buf) -> HaloRun<'a> {
        HaloRun {
            plan: self.plan,
            backend: self.backend,
            elem: self.dtype.size(),
            mover,
            data: self.data,
            work,
        }
    }
}

/// What the performance report records of one operation.
#[derive(Clone, Copy)]
struct Sample<'a> {
    key: &'a dyn Fn() -> SampleKey,
    bytes: f64,
}

/// How the performance report gets an operation's communication time.
#[derive(Clone, Copy)]
enum CommTime<'a> {
    /// Time inside each transport call (transports that complete on the host).
    PerCall,
    /// Read after the run from what it measured itself: pipelines must not be timed call
    /// by call, since each device timing waits for the stream and would serialise them.
    Own(&'a dyn Fn() -> Result<f64>),
}

/// How a device operation through NCCL or MPI exchanges data.
struct DeviceExchange<'a> {
    route: Route,
    /// NCCL may exchange through the registered workspace, of this many elements (the
    /// same on every rank, so that all grow it together): every rank then packs and
    /// unpacks through it.
    registrable: Option<i64>,
    /// Handle ranks of the group's members, by peer index (NCCL uses handle ranks).
    members: &'a [usize],
    /// The MPI group the plan's peer indices refer to.
    comm: &'a dyn Communicator,
    /// Elements the operation's workspace needs, of `elem` bytes, and the query that
    /// says so.
    work_elems: i64,
    elem: usize,
    query: &'static str,
    /// Staging bytes for MPI without CUDA support.
    staging: usize,
    sample: Sample<'a>,
    /// The stream is being captured into a CUDA graph.
    capturing: bool,
}

const TRANSPOSE_QUERY: &str = "get_transpose_workspace_size()";
const HALO_QUERY: &str = "get_halo_workspace_size()";

/// Byte offset, in each peer's workspace, of the slot this rank's chunk goes to.
fn peer_slots(plan: &TransposePlan, elem: i64) -> Vec<u64> {
    plan.peer_recv_offsets
        .iter()
        .map(|&o| (o * elem) as u64)
        .collect()
}

/// Communication time of a pipeline (measured by the pipe) or of a single call.
fn timing<'a>(sliced: bool, span: &'a dyn Fn() -> Result<f64>) -> CommTime<'a> {
    if sliced {
        CommTime::Own(span)
    } else {
        CommTime::PerCall
    }
}

/// Bytes of `elems` elements, after checking that the caller's workspace, if any, holds
/// them. Every route checks it, also those that always use the handle's workspace.
fn check_work(explicit: Option<Buf>, elems: i64, elem: usize, query: &str) -> Result<usize> {
    let need = usize::try_from(elems.max(0))
        .ok()
        .and_then(|n| n.checked_mul(elem))
        .ok_or_else(|| Error::InvalidUsage(format!("{query} = {elems} elements overflow")))?;
    match explicit {
        Some(w) if w.len() < need => invalid!(
            "work: expected at least {need} bytes ({query} = {elems} elements of {elem} bytes), got {} bytes",
            w.len()
        ),
        _ => Ok(need),
    }
}

impl Runtime<'_> {
    fn device(&self) -> Result<&DeviceState> {
        self.device
            .ok_or_else(|| Error::Internal("device operation on a host handle".into()))
    }

    fn mpi_cuda_aware(&self) -> bool {
        self.device.is_some_and(|d| d.mpi_cuda_aware)
    }

    /// The device state with its device bound to this thread and its copy kernels loaded
    /// (inside a capture they must be loaded already).
    fn bound_device(&self, capturing: bool) -> Result<(&DeviceState, std::sync::Arc<Kernels>)> {
        let d = self.device()?;
        d.device.bind()?;
        let kernels = match capturing {
            true => Kernels::loaded(&d.device).ok_or_else(|| {
                Error::NotSupported("CUDA graph capture: the copy kernels are compiled by the first operation, which cannot happen inside a capture: run the operation once before capturing it".into())
            })?,
            false => Kernels::for_device(&d.device)?,
        };
        Ok((d, kernels))
    }

    /// Whether `exec`'s stream is being captured into a CUDA graph; if so, NotSupported
    /// unless `route` can be captured (NCCL, NVSHMEM: stream-ordered, no host
    /// synchronisation) and the performance report is off.
    fn capture_check(&self, exec: Exec, route: Route, backend: &str) -> Result<bool> {
        let Exec::Device(stream) = exec else {
            return Ok(false);
        };
        if !cuda::capturing(stream)? {
            return Ok(false);
        }
        if self.perf.is_some() {
            unsupported!("CUDA graph capture with the performance report on (CUDECOMP_ENABLE_PERFORMANCE_REPORT=1): it times each operation by synchronising its stream; turn the report off while capturing");
        }
        match route {
            Route::Nccl { .. }
            | Route::Nvshmem { .. }
            | Route::NvshmemFaces { .. }
            | Route::Local => Ok(true),
            Route::Ipc { .. } => unsupported!(
                "{backend} cannot be captured into a CUDA graph: DIRECT signals its peers through interprocess events after a host barrier; capturable backends are NCCL, NCCL_PL and the NVSHMEM family (transposes) and NCCL, NVSHMEM and NVSHMEM_BLOCKING (halo updates)"
            ),
            _ => unsupported!(
                "{backend} cannot be captured into a CUDA graph: MPI runs on the host and synchronises the stream; capturable backends are NCCL, NCCL_PL and the NVSHMEM family (transposes) and NCCL, NVSHMEM and NVSHMEM_BLOCKING (halo updates)"
            ),
        }
    }

    /// Runs a transpose (host: synchronously; device: enqueued on the stream, MPI routes
    /// synchronising it on the host).
    pub fn transpose(&self, c: &TransposeCall<'_>, exec: Exec) -> Result<()> {
        let plan = c.plan;
        let elem = c.dtype.size();
        let need = check_work(c.work, c.workspace_elems, elem, TRANSPOSE_QUERY)?;
        let key = || transpose_key(plan, c.dtype, c.input.ptr() == c.output.ptr());
        let sample = Sample {
            key: &key,
            bytes: transpose_bytes(plan, elem),
        };
        let route = transpose_route(exec, c.backend, self.mpi_cuda_aware(), plan)?;
        let capturing = self.capture_check(exec, route, c.backend.enum_name())?;
        match (exec, route) {
            // DIRECT's single copies wait plane by plane (`transpose_ipc`); host operations
            // have no events (`GridDesc::transpose_with` checks).
            (Exec::Device(_), Route::Ipc { .. }) | (Exec::Host, _) => {}
            (Exec::Device(stream), _) => c.steps.input.wait_all(stream)?,
        }
        let moved = match (route, exec) {
            (Route::HostMpi, _) => {
                let mut ws = lock(&self.slot.ws);
                // SAFETY: the workspace stays locked, and not grown again, until the end.
                let work = c.work.unwrap_or_else(|| unsafe { ws.host(need) });
                let mover = HostMover::new(self.host_threads).streaming_into(c.output);
                let r = c.run(&mover, work);
                self.reported(&Clock::Host, c.group, sample, CommTime::PerCall, |t| {
                    r.run(t)
                })
            }
            (Route::HostShared { sliced }, _) => {
                let mut ws = lock(&self.slot.ws);
                // Always the handle's shared workspace: peers write into it. Each rank
                // tells the others, in the same collective, where its output lies when
                // peers could write into it (see `single_copy_wanted`).
                let note = single_copy_wanted(c, sliced, false)
                    .then(|| SharedArray::find(c.output))
                    .flatten()
                    // Memory files only where peers could open this rank's workspace file.
                    .filter(|a| a.mappable(&ws.shared))
                    .map_or_else(Vec::new, |a| a.encode());
                let (work, notes) = ws.shared.exchange_noting(self.world, need, &note)?;
                let mover = HostMover::new(self.host_threads).streaming_into(c.output);
                let r = c.run(&mover, work);
                let ws = &mut *ws;
                let outs = peer_outputs(
                    |r| notes.get(r).and_then(|n| ArrayRef::decode(n)),
                    plan,
                    c.dtype.size(),
                    |r, a, bytes| ws.peer_arrays.map_shared(r, a, bytes),
                );
                let x = SharedChunks {
                    workspaces: &ws.shared,
                    members: &plan.members,
                    me: plan.me,
                    waited_ms: Cell::new(0.0),
                };
                // Every member took the single-copy path: one that cannot map a peer's
                // output tells the others rather than leaving them waiting.
                let outs = match outs {
                    Err(e) => return x.abandon(e),
                    Ok(o) => o,
                };
                if let Some(outs) = outs {
                    let threads = self.host_threads;
                    let movers = |dst: Buf| -> Box<dyn Mover> {
                        Box::new(HostMover::new(threads).streaming_into(dst))
                    };
                    let waited = || Ok(x.waited_ms.get());
                    crate::engine::direct::count_single_copy();
                    return self.reported(
                        &Clock::Host,
                        c.group,
                        sample,
                        CommTime::Own(&waited),
                        |_| {
                            r.single_copy(
                                &outs,
                                &[],
                                &movers,
                                single_copy_block(plan, threads),
                                &x,
                                None,
                            )
                        },
                    );
                }
                let x = SharedSlices {
                    workspaces: &ws.shared,
                    members: &plan.members,
                    rank: self.rank,
                    threads: self.host_threads,
                    ring: Some(HOST_RING_PLACES),
                    waited_ms: Cell::new(0.0),
                };
                let waited = || Ok(x.waited_ms.get());
                self.reported(&Clock::Host, c.group, sample, CommTime::Own(&waited), |t| {
                    if sliced {
                        r.sliced(&x, self.slice_bytes, false)
                    } else {
                        r.run(t)
                    }
                })
            }
            (Route::Ipc { sliced }, Exec::Device(stream)) => {
                self.transpose_ipc(c, need, sliced, stream, sample)
            }
            (
                Route::Nvshmem {
                    sliced,
                    per_peer,
                    direct,
                },
                Exec::Device(stream),
            ) => {
                let mode = (sliced, per_peer, direct);
                self.transpose_nvshmem(c, need, mode, stream, capturing, sample)
            }
            (route, Exec::Device(stream)) => self.on_device(
                stream,
                c.work,
                DeviceExchange {
                    route,
                    // Never where some rank sends from its input or receives into its output.
                    registrable: (matches!(route, Route::Nccl { sliced: true })
                        && plan.packed_everywhere)
                        .then_some(c.workspace_elems),
                    members: &plan.members,
                    comm: c.group,
                    work_elems: c.workspace_elems,
                    elem,
                    query: TRANSPOSE_QUERY,
                    staging: (plan.input.size + plan.output.size) as usize * elem,
                    sample,
                    capturing,
                },
                |mover, work, transport, slices| {
                    let r = c.run(mover, work);
                    match slices {
                        // Staged slices pair unit k with slice k on every rank: never per peer.
                        Some(x) => {
                            r.sliced(x, self.slice_bytes, c.backend == TransposeBackend::NcclPl)
                        }
                        None => r.run(transport),
                    }
                },
            ),
            (route, Exec::Host) => Err(Error::Internal(format!(
                "device route {route:?} for a host operation"
            ))),
        };
        moved?;
        match (exec, route) {
            // DIRECT records its output's steps itself (`transpose_ipc`); host operations
            // have none.
            (Exec::Device(_), Route::Ipc { .. }) | (Exec::Host, _) => Ok(()),
            // The output is written as a whole: every step has landed at the end.
            (Exec::Device(stream), _) => c.steps.output.record_all(stream),
        }
    }

    /// DIRECT on GPUs: chunks are packed slice by slice on the user's stream and copied by
    /// the copy engine straight into the receiving peer's workspace (mapped through CUDA
    /// IPC) from the library's stream; each slice is signalled with an interprocess event
    /// and unpacked by the receiver as it lands. One host synchronisation at the start
    /// (the peers' workspaces are free) and one barrier (signals recorded before waits).
    /// Always uses the handle's workspace, which peers have mapped. When every member's
    /// output is a registered device array (`GridDesc.empty_pencil`), the start's gather
    /// says so and each rank copies its chunks once, straight into those outputs.
    fn transpose_ipc(
        &self,
        c: &TransposeCall<'_>,
        need: usize,
        sliced: bool,
        stream: Stream,
        sample: Sample<'_>,
    ) -> Result<()> {
        let plan = c.plan;
        let elem = c.dtype.size() as i64;
        self.signalled(stream, plan.npeers(), false, |dev, mover, pipe, ws| {
            // SAFETY: the workspace stays locked, and not grown again, until `release`.
            let work = unsafe { ws.device(&dev.device, need, stream)? };
            let run = c.run(mover, work);
            let span = || pipe.span_ms();
            let clock = Clock::Device(stream);
            // The receivers' output steps travel with their arrays: writers cut by them.
            let (ends, wanted) = grouped_landing(&c.steps.output);
            let note = match single_copy_wanted(c, sliced, true)
                .then(|| DeviceArray::find(c.output))
                .flatten()
            {
                Some(a) => ipc_note(
                    &a.encode(),
                    &Landing::encode(c.steps.output.axis_in(&plan.out_layout), &ends)?,
                ),
                None => [0; NOTE],
            };
            self.reported(&clock, c.group, sample, timing(sliced, &span), |t| {
                let notes = ws.start_direct(self.world, work, stream, &note)?;
                let outs = peer_outputs(
                    |r| notes.get(r).and_then(|n| DeviceArrayRef::decode(n)),
                    plan,
                    c.dtype.size(),
                    |r, a, bytes| ws.peer_device_arrays.map_device(&dev.device, r, a, bytes),
                );
                let x = IpcChunks {
                    pipe,
                    peers: ws.ipc(),
                    main: stream,
                    members: &plan.members,
                    me: plan.me,
                    comm: c.group,
                    wanted,
                };
                // As on the host: a member that cannot map a peer's output tells the others.
                let outs = outs.and_then(|o| {
                    o.map(|o| member_landings(&notes, plan).map(|l| (o, l)))
                        .transpose()
                });
                let outs = match outs {
                    Err(e) => return x.abandon(e),
                    Ok(o) => o,
                };
                if let Some((outs, landing)) = outs {
                    crate::engine::direct::count_single_copy();
                    x.start()?;
                    let movers = |dst| -> Box<dyn Mover + '_> {
                        let m = DeviceMover::new(mover.kernels, x.stream_for(dst, c.output));
                        Box::new(m.rows_on_engine())
                    };
                    // Each step's event holds back both streams the chunks are copied on.
                    let ready = c.steps.input;
                    let wait = |j: usize| {
                        let e = ready.marks[j].event;
                        e.wait_on(stream)?;
                        e.wait_on(pipe.side())
                    };
                    let staged = Staged {
                        axis: ready.axis_in(&plan.in_layout),
                        ends: ready.marks.iter().map(|m| m.planes).collect(),
                        wait: &wait,
                    };
                    let staged = (!ready.marks.is_empty()).then_some(&staged);
                    return run.single_copy(&outs, &landing, &movers, 0, &x, staged);
                }
                // Two copies, through the workspaces: the output is written as a whole.
                c.steps.input.wait_all(stream)?;
                if sliced {
                    let x = IpcSlices {
                        pipe,
                        main: stream,
                        peers: ws.ipc(),
                        members: &plan.members,
                        me: plan.me,
                        slots: peer_slots(plan, elem),
                        comm: c.group,
                    };
                    run.sliced(&x, self.slice_bytes, false)?;
                } else {
                    run.run(t)?;
                }
                c.steps.output.record_all(stream)
            })
        })
    }

    /// Runs a halo update (host: synchronously; device: enqueued on the stream).
    pub fn update_halos(&self, c: &HaloCall<'_>, exec: Exec) -> Result<()> {
        let plan = c.plan;
        let elem = c.dtype.size();
        let need = check_work(c.work, c.workspace_elems, elem, HALO_QUERY)?;
        let key = || halo_key(&plan.spec, c.dtype);
        let sample = Sample {
            key: &key,
            bytes: halo_bytes(plan, self.rank, elem),
        };
        let route = halo_route(exec, c.backend, self.mpi_cuda_aware(), plan)?;
        let capturing = self.capture_check(exec, route, c.backend.enum_name())?;
        match (route, exec) {
            (Route::Local, _) => {
                // The wrap's copies alone, on the host or the stream: no workspace, and
                // the communicator is never called.
                let kernels;
                let (mover, clock): (Box<dyn Mover>, Clock) = match exec {
                    Exec::Host => (Box::new(HostMover::new(self.host_threads)), Clock::Host),
                    Exec::Device(stream) => {
                        kernels = self.bound_device(capturing)?.1;
                        (
                            Box::new(DeviceMover::new(&kernels, stream)),
                            Clock::Device(stream),
                        )
                    }
                };
                let r = c.run(mover.as_ref(), Buf::empty());
                self.reported(&clock, self.world, sample, CommTime::PerCall, |t| r.run(t))
            }
            (Route::HostMpi, _) => {
                let mut ws = lock(&self.slot.ws);
                // SAFETY: the workspace stays locked, and not grown again, until the end.
                let work = c.work.unwrap_or_else(|| unsafe { ws.host(need) });
                let mover = HostMover::new(self.host_threads);
                let r = c.run(&mover, work);
                self.reported(&Clock::Host, self.world, sample, CommTime::PerCall, |t| {
                    r.run(t)
                })
            }
            (Route::HostShared { .. }, _) => {
                let mut ws = lock(&self.slot.ws);
                // Always the handle's shared workspace: neighbours write into it.
                let work = ws.shared.exchange(self.world, need)?;
                let mover = HostMover::new(self.host_threads);
                let r = c.run(&mover, work);
                let x = SharedFaces {
                    workspaces: &ws.shared,
                    rank: self.rank,
                    waited_ms: Cell::new(0.0),
                };
                let waited = || Ok(x.waited_ms.get());
                self.reported(
                    &Clock::Host,
                    self.world,
                    sample,
                    CommTime::Own(&waited),
                    |_| r.direct(&x, self.slice_bytes),
                )
            }
            (Route::Ipc { .. }, Exec::Device(stream)) => self.halo_ipc(c, need, stream, sample),
            (Route::NvshmemFaces { blocking }, Exec::Device(stream)) => {
                self.halo_nvshmem(c, need, blocking, stream, capturing, sample)
            }
            (route, Exec::Device(stream)) => {
                let everyone: Vec<usize> = (0..self.world.size()).collect();
                self.on_device(
                    stream,
                    c.work,
                    DeviceExchange {
                        route,
                        // Local wraps exchange nothing; dense faces go straight from the array.
                        registrable: (!plan.local_wrap && plan.packed_everywhere)
                            .then_some(plan.max_workspace_elems),
                        members: &everyone,
                        comm: self.world,
                        work_elems: c.workspace_elems,
                        elem,
                        query: HALO_QUERY,
                        staging: plan.workspace_elems() as usize * elem,
                        sample,
                        capturing,
                    },
                    |mover, work, transport, _| c.run(mover, work).run(transport),
                )
            }
            (route, Exec::Host) => Err(Error::Internal(format!(
                "device route {route:?} for a host operation"
            ))),
        }
    }

    /// NVSHMEM transposes: slices put into (or, NVSHMEM_SM, packed straight into) the
    /// peers' copies of the symmetric workspace, each signalled through NVSHMEM; every
    /// wait is on a stream. Uses the handle's symmetric workspace unless every rank passes
    /// the same `Handle.malloc` buffer as `work` (see [`Workspace::symmetric`]).
    fn transpose_nvshmem(
        &self,
        c: &TransposeCall<'_>,
        need: usize,
        (sliced, per_peer, direct): (bool, bool, bool),
        stream: Stream,
        capturing: bool,
        sample: Sample<'_>,
    ) -> Result<()> {
        let plan = c.plan;
        self.signalled(stream, plan.npeers(), capturing, |dev, mover, pipe, ws| {
            let nv = dev.nvshmem()?;
            // SAFETY: the workspace stays locked, and not grown again, until `release`.
            let sym = unsafe { ws.symmetric(&nv, &dev.device, self.world, need, c.work)? };
            let run = c.run(mover, sym.work);
            // NVSHMEM_SM's packs into peers, on the library's stream beside the user's.
            let far = DeviceMover::new(mover.kernels, pipe.side());
            far.background(true);
            let x = NvshmemSlices {
                sym: self.symmetric(&nv, &sym),
                pipe,
                main: stream,
                members: &plan.members,
                me: plan.me,
                slots: peer_slots(plan, c.dtype.size() as i64),
                direct: direct.then_some(&far as &dyn Mover),
                waited: RefCell::new(vec![false; plan.npeers()]),
            };
            let span = || pipe.span_ms();
            let clock = Clock::Device(stream);
            self.reported(&clock, c.group, sample, timing(sliced, &span), |t| {
                if !sliced {
                    return run.run(t);
                }
                x.start()?;
                run.sliced(&x, self.slice_bytes, per_peer)
            })
        })
    }

    /// NVSHMEM halo updates: faces put into the neighbours' symmetric workspaces, each
    /// signalled through NVSHMEM (NVSHMEM_BLOCKING: whole faces).
    fn halo_nvshmem(
        &self,
        c: &HaloCall<'_>,
        need: usize,
        blocking: bool,
        stream: Stream,
        capturing: bool,
        sample: Sample<'_>,
    ) -> Result<()> {
        self.signalled(stream, 1, capturing, |dev, mover, pipe, ws| {
            let nv = dev.nvshmem()?;
            // SAFETY: the workspace stays locked, and not grown again, until `release`.
            let sym = unsafe { ws.symmetric(&nv, &dev.device, self.world, need, c.work)? };
            let run = c.run(mover, sym.work);
            let x = NvshmemFaces {
                sym: self.symmetric(&nv, &sym),
                pipe,
                main: stream,
                neighbours: c.plan.neighbours,
                slices: if blocking { 1 } else { MAX_SLICES / 2 },
            };
            let span = || pipe.span_ms();
            let clock = Clock::Device(stream);
            self.reported(&clock, self.world, sample, CommTime::Own(&span), |_| {
                x.start();
                run.direct(&x, self.slice_bytes)
            })
        })
    }

    /// The NVSHMEM buffers of an operation of this rank.
    fn symmetric<'n>(&self, nv: &'n Nvshmem, sym: &SymmetricWork) -> Symmetric<'n> {
        Symmetric {
            nv,
            work: sym.work,
            signals: sym.signals,
            rank: self.rank,
            nranks: self.world.size(),
        }
    }

    /// Frame of the device operations that signal peers themselves (DIRECT, NVSHMEM):
    /// binds the device, takes the library's stream (room for `npeers` peers) and the
    /// workspace, runs `f` and orders the next user of the workspace after this operation
    /// (`capturing`: inside a CUDA graph capture, with everything set up beforehand).
    fn signalled(
        &self,
        stream: Stream,
        npeers: usize,
        capturing: bool,
        f: impl FnOnce(&DeviceState, &DeviceMover<'_>, &Pipe, &mut Workspace) -> Result<()>,
    ) -> Result<()> {
        let (dev, kernels) = self.bound_device(capturing)?;
        let mover = DeviceMover::new(&kernels, stream);
        let pipe = self.slot.pipe(&dev.device, npeers, capturing)?;
        let pipe = pipe
            .as_ref()
            .ok_or_else(|| Error::Internal("no library stream".into()))?;
        let mut ws = lock(&self.slot.ws);
        ws.begin(capturing);
        let result = f(dev, &mover, pipe, &mut ws);
        ws.release(stream)?;
        result
    }

    /// DIRECT halo update on GPUs: faces are copied by the copy engine into the
    /// neighbours' workspaces (CUDA IPC) and signalled with interprocess events; the
    /// handle's workspace is always used, as peers have mapped it.
    fn halo_ipc(
        &self,
        c: &HaloCall<'_>,
        need: usize,
        stream: Stream,
        sample: Sample<'_>,
    ) -> Result<()> {
        self.signalled(stream, 1, false, |dev, mover, pipe, ws| {
            // SAFETY: the workspace stays locked, and not grown again, until `release`.
            let work = unsafe { ws.device(&dev.device, need, stream)? };
            let run = c.run(mover, work);
            let span = || pipe.span_ms();
            let clock = Clock::Device(stream);
            self.reported(&clock, self.world, sample, CommTime::Own(&span), |_| {
                ws.start_direct(self.world, work, stream, &[0; NOTE])?;
                let x = IpcFaces {
                    pipe,
                    main: stream,
                    peers: ws.ipc(),
                    neighbours: c.plan.neighbours,
                    comm: self.world,
                };
                run.direct(&x, self.slice_bytes)
            })
        })
    }

    /// Common frame of device operations through NCCL or MPI: binds the device, picks the
    /// workspace, builds the mover and the transport (NCCL, CUDA-aware MPI or host-staged
    /// MPI; sliced routes get their slice exchange), runs `f` and orders the next user of
    /// the workspace after this operation.
    fn on_device(
        &self,
        stream: Stream,
        work: Option<Buf>,
        ex: DeviceExchange<'_>,
        f: impl FnOnce(&dyn Mover, Buf, &dyn Transport, Option<&dyn SliceExchange>) -> Result<()>,
    ) -> Result<()> {
        let (dev, kernels) = self.bound_device(ex.capturing)?;
        let mover = DeviceMover::new(&kernels, stream);
        let sliced = matches!(
            ex.route,
            Route::Nccl { sliced: true } | Route::StagedMpi { sliced: true }
        );
        let pipe = if sliced {
            Some(
                self.slot
                    .pipe(&dev.device, ex.members.len(), ex.capturing)?,
            )
        } else {
            None
        };
        let pipe = pipe.as_ref().and_then(|g| g.as_ref());
        let nccl = match ex.route {
            Route::Nccl { .. } => Some(dev.nccl(self.world)?),
            _ => None,
        };
        let mut ws = lock(&self.slot.ws);
        ws.begin(ex.capturing);
        let need = check_work(work, ex.work_elems, ex.elem, ex.query)?;
        // NCCL exchanges between workspaces on every rank use the handle's registered one
        // (a `work` argument is still checked); others the given or the automatic one.
        let registered = match (&nccl, ex.registrable) {
            (Some(n), Some(elems)) if n.registers() => {
                let total = elems.max(ex.work_elems).max(0) as usize * ex.elem;
                // A graph holds a smaller registered buffer: the caller's `work` serves,
                // unregistered (the same on every rank, as captures and `work` are).
                if work.is_some() && ws.registered_frozen_short(total) {
                    None
                } else {
                    // SAFETY: the workspace stays locked, and not grown again, until `release`.
                    unsafe { ws.registered(n, &dev.device, self.world, total, stream)? }
                }
            }
            _ => None,
        };
        let (work, registered) = match (registered, work) {
            (Some(b), _) => (b, true),
            (None, Some(w)) => (w, false),
            // SAFETY: the workspace stays locked, and not grown again, until `release`.
            (None, None) => (unsafe { ws.device(&dev.device, need, stream)? }, false),
        };
        let clock = Clock::Device(stream);
        let run = |t: &dyn Transport, x: Option<&dyn SliceExchange>, comm: CommTime<'_>| {
            self.reported(&clock, t, ex.sample, comm, |t| f(&mover, work, t, x))
        };
        let result = match ex.route {
            Route::Nccl { .. } => {
                let nccl = nccl.ok_or_else(|| Error::Internal("NCCL route without NCCL".into()))?;
                let on = pipe.map_or(stream, Pipe::side);
                let t = NcclTransport::new(&nccl, on, ex.members);
                match pipe {
                    Some(pipe) => {
                        let x = TransportSlices {
                            transport: &t,
                            pipe,
                            main: stream,
                            registered,
                        };
                        run(&t, Some(&x), CommTime::Own(&|| pipe.span_ms()))
                    }
                    None => run(&t, None, CommTime::PerCall),
                }
            }
            Route::CudaAwareMpi => {
                run(&CudaAwareMpi::new(ex.comm, stream), None, CommTime::PerCall)
            }
            // Nothing leaves the rank: the communicator is never called.
            Route::Local => run(ex.comm, None, CommTime::PerCall),
            _ => {
                let (base, cap) = ws.staging(&dev.device, ex.staging)?;
                // SAFETY: the arena belongs to the locked workspace; the next user waits for
                // `release` below before touching it.
                let arena = unsafe { Arena::new(base, cap) };
                match pipe {
                    Some(pipe) => {
                        // Receives write into the arena from the host as soon as they are
                        // posted: the previous operation's copies out of it must be done.
                        ws.quiesce()?;
                        let x = StagedSlices::new(ex.comm, pipe, stream, arena);
                        let waited = || Ok(x.waited_ms.get());
                        run(ex.comm, Some(&x), CommTime::Own(&waited))
                    }
                    None => run(
                        &StagedMpi::new(ex.comm, stream, arena),
                        None,
                        CommTime::PerCall,
                    ),
                }
            }
        };
        ws.release(stream)?;
        result
    }

    /// Runs `f` on `transport`; with the performance report on, times it (total, and the
    /// communication time `comm` says how to get) and records a sample.
    fn reported(
        &self,
        clock: &Clock,
        transport: &dyn Transport,
        sample: Sample<'_>,
        comm: CommTime<'_>,
        f: impl FnOnce(&dyn Transport) -> Result<()>,
    ) -> Result<()> {
        let Some(perf) = self.perf else {
            return f(transport);
        };
        let start = clock.mark()?;
        let timed = TimedTransport {
            inner: transport,
            clock,
            comm_ms: Cell::new(0.0),
        };
        let comm_ms = match comm {
            CommTime::PerCall => {
                f(&timed)?;
                timed.comm_ms.get()
            }
            CommTime::Own(read) => {
                f(transport)?;
                read()?
            }
        };
        let total = clock.since(&start)?;
        // Host-timed waits of a device operation (host-staged slices) may begin while
        // earlier work still holds the stream, before the operation's first event runs:
        // communication is part of the operation, so it is capped at its time.
        perf.record((sample.key)(), total, comm_ms.min(total), sample.bytes);
        Ok(())
    }
}

/// Whether this rank offers its output for a single-copy DIRECT transpose: out of place,
/// with peers to exchange with, and allowed by `CUDECOMP_SINGLE_COPY` (`0`: never, `1`:
/// always; unset: on the host, and on GPUs when the copy engine carries every chunk). It
/// then publishes where its output lies when that is a registered array
/// (`GridDesc.empty_pencil`).
///
/// On GPUs chunks of contiguous rows of at least
/// [`crate::cuda::kernels::ENGINE_ROW_BYTES`] go to the copy engine, straight into the
/// peers' outputs: the same engine that carries the two-copy path's chunks across (95 %
/// of peer copy), without its pack and unpack kernels. Other
/// chunks would be written into peers by copy kernels, which reach about 85 % (as
/// NVSHMEM_SM does), so those single copies are taken only when asked for.
fn single_copy_wanted(c: &TransposeCall<'_>, sliced: bool, device: bool) -> bool {
    let allowed = match std::env::var("CUDECOMP_SINGLE_COPY")
        .as_deref()
        .map(str::trim)
    {
        Ok("0") => false,
        Ok("1") => true,
        _ => !device || rows_on_engine(c.plan, c.dtype.size()),
    };
    sliced && allowed && !c.input.overlaps(&c.output)
}

/// A receiver's output steps as its writers' signals carry them (see
/// [`crate::plan::Landing`]): the ends it publishes (the caller's marks grouped into at
/// most [`MAX_LANDING_STEPS`]) and the caller's events to record after each signal, the
/// last (for the cells past the ends) with none; no marks: nothing (the output whole).
fn grouped_landing(s: &Steps<'_>) -> (Vec<i64>, Vec<Vec<EventRef>>) {
    if s.marks.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let planes: Vec<i64> = s.marks.iter().map(|m| m.planes).collect();
    let groups = landing_groups(&planes, MAX_LANDING_STEPS);
    let mut events = Vec::with_capacity(groups.len() + 1);
    let mut first = 0;
    for &last in &groups {
        events.push(s.marks[first..=last].iter().map(|m| m.event).collect());
        first = last + 1;
    }
    events.push(Vec::new());
    (groups.iter().map(|&i| planes[i]).collect(), events)
}

/// A DIRECT member's note: its output array, then its output steps.
fn ipc_note(array: &[u8; DEVICE_ARRAY_REF_BYTES], landing: &[u8; LANDING_BYTES]) -> [u8; NOTE] {
    let mut n = [0u8; NOTE];
    n[..DEVICE_ARRAY_REF_BYTES].copy_from_slice(array);
    n[DEVICE_ARRAY_REF_BYTES..].copy_from_slice(landing);
    n
}

/// The output steps each member of `plan` published in `notes` (by handle rank), by member.
fn member_landings(notes: &[[u8; NOTE]], plan: &TransposePlan) -> Result<Vec<Landing>> {
    plan.members
        .iter()
        .enumerate()
        .map(|(p, &r)| {
            let v = notes
                .get(r)
                .map_or(&[][..], |n| &n[DEVICE_ARRAY_REF_BYTES..]);
            Landing::decode(v, &plan.peer_out_layouts[p], plan.peer_out_elems[p])
        })
        .collect()
}

/// Whether the copy engine takes every chunk of the plan (into peers and into this rank's
/// own output; see [`DeviceMover::rows_on_engine`]).
fn rows_on_engine(plan: &TransposePlan, elem: usize) -> bool {
    (0..plan.npeers())
        .filter(|&p| plan.sends[p].count > 0)
        .map(|p| {
            if p == plan.me {
                plan.self_copy()
            } else {
                plan.into_peer_output(p)
            }
        })
        .all(|c| on_engine(&c, elem).is_some())
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
