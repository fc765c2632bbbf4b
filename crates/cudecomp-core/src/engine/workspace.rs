//! The handle's workspaces: host memory, device memory, the NCCL-registered device
//! buffer, page-locked staging, and the peers' mapped workspaces of the DIRECT backends.
//! Grown on demand and never shrunk; one operation at a time uses them (the handle's lock).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::comm::{allgather_words, Communicator};
use crate::cuda::ipc::{IpcPeers, NOTE};
use crate::cuda::nccl::{Nccl, RegisteredAlloc};
use crate::cuda::nvshmem::{Nvshmem, SymmetricAlloc, SymmetricBuffer};
use crate::cuda::vmm::PeerDeviceArrays;
use crate::cuda::{self, Device, DeviceAlloc, Event, PinnedAlloc, Stream};
use crate::engine::device::lock;
use crate::engine::pipe::Pipe;
use crate::mem::shm::{PeerArrays, SharedWorkspaces};
use crate::mem::Buf;
use crate::plan::MAX_SLICES;
use crate::{invalid, Error, Result};

/// Everything a handle's operations stage data in (host and device memory), grown on
/// demand and never shrunk. The handle keeps it behind a lock that one operation holds
/// from start to end.
///
/// The buffers it hands out ([`Workspace::host`], [`Workspace::device`],
/// [`Workspace::registered`]) are raw address ranges: they stay valid until the next call
/// that may grow the same kind of buffer, hence those calls are `unsafe`.
#[derive(Default)]
pub(crate) struct Workspace {
    words: Vec<u64>,
    device: Option<DeviceAlloc>,
    /// NCCL exchanges' workspace, registered with the handle's communicator.
    registered: Option<RegisteredAlloc>,
    /// Some rank could not allocate or register it: NCCL uses `device` from then on.
    unregistered: bool,
    /// Recorded after every device operation that used `device` or `staging`: the next
    /// one (possibly on another stream) waits for it, and growth waits before freeing.
    last_use: Option<Event>,
    staging: Option<PinnedAlloc>,
    /// Peers' device workspaces mapped for the DIRECT backend.
    ipc: IpcPeers,
    /// Node-shared host workspaces of the DIRECT backend (this rank's and its peers').
    pub(crate) shared: SharedWorkspaces,
    /// Peers' registered arrays mapped for single-copy DIRECT transposes on the host.
    pub(crate) peer_arrays: PeerArrays,
    /// Peers' registered device arrays mapped for single-copy DIRECT transposes on GPUs.
    pub(crate) peer_device_arrays: PeerDeviceArrays,
    /// The current operation is being captured into a CUDA graph: nothing may grow, and
    /// the ordering events of eager operations are left alone.
    capturing: bool,
    /// A captured graph uses the device buffer: it may never be replaced again.
    device_frozen: bool,
    /// A captured graph uses the registered buffer: likewise.
    registered_frozen: bool,
    /// NVSHMEM backends' symmetric workspace (the same size on every rank).
    symmetric: Option<SymmetricAlloc>,
    /// NVSHMEM signals: `MAX_SLICES` delivery slots per writer rank, then one "workspace
    /// free" slot per receiver rank.
    signals: Option<SymmetricAlloc>,
    /// A captured graph uses the symmetric workspace and signals: likewise.
    symmetric_frozen: bool,
}

/// What an NVSHMEM operation gets from the workspace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SymmetricWork {
    /// The symmetric workspace (this rank's copy).
    pub work: Buf,
    /// Symmetric address of the signal array.
    pub signals: u64,
}

/// What a capture needs that only an eager run can set up.
fn warm_up_first(what: &str) -> Error {
    Error::NotSupported(format!(
        "CUDA graph capture: {what} is set up by the operation's first run, which cannot happen inside a capture: run the operation once (same grid, dtype, halos and padding) before capturing it"
    ))
}

/// Before a buffer of `have` bytes serves `bytes`: inside a capture (`capturing`) it must
/// be large enough already (it is then `frozen` for good), and a frozen one may never grow.
fn freeze_check(
    capturing: bool,
    frozen: &mut bool,
    have: usize,
    bytes: usize,
    what: &str,
) -> Result<()> {
    if (capturing || *frozen) && have < bytes {
        return Err(if capturing && !*frozen {
            warm_up_first(what)
        } else {
            frozen_error(bytes, have)
        });
    }
    *frozen |= capturing;
    Ok(())
}

