//! DIRECT on GPUs: the copy engine writes into the peers' workspaces, mapped through
//! CUDA IPC, from the library's stream, and each slice (or halo face slice) is signalled
//! with an interprocess event the receiver's stream waits for. One host synchronisation at
//! the start (the peers' workspaces are free) and one barrier (signals recorded before
//! waits); the handle's workspace is always used, as peers have mapped it.
//!
//! Between library arrays (`GridDesc.empty_pencil`, exported device memory) where the copy
//! engine carries every chunk, each rank copies its chunks once, straight into the
//! receivers' outputs (the pipeline's single-copy mode): the operation's start gathers
//! every member's output, and the output steps it wants (`output_ready`), and each writer
//! signals each step of each receiver's output as it lands.

use super::{Backend, Place, Stage};
use crate::comm::{allgather_u64, Communicator};
use crate::cuda::ipc::{IpcPeers, NOTE};
use crate::cuda::kernels::on_engine;
use crate::cuda::vmm::{DeviceArray, DeviceArrayRef, DEVICE_ARRAY_REF_BYTES};
use crate::cuda::{copy_device, EventRef, Stream};
use crate::engine::call::{HaloCall, Steps, TransposeCall};
use crate::engine::context::CommTime;
use crate::engine::exchange::{Exchange, FaceExchange, Piece, Profile, SingleCopySignals};
use crate::engine::pipe::Pipe;
use crate::engine::route::{Capture, DIRECT_BARRIER};
use crate::engine::workspace::Workspace;
use crate::mem::{Buf, Mover};
use crate::plan::{
    landing_groups, Landing, TransposePlan, LANDING_BYTES, MAX_LANDING_STEPS, MAX_SLICES,
};
use crate::{Error, Result};

use super::direct_host::count_single_copy;
use super::peer_slots;
use super::single_copy::{peer_outputs, single_copy_wanted, InputSteps};

/// Makes the copy stream wait until each of `ranks` has finished with its workspace
/// (their `free` records precede the operation's start barrier, so these waits see
/// them): no host synchronisation.
fn wait_peers_free(
    peers: &IpcPeers,
    pipe: &Pipe,
    ranks: impl Iterator<Item = usize>,
) -> Result<()> {
    for r in ranks {
        peers.peer_free(r)?.wait_on(pipe.side())?;
    }
    Ok(())
}

/// Copies `len` bytes at device address `src` into rank `r`'s mapped workspace at byte
/// `at` on the copy stream, then records `r`'s signal `k`.
///
/// # Safety
/// `src..src+len` must be device memory that stays valid until the operation's pipe
/// finishes (the main stream waits for the copy stream then).
unsafe fn copy_to_peer(
    peers: &IpcPeers,
    pipe: &Pipe,
    r: usize,
    at: u64,
    src: u64,
    len: usize,
    k: usize,
) -> Result<()> {
    let (base, size) = peers
        .peer(r)
        .ok_or_else(|| Error::Internal(format!("DIRECT: rank {r}'s workspace not mapped")))?;
    if at + len as u64 > size {
        return Err(Error::Internal(format!(
            "DIRECT: copy of {at}+{len} bytes beyond rank {r}'s workspace of {size} bytes"
        )));
    }
    // SAFETY: the destination lies inside rank `r`'s mapped workspace (checked above),
    // which stays mapped while the operation holds the workspace lock; the caller vouches
    // for the source.
    unsafe { copy_device(base + at, src, len, pipe.side())? };
    peers.sent(r, k)?.record(pipe.side())
}

/// Slices copied by the copy engine straight into peers' workspaces (DIRECT backend),
/// each followed by an interprocess event the receiver waits on.
struct IpcSlices<'a> {
    /// The side stream the copy engine's writes are enqueued on, and its events.
    pipe: &'a Pipe,
    /// The user's stream, on which slices are packed and unpacked.
    main: Stream,
    /// The peers' workspaces mapped through CUDA IPC, and their interprocess events.
    peers: &'a IpcPeers,
    /// Handle rank of each peer of the plan's sub-communicator.
    members: &'a [usize],
    /// This rank's index in `members`.
    me: usize,
    /// Byte offset, in each peer's workspace, of the slot this rank's chunk goes to.
    slots: Vec<u64>,
    /// The plan's sub-communicator (its barrier separates records from waits).
    comm: &'a dyn Communicator,
}

