//! The exchange traits: how a sliced pipeline ([`SliceExchange`]) or a DIRECT halo
//! update ([`FaceExchange`]) moves its pieces between ranks. The pipelines in
//! [`super::transpose`] and [`super::halo`] drive them; the implementations live beside
//! the memory they move through ([`super::streamed`] and [`super::staged`] on GPUs,
//! [`super::direct`] in node-shared host memory).

use crate::mem::{Buf, Mover};
use crate::plan::SLICE_BYTES;
use crate::Result;

/// One slice of one peer's chunk in a sliced pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Peer index in the plan's sub-communicator.
    pub peer: usize,
    /// Local address of the slice: where it is sent from or received into.
    pub ptr: *mut u8,
    /// Bytes.
    pub len: usize,
    /// Byte offset of the slice inside the packed chunk (what a peer-side address adds).
    pub rel: usize,
}

/// How a sliced pipeline moves slices between ranks. Implementations are stream-ordered
/// (NCCL or copies into peers' memory on a second stream), so the main stream keeps packing
/// and unpacking while earlier slices are in flight.
pub trait SliceExchange {
    /// True when incoming slices may land straight in the output array (false when peers
    /// can only address this rank's workspace).
    fn lands_in_output(&self) -> bool;
    /// The peer's workspace when this rank can write into it directly: slices for `peer`
    /// are then packed straight into their slot there (no send, no separate copy).
    fn pack_into(&self, _peer: usize) -> Option<Buf> {
        None
    }
    /// The mover of packs into peers' memory ([`SliceExchange::pack_into`]) when they run
    /// on a stream of their own; `None`: the pipeline's mover, on the main stream.
    fn far_mover(&self) -> Option<&dyn Mover> {
        None
    }
    /// Units packed ahead of the first wait for an arrival (`usize::MAX`: pack all first,
    /// as stream-ordered exchanges need so that packing never queues behind a wait).
    fn lag(&self) -> usize {
        usize::MAX
    }
    /// Most slices per chunk this exchange works best with (at most [`crate::plan::MAX_SLICES`]).
    fn max_slices(&self) -> usize;
    /// True when the transfer runs on the SMs (NCCL's kernels): packing and unpacking
    /// beside it then go in the mover's background mode.
    fn shares_sms(&self) -> bool {
        false
    }
    /// Slice size this exchange works best with, when the user sets none.
    fn slice_bytes(&self) -> i64 {
        SLICE_BYTES
    }
    /// Orders unit `u`'s exchange after everything enqueued so far on the main stream.
    fn ready(&self, u: usize) -> Result<()>;
    /// Enqueues unit `u` (slice number `slice` of each peer's chunk): `sends` leave this
    /// rank, `recvs` arrive.
    fn exchange(&self, u: usize, slice: usize, sends: &[Piece], recvs: &[Piece]) -> Result<()>;
    /// Called once this rank has enqueued every unit, before the first `arrived` (DIRECT:
    /// a barrier, so that peers have recorded their signals before anyone waits on them).
    fn posted(&self) -> Result<()>;
    /// Orders the main stream after the arrival of unit `u`'s `recvs`.
    fn arrived(&self, u: usize, slice: usize, recvs: &[Piece]) -> Result<()>;
    /// Orders the main stream after every exchange, sends included.
    fn finish(&self) -> Result<()>;
    /// For exchanges that pack into the peer's workspace ([`SliceExchange::pack_into`]):
    /// the number of places slices of one chunk cycle through there (slice `k` lands in
    /// place `k % ring`), so that the staging memory is reused while still in cache;
    /// `None` (the default) keeps every slice at its own place in the packed chunk.
    fn ring(&self) -> Option<usize> {
        None
    }
    /// Ring only: waits until the peer has unpacked the slice that last used the place of
    /// slice `k` of the chunk for `peer`.
    fn place_free(&self, _peer: usize, _k: usize) -> Result<()> {
        Ok(())
    }
    /// Ring only: tells `peer` that its slice `k` has been unpacked here.
    fn unpacked(&self, _peer: usize, _k: usize) -> Result<()> {
        Ok(())
    }
    /// True when [`SliceExchange::landed`] tells, without waiting, whether a unit has
    /// arrived: the pipeline then copies this rank's own cells while it would wait.
    fn polls(&self) -> bool {
        false
    }
    /// Whether unit `u`'s `recvs` have all arrived (asked only when
    /// [`SliceExchange::polls`]).
    fn landed(&self, _u: usize, _slice: usize, _recvs: &[Piece]) -> Result<bool> {
        Ok(true)
    }
}

/// How a DIRECT halo update moves faces into neighbours' workspaces. Faces are cut into
/// slices; a rank sends its left face's slices, then its right face's, and a neighbour
/// learns of each slice with a signal numbered `side * slices_per_face + slice` by the
/// sender (so a sender raises its signals in increasing order).
pub trait FaceExchange {
    /// Most slices per face this exchange can signal.
    fn max_slices(&self) -> usize;
    /// Slice size this exchange works best with, when the user sets none.
    fn slice_bytes(&self) -> i64 {
        SLICE_BYTES
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
/// receiving members' outputs (see [`crate::engine::transpose::TransposeRun::single_copy`]).
pub trait ChunkSignals {
    /// This rank's part of `peer`'s output step `step` is written (see
    /// [`crate::plan::Landing`]; receivers that take their output whole have step 0 only).
    fn delivered(&self, peer: usize, step: usize) -> Result<()>;
    /// Waits until every peer's chunk is in this rank's output.
    fn arrived(&self) -> Result<()>;
    /// This rank cannot write its chunks (`why`, e.g. a peer's output it could not map):
    /// tells the members, whose `arrived` then fails instead of waiting, and returns `why`.
    fn abandon(&self, why: crate::Error) -> Result<()>;
}
