//! In-process communicator for `cargo test`: one thread per rank, eager sends into shared
//! mailboxes, receives matched in posting order by (communicator, source, tag) as MPI does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::{Communicator, Request, Transport};
use crate::{Error, Result};

struct Message {
    comm: u64,
    src: usize,
    tag: i32,
    data: Vec<u8>,
}

/// Mailboxes of every thread of one mock world.
struct World {
    boxes: Mutex<Vec<VecDeque<Message>>>,
    arrived: Condvar,
}

#[derive(Clone, Copy)]
struct PendingRecv {
    buf: usize,
    len: usize,
    src: usize,
    tag: i32,
}

/// One rank's view of a mock communicator.
pub struct MockComm {
    world: Arc<World>,
    id: u64,
    rank: usize,
    /// World thread index of each rank.
    members: Vec<usize>,
    pending: Mutex<Vec<Option<PendingRecv>>>,
    splits: AtomicU64,
}

const TAG_COLLECTIVE: i32 = -7;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread poisons the lock; the data is still consistent for the others.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on `n` threads, each with its rank of a fresh world communicator, and returns
/// the results in rank order.
pub fn run<R: Send>(n: usize, f: impl Fn(&dyn Communicator) -> R + Sync) -> Vec<R> {
    let world = Arc::new(World {
        boxes: Mutex::new((0..n).map(|_| VecDeque::new()).collect()),
        arrived: Condvar::new(),
    });
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let comm = MockComm {
                    world: world.clone(),
                    id: 1,
                    rank,
                    members: (0..n).collect(),
                    pending: Mutex::new(Vec::new()),
                    splits: AtomicU64::new(0),
                };
                let f = &f;
                s.spawn(move || f(&comm))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(v) => v,
                Err(e) => std::panic::resume_unwind(e),
            })
            .collect()
    })
}

impl MockComm {
    /// Tries to complete pending receive `idx` from the mailbox. Needs the mailbox lock.
    fn try_complete(&self, boxes: &mut [VecDeque<Message>], idx: usize) -> Result<bool> {
        let mut pending = lock(&self.pending);
        let Some(p) = pending.get(idx).copied().flatten() else {
            return Ok(true);
        };
        let mailbox = &mut boxes[self.members[self.rank]];
        let Some(pos) = mailbox
            .iter()
            .position(|m| m.comm == self.id && m.src == p.src && m.tag == p.tag)
        else {
            return Ok(false);
        };
        let msg = mailbox
            .remove(pos)
            .ok_or_else(|| Error::Internal("mailbox".into()))?;
        if msg.data.len() != p.len {
            return Err(Error::Mpi(format!(
                "mock receive from rank {} tag {}: expected {} bytes, got {}",
                p.src,
                p.tag,
                p.len,
                msg.data.len()
            )));
        }
        // SAFETY: the irecv caller keeps `buf..buf+len` valid until completion.
        unsafe { std::ptr::copy_nonoverlapping(msg.data.as_ptr(), p.buf as *mut u8, p.len) };
        pending[idx] = None;
        Ok(true)
    }
}

impl Communicator for MockComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn split(&self, color: i32, key: i32) -> Result<Box<dyn Communicator>> {
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend(key.to_le_bytes());
        let mut all = vec![0u8; 8 * self.size()];
        self.allgather(&mine, &mut all)?;
        let seq = self.splits.fetch_add(1, Ordering::SeqCst);
        let mut group: Vec<(i32, usize)> = all
            .chunks_exact(8)
            .enumerate()
            .filter_map(|(r, c)| {
                let col = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let k = i32::from_le_bytes([c[4], c[5], c[6], c[7]]);
                (col == color).then_some((k, r))
            })
            .collect();
        group.sort();
        let rank = group
            .iter()
            .position(|&(_, r)| r == self.rank)
            .ok_or_else(|| Error::Internal("split lost this rank".into()))?;
        let id = self
            .id
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(seq.wrapping_mul(1_000_003))
            .wrapping_add(color as u64)
            .wrapping_add(1);
        Ok(Box::new(MockComm {
            world: self.world.clone(),
            id,
            rank,
            members: group.iter().map(|&(_, r)| self.members[r]).collect(),
            pending: Mutex::new(Vec::new()),
            splits: AtomicU64::new(0),
        }))
    }

    fn free(&self) -> Result<()> {
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        let mut out = vec![0u8; self.size()];
        self.allgather(&[1], &mut out)
    }

    fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let n = send.len();
        if recv.len() != n * self.size() {
            return Err(Error::Internal("allgather buffer size".into()));
        }
        let mut reqs = Vec::new();
        for peer in 0..self.size() {
            // SAFETY: `send` and `recv` outlive the wait below.
            unsafe {
                reqs.push(self.isend(send.as_ptr(), n, peer, TAG_COLLECTIVE)?);
                reqs.push(self.irecv(recv.as_mut_ptr().add(peer * n), n, peer, TAG_COLLECTIVE)?);
            }
        }
        self.wait_all(&mut reqs)
    }

    fn host_name(&self) -> Result<String> {
        Ok("mock-host".into())
    }
}

