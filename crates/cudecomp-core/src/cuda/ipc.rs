//! CUDA IPC for the DIRECT backend on GPUs: every rank exports its device workspace, and
//! every other rank of the node maps it, so pack kernels write chunks straight into the
//! peer's receive region (one crossing of NVLink, no staging, no library in between).
//! Interprocess events, one per (peer, slice), tell a receiver that a slice has landed.

use super::{check, Event};
use crate::comm::{allgather_bytes, Communicator};
use crate::plan::MAX_SLICES;
use crate::{Error, Result};
use cudarc::driver::sys;

/// Byte offset of the note in a record: after the exported handle, the exporter's address
/// and length.
const NOTE_AT: usize = 64 + 16;

/// Bytes of one exported handle, the exporter's address and length, and its note.
const RECORD: usize = NOTE_AT + NOTE;

/// Bytes of the note each rank publishes with its workspace (see [`IpcPeers::exchange`]):
/// its output array and the steps it takes it in, for single copies.
pub(crate) const NOTE: usize =
    crate::cuda::vmm::DEVICE_ARRAY_REF_BYTES + crate::plan::LANDING_BYTES;

/// A peer's workspace mapped into this process.
struct Mapped {
    /// The peer's own address of its workspace (identifies the allocation).
    remote: u64,
    ptr: u64,
    len: u64,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: opened by cuIpcOpenMemHandle; the stream that used it was synchronised.
        let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
    }
}

/// Peers' workspaces as seen from this rank (indexed by handle rank; `None` for self).
#[derive(Default)]
pub(crate) struct IpcPeers {
    peers: Vec<Option<Mapped>>,
    /// Recorded by this rank once slice `k` is in rank `r`'s workspace: `sent[r][k]`.
    sent: Vec<Vec<Event>>,
    /// Recorded by rank `w` once slice `k` is in this rank's workspace: `landed[w][k]`.
    landed: Vec<Vec<Event>>,
    /// Recorded by this rank where its stream no longer uses its workspace (at the start
    /// of each DIRECT operation, before the start barrier).
    free: Option<Event>,
    /// Every peer's `free`, opened here (`None` for self).
    peers_free: Vec<Option<Event>>,
}

