//! What the ranks of a handle can do together, found out collectively on first need and
//! cached: whether they share one node, whether they can write into each other's
//! node-shared memory, how many threads each copies with, whether each drives its own GPU.

use std::sync::Mutex;

use crate::comm::{allgather_bytes, allgather_u64, Communicator};
use crate::cuda::Device;
use crate::engine::device::lock;
use crate::mem::shm::SharedWorkspaces;
use crate::{invalid, Error, Result};

/// Most threads a rank uses for host copies by default: beyond this many, memory
/// bandwidth, not cores, bounds a copy.
pub const MAX_HOST_THREADS: usize = 16;

/// Cached answers (each collective the first time it is asked).
#[derive(Default)]
pub(crate) struct Capabilities {
    /// Whether every rank can map every other's shared memory (host DIRECT backend).
    direct: Mutex<Option<bool>>,
    /// Threads each rank uses for host copies.
    host_threads: Mutex<Option<usize>>,
}

/// The name of the node this rank runs on: every "same node?" question asks this.
pub(crate) fn node_name(comm: &dyn Communicator) -> Result<String> {
    comm.host_name()
}

/// Collective: true when every rank runs on this rank's node.
pub(crate) fn one_node(comm: &dyn Communicator) -> Result<bool> {
    let node = node_name(comm)?;
    let all = allgather_bytes(comm, node.as_bytes())?;
    Ok(all.iter().all(|h| *h == node.as_bytes()))
}

/// Collective: true when every rank drives its own GPU (what NCCL requires); ranks
/// sharing a GPU can still use the MPI backends.
pub(crate) fn one_gpu_per_rank(comm: &dyn Communicator, device: &Device) -> Result<bool> {
    let mine = format!("{}#{}", node_name(comm)?, device.ordinal);
    let all = allgather_bytes(comm, mine.as_bytes())?;
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    Ok(sorted.len() == all.len())
}

impl Capabilities {
    /// Collective: the threads this rank uses for host copies — `CUDECOMP_HOST_THREADS`
    /// when set, otherwise the cores it may run on shared evenly among the ranks of its
    /// node (at most [`MAX_HOST_THREADS`]), so that ranks with idle cores beside them copy
    /// with several. A bad value raises on every rank.
    pub(crate) fn host_threads(&self, comm: &dyn Communicator) -> Result<usize> {
        let mut cached = lock(&self.host_threads);
        if let Some(t) = *cached {
            return Ok(t);
        }
        let set = std::env::var("CUDECOMP_HOST_THREADS")
            .ok()
            .map(|v| v.trim().parse::<usize>().ok().filter(|&t| t > 0).ok_or(v));
        // The node name, then whether this rank's setting parses.
        let mut mine = node_name(comm)?.into_bytes();
        mine.push(u8::from(!matches!(set, Some(Err(_)))));
        let all = allgather_bytes(comm, &mine)?;
        let bad: Vec<usize> = (0..all.len())
            .filter(|&r| all[r].last() == Some(&0))
            .collect();
        let threads = match set {
            Some(Err(v)) => invalid!(
                "CUDECOMP_HOST_THREADS: expected a positive number of threads, got {v:?}"
            ),
            _ if !bad.is_empty() => invalid!(
                "CUDECOMP_HOST_THREADS: expected a positive number of threads on every rank, but rank(s) {bad:?} set something else"
            ),
            Some(Ok(t)) => t,
            None => {
                let local = all.iter().filter(|h| **h == mine).count().max(1);
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                (cores / local).clamp(1, MAX_HOST_THREADS)
            }
        };
        *cached = Some(threads);
        Ok(threads)
    }

    /// Collective: true when all ranks share one node and each can write into every
    /// other's shared memory (checked by a probe write through a small shared workspace).
    pub(crate) fn host_direct_ok(&self, comm: &dyn Communicator) -> Result<bool> {
        let mut cached = lock(&self.direct);
        if let Some(c) = *cached {
            return Ok(c);
        }
        let ok = one_node(comm)? && probe_shared(comm)?;
        *cached = Some(ok);
        Ok(ok)
    }
}

/// Collective: every rank stamps its rank into every peer's probe workspace; true when
/// every stamp arrived everywhere.
fn probe_shared(comm: &dyn Communicator) -> Result<bool> {
    let (n, me) = (comm.size(), comm.rank());
    let mut probe = SharedWorkspaces::default();
    let mine = match probe.exchange(comm, 8 * n) {
        Ok(b) => b,
        Err(Error::NotSupported(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    for r in (0..n).filter(|&r| r != me) {
        if let Some(peer) = probe.peer(r) {
            let stamp = (me as u64 + 1).to_le_bytes();
            let at = peer.range(8 * me as i64, 8)?;
            // SAFETY: inside rank r's mapped probe workspace; only this rank writes there.
            unsafe { std::ptr::copy_nonoverlapping(stamp.as_ptr(), at, 8) };
        }
    }
    comm.barrier()?;
    let mut ok = true;
    for r in (0..n).filter(|&r| r != me) {
        let at = mine.range(8 * r as i64, 8)?;
        // SAFETY: inside this rank's probe workspace, written by rank r before the barrier.
        let v = unsafe { std::ptr::read_volatile(at.cast::<[u8; 8]>()) };
        ok &= u64::from_le_bytes(v) == r as u64 + 1;
    }
    let flags = allgather_u64(comm, u64::from(ok))?;
    Ok(flags.iter().all(|&f| f == 1))
}