/// A captured graph keeps using the workspace.
fn frozen_error(bytes: usize, have: usize) -> Error {
    Error::NotSupported(format!(
        "the handle's workspace is used by a captured CUDA graph and cannot grow from {have} to {bytes} bytes: pass a `work` array of at least {bytes} bytes, or run the larger operation before capturing"
    ))
}

impl Workspace {
    /// Host memory of at least `bytes` bytes (8-byte aligned).
    ///
    /// # Safety
    /// The buffer is valid until the next call of `host` on this workspace (which may
    /// reallocate) or until the workspace is dropped; the caller uses it no longer.
    pub(crate) unsafe fn host(&mut self, bytes: usize) -> Buf {
        let words = bytes.div_ceil(8);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        let len = std::mem::size_of_val(self.words.as_slice());
        // SAFETY: the vector's storage, valid for `len` bytes until it is next resized,
        // which the caller's contract rules out while the buffer is in use.
        unsafe { Buf::new(self.words.as_mut_ptr().cast::<u8>(), len) }
    }

    /// Waits on the host until the last device operation that used this workspace is done.
    pub(crate) fn quiesce(&self) -> Result<()> {
        quiesce(&self.last_use)
    }

    /// Waits for the last operation, then frees the NCCL-registered buffer (before the
    /// communicator it is registered with goes).
    pub(crate) fn drop_registered(&mut self) -> Result<()> {
        self.quiesce()?;
        self.registered = None;
        Ok(())
    }

    /// Starts an operation on the device: `capturing` when its stream is being captured
    /// into a CUDA graph (the buffers it then gets are frozen for good).
    pub(crate) fn begin(&mut self, capturing: bool) {
        self.capturing = capturing;
    }

    /// True when a captured graph uses this workspace and the registered buffer holds
    /// fewer than `bytes`: it cannot grow, so NCCL exchanges through the caller's `work`.
    pub(crate) fn registered_frozen_short(&self, bytes: usize) -> bool {
        self.registered_frozen && self.registered.as_ref().map_or(0, RegisteredAlloc::bytes) < bytes
    }

    /// Orders `stream` after the last operation that used the workspace (not inside a
    /// capture: the graph's launches are ordered by the caller).
    fn order_after_last_use(&self, stream: Stream) -> Result<()> {
        match &self.last_use {
            Some(e) if !self.capturing => e.wait_on(stream),
            _ => Ok(()),
        }
    }

    /// Device workspace of at least `bytes`, ordered after its previous use on `stream`.
    ///
    /// # Safety
    /// The buffer is valid until the next call of `device` on this workspace (which may
    /// reallocate) or until the workspace is dropped; the caller uses it no longer.
    pub(crate) unsafe fn device(
        &mut self,
        device: &Arc<Device>,
        bytes: usize,
        stream: Stream,
    ) -> Result<Buf> {
        let have = self.device.as_ref().map_or(0, DeviceAlloc::bytes);
        freeze_check(
            self.capturing,
            &mut self.device_frozen,
            have,
            bytes,
            "the workspace",
        )?;
        self.order_after_last_use(stream)?;
        let d = grow(
            &mut self.device,
            &self.last_use,
            bytes,
            DeviceAlloc::bytes,
            || DeviceAlloc::new(device, bytes),
        )?;
        // SAFETY: the allocation is owned here and lives until the next growth, which the
        // caller's contract rules out while the buffer is in use.
        Ok(unsafe { Buf::new(d.ptr() as usize as *mut u8, d.bytes()) })
    }

