//! Communicators: the byte-moving interface every engine uses, an MPI implementation
//! bound at run time (`dynmpi`) and an in-process thread mock for tests (`mock`).

mod agree;
pub(crate) mod dynmpi;
pub(crate) mod hooked;
#[cfg(any(test, feature = "testing"))]
pub mod mock;

pub(crate) use agree::{settle, Call};

use crate::{Error, Result};

/// An outstanding non-blocking operation. `Null` is a completed (or never started) one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Request {
    /// Nothing outstanding: completed, or never started.
    #[default]
    Null,
    /// Backend-specific bits of the request handle.
    Active(u64),
}

/// Largest single message handed to the transport; longer messages go in pieces so
/// that element counts never overflow MPI's `int`.
pub(crate) const MAX_PIECE_BYTES: usize = 1 << 30;

/// First tag of the messages of the default [`Transport::alltoallv`] (piece `i` uses
/// `ALLTOALLV_TAG + i`): apart from the transposes' and halos' tags, and below 32767, the
/// least upper bound on tags MPI guarantees.
pub(crate) const ALLTOALLV_TAG: i32 = 1 << 14;

/// Point-to-point and all-to-all byte movement between the ranks of a group; what engines
/// use. MPI communicators implement it directly; device transports (NCCL, host-staged
/// MPI) wrap a group for the duration of one operation.
pub trait Transport {
    /// Starts sending `len` bytes at `buf` to `peer` with `tag`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unmodified until the request completes.
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request>;

    /// Starts receiving exactly `len` bytes from `peer` with `tag` into `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and otherwise untouched until the request completes.
    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request>;

    /// Completes every request (each becomes `Null`).
    fn wait_all(&self, reqs: &mut [Request]) -> Result<()>;

    /// Completes one request and returns its index, or `None` when all are `Null`.
    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>>;

    /// `MPI_Alltoallv` with byte counts and displacements, one entry per rank: sends
    /// `send_counts[p]` bytes at `send + send_displs[p]` to rank `p` and receives
    /// `recv_counts[p]` bytes from it at `recv + recv_displs[p]`. Collective.
    ///
    /// The default posts every non-empty receive, then every non-empty send, as
    /// point-to-point messages (cut as [`post_pieces`] does, with tags from
    /// [`ALLTOALLV_TAG`]) and waits for all of them. Transports with a native all-to-all
    /// (MPI's, limited to counts and displacements below `i32::MAX`) override it.
    ///
    /// # Safety
    /// Every described region must be valid for the call's duration, the received ones
    /// written by nothing else.
    unsafe fn alltoallv(
        &self,
        send: *const u8,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: *mut u8,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let n = send_counts.len();
        if [send_displs.len(), recv_counts.len(), recv_displs.len()] != [n; 3] {
            return Err(Error::Internal(format!(
                "alltoallv: expected one count and displacement per rank, got {n} send counts, {} send displacements, {} receive counts, {} receive displacements",
                send_displs.len(),
                recv_counts.len(),
                recv_displs.len()
            )));
        }
        let mut reqs = Vec::new();
        for p in (0..n).filter(|&p| recv_counts[p] > 0) {
            // SAFETY: the caller vouches for `recv + recv_displs[p]` .. `+ recv_counts[p]`
            // until this call returns, after the wait below.
            unsafe {
                let at = recv.add(recv_displs[p]);
                post_pieces(
                    self,
                    Way::Receive,
                    at,
                    recv_counts[p],
                    p,
                    ALLTOALLV_TAG,
                    &mut reqs,
                )?;
            }
        }
        for p in (0..n).filter(|&p| send_counts[p] > 0) {
            // SAFETY: as above, for the send region (only read: `Way::Send`).
            unsafe {
                let at = send.add(send_displs[p]).cast_mut();
                post_pieces(
                    self,
                    Way::Send,
                    at,
                    send_counts[p],
                    p,
                    ALLTOALLV_TAG,
                    &mut reqs,
                )?;
            }
        }
        self.wait_all(&mut reqs)
    }

    /// True when the transport accepts CUDA device pointers.
    fn cuda_aware(&self) -> bool {
        false
    }
}

