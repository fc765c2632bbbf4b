//! CUDA IPC for the DIRECT backend on GPUs: every rank exports its device workspace, and
//! every other rank of the node maps it, so pack kernels write chunks straight into the
//! peer's receive region (one crossing of NVLink, no staging, no library in between).

use super::check;
use crate::comm::{allgather_bytes, Communicator};
use crate::{Error, Result};
use cudarc::driver::sys;

/// Bytes of one exported handle plus the exporter's address and length.
const RECORD: usize = 64 + 16;

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
pub struct IpcPeers {
    peers: Vec<Option<Mapped>>,
}

impl IpcPeers {
    /// Collective: exports `(ptr, len)` (a whole `cuMemAlloc` allocation) and maps every
    /// peer's, reopening only those whose allocation changed since the last call.
    pub fn exchange(&mut self, comm: &dyn Communicator, ptr: u64, len: u64) -> Result<()> {
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: `ptr` is the base of a live cuMemAlloc allocation of this process.
        check(
            unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) }.result(),
            "cuIpcGetMemHandle",
        )?;
        let mut mine: Vec<u8> = handle.reserved.iter().map(|&c| c as u8).collect();
        mine.extend(ptr.to_le_bytes());
        mine.extend(len.to_le_bytes());
        let all = allgather_bytes(comm, &mine)?;
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
        Ok(())
    }

    /// `(mapped address, length)` of rank `r`'s workspace.
    pub fn peer(&self, r: usize) -> Option<(u64, u64)> {
        self.peers.get(r)?.as_ref().map(|m| (m.ptr, m.len))
    }
}