    /// Collective over `comm` when it grows: the registered workspace of at least `bytes`
    /// for NCCL exchanges, ordered after its previous use on `stream`. `None` once any
    /// rank failed to allocate or register it (all ranks then fall back alike, since a
    /// registered send must meet a registered receive). Every rank asks for the same
    /// sizes in the same order (the grid's transpose workspace size, or the largest halo
    /// workspace of any rank), so all grow together.
    ///
    /// # Safety
    /// As [`Workspace::device`], for calls of `registered`.
    pub(crate) unsafe fn registered(
        &mut self,
        nccl: &Arc<Nccl>,
        device: &Arc<Device>,
        comm: &dyn Communicator,
        bytes: usize,
        stream: Stream,
    ) -> Result<Option<Buf>> {
        if self.unregistered {
            return Ok(None);
        }
        let have = self.registered.as_ref().map_or(0, RegisteredAlloc::bytes);
        let what = "the NCCL-registered workspace";
        freeze_check(
            self.capturing,
            &mut self.registered_frozen,
            have,
            bytes,
            what,
        )?;
        self.order_after_last_use(stream)?;
        if self.registered.as_ref().is_none_or(|r| r.bytes() < bytes) {
            quiesce(&self.last_use)?;
            self.registered = None;
            let made = RegisteredAlloc::new(nccl, device, bytes).ok();
            let mut all = vec![0u8; comm.size()];
            comm.allgather(&[u8::from(made.is_some())], &mut all)?;
            if all.iter().all(|&ok| ok == 1) {
                self.registered = made;
            } else {
                self.unregistered = true;
            }
        }
        // SAFETY: the allocation is owned here and lives until the next growth, which the
        // caller's contract rules out while the buffer is in use.
        Ok(self
            .registered
            .as_ref()
            .map(|r| unsafe { Buf::new(r.ptr() as usize as *mut u8, r.bytes()) }))
    }

    /// Collective over `comm` (every rank of the handle, in the same order): the symmetric
    /// workspace of at least `bytes` (grown to the largest request of any rank, alike on
    /// every rank), the signals, and the operation's number. When every rank passes the
    /// same place of the same lent symmetric buffer as `explicit` work
    /// ([`SymmetricBuffer`], `Handle.malloc`), that is the workspace instead; other
    /// explicit work is not used (the exchange needs symmetric memory), and a mix of lent
    /// buffers and others, or different lent buffers, is `InvalidUsage` on every rank.
    ///
    /// # Safety
    /// As [`Workspace::device`], for calls of `symmetric`.
    pub(crate) unsafe fn symmetric(
        &mut self,
        runtime: &Arc<Nvshmem>,
        device: &Arc<Device>,
        comm: &dyn Communicator,
        bytes: usize,
        explicit: Option<Buf>,
    ) -> Result<SymmetricWork> {
        let lent = explicit.and_then(|w| SymmetricBuffer::find(w).map(|(s, o)| (w, s, o)));
        let most = agree_on_lent(comm, bytes, lent.map(|(_, s, o)| (s, o)))?;
        if self.capturing && self.signals.is_none() {
            return Err(warm_up_first("the NVSHMEM symmetric workspace"));
        }
        let have = self.symmetric.as_ref().map_or(0, SymmetricAlloc::bytes);
        freeze_check(
            self.capturing,
            &mut self.symmetric_frozen,
            have,
            most,
            "the NVSHMEM symmetric workspace",
        )?;
        // (Every rank agrees on `lent`: checked above.)
        if lent.is_none() && self.symmetric.as_ref().is_none_or(|s| s.bytes() < most) {
            // Every rank waits for its own stream, then frees collectively: no put of an
            // earlier operation is still under way anywhere.
            quiesce(&self.last_use)?;
            self.symmetric = None;
            self.symmetric = Some(SymmetricAlloc::new(runtime, device, most)?);
        }
        if self.signals.is_none() {
            // Per rank: one delivery slot per item, and one free slot.
            let slots = comm.size() * (MAX_SLICES + 1);
            self.signals = Some(SymmetricAlloc::new(runtime, device, 8 * slots)?);
            // Every rank has zeroed its signals before any peer raises one there (a
            // notice written before a late rank's zeroing would be lost).
            comm.barrier()?;
        }
        if let (Some((w, _, _)), Some(s)) = (lent, &self.signals) {
            return Ok(SymmetricWork {
                work: w,
                signals: s.ptr(),
            });
        }
        let (Some(w), Some(s)) = (&self.symmetric, &self.signals) else {
            return Err(Error::Internal("NVSHMEM workspace missing".into()));
        };
        Ok(SymmetricWork {
            // SAFETY: the allocation is owned here and lives until the next growth, which
            // the caller's contract rules out while the buffer is in use.
            work: unsafe { Buf::new(w.ptr() as usize as *mut u8, w.bytes()) },
            signals: s.ptr(),
        })
    }

