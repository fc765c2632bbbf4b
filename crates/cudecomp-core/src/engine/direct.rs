//! The DIRECT backend on host memory: ranks of one node write their chunks straight into
//! each other's output arrays with `process_vm_writev` (cross-memory attach), so each
//! off-rank cell is copied once, with no MPI data movement and no unpacking.
//!
//! Protocol per transpose: exchange output addresses (this also tells every rank that its
//! peers have entered the operation), write, then a barrier so that nobody returns before
//! its output is complete. In-place runs stage every chunk in the workspace first and
//! wait for all peers to do the same before anyone overwrites a peer's (shared) buffer.

use std::ffi::c_void;

use crate::comm::Communicator;
use crate::mem::{Buf, Mover};
use crate::plan::{Run, TransposePlan};
use crate::{Error, Result};

/// Largest number of runs handed to one `process_vm_writev` call (Linux `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Lets any process of this user write into this one (Yama's `ptrace_scope=1` otherwise
/// restricts cross-memory attach to descendants).
pub fn allow_peer_writes() {
    // SAFETY: prctl with PR_SET_PTRACER only changes this process's Yama policy.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
}

/// Writes `runs` (element offsets and lengths) from `src` into process `pid`'s memory
/// starting at `remote` (`remote_len` bytes long).
fn write_runs(
    pid: i32,
    elem: usize,
    src: Buf,
    remote: u64,
    remote_len: u64,
    runs: &[Run],
) -> Result<()> {
    let e = elem as i64;
    for batch in runs.chunks(IOV_MAX) {
        let mut local = Vec::with_capacity(batch.len());
        let mut far = Vec::with_capacity(batch.len());
        let mut total = 0usize;
        for &(s, d, n) in batch {
            let bytes = n * e;
            let p = src.range(s * e, bytes)?;
            if d < 0 || (d + n) as u64 * elem as u64 > remote_len {
                return Err(Error::Internal(format!(
                    "direct write beyond rank buffer ({d}+{n} elements)"
                )));
            }
            local.push(libc::iovec {
                iov_base: p.cast::<c_void>(),
                iov_len: bytes as usize,
            });
            far.push(libc::iovec {
                iov_base: (remote + (d * e) as u64) as usize as *mut c_void,
                iov_len: bytes as usize,
            });
            total += bytes as usize;
        }
        // SAFETY: the local iovecs lie inside `src` (checked); the remote ones inside the
        // peer's output array, whose address and length the peer sent for this operation.
        let done = unsafe {
            libc::process_vm_writev(
                pid,
                local.as_ptr(),
                local.len() as _,
                far.as_ptr(),
                far.len() as _,
                0,
            )
        };
        if done < 0 || done as usize != total {
            let err = std::io::Error::last_os_error();
            return Err(Error::Mpi(format!(
                "DIRECT backend: writing {total} bytes into process {pid} failed ({err}); cross-memory attach must be allowed (kernel.yama.ptrace_scope <= 1)"
            )));
        }
    }
    Ok(())
}

/// One host transpose through direct writes. `comm` is the plan's sub-communicator and
/// `pids[i]` the process id of its rank `i`.
pub struct DirectRun<'a> {
    pub plan: &'a TransposePlan,
    pub elem: usize,
    pub mover: &'a dyn Mover,
    pub input: Buf,
    pub output: Buf,
    pub work: Buf,
}

impl DirectRun<'_> {
    /// Runs the transpose.
    pub fn run(&self, comm: &dyn Communicator, pids: &[i32]) -> Result<()> {
        let plan = self.plan;
        let in_place = self.input.ptr() == self.output.ptr();
        let mut mine = (self.output.ptr() as u64).to_le_bytes().to_vec();
        mine.extend((self.output.len() as u64).to_le_bytes());
        let mut all = vec![0u8; 16 * comm.size()];
        comm.allgather(&mine, &mut all)?;
        let peer = |p: usize| {
            let w = |i: usize| {
                u64::from_le_bytes(all[16 * p + i..16 * p + i + 8].try_into().unwrap_or([0; 8]))
            };
            (w(0), w(8))
        };
        let routes = plan.direct_routes();
        // In-place runs stage every chunk: peers overwrite this rank's (shared) buffer.
        let direct = |p: usize| routes.from_input[p].as_ref().filter(|_| !in_place);
        for p in 0..plan.npeers() {
            let needed = in_place || p != plan.me;
            if needed && direct(p).is_none() && plan.sends[p].count > 0 {
                self.mover
                    .copy(self.elem, self.input, self.work, &plan.stage(p))?;
            }
        }
        if in_place {
            comm.barrier()?; // every rank has staged its own chunks before any overwrite
        }
        for &(to, _) in &plan.schedule {
            if plan.sends[to].count == 0 {
                continue;
            }
            let (base, len) = peer(to);
            let pid = pids[to];
            match direct(to) {
                Some(runs) => write_runs(pid, self.elem, self.input, base, len, runs)?,
                None => write_runs(pid, self.elem, self.work, base, len, &routes.from_stage[to])?,
            }
        }
        let own = if in_place {
            (self.work, plan.unstage_self())
        } else {
            (self.input, plan.self_copy())
        };
        self.mover.copy(self.elem, own.0, self.output, &own.1)?;
        comm.barrier()
    }
}