impl Exchange for IpcSlices<'_> {
    fn profile(&self) -> Profile {
        Profile {
            lands_in_output: false,
            ..Profile::sliced(MAX_SLICES)
        }
    }

    fn ready(&self, u: usize) -> Result<()> {
        self.pipe.ready(self.main)?;
        if u == 0 {
            let others = self
                .members
                .iter()
                .enumerate()
                .filter(|&(p, _)| p != self.me);
            wait_peers_free(self.peers, self.pipe, others.map(|(_, &r)| r))?;
        }
        Ok(())
    }

    fn exchange(&self, _u: usize, k: usize, sends: &[Piece], _recvs: &[Piece]) -> Result<()> {
        for s in sends {
            let at = self.slots[s.peer] + s.rel as u64;
            let r = self.members[s.peer];
            // SAFETY: the piece lies inside one of the operation's buffers (checked when it
            // was cut), which outlive the operation.
            unsafe { copy_to_peer(self.peers, self.pipe, r, at, s.ptr as u64, s.len, k)? };
        }
        Ok(())
    }

    fn posted(&self) -> Result<()> {
        // Peers have enqueued their records: waits enqueued from now on see them.
        self.comm.barrier()
    }

    fn arrived(&self, _u: usize, k: usize, recvs: &[Piece]) -> Result<()> {
        for r in recvs {
            self.peers
                .landed(self.members[r.peer], k)?
                .wait_on(self.main)?;
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        self.pipe.finish(self.main)
    }
}

/// Single-copy transposes between registered device arrays (DIRECT): chunks for peers
/// are copied on the library's stream straight into their outputs, after each member's
/// `free` event (its stream is done with its output), each step of a receiver's output
/// followed by an interprocess event the receiver's stream waits for; this rank's own
/// chunk is copied on the user's stream meanwhile.
struct IpcChunks<'a> {
    /// The library's stream (peers' chunks) and its events.
    pipe: &'a Pipe,
    /// The peers' interprocess events.
    peers: &'a IpcPeers,
    /// The user's stream.
    main: Stream,
    /// Handle rank of each member of the plan's sub-communicator.
    members: &'a [usize],
    /// This rank's index in `members`.
    me: usize,
    /// The plan's sub-communicator (its barrier separates records from waits).
    comm: &'a dyn Communicator,
    /// The caller's events to record on the user's stream once each step of this rank's
    /// output has landed, by step (see [`crate::plan::Landing`]); empty: the output whole.
    wanted: Vec<Vec<EventRef>>,
}

impl IpcChunks<'_> {
    /// Orders the library's stream after the user's (the input is ready) and after every
    /// member's last use of its output.
    fn start(&self) -> Result<()> {
        self.pipe.ready(self.main)?;
        let others = self
            .members
            .iter()
            .enumerate()
            .filter(|&(p, _)| p != self.me);
        wait_peers_free(self.peers, self.pipe, others.map(|(_, &r)| r))
    }

    /// Where chunks for `dst` are copied: this rank's own output on the user's stream,
    /// peers' outputs on the library's.
    fn stream_for(&self, dst: Buf, own: Buf) -> Stream {
        if dst == own {
            self.main
        } else {
            self.pipe.side()
        }
    }
}