    /// Waits for the last operation, then frees the symmetric buffers (collective: at
    /// `finalize`, before the NVSHMEM runtime is released).
    pub(crate) fn drop_symmetric(&mut self) -> Result<()> {
        if self.symmetric.is_some() || self.signals.is_some() {
            self.quiesce()?;
        }
        self.symmetric = None;
        self.signals = None;
        Ok(())
    }

    /// Page-locked staging of at least `bytes` (for MPI without CUDA support).
    pub(crate) fn staging(
        &mut self,
        device: &Arc<Device>,
        bytes: usize,
    ) -> Result<(*mut u8, usize)> {
        let s = grow(
            &mut self.staging,
            &self.last_use,
            bytes,
            PinnedAlloc::bytes,
            || PinnedAlloc::new(device, bytes),
        )?;
        Ok((s.ptr(), s.bytes()))
    }

    /// Peers' mapped workspaces and signal events (after `start_direct`).
    pub(crate) fn ipc(&self) -> &IpcPeers {
        &self.ipc
    }

    /// Collective start of a DIRECT device operation on `stream`, `work` being this
    /// workspace's current buffer: peers may write into the workspace once `stream` gets
    /// here (it already waits for every earlier user of the workspace). That is said with
    /// the `free` event, recorded before the start barrier so that peers' waits after it
    /// see it; the first operation, before the events exist, waits on the host instead.
    /// Then maps new peer workspaces (the start barrier), which also carries each rank's
    /// `note` (see [`IpcPeers::exchange`]); the operation's output, when it is a
    /// registered device array, is free for peers' writes at the same point.
    pub(crate) fn start_direct(
        &mut self,
        comm: &dyn Communicator,
        work: Buf,
        stream: Stream,
        note: &[u8; NOTE],
    ) -> Result<Vec<[u8; NOTE]>> {
        if self.ipc.has_signals() {
            self.ipc.free()?.record(stream)?;
        } else {
            cuda::synchronize(stream)?;
        }
        self.ipc
            .exchange(comm, work.ptr() as u64, work.len() as u64, note)
    }

    /// Marks the end of a device operation on `stream` (not of a captured one: its work
    /// runs when the graph is launched, ordered by the caller).
    pub(crate) fn release(&mut self, stream: Stream) -> Result<()> {
        if std::mem::take(&mut self.capturing) {
            return Ok(());
        }
        if self.last_use.is_none() {
            self.last_use = Some(Event::new(false)?);
        }
        match &self.last_use {
            Some(e) => e.record(stream),
            None => Ok(()),
        }
    }
}

/// Collective: checks that every rank passes the same place `(serial, byte offset)` of the
/// same lent symmetric buffer, or none (`InvalidUsage` on every rank otherwise: all see the
/// same records), and returns the most workspace bytes any rank without one asks for.
fn agree_on_lent(
    comm: &dyn Communicator,
    bytes: usize,
    lent: Option<(u64, usize)>,
) -> Result<usize> {
    let (serial, offset) = lent.map_or((0, 0), |(s, o)| (s, o as u64));
    // Ranks exchanging through a lent buffer need none of the workspace.
    let mine = if lent.is_some() { 0 } else { bytes as u64 };
    let all = allgather_words(comm, [mine, serial, offset])?;
    if let Some(r) = all.iter().position(|w| (w[1], w[2]) != (serial, offset)) {
        let describe = |s: u64, o: u64| {
            match s {
            0 => "no Handle.malloc buffer (NVSHMEM operations then use the handle's symmetric workspace)".to_owned(),
            s => format!("Handle.malloc buffer #{s} at byte {o}"),
        }
        };
        invalid!(
            "work: NVSHMEM operations exchange through the same symmetric memory on every rank: pass the same Handle.malloc buffer on all ranks, or none; this rank passed {}, rank {r} {}",
            describe(serial, offset),
            describe(all[r][1], all[r][2])
        );
    }
    Ok(all.iter().map(|w| w[0]).max().unwrap_or(0) as usize)
}

fn quiesce(last_use: &Option<Event>) -> Result<()> {
    match last_use {
        Some(e) => e.synchronize(),
        None => Ok(()),
    }
}

