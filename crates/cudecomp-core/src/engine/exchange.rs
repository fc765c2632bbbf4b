//! What a backend gives the pipelines: how a transpose's slices move ([`Exchange`]), how a
//! halo update's faces move into neighbours' workspaces ([`FaceExchange`]), and how a
//! single-copy transpose tells receivers that their chunks are written
//! ([`SingleCopySignals`]). The pipelines ([`super::pipeline`], [`super::halo`]) drive
//! them; each backend module under [`super::backend`] implements the ones it needs.

use crate::mem::{Buf, Mover};
use crate::Result;

/// One slice of one peer's chunk in the transpose pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Peer index in the plan's sub-communicator.
    pub peer: usize,
    /// Local address of the slice: where it is sent from or received into.
    pub ptr: *mut u8,
    /// Bytes.
    pub len: usize,
    /// Byte offset of the slice inside the packed chunk (what a peer-side address adds).
    pub rel: usize,
}

/// Fixed facts about an exchange that decide how the pipeline runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Profile {
    /// Incoming slices may land straight in the output array (false when peers can only
    /// address this rank's workspace).
    pub lands_in_output: bool,
    /// Most slices per chunk (at most [`crate::plan::MAX_SLICES`]; 1: chunks move whole).
    pub max_slices: usize,
    /// Slice size this exchange works best with, when the user sets none.
    pub slice_bytes: i64,
    /// Units packed ahead of the first wait for an arrival (`usize::MAX`: pack all first,
    /// as stream-ordered exchanges need so that packing never queues behind a wait).
    pub lag: usize,
    /// Each unit holds one pair of the plan's schedule (one peer to send to, one to
    /// receive from) instead of every pair: per-peer pipelining.
    pub per_peer: bool,
    /// The transfer runs on the SMs (NCCL's kernels): packing and unpacking beside it go
    /// in the mover's background mode.
    pub shares_sms: bool,
    /// For exchanges that pack into the peer's workspace ([`Exchange::pack_into`]): the
    /// number of places slices of one chunk cycle through there (slice `k` lands in place
    /// `k % ring`), so that the staging memory is reused while still in cache; `None`
    /// keeps every slice at its own place in the packed chunk.
    pub ring: Option<usize>,
    /// [`Exchange::landed`] tells, without waiting, whether a unit has arrived: the
    /// pipeline then copies this rank's own cells while it would wait.
    pub polls: bool,
}

impl Profile {
    /// An exchange that moves each chunk whole once everything is packed.
    pub(crate) fn whole_chunks() -> Profile {
        Profile {
            lands_in_output: true,
            max_slices: 1,
            slice_bytes: crate::plan::SLICE_BYTES,
            lag: usize::MAX,
            per_peer: false,
            shares_sms: false,
            ring: None,
            polls: false,
        }
    }

    /// A stream-ordered exchange of up to `max_slices` slices per chunk.
    pub(crate) fn sliced(max_slices: usize) -> Profile {
        Profile {
            max_slices,
            ..Profile::whole_chunks()
        }
    }
}

/// How the transpose pipeline moves slices between ranks: the part of a transpose that
/// differs by backend.
pub(crate) trait Exchange {
    /// How the pipeline runs this exchange.
    fn profile(&self) -> Profile;
    /// The peer's workspace when this rank can write into it directly: slices for `peer`
    /// are then packed straight into their slot there (no send, no separate copy).
    fn pack_into(&self, _peer: usize) -> Option<Buf> {
        None
    }
    /// The mover of packs into peers' memory ([`Exchange::pack_into`]) when they run
    /// on a stream of their own; `None`: the pipeline's mover, on the main stream.
    fn far_mover(&self) -> Option<&dyn Mover> {
        None
    }
    /// Orders unit `u`'s exchange after everything enqueued so far on the main stream.
    fn ready(&self, _u: usize) -> Result<()> {
        Ok(())
    }
    /// Enqueues unit `u` (slice number `slice` of each peer's chunk): `sends` leave this
    /// rank, `recvs` arrive.
    fn exchange(&self, u: usize, slice: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()>;
    /// Called once this rank has enqueued every unit (also when there are none), before
    /// the first `arrived` (DIRECT: a barrier, so that peers have recorded their signals
    /// before anyone waits on them; an all-to-all: the collective itself).
    fn posted(&self) -> Result<()> {
        Ok(())
    }
    /// Orders the main stream after the arrival of unit `u`'s `recvs`.
    fn arrived(&self, u: usize, slice: usize, recvs: &[Piece]) -> Result<()>;
    /// Orders the main stream after every exchange, sends included.
    fn finish(&self) -> Result<()>;
    /// Rings only: waits until the peer has unpacked the slice that last used the place
    /// of slice `k` of the chunk for `peer`.
    fn place_free(&self, _peer: usize, _k: usize) -> Result<()> {
        Ok(())
    }
    /// Rings only: tells `peer` that its slice `k` has been unpacked here.
    fn unpacked(&self, _peer: usize, _k: usize) -> Result<()> {
        Ok(())
    }
    /// Whether unit `u`'s `recvs` have all arrived (asked only when the profile polls).
    fn landed(&self, _u: usize, _slice: usize, _recvs: &[Piece]) -> Result<bool> {
        Ok(true)
    }
}

/// How a halo update moves faces into neighbours' workspaces (DIRECT, NVSHMEM). Faces are
/// cut into slices; a rank sends its left face's slices, then its right face's, and a
/// neighbour learns of each slice with a signal numbered `side * slices_per_face + slice`
/// by the sender (so a sender raises its signals in increasing order).
pub(crate) trait FaceExchange {
    /// Most slices per face this exchange can signal.
    fn max_slices(&self) -> usize;
    /// Slice size this exchange works best with, when the user sets none.
    fn slice_bytes(&self) -> i64 {
        crate::plan::SLICE_BYTES
    }
    /// Orders the next delivery after everything enqueued so far (packing included);
    /// `first` for the operation's first delivery.
    fn ready(&self, first: bool) -> Result<()>;
    /// Copies `part` into rank `to`'s workspace at byte `at`, then raises signal `signal`
    /// there.
    fn deliver(&self, part: Buf, to: usize, at: i64, signal: usize) -> Result<()>;
    /// Called once this rank has delivered everything, before any `arrived`.
    fn posted(&self) -> Result<()>;
    /// Waits until rank `from` has raised signal `signal` for this rank.
    fn arrived(&self, from: usize, signal: usize) -> Result<()>;
    /// Orders what follows after every delivery of this rank.
    fn finish(&self) -> Result<()>;
}

/// Signals of a single-copy transpose, where each rank writes its chunks straight into the
/// receiving members' outputs (see [`crate::engine::pipeline::TransposeRun::single_copy`]).
pub(crate) trait SingleCopySignals {
    /// This rank's part of `peer`'s output step `step` is written (see
    /// [`crate::plan::Landing`]; receivers that take their output whole have step 0 only).
    fn delivered(&self, peer: usize, step: usize) -> Result<()>;
    /// Waits until every peer's chunk is in this rank's output.
    fn arrived(&self) -> Result<()>;
    /// This rank cannot write its chunks (`why`, e.g. a peer's output it could not map):
    /// tells the members, whose `arrived` then fails instead of waiting, and returns `why`.
    fn abandon(&self, why: crate::Error) -> Result<()>;
}