impl Transport for MockComm {
    unsafe fn isend(&self, buf: *const u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        if peer >= self.size() {
            return Err(Error::Mpi(format!(
                "mock send to rank {peer} of {}",
                self.size()
            )));
        }
        // SAFETY: the caller guarantees `buf..buf+len` is readable.
        let data = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
        let mut boxes = lock(&self.world.boxes);
        boxes[self.members[peer]].push_back(Message {
            comm: self.id,
            src: self.rank,
            tag,
            data,
        });
        self.world.arrived.notify_all();
        Ok(Request::Null)
    }

    unsafe fn irecv(&self, buf: *mut u8, len: usize, peer: usize, tag: i32) -> Result<Request> {
        if peer >= self.size() {
            return Err(Error::Mpi(format!(
                "mock receive from rank {peer} of {}",
                self.size()
            )));
        }
        let mut pending = lock(&self.pending);
        pending.push(Some(PendingRecv {
            buf: buf as usize,
            len,
            src: peer,
            tag,
        }));
        Ok(Request::Active((pending.len() - 1) as u64))
    }

    fn wait_all(&self, reqs: &mut [Request]) -> Result<()> {
        while self.wait_any(reqs)?.is_some() {}
        Ok(())
    }

    fn wait_any(&self, reqs: &mut [Request]) -> Result<Option<usize>> {
        let mut boxes = lock(&self.world.boxes);
        loop {
            let mut any = false;
            for (i, r) in reqs.iter_mut().enumerate() {
                if let Request::Active(idx) = *r {
                    any = true;
                    if self.try_complete(&mut boxes, idx as usize)? {
                        *r = Request::Null;
                        return Ok(Some(i));
                    }
                }
            }
            if !any {
                return Ok(None);
            }
            boxes = self
                .world
                .arrived
                .wait(boxes)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_exchange() {
        let out = run(6, |c| {
            let sub = c.split((c.rank() % 2) as i32, -(c.rank() as i32)).unwrap();
            let mut all = vec![0u8; sub.size()];
            sub.allgather(&[c.rank() as u8], &mut all).unwrap();
            (sub.rank(), all)
        });
        assert_eq!(out[0], (2, vec![4, 2, 0]));
        assert_eq!(out[5], (0, vec![5, 3, 1]));
    }

    /// The default all-to-all: uneven counts, empty ones skipped, displacements out of
    /// order.
    #[test]
    fn default_alltoallv() {
        let n = 3;
        // Rank r sends (r + p) % 3 bytes of value 10 r + p to rank p.
        let len = |r: usize, p: usize| (r + p) % 3;
        let out = run(n, |c| {
            let r = c.rank();
            let sc: Vec<usize> = (0..n).map(|p| len(r, p)).collect();
            let rc: Vec<usize> = (0..n).map(|p| len(p, r)).collect();
            // Blocks stored in reverse peer order.
            let displs = |counts: &[usize]| -> Vec<usize> {
                (0..n).map(|p| counts[p + 1..].iter().sum()).collect()
            };
            let (sd, rd) = (displs(&sc), displs(&rc));
            let mut send = vec![0u8; sc.iter().sum()];
            for p in 0..n {
                send[sd[p]..sd[p] + sc[p]].fill((10 * r + p) as u8);
            }
            let mut recv = vec![0xffu8; rc.iter().sum()];
            // SAFETY: both vectors outlive the call and are sized by the counts.
            unsafe { c.alltoallv(send.as_ptr(), &sc, &sd, recv.as_mut_ptr(), &rc, &rd) }.unwrap();
            (0..n).all(|p| {
                recv[rd[p]..rd[p] + rc[p]]
                    .iter()
                    .all(|&b| b == (10 * p + r) as u8)
            })
        });
        assert_eq!(out, vec![true; n]);
    }
}