/// The allocation in `slot`, replaced by a fresh one from `alloc` (once every operation that
/// used the old one finished) when it holds fewer than `bytes`. Never shrinks.
fn grow<'a, T>(
    slot: &'a mut Option<T>,
    last_use: &Option<Event>,
    bytes: usize,
    size: impl Fn(&T) -> usize,
    alloc: impl FnOnce() -> Result<T>,
) -> Result<&'a T> {
    if slot.as_ref().is_none_or(|t| size(t) < bytes) {
        quiesce(last_use)?;
        *slot = None;
        *slot = Some(alloc()?);
    }
    slot.as_ref()
        .ok_or_else(|| Error::Internal("workspace allocation".into()))
}

/// Everything one running operation stages data in: a workspace and the library's second
/// stream. A handle keeps one slot per operation running at once: one, unless threads run
/// operations on distinct grids together, which then never wait for each other's memory.
#[derive(Default)]
pub(crate) struct Slot {
    /// The workspace.
    pub(crate) ws: Mutex<Workspace>,
    /// The library's stream and events (pipelined device operations), made on first use.
    pipe: Mutex<Option<Pipe>>,
    busy: AtomicBool,
}

impl Slot {
    /// The pipe, created on first use (on `device`), with room for `npeers` peers; inside
    /// a capture (`capturing`) it must exist already.
    pub(crate) fn pipe(
        &self,
        device: &Device,
        npeers: usize,
        capturing: bool,
    ) -> Result<MutexGuard<'_, Option<Pipe>>> {
        let mut g = lock(&self.pipe);
        if capturing && g.as_ref().is_none_or(|p| !p.has_room(npeers)) {
            return Err(warm_up_first("the library's stream"));
        }
        if g.is_none() {
            device.bind()?;
            *g = Some(Pipe::new()?);
        }
        if let Some(p) = g.as_mut() {
            p.reserve(npeers)?;
        }
        Ok(g)
    }
}

/// A handle's slots.
#[derive(Default)]
pub(crate) struct Pool {
    slots: Mutex<Vec<Arc<Slot>>>,
}

/// A slot lent to one operation; given back when dropped.
pub(crate) struct Lease {
    slot: Arc<Slot>,
}

impl std::ops::Deref for Lease {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.slot
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slot.busy.store(false, Ordering::Release);
    }
}

impl Pool {
    /// A slot no other operation uses now (a new one when all are in use).
    pub(crate) fn lease(&self) -> Lease {
        let mut slots = lock(&self.slots);
        let free = slots.iter().find(|s| {
            s.busy
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        let slot = match free {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(Slot::default());
                s.busy.store(true, Ordering::Release);
                slots.push(s.clone());
                s
            }
        };
        Lease { slot }
    }

    /// Runs `f` on every slot's workspace (waiting for operations using it).
    pub(crate) fn each(&self, mut f: impl FnMut(&mut Workspace) -> Result<()>) -> Result<()> {
        let slots: Vec<Arc<Slot>> = lock(&self.slots).clone();
        for s in slots {
            f(&mut lock(&s.ws))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;

    #[test]
    fn ranks_agree_on_lent_buffers_or_all_refuse() {
        // Everybody on one place of one buffer: no workspace needed.
        for r in mock::run(3, |c| agree_on_lent(c, 100 * (c.rank() + 1), Some((7, 64)))) {
            assert_eq!(r.expect("agreed"), 0);
        }
        // Nobody: the largest request.
        for r in mock::run(3, |c| agree_on_lent(c, 100 * (c.rank() + 1), None)) {
            assert_eq!(r.expect("agreed"), 300);
        }
        // A mix, different buffers, different places: refused on every rank.
        type Lent = fn(usize) -> Option<(u64, usize)>;
        let mixes: [Lent; 3] = [
            |r| (r == 0).then_some((7, 0)),
            |r| Some((7 + r as u64, 0)),
            |r| Some((7, 8 * r)),
        ];
        for lent in mixes {
            for r in mock::run(3, move |c| agree_on_lent(c, 64, lent(c.rank()))) {
                let e = r.expect_err("refused");
                assert!(matches!(e, Error::InvalidUsage(_)), "{e}");
                assert!(e.to_string().contains("same Handle.malloc buffer"), "{e}");
            }
        }
    }
}