impl SingleCopySignals for IpcChunks<'_> {
    fn delivered(&self, peer: usize, step: usize) -> Result<()> {
        self.peers
            .sent(self.members[peer], step)?
            .record(self.pipe.side())
    }

    fn arrived(&self) -> Result<()> {
        // Peers have enqueued their records (waits enqueued from now on see them), or
        // some rank could not write its chunks.
        if let Some(r) = self.settle(false)? {
            self.pipe.finish(self.main)?;
            return Err(Error::Internal(format!(
                "DIRECT: rank {r} could not write its chunks into the outputs (its own error says why)"
            )));
        }
        // Step by step: every writer's part of the step, then the caller's events of it
        // (the user's stream has copied this rank's own cells before).
        for step in 0..self.wanted.len().max(1) {
            for (p, &w) in self.members.iter().enumerate() {
                if p != self.me {
                    self.peers.landed(w, step)?.wait_on(self.main)?;
                }
            }
            for e in self.wanted.get(step).into_iter().flatten() {
                e.record(self.main)?;
            }
        }
        self.pipe.finish(self.main)
    }

    fn abandon(&self, why: Error) -> Result<()> {
        self.settle(true)?;
        self.pipe.finish(self.main)?;
        Err(why)
    }
}

impl IpcChunks<'_> {
    /// Collective (the barrier between records and waits): whether this rank `failed`;
    /// the first member that did, if any.
    fn settle(&self, failed: bool) -> Result<Option<usize>> {
        let all = allgather_u64(self.comm, u64::from(failed))?;
        Ok(all.iter().position(|&f| f != 0))
    }
}

/// Halo faces copied by the copy engine into neighbours' workspaces mapped through CUDA
/// IPC, each followed by an interprocess event (numbered by the sender's side).
struct IpcFaces<'a> {
    /// The side stream the copy engine's writes are enqueued on, and its events.
    pipe: &'a Pipe,
    /// The user's stream, on which faces are packed and unpacked.
    main: Stream,
    /// The neighbours' workspaces mapped through CUDA IPC, and their interprocess events.
    peers: &'a IpcPeers,
    /// Handle ranks of the neighbours (left, right).
    neighbours: [Option<usize>; 2],
    /// The handle's communicator (its barrier separates records from waits).
    comm: &'a dyn Communicator,
}

impl FaceExchange for IpcFaces<'_> {
    /// Both faces' signals share the [`MAX_SLICES`] interprocess events per writer.
    fn max_slices(&self) -> usize {
        MAX_SLICES / 2
    }

    fn ready(&self, first: bool) -> Result<()> {
        self.pipe.ready(self.main)?;
        if first {
            wait_peers_free(self.peers, self.pipe, self.neighbours.into_iter().flatten())?;
        }
        Ok(())
    }

    fn deliver(&self, part: Buf, to: usize, at: i64, signal: usize) -> Result<()> {
        let at = u64::try_from(at).map_err(|_| Error::Internal(format!("DIRECT: face at {at}")))?;
        let src = part.ptr() as u64;
        // SAFETY: `part` is a checked slice of the operation's array or workspace, which
        // outlive the operation.
        unsafe { copy_to_peer(self.peers, self.pipe, to, at, src, part.len(), signal) }
    }

    fn posted(&self) -> Result<()> {
        self.comm.barrier()
    }

    fn arrived(&self, from: usize, signal: usize) -> Result<()> {
        self.peers.landed(from, signal)?.wait_on(self.main)
    }

    fn finish(&self) -> Result<()> {
        self.pipe.finish(self.main)
    }
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
/// own output; see [`crate::cuda::kernels::DeviceMover::rows_on_engine`]).
fn rows_on_engine(plan: &TransposePlan, elem: usize) -> bool {
    (0..plan.npeers())
        .filter(|&p| plan.sends[p].count > 0)
        .map(|p| {
            if p == plan.me {
                plan.self_copy()
            } else {
                plan.peer_output_copy(p)
            }
        })
        .all(|c| on_engine(&c, elem).is_some())
}

/// DIRECT on device memory.
pub(super) struct DirectDeviceBackend;

impl Backend for DirectDeviceBackend {
    type TransposeHow = Stream;
    type HaloHow = Stream;
    const CAPTURE: Capture = Capture::Refused(DIRECT_BARRIER);

    /// The second copies run on the library's stream.
    fn transpose_place(c: &TransposeCall<'_>, &stream: &Stream) -> Place {
        Place::piped(stream, c.plan.npeers())
    }

