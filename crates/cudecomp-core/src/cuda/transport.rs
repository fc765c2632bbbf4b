//! MPI transports for device buffers: straight through a CUDA-aware MPI, or staged
//! through page-locked host memory when MPI cannot read device pointers.
//!
//! Both wait for the operation's stream once, before the first message: the pack kernels
//! (and anything the caller enqueued earlier) must be done before MPI touches the data.

use std::cell::{Cell, RefCell};

use super::{copy_to_device, copy_to_host, synchronize, Stream};
use crate::comm::{Request, Transport};
use crate::{Error, Result};

fn fence(done: &Cell<bool>, stream: Stream) -> Result<()> {
    if !done.replace(true) {
        synchronize(stream)?;
    }
    Ok(())
}

/// CUDA-aware MPI: device pointers go straight to MPI after the stream is drained.
pub struct CudaAwareMpi<'a> {
    inner: &'a dyn Transport,
    stream: Stream,
    fenced: Cell<bool>,
}

impl<'a> CudaAwareMpi<'a> {
    /// Wraps a CUDA-aware MPI transport for one operation on `stream`.
    pub fn new(inner: &'a dyn Transport, stream: Stream) -> Self {
        CudaAwareMpi {
            inner,
            stream,
            fenced: Cell::new(false),
        }
    }
}

impl Transport for CudaAwareMpi<'_> {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        fence(&self.fenced, self.stream)?;
        // SAFETY: forwarded to the caller.
        unsafe { self.inner.isend(buf, len, peer, tag) }
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        fence(&self.fenced, self.stream)?;
        // SAFETY: forwarded to the caller.
        unsafe { self.inner.irecv(buf, len, peer, tag) }
    }

    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        self.inner.wait_all(reqs)
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        self.inner.wait_any(reqs)
    }

    unsafe fn alltoallv(
        &self,
        send: *const u8,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: *mut u8,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        fence(&self.fenced, self.stream)?;
        // SAFETY: forwarded to the caller.
        unsafe {
            self.inner.alltoallv(
                send,
                send_counts,
                send_displs,
                recv,
                recv_counts,
                recv_displs,
            )
        }
    }

    fn cuda_aware(&self) -> bool {
        true
    }
}

/// A receive landing in staging memory, copied to the device when it completes.
#[derive(Clone, Copy)]
struct Landing {
    request: Request,
    device: u64,
    host: *mut u8,
    len: usize,
}

/// Page-locked staging memory handed out front to back during one operation.
pub struct Arena {
    base: *mut u8,
    capacity: usize,
    used: Cell<usize>,
}

impl Arena {
    /// An arena over `base..base+capacity`.
    ///
    /// # Safety
    /// The range must be page-locked host memory that nothing else uses until the
    /// operation's streams have drained.
    pub unsafe fn new(base: *mut u8, capacity: usize) -> Self {
        Arena {
            base,
            capacity,
            used: Cell::new(0),
        }
    }

    /// The next `len` bytes.
    pub fn take(&self, len: usize) -> Result<*mut u8> {
        let at = self.used.get();
        if at + len > self.capacity {
            return Err(Error::Internal(format!(
                "staging arena of {} bytes exhausted (needs {})",
                self.capacity,
                at + len
            )));
        }
        self.used.set(at + len);
        // SAFETY: inside the arena (checked above).
        Ok(unsafe { self.base.add(at) })
    }
}

/// MPI without CUDA support: every message goes through a slice of a page-locked arena
/// (device → host before the send, host → device on the stream after the receive).
pub struct StagedMpi<'a> {
    inner: &'a dyn Transport,
    stream: Stream,
    arena: Arena,
    fenced: Cell<bool>,
    landings: RefCell<Vec<Landing>>,
}

impl<'a> StagedMpi<'a> {
    /// Wraps a host MPI transport; `arena` must hold every message of the operation.
    pub fn new(inner: &'a dyn Transport, stream: Stream, arena: Arena) -> Self {
        StagedMpi {
            inner,
            stream,
            arena,
            fenced: Cell::new(false),
            landings: RefCell::new(Vec::new()),
        }
    }

    fn take(&self, len: usize) -> Result<*mut u8> {
        self.arena.take(len)
    }

    /// Copies completed receives to the device (enqueued on the stream).
    fn land(&self, done: &[Request]) -> Result<()> {
        let mut landings = self.landings.borrow_mut();
        let mut i = 0;
        while i < landings.len() {
            if done.contains(&landings[i].request) {
                let l = landings.swap_remove(i);
                // SAFETY: the staging slice holds the received bytes and stays untouched
                // until the stream drains (next operation's fence).
                unsafe { copy_to_device(l.device, l.host, l.len, self.stream)? };
            } else {
                i += 1;
            }
        }
        Ok(())
    }
}

impl Transport for StagedMpi<'_> {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        fence(&self.fenced, self.stream)?;
        let host = self.take(len)?;
        // SAFETY: `host` is a fresh arena slice; `buf` a device range of `len` bytes.
        unsafe { copy_to_host(host, buf as u64, len, self.stream)? };
        synchronize(self.stream)?;
        // SAFETY: the arena slice stays valid until the operation ends.
        unsafe { self.inner.isend(host, len, peer, tag) }
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        fence(&self.fenced, self.stream)?;
        let host = self.take(len)?;
        // SAFETY: as in `isend`.
        let request = unsafe { self.inner.irecv(host, len, peer, tag)? };
        self.landings.borrow_mut().push(Landing {
            request,
            device: buf as u64,
            host,
            len,
        });
        Ok(request)
    }

    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        let before = reqs.to_vec();
        self.inner.wait_all(reqs)?;
        self.land(&before)
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        let before = reqs.to_vec();
        let done = self.inner.wait_any(reqs)?;
        if let Some(i) = done {
            self.land(&before[i..=i])?;
        }
        Ok(done)
    }

    unsafe fn alltoallv(
        &self,
        send: *const u8,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: *mut u8,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        fence(&self.fenced, self.stream)?;
        // Stage only the bytes between the first and the last chunk, shifting displacements.
        let range = |c: &[usize], d: &[usize]| {
            let used = c.iter().zip(d).filter(|(&c, _)| c > 0);
            let lo = used.clone().map(|(_, &d)| d).min().unwrap_or(0);
            let hi = used.map(|(&c, &d)| c + d).max().unwrap_or(0);
            (
                lo,
                hi.max(lo),
                d.iter().map(|&x| x.saturating_sub(lo)).collect::<Vec<_>>(),
            )
        };
        let (slo, shi, sd) = range(send_counts, send_displs);
        let (rlo, rhi, rd) = range(recv_counts, recv_displs);
        let (shost, rhost) = (self.take(shi - slo)?, self.take(rhi - rlo)?);
        // SAFETY: fresh arena slices mirroring the device ranges [send+slo, send+shi) and
        // [recv+rlo, recv+rhi).
        unsafe {
            copy_to_host(shost, send as u64 + slo as u64, shi - slo, self.stream)?;
            synchronize(self.stream)?;
            self.inner
                .alltoallv(shost, send_counts, &sd, rhost, recv_counts, &rd)?;
            // Only the received chunks: the gaps between them hold other data.
            for (&c, &d) in recv_counts.iter().zip(&rd) {
                if c > 0 {
                    copy_to_device(recv as u64 + (rlo + d) as u64, rhost.add(d), c, self.stream)?;
                }
            }
        }
        Ok(())
    }
}