impl IpcPeers {
    /// Collective: exports `(ptr, len)` (a whole `cuMemAlloc` allocation) and maps every
    /// peer's, reopening only those whose allocation changed since the last call. Each
    /// rank's `note` travels in the same gather; all of them are returned, by rank.
    pub(crate) fn exchange(
        &mut self,
        comm: &dyn Communicator,
        ptr: u64,
        len: u64,
        note: &[u8; NOTE],
    ) -> Result<Vec<[u8; NOTE]>> {
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        check(
            // SAFETY: `ptr` is the base of a live cuMemAlloc allocation of this process.
            unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) }.result(),
            "cuIpcGetMemHandle",
        )?;
        let mut mine: Vec<u8> = handle.reserved.iter().map(|&c| c as u8).collect();
        mine.extend(ptr.to_le_bytes());
        mine.extend(len.to_le_bytes());
        mine.extend(note);
        // Fixed-size records: one gather (this is also the start barrier of every DIRECT
        // transpose).
        let mut all = vec![0u8; RECORD * comm.size()];
        comm.allgather(&mine, &mut all)?;
        let all: Vec<&[u8]> = all.chunks_exact(RECORD).collect();
        let notes = all
            .iter()
            .map(|rec| rec[NOTE_AT..].try_into().unwrap_or([0; NOTE]))
            .collect();
        self.peers.resize_with(all.len(), || None);
        for (r, rec) in all.iter().enumerate() {
            if r == comm.rank() {
                continue;
            }
            if rec.len() != RECORD {
                return Err(Error::Internal("IPC record size".into()));
            }
            let word = |i: usize| u64::from_le_bytes(rec[i..i + 8].try_into().unwrap_or([0; 8]));
            let (remote, rlen) = (word(64), word(72));
            if self.peers[r]
                .as_ref()
                .is_some_and(|m| m.remote == remote && m.len == rlen)
            {
                continue;
            }
            self.peers[r] = None; // closes the stale mapping first
            let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
            for (d, &s) in h.reserved.iter_mut().zip(&rec[..64]) {
                *d = s as std::ffi::c_char;
            }
            let mut mapped: sys::CUdeviceptr = 0;
            // SAFETY: the handle was exported by rank `r` for a live allocation.
            let rc = unsafe { sys::cuIpcOpenMemHandle_v2(&mut mapped, h, 1) };
            check(
                rc.result(),
                "cuIpcOpenMemHandle (DIRECT needs the ranks' GPUs in one node)",
            )?;
            self.peers[r] = Some(Mapped {
                remote,
                ptr: mapped,
                len: rlen,
            });
        }
        if self.sent.is_empty() {
            self.exchange_events(comm)?;
        }
        Ok(notes)
    }

    /// Collective, once: creates this rank's signal events and opens its peers'.
    fn exchange_events(&mut self, comm: &dyn Communicator) -> Result<()> {
        let (n, me) = (comm.size(), comm.rank());
        // Layout: this rank's `free` handle, then one handle per (receiver, slice).
        let free = Event::new_ipc()?;
        let mut table = Vec::with_capacity((1 + n * MAX_SLICES) * 64);
        table.extend(free.ipc_handle()?);
        let mut sent = Vec::with_capacity(n);
        for r in 0..n {
            let events = if r == me {
                Vec::new()
            } else {
                (0..MAX_SLICES)
                    .map(|_| Event::new_ipc())
                    .collect::<Result<Vec<_>>>()?
            };
            for k in 0..MAX_SLICES {
                match events.get(k) {
                    Some(e) => table.extend(e.ipc_handle()?),
                    None => table.extend([0u8; 64]),
                }
            }
            sent.push(events);
        }
        let all = allgather_bytes(comm, &table)?;
        let mut landed = Vec::with_capacity(n);
        let mut peers_free = Vec::with_capacity(n);
        let open = |h: &[u8]| Event::open_ipc(h.try_into().unwrap_or(&[0; 64]));
        for (w, t) in all.iter().enumerate() {
            if w == me {
                landed.push(Vec::new());
                peers_free.push(None);
                continue;
            }
            let at = |i: usize| {
                t.get(64 * i..64 * (i + 1))
                    .ok_or_else(|| Error::Internal("IPC event table size".into()))
            };
            peers_free.push(Some(open(at(0)?)?));
            let mine = t
                .get(64 * (1 + me * MAX_SLICES)..64 * (1 + (me + 1) * MAX_SLICES))
                .ok_or_else(|| Error::Internal("IPC event table size".into()))?;
            landed.push(
                mine.chunks_exact(64)
                    .map(open)
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        self.sent = sent;
        self.landed = landed;
        self.free = Some(free);
        self.peers_free = peers_free;
        Ok(())
    }

    /// True once the signal events exist (after the first `exchange`).
    pub(crate) fn has_signals(&self) -> bool {
        self.free.is_some()
    }

    /// The event this rank records once it is done with its workspace for an operation;
    /// writers wait for it (on their stream) before copying into the workspace again.
    pub(crate) fn free(&self) -> Result<&Event> {
        self.free
            .as_ref()
            .ok_or_else(|| Error::Internal("DIRECT: signals not exchanged".into()))
    }

    /// Rank `r`'s `free` event.
    pub(crate) fn peer_free(&self, r: usize) -> Result<&Event> {
        self.peers_free
            .get(r)
            .and_then(|e| e.as_ref())
            .ok_or_else(|| Error::Internal(format!("DIRECT: no free signal of rank {r}")))
    }

    /// The event this rank records after copying slice `k` into rank `r`'s workspace.
    pub(crate) fn sent(&self, r: usize, k: usize) -> Result<&Event> {
        self.sent
            .get(r)
            .and_then(|v| v.get(k))
            .ok_or_else(|| Error::Internal(format!("DIRECT: no signal for rank {r} slice {k}")))
    }

    /// The event rank `w` records after copying slice `k` into this rank's workspace.
    pub(crate) fn landed(&self, w: usize, k: usize) -> Result<&Event> {
        self.landed
            .get(w)
            .and_then(|v| v.get(k))
            .ok_or_else(|| Error::Internal(format!("DIRECT: no signal from rank {w} slice {k}")))
    }

    /// `(mapped address, length)` of rank `r`'s workspace.
    pub(crate) fn peer(&self, r: usize) -> Option<(u64, u64)> {
        self.peers.get(r)?.as_ref().map(|m| (m.ptr, m.len))
    }
}