    fn halo_place(_c: &HaloCall<'_>, &stream: &Stream) -> Place {
        Place::piped(stream, 1)
    }

    /// A transpose through DIRECT on GPUs: single copies between library arrays where every
    /// member publishes one, else two copies through the mapped workspaces.
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        stream: Stream,
    ) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let plan = c.plan;
        let elem = c.dtype.size();
        // Always the handle's workspace: peers write into it.
        // SAFETY: the workspace stays locked, and not grown again, until `release`.
        let work = unsafe { ws.device(&f.dev.device, s.need, stream)? };
        let pipe = f.pipe()?;
        let span = || pipe.span_ms();
        // The receivers' output steps travel with their arrays: writers cut by them.
        let (ends, wanted) = grouped_landing(&c.steps.output);
        // Chunks of contiguous rows of at least `ENGINE_ROW_BYTES` go to the copy engine,
        // straight into the peers' outputs, as the two-copy path's chunks do, without its
        // pack and unpack kernels; other chunks would be written into peers by copy
        // kernels, which reach less of the link (as NVSHMEM_SM does), so those single
        // copies are taken only when asked for.
        // A batch takes the two copies on devices: its single copy has not run on a GPU.
        let offered =
            c.fields.count == 1 && single_copy_wanted(cx, c, || rows_on_engine(plan, elem));
        let note = match offered.then(|| DeviceArray::find(c.output)).flatten() {
            Some(a) => ipc_note(
                &a.encode(),
                &Landing::encode(c.steps.output.axis_in(&plan.out_layout), &ends)?,
            ),
            None => [0; NOTE],
        };
        s.reported(work, c.group, CommTime::Own(&span), |run, _| {
            let notes = ws.start_direct(cx.world, work, stream, &note)?;
            let outs = peer_outputs(
                |r| notes.get(r).and_then(|n| DeviceArrayRef::decode(n)),
                plan,
                elem,
                c.fields.count,
                |r, a, bytes| ws.peer_device_arrays.map_device(&f.dev.device, r, a, bytes),
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
                count_single_copy();
                x.start()?;
                let movers = |dst| -> Box<dyn Mover + '_> {
                    let m = cx.device_mover(f.mover.kernels, x.stream_for(dst, c.output));
                    Box::new(m.rows_on_engine())
                };
                // Each step's event holds back both streams the chunks are copied on.
                let ready = c.steps.input;
                let wait = |j: usize| {
                    let e = ready.marks[j].event;
                    e.wait_on(stream)?;
                    e.wait_on(pipe.side())
                };
                let steps = InputSteps {
                    axis: ready.axis_in(&plan.in_layout),
                    ends: ready.marks.iter().map(|m| m.planes).collect(),
                    wait: &wait,
                };
                let steps = (!ready.marks.is_empty()).then_some(&steps);
                return run.single_copy(&outs, &landing, &movers, 0, &x, steps);
            }
            // Two copies, through the workspaces: the output is written as a whole.
            c.steps.input.wait_all(stream)?;
            let x = IpcSlices {
                pipe,
                main: stream,
                peers: ws.ipc(),
                members: &plan.members,
                me: plan.me,
                slots: peer_slots(plan, elem as i64, c.fields.count),
                comm: c.group,
            };
            run.run(&x, cx.slice_bytes)?;
            c.steps.output.record_all(stream)
        })
    }

    /// A halo update through DIRECT on GPUs.
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, stream: Stream) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        // Always the handle's workspace: neighbours write into it.
        // SAFETY: the workspace stays locked, and not grown again, until `release`.
        let work = unsafe { ws.device(&f.dev.device, s.need, stream)? };
        let pipe = f.pipe()?;
        let span = || pipe.span_ms();
        s.reported(work, cx.world, CommTime::Own(&span), |run, _| {
            ws.start_direct(cx.world, work, stream, &[0; NOTE])?;
            let x = IpcFaces {
                pipe,
                main: stream,
                peers: ws.ipc(),
                neighbours: c.plan.neighbours,
                comm: cx.world,
            };
            run.direct(&x, cx.slice_bytes)
        })
    }
}