/// A process group: a transport plus the collectives used to set up decompositions.
/// Ranks are indices into this group.
pub trait Communicator: Transport + Send + Sync {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// `MPI_Comm_split`: collective; ranks with equal `color` form a new group ordered by `key`.
    fn split(&self, color: i32, key: i32) -> Result<Box<dyn Communicator>>;
    /// `MPI_Comm_free`: collective; the communicator must not be used afterwards.
    fn free(&self) -> Result<()>;
    /// `MPI_Barrier`.
    fn barrier(&self) -> Result<()>;
    /// `MPI_Allgather` of `send.len()` bytes per rank into `recv` (`size * send.len()` bytes).
    fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<()>;
    /// Name of the host this rank runs on (groups ranks by node).
    fn host_name(&self) -> Result<String>;
    /// True once the library under the communicator was shut down (`MPI_Finalized`):
    /// every call would then end the job, so the handle refuses before making one.
    fn finalized(&self) -> bool {
        false
    }
}

/// Direction of a point-to-point message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Bytes leave this rank.
    Send,
    /// Bytes arrive at this rank.
    Receive,
}

/// Posts a send or receive of any length, in pieces of at most [`MAX_PIECE_BYTES`];
/// piece `i` uses tag `tag + i`. Returns the number of requests pushed.
///
/// # Safety
/// As [`Transport::isend`] / [`Transport::irecv`].
pub(crate) unsafe fn post_pieces<T: Transport + ?Sized>(
    comm: &T,
    way: Way,
    buf: *mut u8,
    len: usize,
    peer: usize,
    tag: i32,
    out: &mut Vec<Request>,
) -> Result<usize> {
    let n = pieces(len);
    for i in 0..n {
        let off = i * MAX_PIECE_BYTES;
        let l = (len - off).min(MAX_PIECE_BYTES);
        let t = tag + i as i32;
        // SAFETY: the caller guarantees `buf..buf+len`; each piece lies inside it.
        out.push(unsafe {
            match way {
                Way::Send => comm.isend(buf.add(off), l, peer, t)?,
                Way::Receive => comm.irecv(buf.add(off), l, peer, t)?,
            }
        });
    }
    Ok(n)
}

/// Number of pieces a message of `len` bytes is cut into (at least one).
pub(crate) fn pieces(len: usize) -> usize {
    len.div_ceil(MAX_PIECE_BYTES).max(1)
}

/// Gathers one `u64` per rank.
pub(crate) fn allgather_u64(comm: &dyn Communicator, v: u64) -> Result<Vec<u64>> {
    Ok(allgather_words(comm, [v])?
        .into_iter()
        .map(|[w]| w)
        .collect())
}

/// Gathers `N` `u64` words per rank (one collective).
pub(crate) fn allgather_words<const N: usize>(
    comm: &dyn Communicator,
    v: [u64; N],
) -> Result<Vec<[u64; N]>> {
    let mine: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut out = vec![0u8; 8 * N * comm.size()];
    comm.allgather(&mine, &mut out)?;
    Ok(out
        .chunks_exact(8 * N)
        .map(|rec| {
            std::array::from_fn(|i| {
                u64::from_le_bytes(rec[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]))
            })
        })
        .collect())
}

/// Gathers one `f64` per rank.
pub(crate) fn allgather_f64(comm: &dyn Communicator, v: f64) -> Result<Vec<f64>> {
    Ok(allgather_u64(comm, v.to_bits())?
        .into_iter()
        .map(f64::from_bits)
        .collect())
}

/// Gathers a byte string of any (per-rank different) length from every rank.
pub(crate) fn allgather_bytes(comm: &dyn Communicator, v: &[u8]) -> Result<Vec<Vec<u8>>> {
    let lens = allgather_u64(comm, v.len() as u64)?;
    let width = lens.iter().copied().max().unwrap_or(0) as usize;
    if width == 0 {
        return Ok(vec![Vec::new(); comm.size()]);
    }
    let mut send = v.to_vec();
    send.resize(width, 0);
    let mut out = vec![0u8; width * comm.size()];
    comm.allgather(&send, &mut out)?;
    Ok(out
        .chunks(width)
        .zip(lens)
        .map(|(c, l)| c[..l as usize].to_vec())
        .collect())
}
