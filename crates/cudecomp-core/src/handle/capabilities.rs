//! What the ranks of a handle can do together, found out collectively on first need and
//! cached: whether they share one node, whether they can write into each other's
//! node-shared memory, how many threads each copies with, whether each drives its own GPU.

use std::sync::Mutex;

use crate::comm::{allgather_bytes, allgather_u64, settle, Call, Communicator};
use crate::cuda::Device;
use crate::engine::device::lock;
use crate::mem::shm::SharedWorkspaces;
use crate::settings::NodeSettings;
use crate::{invalid, Error, Fields, Result};

/// Most threads a rank uses for host copies by default: beyond this many, memory
/// bandwidth, not cores, bounds a copy.
pub const MAX_HOST_THREADS: usize = 16;

/// `CUDECOMP_HOST_THREADS` may ask for this many threads per core (of those a rank may
/// run on, or of [`MAX_HOST_THREADS`] where it has fewer), no more.
pub(crate) const HOST_THREADS_PER_CORE: usize = 4;

/// Cached answers (each collective the first time it is asked).
#[derive(Default)]
pub(crate) struct Capabilities {
    /// Whether every rank can map every other's shared memory (host DIRECT backend).
    direct: Mutex<Option<bool>>,
    /// Threads each rank uses for host copies.
    host_threads: Mutex<Option<usize>>,
}

/// The node this rank runs on: every "same node?" question asks this (through
/// [`gather_nodes`]). For testing and simulating several nodes on one machine, the node
/// settings (`CUDECOMP_NODE_ID`, per rank, any text; or `CUDECOMP_SIMULATE_NODES=k`, the
/// ranks of `comm` in k contiguous blocks) replace the host name. A bad setting is
/// reported as `Err(message)`, for [`gather_nodes`] to raise on every rank.
fn node_name(
    comm: &dyn Communicator,
    nodes: &NodeSettings,
) -> Result<std::result::Result<String, String>> {
    if let Some(id) = &nodes.node_id {
        return Ok(Ok(format!("cudecomp-node-id-{id}")));
    }
    if let Some(k) = nodes.simulate_nodes {
        let n = comm.size();
        return Ok(if (1..=n).contains(&k) {
            Ok(format!("cudecomp-simulated-node-{}", comm.rank() * k / n))
        } else {
            Err(format!(
                "CUDECOMP_SIMULATE_NODES: expected a number of nodes from 1 to the {n} ranks, got {k}"
            ))
        });
    }
    comm.host_name().map(Ok)
}

/// Collective: this rank's node name followed by `extra`, and every rank's. Fails on every
/// rank, without hanging, when some rank's node setting is bad.
fn gather_nodes(
    comm: &dyn Communicator,
    nodes: &NodeSettings,
    extra: &[u8],
) -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let name = node_name(comm, nodes)?;
    let mut mine = vec![u8::from(name.is_err())];
    match &name {
        Ok(n) => mine.extend(n.as_bytes()),
        Err(e) => mine.extend(e.as_bytes()),
    }
    mine.extend(extra);
    let all = allgather_bytes(comm, &mine)?;
    if let Err(e) = name {
        invalid!("{e}");
    }
    if let Some(r) = all.iter().position(|v| v.first() != Some(&0)) {
        invalid!("rank {r} has a bad CUDECOMP_SIMULATE_NODES setting");
    }
    Ok((mine, all))
}

/// Collective: true when every rank runs on this rank's node.
pub(crate) fn one_node(comm: &dyn Communicator, nodes: &NodeSettings) -> Result<bool> {
    Ok(same_node(comm, nodes)?.iter().all(|&s| s))
}

/// Collective: per rank of `comm`, whether it runs on this rank's node.
pub(crate) fn same_node(comm: &dyn Communicator, nodes: &NodeSettings) -> Result<Vec<bool>> {
    let (mine, all) = gather_nodes(comm, nodes, &[])?;
    Ok(all.iter().map(|h| *h == mine).collect())
}

/// Collective: true when every rank drives its own GPU (what NCCL requires); ranks
/// sharing a GPU can still use the MPI backends.
pub(crate) fn one_gpu_per_rank(
    comm: &dyn Communicator,
    nodes: &NodeSettings,
    device: &Device,
) -> Result<bool> {
    let (_, all) = gather_nodes(comm, nodes, format!("#{}", device.ordinal).as_bytes())?;
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    Ok(sorted.len() == all.len())
}

impl Capabilities {
    /// Collective: the threads this rank uses for host copies — `set` (the
    /// `CUDECOMP_HOST_THREADS` setting) when given, otherwise the cores it may run on
    /// shared evenly among the ranks of its node (at most [`MAX_HOST_THREADS`]), so that
    /// ranks with idle cores beside them copy with several.
    pub(crate) fn host_threads(
        &self,
        comm: &dyn Communicator,
        nodes: &NodeSettings,
        set: Option<usize>,
    ) -> Result<usize> {
        let mut cached = lock(&self.host_threads);
        if let Some(t) = *cached {
            return Ok(t);
        }
        let (mine, all) = gather_nodes(comm, nodes, &[])?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = set.unwrap_or_else(|| {
            let local = all.iter().filter(|h| **h == mine).count().max(1);
            (cores / local).clamp(1, MAX_HOST_THREADS)
        });
        // More threads than cores only take turns: past a few per core, each copy costs
        // more in thread start-up and switches than it moves.
        let most = HOST_THREADS_PER_CORE * cores.max(MAX_HOST_THREADS);
        let local = if threads > most {
            Err(Error::InvalidUsage(format!(
                "CUDECOMP_HOST_THREADS: expected at most {most} threads ({HOST_THREADS_PER_CORE} per core of the {} this rank may run on, or of {MAX_HOST_THREADS}), got {threads}",
                cores.max(MAX_HOST_THREADS)
            )))
        } else {
            Ok(())
        };
        let fields = Fields::new();
        let call = Call {
            what: "CUDECOMP_HOST_THREADS",
            fields: &fields,
        };
        settle(comm, 0, call, &local)?;
        *cached = Some(threads);
        Ok(threads)
    }

    /// Collective: true when all ranks share one node and each can write into every
    /// other's shared memory (checked by a probe write through a small shared workspace).
    pub(crate) fn host_direct_ok(
        &self,
        comm: &dyn Communicator,
        nodes: &NodeSettings,
    ) -> Result<bool> {
        let mut cached = lock(&self.direct);
        if let Some(c) = *cached {
            return Ok(c);
        }
        let ok = one_node(comm, nodes)? && probe_shared(comm)?;
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
