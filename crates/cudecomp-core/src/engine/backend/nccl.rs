//! NCCL (NCCL and NCCL_PL transposes, NCCL halos) on the handle's NCCL communicator.
//! Transposes run their slices on the library's stream, one NCCL group per unit, while
//! the user's stream packs and unpacks. Where every rank packs and unpacks through its
//! workspace, both move through the handle's workspace registered with NCCL.

use super::{Backend, Place, Stage};
use crate::engine::route::Capture;
use std::sync::Arc;

use crate::comm::{post_pieces, Communicator, Transport, Way};
use crate::cuda::nccl::{Nccl, NcclTransport};
use crate::cuda::Stream;
use crate::engine::call::{HaloCall, TransposeCall};
use crate::engine::context::{CommTime, DeviceFrame};
use crate::engine::exchange::{Exchange, Piece, Profile};
use crate::engine::pipe::Pipe;
use crate::engine::workspace::Workspace;
use crate::engine::Exec;
use crate::mem::Buf;
use crate::Result;

/// Default slice size of NCCL pipelines between unregistered and between registered
/// buffers: each NCCL group between unregistered buffers costs far more on top of its
/// bytes than one between registered buffers, so unregistered slices are larger.
const SLICE_BYTES: [i64; 2] = [256 << 20, 128 << 20];

/// Most slices per chunk: NCCL's kernels share the SMs with the packing, and every group
/// has a fixed cost, so more slices run slower.
const MAX_SLICES: usize = 8;

/// Slices through NCCL bound to the library's stream: one group per unit.
struct NcclSlices<'a> {
    /// NCCL, enqueuing on the library's stream.
    transport: &'a dyn Transport,
    /// The library's stream and the events ordering it against `main`.
    pipe: &'a Pipe,
    /// The user's stream, on which slices are packed and unpacked.
    main: Stream,
    /// Slices move between buffers registered with NCCL.
    registered: bool,
    /// One peer per unit (NCCL_PL).
    per_peer: bool,
}

impl Exchange for NcclSlices<'_> {
    fn profile(&self) -> Profile {
        Profile {
            slice_bytes: SLICE_BYTES[usize::from(self.registered)],
            per_peer: self.per_peer,
            shares_sms: true,
            ..Profile::sliced(MAX_SLICES)
        }
    }

    fn ready(&self, _u: usize) -> Result<()> {
        self.pipe.ready(self.main)
    }

    fn exchange(&self, u: usize, _k: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()> {
        let mut reqs = Vec::new();
        for (way, list) in [(Way::Receive, recvs), (Way::Send, sends)] {
            for p in list {
                // SAFETY: pieces lie in the operation's buffers, which the main stream
                // keeps until `finish` has ordered it after this exchange.
                unsafe { post_pieces(self.transport, way, p.ptr, p.len, p.peer, 0, &mut reqs)? };
            }
        }
        self.transport.wait_all(&mut reqs)?;
        self.pipe.done(u)?.record(self.pipe.side())
    }

    fn arrived(&self, u: usize, _k: usize, _recvs: &[Piece]) -> Result<()> {
        self.pipe.done(u)?.wait_on(self.main)
    }

    fn finish(&self) -> Result<()> {
        self.pipe.finish(self.main)
    }
}

/// The buffer an NCCL operation packs and unpacks through, and whether it is registered:
/// the handle's registered workspace of `registrable` elements (the same size on every
/// rank, so that all grow it together) when every rank packs; otherwise the caller's
/// `work` or the handle's workspace of `need` bytes.
#[allow(clippy::too_many_arguments)]
fn workspace(
    ws: &mut Workspace,
    nccl: &Arc<Nccl>,
    f: &DeviceFrame<'_>,
    comm: &dyn Communicator,
    registrable: Option<i64>,
    work: Option<Buf>,
    need: usize,
    elem: usize,
) -> Result<(Buf, bool)> {
    let registered = match registrable {
        Some(elems) if nccl.registers() => {
            let total = elems.max(0) as usize * elem;
            // A graph holds a smaller registered buffer: the caller's `work` serves,
            // unregistered (the same on every rank, as captures and `work` are).
            if work.is_some() && ws.registered_frozen_short(total) {
                None
            } else {
                // SAFETY: the workspace stays locked, and not grown again, until `release`.
                unsafe { ws.registered(nccl, &f.dev.device, comm, total, f.stream)? }
            }
        }
        _ => None,
    };
    Ok(match (registered, work) {
        (Some(b), _) => (b, true),
        (None, Some(w)) => (w, false),
        // SAFETY: the workspace stays locked, and not grown again, until `release`.
        (None, None) => (unsafe { ws.device(&f.dev.device, need, f.stream)? }, false),
    })
}

/// NCCL on device memory.
pub(super) struct NcclBackend;

impl Backend for NcclBackend {
    /// The stream, and one peer per unit (NCCL_PL).
    type TransposeHow = (Stream, bool);
    type HaloHow = Stream;
    const CAPTURE: Capture = Capture::Allowed;

    /// Slices go through the library's stream.
    fn transpose_place(c: &TransposeCall<'_>, &(stream, _): &(Stream, bool)) -> Place {
        Place::piped(stream, c.plan.npeers())
    }

    fn halo_place(_c: &HaloCall<'_>, &stream: &Stream) -> Place {
        Place::on(Exec::Device(stream))
    }

    /// A transpose through NCCL (`per_peer`: NCCL_PL).
    fn transpose(
        s: &Stage<'_, TransposeCall<'_>>,
        ws: &mut Workspace,
        (stream, per_peer): (Stream, bool),
    ) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let plan = c.plan;
        let nccl = f.dev.nccl(cx.world)?;
        // Never where some rank sends from its input or receives into its output (a batch
        // of fields always packs, on every rank alike).
        let registrable = (plan.packed_everywhere || c.fields.count > 1)
            .then_some(c.workspace_elems * c.fields.count);
        let elem = c.dtype.size();
        let (work, registered) =
            workspace(ws, &nccl, f, cx.world, registrable, c.work, s.need, elem)?;
        let pipe = f.pipe()?;
        let t = NcclTransport::new(&nccl, pipe.side(), &plan.members);
        let x = NcclSlices {
            transport: &t,
            pipe,
            main: stream,
            registered,
            per_peer,
        };
        let span = || pipe.span_ms();
        s.reported(work, &t, CommTime::Own(&span), |run, _| {
            run.run(&x, cx.slice_bytes)
        })
    }

    /// A halo update through NCCL (packed faces through the registered workspace).
    fn halo(s: &Stage<'_, HaloCall<'_>>, ws: &mut Workspace, stream: Stream) -> Result<()> {
        let (cx, c, f) = (s.cx, s.call, s.device()?);
        let nccl = f.dev.nccl(cx.world)?;
        // Dense faces go straight from the array; every rank asks for the largest
        // workspace of any rank.
        let largest = c.plan.max_workspace_elems.max(c.workspace_elems) * c.fields.count;
        let registrable = (c.plan.packed_everywhere || c.fields.count > 1).then_some(largest);
        let elem = c.dtype.size();
        let (work, _) = workspace(ws, &nccl, f, cx.world, registrable, c.work, s.need, elem)?;
        let everyone: Vec<usize> = (0..cx.world.size()).collect();
        let t = NcclTransport::new(&nccl, stream, &everyone);
        s.reported(work, &t, CommTime::PerCall, |run, t| run.run(t))
    }
}
