//! Library handle and grid descriptors: the stateful objects behind `cudecomp.Handle`
//! and `cudecomp.GridDesc`.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::autotune::{autotune, AutotuneOptions};
use crate::comm::{allgather_bytes, allgather_u64, Communicator, Transport};
use crate::config::{DataType, GridConfig, HaloBackend, TransposeBackend};
use crate::cuda::ipc::IpcPeers;
use crate::cuda::kernels::{DeviceMover, Kernels};
use crate::cuda::nccl::{Nccl, NcclTransport, RegisteredAlloc};
use crate::cuda::transport::{Arena, DirectMpi, StagedMpi};
use crate::cuda::{self, Device, DeviceAlloc, Event, PinnedAlloc, Stream};
use crate::engine::direct::{SharedFaces, SharedSlices, HOST_RING_PLACES};
use crate::engine::exchange::SliceExchange;
use crate::engine::halo::HaloRun;
use crate::engine::staged::StagedSlices;
use crate::engine::streamed::{IpcFaces, IpcSlices, Pipe, TransportSlices};
use crate::engine::transpose::TransposeRun;
use crate::geometry::{CommAxis, Grid};
use crate::mem::shm::SharedWorkspaces;
use crate::mem::{Buf, HostMover, Mover};
use crate::perf::{triple, Clock, PerfReport, PerfSettings, SampleKey, TimedTransport};
use crate::plan::{Direction, HaloPlan, HaloSpec, TransposeLayouts, TransposePlan};
use crate::{invalid, unsupported, Error, Result};

/// Handle-owned host workspace, grown on demand and never shrunk. Its lock also
/// serialises operations on one handle.
#[derive(Default)]
pub struct Workspace {
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
    shared: SharedWorkspaces,
}

impl Workspace {
    /// A buffer of at least `bytes` bytes (8-byte aligned).
    pub fn get(&mut self, bytes: usize) -> Buf {
        let words = bytes.div_ceil(8);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        let b = bytemuck_words(&mut self.words);
        Buf::from_slice(b)
    }

    /// Current size in bytes.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    fn quiesce(&self) -> Result<()> {
        quiesce(&self.last_use)
    }

    /// Device workspace of at least `bytes`, ordered after its previous use on `stream`.
    pub fn device(&mut self, device: &Arc<Device>, bytes: usize, stream: Stream) -> Result<Buf> {
        if let Some(e) = &self.last_use {
            e.wait_on(stream)?;
        }
        let d = grow(
            &mut self.device,
            &self.last_use,
            bytes,
            DeviceAlloc::bytes,
            || DeviceAlloc::new(device, bytes),
        )?;
        // SAFETY: the allocation is owned here and outlives the operation holding the lock.
        Ok(unsafe { Buf::new(d.ptr() as usize as *mut u8, d.bytes()) })
    }

    /// Collective over `comm` when it grows: the registered workspace of at least `bytes`
    /// for NCCL exchanges, ordered after its previous use on `stream`. `None` once any
    /// rank failed to allocate or register it (all ranks then fall back alike, since a
    /// registered send must meet a registered receive). Every rank asks for the same
    /// sizes in the same order (the grid's transpose workspace size, or the largest halo
    /// workspace of any rank), so all grow together.
    pub fn registered(
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
        if let Some(e) = &self.last_use {
            e.wait_on(stream)?;
        }
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
        // SAFETY: the allocation is owned here and outlives the operation holding the lock.
        Ok(self
            .registered
            .as_ref()
            .map(|r| unsafe { Buf::new(r.ptr() as usize as *mut u8, r.bytes()) }))
    }

    /// Page-locked staging of at least `bytes` (for MPI without CUDA support).
    pub fn staging(&mut self, device: &Arc<Device>, bytes: usize) -> Result<(*mut u8, usize)> {
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
    pub fn ipc(&self) -> &IpcPeers {
        &self.ipc
    }

    /// Collective start of a DIRECT device operation on `stream`, `work` being this
    /// workspace's current buffer: peers may write into the workspace once `stream` gets
    /// here (it already waits for every earlier user of the workspace). That is said with
    /// the `free` event, recorded before the start barrier so that peers' waits after it
    /// see it; the first operation, before the events exist, waits on the host instead.
    /// Then maps new peer workspaces (the start barrier).
    pub fn start_direct(
        &mut self,
        comm: &dyn Communicator,
        work: Buf,
        stream: Stream,
    ) -> Result<()> {
        if self.ipc.has_signals() {
            self.ipc.free()?.record(stream)?;
        } else {
            cuda::synchronize(stream)?;
        }
        self.ipc
            .exchange(comm, work.ptr() as u64, work.len() as u64)
    }

    /// Marks the end of a device operation on `stream`.
    pub fn release(&mut self, stream: Stream) -> Result<()> {
        if self.last_use.is_none() {
            self.last_use = Some(Event::new(false)?);
        }
        match &self.last_use {
            Some(e) => e.record(stream),
            None => Ok(()),
        }
    }
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

fn bytemuck_words(w: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(w);
    // SAFETY: u64 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), len) }
}

/// Where a handle's data lives; decides which backends it can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySpace {
    /// Host memory (the CPU variant): MPI backends only.
    Host,
    /// CUDA device memory (the GPU variant).
    Cuda,
}

/// What a GPU handle adds: its device, NCCL (created with the first grid that needs it)
/// and whether MPI takes device pointers.
pub struct CudaState {
    pub device: Arc<Device>,
    nccl_path: String,
    nccl: Mutex<Option<Arc<Nccl>>>,
    /// MPI reads device memory directly; otherwise messages are staged through the host.
    pub mpi_cuda_aware: bool,
    /// The library's second stream (pipelined NCCL and DIRECT transposes), made on first
    /// use. Locked before the workspace.
    pipe: Mutex<Option<Pipe>>,
}

impl CudaState {
    /// The pipe, created on first use, with room for `npeers` peers.
    fn pipe(&self, npeers: usize) -> Result<MutexGuard<'_, Option<Pipe>>> {
        let mut g = lock(&self.pipe);
        if g.is_none() {
            self.device.bind()?;
            *g = Some(Pipe::new()?);
        }
        if let Some(p) = g.as_mut() {
            p.reserve(npeers)?;
        }
        Ok(g)
    }
}

struct Shared {
    comm: Box<dyn Communicator>,
    workspace: Mutex<Workspace>,
    col_major_default: bool,
    cuda: Option<CudaState>,
    /// Whether every rank can map every other's shared memory (host DIRECT backend);
    /// probed collectively on first need.
    direct: Mutex<Option<bool>>,
    /// Threads each rank uses for host copies; agreed on collectively on first need.
    host_threads: Mutex<Option<usize>>,
}

/// A library handle bound to a (private duplicate of a) communicator.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Handle {
    /// Wraps a communicator the handle owns from now on. `col_major_default` is the
    /// deprecated `CUDECOMP_USE_COL_MAJOR_RANK_ORDER=1` switch.
    pub fn new(comm: Box<dyn Communicator>, col_major_default: bool) -> Handle {
        Handle {
            shared: Arc::new(Shared {
                comm,
                workspace: Mutex::new(Workspace::default()),
                col_major_default,
                cuda: None,
                direct: Mutex::new(None),
                host_threads: Mutex::new(None),
            }),
        }
    }

    /// A GPU handle on `device`. `nccl_path` locates `libnccl.so.2`; `mpi_cuda_aware`
    /// overrides what MPI reports (`CUDECOMP_MPI_CUDA_AWARE`).
    pub fn new_cuda(
        comm: Box<dyn Communicator>,
        col_major_default: bool,
        device: Arc<Device>,
        nccl_path: String,
        mpi_cuda_aware: Option<bool>,
    ) -> Handle {
        let aware = mpi_cuda_aware.unwrap_or_else(|| comm.cuda_aware());
        Handle {
            shared: Arc::new(Shared {
                comm,
                workspace: Mutex::new(Workspace::default()),
                col_major_default,
                cuda: Some(CudaState {
                    device,
                    nccl_path,
                    nccl: Mutex::new(None),
                    mpi_cuda_aware: aware,
                    pipe: Mutex::new(None),
                }),
                direct: Mutex::new(None),
                host_threads: Mutex::new(None),
            }),
        }
    }

    /// Collective: true when every rank runs on this rank's host.
    pub fn one_node(&self) -> Result<bool> {
        let host = self.comm().host_name()?;
        let all = allgather_bytes(self.comm(), host.as_bytes())?;
        Ok(all.iter().all(|h| *h == host.as_bytes()))
    }

    /// Collective: the threads this rank uses for host copies — `CUDECOMP_HOST_THREADS`
    /// when set, otherwise the cores it may run on shared evenly among the ranks of its
    /// node (at most [`MAX_HOST_THREADS`]), so that ranks with idle cores beside them copy
    /// with several. A bad value raises on every rank.
    pub fn host_threads(&self) -> Result<usize> {
        let mut cached = lock(&self.shared.host_threads);
        if let Some(t) = *cached {
            return Ok(t);
        }
        let set = std::env::var("CUDECOMP_HOST_THREADS")
            .ok()
            .map(|v| v.trim().parse::<usize>().ok().filter(|&t| t > 0).ok_or(v));
        // The host name, then whether this rank's setting parses.
        let mut mine = self.comm().host_name()?.into_bytes();
        mine.push(u8::from(!matches!(set, Some(Err(_)))));
        let all = allgather_bytes(self.comm(), &mine)?;
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
    pub fn host_direct_ok(&self) -> Result<bool> {
        let mut cached = lock(&self.shared.direct);
        if let Some(c) = *cached {
            return Ok(c);
        }
        let ok = self.one_node()? && self.probe_shared()?;
        *cached = Some(ok);
        Ok(ok)
    }

    /// Collective: every rank stamps its rank into every peer's probe workspace; true
    /// when every stamp arrived everywhere.
    fn probe_shared(&self) -> Result<bool> {
        let (n, me) = (self.nranks(), self.rank());
        let mut probe = SharedWorkspaces::default();
        let mine = match probe.exchange(self.comm(), 8 * n) {
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
        self.comm().barrier()?;
        let mut ok = true;
        for r in (0..n).filter(|&r| r != me) {
            let at = mine.range(8 * r as i64, 8)?;
            // SAFETY: inside this rank's probe workspace, written by rank r before the barrier.
            let v = unsafe { std::ptr::read_volatile(at.cast::<[u8; 8]>()) };
            ok &= u64::from_le_bytes(v) == r as u64 + 1;
        }
        let flags = allgather_u64(self.comm(), u64::from(ok))?;
        Ok(flags.iter().all(|&f| f == 1))
    }

    /// Whether `RANK_ORDER_DEFAULT` resolves to column-major (deprecated environment switch).
    pub fn col_major_default(&self) -> bool {
        self.shared.col_major_default
    }

    /// Collective: like [`Handle::create_grid`], running the searches `opts` asks for first
    /// (process grid when `pdims` is `[0, 0]`, transpose and/or halo backends).
    pub fn create_grid_tuned(
        &self,
        cfg: &GridConfig,
        opts: &AutotuneOptions,
        space: MemorySpace,
    ) -> Result<GridDesc> {
        let mut mine = cfg.to_bytes();
        mine.extend(opts.to_bytes());
        self.check_agreement("grid configuration or autotuning options", &mine)?;
        cfg.validate_static()?;
        let chosen = autotune(self, cfg, opts, space)?;
        self.create_grid(&chosen, space)
    }

    /// The GPU state (InvalidUsage on a CPU handle).
    pub fn cuda(&self) -> Result<&CudaState> {
        self.shared
            .cuda
            .as_ref()
            .ok_or_else(|| Error::InvalidUsage("this handle has no CUDA device".into()))
    }

    /// Collective: true when every rank drives its own GPU (what NCCL requires); ranks
    /// sharing a GPU can still use the MPI backends.
    pub fn one_gpu_per_rank(&self) -> Result<bool> {
        let cuda = self.cuda()?;
        let mine = format!("{}#{}", self.comm().host_name()?, cuda.device.ordinal);
        let all = allgather_bytes(self.comm(), mine.as_bytes())?;
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        Ok(sorted.len() == all.len())
    }

    /// The handle's NCCL communicator, created collectively on first use.
    fn nccl(&self) -> Result<Arc<Nccl>> {
        let cuda = self.cuda()?;
        let mut n = lock(&cuda.nccl);
        if let Some(n) = n.as_ref() {
            return Ok(n.clone());
        }
        cuda.device.bind()?;
        let register = std::env::var("CUDECOMP_ENABLE_NCCL_UBR").map_or(true, |v| v.trim() != "0");
        let made = Arc::new(Nccl::new(&cuda.nccl_path, self.comm(), register)?);
        *n = Some(made.clone());
        Ok(made)
    }

    /// This process's rank in the handle's communicator.
    pub fn rank(&self) -> usize {
        self.shared.comm.rank()
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.shared.comm.size()
    }

    /// The handle's communicator.
    pub fn comm(&self) -> &dyn Communicator {
        self.shared.comm.as_ref()
    }

    /// Locks the handle for one operation (and gives access to its workspace).
    pub fn lock_workspace(&self) -> MutexGuard<'_, Workspace> {
        lock(&self.shared.workspace)
    }

    /// Collective: fails on every rank, without hanging, unless all ranks pass the same
    /// bytes. `what` names the object in the message.
    pub fn check_agreement(&self, what: &str, mine: &[u8]) -> Result<()> {
        let all = allgather_bytes(self.comm(), mine)?;
        let differing: Vec<usize> = (0..all.len()).filter(|&r| all[r] != all[0]).collect();
        if !differing.is_empty() {
            invalid!(
                "{what} differs across ranks: expected every rank to pass the same values, but rank(s) {differing:?} differ from rank 0"
            );
        }
        Ok(())
    }

    /// Collective: validates `cfg` (the same on all ranks) and builds a grid descriptor
    /// with its row and column communicators.
    pub fn create_grid(&self, cfg: &GridConfig, space: MemorySpace) -> Result<GridDesc> {
        self.check_agreement("grid configuration", &cfg.to_bytes())?;
        // Agreed on before a bad value raises, so that a rank alone with a typo does not
        // leave the others waiting in the collective.
        let slice_bytes = slice_bytes_from_env();
        let token = slice_bytes.as_ref().map_or(-1, |b| b.unwrap_or(0));
        self.check_agreement("CUDECOMP_PIPELINE_SLICE_BYTES", &token.to_le_bytes())?;
        let slice_bytes = slice_bytes?;
        let grid = Grid::new(cfg, self.nranks(), self.shared.col_major_default)?;
        let nvshmem = matches!(
            grid.transpose_backend,
            TransposeBackend::Nvshmem | TransposeBackend::NvshmemPl | TransposeBackend::NvshmemSm
        ) || matches!(
            grid.halo_backend,
            HaloBackend::Nvshmem | HaloBackend::NvshmemBlocking
        );
        if nvshmem {
            unsupported!(
                "NVSHMEM backends (transpose {}, halo {}) are not implemented: expected MPI or NCCL backends",
                grid.transpose_backend.enum_name(),
                grid.halo_backend.enum_name()
            );
        }
        if space == MemorySpace::Cuda
            && (grid.transpose_backend.is_nccl() || grid.halo_backend == HaloBackend::Nccl)
        {
            self.nccl()?;
        }
        for (what, direct) in [
            (
                "transpose_comm_backend",
                grid.transpose_backend == TransposeBackend::Direct,
            ),
            (
                "halo_comm_backend",
                grid.halo_backend == HaloBackend::Direct,
            ),
        ] {
            if !direct {
                continue;
            }
            if space == MemorySpace::Cuda {
                if !self.one_node()? {
                    unsupported!("{what} DIRECT needs every rank's GPU in one node (CUDA IPC)");
                }
            } else if !self.host_direct_ok()? {
                unsupported!(
                    "{what} DIRECT needs every rank on one node, sharing memory through /dev/shm"
                );
            }
        }
        if space == MemorySpace::Host {
            if !(grid.transpose_backend.is_mpi()
                || grid.transpose_backend == TransposeBackend::Direct)
            {
                unsupported!(
                    "transpose_comm_backend {}: the CPU variant supports MPI_P2P, MPI_P2P_PL, MPI_A2A and DIRECT only",
                    grid.transpose_backend.enum_name()
                );
            }
            if !(grid.halo_backend.is_mpi() || grid.halo_backend == HaloBackend::Direct) {
                unsupported!(
                    "halo_comm_backend {}: the CPU variant supports MPI, MPI_BLOCKING and DIRECT only",
                    grid.halo_backend.enum_name()
                );
            }
        }
        let host_threads = match space {
            MemorySpace::Host => self.host_threads()?,
            MemorySpace::Cuda => 1,
        };
        let rank = self.rank();
        let [row, col] = grid.coords(rank);
        let col_comm = self.comm().split(col as i32, row as i32)?;
        let row_comm = self.comm().split(row as i32, col as i32)?;
        Ok(GridDesc {
            handle: self.clone(),
            grid,
            rank,
            subcomms: [col_comm, row_comm],
            plans: Mutex::new(HashMap::new()),
            halo_plans: Mutex::new(HashMap::new()),
            perf: PerfSettings::from_env().map(PerfReport::new),
            slice_bytes,
            host_threads,
        })
    }

    /// Collective: releases NCCL and the handle's communicator.
    pub fn finalize(&self) -> Result<()> {
        if let Some(c) = &self.shared.cuda {
            {
                let mut ws = lock(&self.shared.workspace);
                ws.quiesce()?;
                // Deregistered while the communicator lives.
                ws.registered = None;
            }
            if let Some(n) = lock(&c.nccl).take() {
                c.device.bind()?;
                n.destroy()?;
            }
        }
        self.comm().free()
    }
}

/// Most threads a rank uses for host copies by default: beyond this many, memory
/// bandwidth, not cores, bounds a copy.
pub const MAX_HOST_THREADS: usize = 16;

/// One decomposition bound to a handle.
pub struct GridDesc {
    handle: Handle,
    grid: Grid,
    rank: usize,
    /// Indexed by [`CommAxis`]: column then row communicator.
    subcomms: [Box<dyn Communicator>; 2],
    plans: Mutex<HashMap<(Direction, TransposeLayouts), Arc<TransposePlan>>>,
    halo_plans: Mutex<HashMap<HaloSpec, Option<Arc<HaloPlan>>>>,
    perf: Option<PerfReport>,
    /// Slice size of pipelined transposes and DIRECT halos set by the user (the same on
    /// every rank: checked); each exchange has its own otherwise.
    slice_bytes: Option<i64>,
    /// Threads of host copies (see [`Handle::host_threads`]).
    host_threads: usize,
}

/// `CUDECOMP_PIPELINE_SLICE_BYTES` (bytes per slice of pipelined transposes and DIRECT
/// halos), `None` when unset.
fn slice_bytes_from_env() -> Result<Option<i64>> {
    match std::env::var("CUDECOMP_PIPELINE_SLICE_BYTES") {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|&n| n > 0)
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidUsage(format!(
                    "CUDECOMP_PIPELINE_SLICE_BYTES: expected a positive number of bytes, got {v:?}"
                ))
            }),
    }
}

/// Identifies a transpose configuration in the performance report.
fn transpose_key(d: Direction, l: &TransposeLayouts, dtype: DataType, in_place: bool) -> SampleKey {
    SampleKey {
        kind: "transpose",
        operation: d.report_name().into(),
        fields: vec![
            dtype.short_name().into(),
            triple(&l.input_halo),
            triple(&l.output_halo),
            triple(&l.input_padding),
            triple(&l.output_padding),
            u8::from(in_place).to_string(),
            "0".into(),
        ],
    }
}

/// Identifies a halo configuration in the performance report.
fn halo_key(s: &HaloSpec, dtype: DataType) -> SampleKey {
    SampleKey {
        kind: "halo",
        operation: format!("Halo{}", ["X", "Y", "Z"][s.axis]),
        fields: vec![
            dtype.short_name().into(),
            s.dim.to_string(),
            triple(&s.halo),
            triple(&s.periods.map(u8::from)),
            triple(&s.padding),
            "0".into(),
        ],
    }
}

/// Bytes a halo update moves off-rank: one face per real neighbour.
fn halo_bytes(plan: &HaloPlan, rank: usize, elem: usize) -> f64 {
    let real = plan
        .neighbours
        .iter()
        .flatten()
        .filter(|&&r| r != rank)
        .count();
    (plan.face as usize * elem * real) as f64
}

/// Bytes of `elems` elements of `elem` bytes, after checking that the explicit workspace,
/// if any, holds them (InvalidUsage otherwise).
fn check_work(explicit: Option<Buf>, elems: i64, elem: usize, query: &str) -> Result<usize> {
    let need = elems.max(0) as usize * elem;
    match explicit {
        Some(w) if w.len() < need => invalid!(
            "work: expected at least {need} bytes ({query} = {elems} elements of {elem} bytes), got {} bytes",
            w.len()
        ),
        _ => Ok(need),
    }
}

/// The explicit workspace if it holds `elems` elements of `elem` bytes (InvalidUsage
/// otherwise), else the automatic one `auto` returns for that many bytes.
fn choose_work(
    explicit: Option<Buf>,
    elems: i64,
    elem: usize,
    query: &str,
    auto: impl FnOnce(usize) -> Result<Buf>,
) -> Result<Buf> {
    let need = check_work(explicit, elems, elem, query)?;
    match explicit {
        Some(w) => Ok(w),
        None => auto(need),
    }
}

/// A value from `map`, made by `make` (and kept) on first request.
fn cached<K: std::hash::Hash + Eq, V: Clone>(
    map: &Mutex<HashMap<K, V>>,
    key: K,
    make: impl FnOnce() -> Result<V>,
) -> Result<V> {
    if let Some(v) = lock(map).get(&key) {
        return Ok(v.clone());
    }
    let v = make()?;
    lock(map).insert(key, v.clone());
    Ok(v)
}

impl GridDesc {
    /// The resolved grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// The owning handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The sub-communicator along `axis`.
    pub fn subcomm(&self, axis: CommAxis) -> &dyn Communicator {
        self.subcomms[axis as usize].as_ref()
    }

    /// The (cached) plan of one transpose.
    pub fn transpose_plan(
        &self,
        direction: Direction,
        layouts: &TransposeLayouts,
    ) -> Result<Arc<TransposePlan>> {
        cached(&self.plans, (direction, *layouts), || {
            Ok(Arc::new(TransposePlan::new(
                &self.grid, self.rank, direction, layouts,
            )?))
        })
    }

    /// Runs a transpose on host buffers. `work = None` uses the handle's workspace.
    /// Buffer lengths are checked against the plan; the caller checks shapes and aliasing.
    pub fn transpose_host(
        &self,
        direction: Direction,
        layouts: &TransposeLayouts,
        dtype: DataType,
        input: Buf,
        output: Buf,
        work: Option<Buf>,
    ) -> Result<()> {
        let (plan, elem) = self.sized_transpose_plan(direction, layouts, dtype, input, output)?;
        let mut ws = self.handle.lock_workspace();
        let key = || transpose_key(direction, layouts, dtype, input.ptr() == output.ptr());
        let bytes = (plan.input.interior().volume() as usize * elem) as f64;
        let sub = self.subcomm(direction.comm());
        if self.grid.transpose_backend == TransposeBackend::Direct {
            // Always the handle's shared workspace: peers write into it.
            let need = self.grid.transpose_workspace_size() as usize * elem;
            let work = ws.shared.exchange(self.handle.comm(), need)?;
            let run = TransposeRun {
                plan: &plan,
                backend: TransposeBackend::Direct,
                elem,
                mover: &HostMover::new(self.host_threads).streaming_into(output),
                input,
                output,
                work,
            };
            let x = SharedSlices {
                workspaces: &ws.shared,
                members: &plan.members,
                rank: self.rank,
                threads: self.host_threads,
                ring: Some(HOST_RING_PLACES),
                waited_ms: Cell::new(0.0),
            };
            let waited = || Ok(x.waited_ms.get());
            return self.reported(
                &Clock::Host,
                sub,
                &key,
                bytes,
                CommTime::Own(&waited),
                |t| {
                    if plan.npeers() > 1 {
                        run.sliced(&x, self.slice_bytes, false)
                    } else {
                        run.run(t)
                    }
                },
            );
        }
        let work = choose_work(
            work,
            self.grid.transpose_workspace_size(),
            elem,
            "get_transpose_workspace_size()",
            |n| Ok(ws.get(n)),
        )?;
        let run = TransposeRun {
            plan: &plan,
            backend: self.grid.transpose_backend,
            elem,
            mover: &HostMover::new(self.host_threads).streaming_into(output),
            input,
            output,
            work,
        };
        self.reported(&Clock::Host, sub, &key, bytes, CommTime::PerCall, |t| {
            run.run(t)
        })
    }

    /// The plan of a transpose and the element size, after checking that the buffers hold
    /// the pencils (shapes are the caller's check).
    fn sized_transpose_plan(
        &self,
        direction: Direction,
        layouts: &TransposeLayouts,
        dtype: DataType,
        input: Buf,
        output: Buf,
    ) -> Result<(Arc<TransposePlan>, usize)> {
        let plan = self.transpose_plan(direction, layouts)?;
        let elem = dtype.size();
        check_len("input", input, plan.input.size, elem)?;
        check_len("output", output, plan.output.size, elem)?;
        Ok((plan, elem))
    }

    /// The plan of a halo update (`None`: nothing moves), the element size and the
    /// workspace elements it needs, after checking that `data` holds the pencil.
    fn sized_halo_plan(
        &self,
        spec: &HaloSpec,
        dtype: DataType,
        data: Buf,
    ) -> Result<Option<(Arc<HaloPlan>, usize, i64)>> {
        let Some(plan) = self.halo_plan(spec)? else {
            return Ok(None);
        };
        let elem = dtype.size();
        check_len("input", data, plan.info.size, elem)?;
        let elems = self
            .grid
            .halo_workspace_size(spec.axis as i64, self.rank, spec.halo)?;
        Ok(Some((plan, elem, elems)))
    }

    /// The (cached) plan of one halo update; `None` when it moves nothing.
    pub fn halo_plan(&self, spec: &HaloSpec) -> Result<Option<Arc<HaloPlan>>> {
        cached(&self.halo_plans, *spec, || {
            Ok(HaloPlan::new(&self.grid, self.rank, *spec)?.map(Arc::new))
        })
    }

    /// Runs a halo update on a host pencil array. `work = None` uses the handle's workspace.
    pub fn update_halos_host(
        &self,
        spec: &HaloSpec,
        dtype: DataType,
        data: Buf,
        work: Option<Buf>,
    ) -> Result<()> {
        let Some((plan, elem, elems)) = self.sized_halo_plan(spec, dtype, data)? else {
            return Ok(());
        };
        let mut ws = self.handle.lock_workspace();
        let bytes = halo_bytes(&plan, self.rank, elem);
        if self.grid.halo_backend == HaloBackend::Direct && !plan.local_wrap {
            // Always the handle's shared workspace: neighbours write into it.
            let work = ws
                .shared
                .exchange(self.handle.comm(), elems as usize * elem)?;
            let run = HaloRun {
                plan: &plan,
                backend: HaloBackend::Direct,
                elem,
                mover: &HostMover::new(self.host_threads),
                data,
                work,
            };
            let x = SharedFaces {
                workspaces: &ws.shared,
                rank: self.rank,
                waited_ms: Cell::new(0.0),
            };
            let waited = || Ok(x.waited_ms.get());
            let key = || halo_key(spec, dtype);
            let comm = self.handle.comm();
            return self.reported(
                &Clock::Host,
                comm,
                &key,
                bytes,
                CommTime::Own(&waited),
                |_| run.direct(&x, self.slice_bytes),
            );
        }
        let work = choose_work(work, elems, elem, "get_halo_workspace_size()", |n| {
            Ok(ws.get(n))
        })?;
        self.reported(
            &Clock::Host,
            self.handle.comm(),
            &|| halo_key(spec, dtype),
            bytes,
            CommTime::PerCall,
            |t| {
                HaloRun {
                    plan: &plan,
                    backend: self.grid.halo_backend,
                    elem,
                    mover: &HostMover::new(self.host_threads),
                    data,
                    work,
                }
                .run(t)
            },
        )
    }

    /// Runs a transpose on device buffers, enqueued on `stream` (MPI backends synchronise
    /// it on the host). `work = None` uses the handle's device workspace.
    #[allow(clippy::too_many_arguments)]
    pub fn transpose_device(
        &self,
        direction: Direction,
        layouts: &TransposeLayouts,
        dtype: DataType,
        input: Buf,
        output: Buf,
        work: Option<Buf>,
        stream: Stream,
    ) -> Result<()> {
        let (plan, elem) = self.sized_transpose_plan(direction, layouts, dtype, input, output)?;
        let backend = self.grid.transpose_backend;
        let key = || transpose_key(direction, layouts, dtype, input.ptr() == output.ptr());
        let bytes = (plan.input.interior().volume() as usize * elem) as f64;
        if backend == TransposeBackend::Direct {
            return self.direct_device(&plan, elem, input, output, stream, (&key, bytes));
        }
        let staging = ((plan.input.size + plan.output.size) as usize) * elem;
        let cuda = self.handle.cuda()?;
        // NCCL transposes run as a pipeline of slices with the exchange on the library's
        // stream; so do point-to-point ones through host-staged MPI (the copies to and from
        // the host overlap MPI's). Others synchronise on the host per message.
        let staged_p2p = !cuda.mpi_cuda_aware
            && matches!(
                backend,
                TransposeBackend::MpiP2p | TransposeBackend::MpiP2pPl
            );
        let sliced = (backend.is_nccl() || staged_p2p) && plan.npeers() > 1;
        let pipe = if sliced {
            Some(cuda.pipe(plan.npeers())?)
        } else {
            None
        };
        let pipe = pipe.as_ref().and_then(|g| g.as_ref());
        self.on_device(
            stream,
            work,
            self.grid.transpose_workspace_size(),
            elem,
            "get_transpose_workspace_size()",
            DeviceExchange {
                nccl: backend.is_nccl(),
                // Never where some rank sends from its input or receives into its output.
                registrable: (sliced && plan.packed_everywhere)
                    .then(|| self.grid.transpose_workspace_size()),
                members: &plan.members,
                comm: self.subcomm(direction.comm()),
                staging,
                key: &key,
                bytes,
                pipe,
            },
            |mover, work, transport, slices| {
                let run = TransposeRun {
                    plan: &plan,
                    backend,
                    elem,
                    mover,
                    input,
                    output,
                    work,
                };
                match slices {
                    // Staged slices pair unit k with slice k on every rank: never per peer.
                    Some(x) => run.sliced(x, self.slice_bytes, backend == TransposeBackend::NcclPl),
                    None => run.run(transport),
                }
            },
        )
    }

    /// DIRECT on GPUs: chunks are packed slice by slice on the user's stream and copied by
    /// the copy engine straight into the receiving peer's workspace (mapped through CUDA
    /// IPC) from the library's stream; each slice is signalled with an interprocess event
    /// and unpacked by the receiver as it lands. One host synchronisation at the start
    /// (the peers' workspaces are free) and one barrier (signals recorded before waits).
    /// Always uses the handle's workspace, which peers have mapped.
    fn direct_device(
        &self,
        plan: &TransposePlan,
        elem: usize,
        input: Buf,
        output: Buf,
        stream: Stream,
        (key, bytes): (&dyn Fn() -> SampleKey, f64),
    ) -> Result<()> {
        let (cuda, kernels) = self.bound_device()?;
        let mover = DeviceMover::new(&kernels, stream);
        let pipe = cuda.pipe(plan.npeers())?;
        let pipe = pipe
            .as_ref()
            .ok_or_else(|| Error::Internal("DIRECT: no pipe".into()))?;
        let mut ws = self.handle.lock_workspace();
        let need = self.grid.transpose_workspace_size() as usize * elem;
        let work = ws.device(&cuda.device, need, stream)?;
        let comm = self.subcomm(plan.direction.comm());
        let run = TransposeRun {
            plan,
            backend: TransposeBackend::Direct,
            elem,
            mover: &mover,
            input,
            output,
            work,
        };
        let clock = Clock::Device(stream);
        let span = || pipe.span_ms();
        let timing = if plan.npeers() > 1 {
            CommTime::Own(&span)
        } else {
            CommTime::PerCall
        };
        let result = self.reported(&clock, comm, key, bytes, timing, |t| {
            ws.start_direct(self.handle.comm(), work, stream)?;
            if plan.npeers() == 1 {
                return run.run(t);
            }
            let x = IpcSlices {
                pipe,
                main: stream,
                peers: ws.ipc(),
                members: &plan.members,
                me: plan.me,
                slots: plan
                    .peer_recv_offsets
                    .iter()
                    .map(|&o| (o * elem as i64) as u64)
                    .collect(),
                comm,
            };
            run.sliced(&x, self.slice_bytes, false)
        });
        ws.release(stream)?;
        result
    }

    /// DIRECT halo update on GPUs: faces are copied by the copy engine into the
    /// neighbours' workspaces (CUDA IPC) and signalled with interprocess events; the
    /// handle's workspace is always used, as peers have mapped it.
    #[allow(clippy::too_many_arguments)]
    fn direct_halo_device(
        &self,
        plan: &HaloPlan,
        spec: &HaloSpec,
        dtype: DataType,
        elem: usize,
        elems: i64,
        data: Buf,
        stream: Stream,
    ) -> Result<()> {
        let (cuda, kernels) = self.bound_device()?;
        let mover = DeviceMover::new(&kernels, stream);
        let pipe = cuda.pipe(1)?;
        let pipe = pipe
            .as_ref()
            .ok_or_else(|| Error::Internal("DIRECT: no pipe".into()))?;
        let mut ws = self.handle.lock_workspace();
        let work = ws.device(&cuda.device, elems as usize * elem, stream)?;
        let run = HaloRun {
            plan,
            backend: HaloBackend::Direct,
            elem,
            mover: &mover,
            data,
            work,
        };
        let comm = self.handle.comm();
        let span = || pipe.span_ms();
        let key = || halo_key(spec, dtype);
        let bytes = halo_bytes(plan, self.rank, elem);
        let clock = Clock::Device(stream);
        let result = self.reported(&clock, comm, &key, bytes, CommTime::Own(&span), |_| {
            ws.start_direct(comm, work, stream)?;
            let x = IpcFaces {
                pipe,
                main: stream,
                peers: ws.ipc(),
                neighbours: plan.neighbours,
                comm,
            };
            run.direct(&x, self.slice_bytes)
        });
        ws.release(stream)?;
        result
    }

    /// The GPU state with its device bound to this thread and its copy kernels loaded.
    fn bound_device(&self) -> Result<(&CudaState, Arc<Kernels>)> {
        let cuda = self.handle.cuda()?;
        cuda.device.bind()?;
        Ok((cuda, Kernels::for_device(&cuda.device)?))
    }

    /// Runs a halo update on a device pencil array, enqueued on `stream`.
    pub fn update_halos_device(
        &self,
        spec: &HaloSpec,
        dtype: DataType,
        data: Buf,
        work: Option<Buf>,
        stream: Stream,
    ) -> Result<()> {
        let Some((plan, elem, elems)) = self.sized_halo_plan(spec, dtype, data)? else {
            return Ok(());
        };
        let backend = self.grid.halo_backend;
        if backend == HaloBackend::Direct && !plan.local_wrap {
            return self.direct_halo_device(&plan, spec, dtype, elem, elems, data, stream);
        }
        let everyone: Vec<usize> = (0..self.grid.nranks()).collect();
        self.on_device(
            stream,
            work,
            elems,
            elem,
            "get_halo_workspace_size()",
            DeviceExchange {
                nccl: backend == HaloBackend::Nccl,
                // Local wraps exchange nothing; dense faces go straight from the array.
                registrable: (!plan.local_wrap && plan.packed_everywhere)
                    .then_some(plan.max_workspace_elems),
                members: &everyone,
                comm: self.handle.comm(),
                staging: plan.workspace_elems() as usize * elem,
                key: &|| halo_key(spec, dtype),
                bytes: halo_bytes(&plan, self.rank, elem),
                pipe: None,
            },
            |mover, work, transport, _| {
                HaloRun {
                    plan: &plan,
                    backend,
                    elem,
                    mover,
                    data,
                    work,
                }
                .run(transport)
            },
        )
    }

    /// Common frame of device operations: binds the device, picks the workspace, builds
    /// the mover and the transport (NCCL, CUDA-aware MPI or host-staged MPI), runs `f`
    /// and orders the next user of the workspace after this operation.
    #[allow(clippy::too_many_arguments)]
    fn on_device(
        &self,
        stream: Stream,
        work: Option<Buf>,
        work_elems: i64,
        elem: usize,
        query: &str,
        ex: DeviceExchange<'_>,
        f: impl FnOnce(&dyn Mover, Buf, &dyn Transport, Option<&dyn SliceExchange>) -> Result<()>,
    ) -> Result<()> {
        let (cuda, kernels) = self.bound_device()?;
        let mover = DeviceMover::new(&kernels, stream);
        let nccl = if ex.nccl {
            Some(self.handle.nccl()?)
        } else {
            None
        };
        let mut ws = self.handle.lock_workspace();
        // NCCL exchanges between workspaces on every rank use the handle's registered one
        // (a `work` argument is still checked); others the given or the automatic one.
        let registered = match (&nccl, ex.registrable) {
            (Some(n), Some(elems)) if n.registers() => {
                check_work(work, work_elems, elem, query)?;
                let need = elems.max(work_elems).max(0) as usize * elem;
                ws.registered(n, &cuda.device, self.handle.comm(), need, stream)?
            }
            _ => None,
        };
        let (work, registered) = match registered {
            Some(b) => (b, true),
            None => (
                choose_work(work, work_elems, elem, query, |n| {
                    ws.device(&cuda.device, n, stream)
                })?,
                false,
            ),
        };
        let clock = Clock::Device(stream);
        let run = |t: &dyn Transport, x: Option<&dyn SliceExchange>, comm: CommTime<'_>| {
            self.reported(&clock, t, ex.key, ex.bytes, comm, |t| f(&mover, work, t, x))
        };
        let result = if let Some(nccl) = &nccl {
            let on = ex.pipe.map_or(stream, Pipe::side);
            let t = NcclTransport::new(nccl, on, ex.members);
            match ex.pipe {
                Some(pipe) => {
                    let x = TransportSlices {
                        transport: &t,
                        pipe,
                        main: stream,
                        registered,
                    };
                    run(&t, Some(&x), CommTime::Own(&|| pipe.span_ms()))
                }
                None => run(&t, None, CommTime::PerCall),
            }
        } else if cuda.mpi_cuda_aware {
            run(&DirectMpi::new(ex.comm, stream), None, CommTime::PerCall)
        } else {
            let (base, cap) = ws.staging(&cuda.device, ex.staging)?;
            // SAFETY: the arena belongs to the locked workspace; the next user waits for
            // `release` below before touching it.
            let arena = unsafe { Arena::new(base, cap) };
            match ex.pipe {
                Some(pipe) => {
                    // Receives write into the arena from the host as soon as they are
                    // posted: the previous operation's copies out of it must be done.
                    ws.quiesce()?;
                    let x = StagedSlices::new(ex.comm, pipe, stream, arena);
                    let waited = || Ok(x.waited_ms.get());
                    run(ex.comm, Some(&x), CommTime::Own(&waited))
                }
                None => run(
                    &StagedMpi::new(ex.comm, stream, arena),
                    None,
                    CommTime::PerCall,
                ),
            }
        };
        ws.release(stream)?;
        result
    }

    /// Runs `f` on `transport`; with the performance report on, times it (total, and the
    /// communication time `comm` says how to get) and records a sample under `key`.
    fn reported(
        &self,
        clock: &Clock,
        transport: &dyn Transport,
        key: &dyn Fn() -> SampleKey,
        bytes: f64,
        comm: CommTime<'_>,
        f: impl FnOnce(&dyn Transport) -> Result<()>,
    ) -> Result<()> {
        let Some(perf) = &self.perf else {
            return f(transport);
        };
        let start = clock.mark()?;
        let timed = TimedTransport {
            inner: transport,
            clock,
            comm_ms: Cell::new(0.0),
        };
        let comm_ms = match comm {
            CommTime::PerCall => {
                f(&timed)?;
                timed.comm_ms.get()
            }
            CommTime::Own(read) => {
                f(transport)?;
                read()?
            }
        };
        let total = clock.since(&start)?;
        // Host-timed waits of a device operation (host-staged slices) may begin while
        // earlier work still holds the stream, before the operation's first event runs:
        // communication is part of the operation, so it is capped at its time.
        perf.record(key(), total, comm_ms.min(total), bytes);
        Ok(())
    }

    /// Collective: prints the performance report (if enabled) and releases the row and
    /// column communicators.
    pub fn destroy(&self) -> Result<()> {
        if let Some(p) = &self.perf {
            p.finish(&self.grid, self.handle.comm())?;
        }
        for c in &self.subcomms {
            c.free()?;
        }
        Ok(())
    }
}

/// How the performance report gets an operation's communication time.
#[derive(Clone, Copy)]
enum CommTime<'a> {
    /// Time inside each transport call (transports that complete on the host).
    PerCall,
    /// Read after the run from what it measured itself: pipelines must not be timed call
    /// by call, since each device timing waits for the stream and would serialise them.
    Own(&'a dyn Fn() -> Result<f64>),
}

/// How a device operation exchanges data.
struct DeviceExchange<'a> {
    nccl: bool,
    /// NCCL may exchange through the registered workspace, of this many elements (the
    /// same on every rank, so that all grow it together): every rank then packs and
    /// unpacks through it.
    registrable: Option<i64>,
    /// Handle ranks of the group's members, by peer index (NCCL uses handle ranks).
    members: &'a [usize],
    /// The MPI group the plan's peer indices refer to.
    comm: &'a dyn Communicator,
    /// Staging bytes for MPI without CUDA support.
    staging: usize,
    /// Performance-report key and bytes of the operation.
    key: &'a dyn Fn() -> SampleKey,
    bytes: f64,
    /// The library's stream and events, where a sliced exchange (NCCL or host-staged
    /// MPI) runs.
    pipe: Option<&'a Pipe>,
}

fn check_len(what: &str, b: Buf, cells: i64, elem: usize) -> Result<()> {
    let need = cells as usize * elem;
    if b.len() < need {
        return Err(Error::InvalidUsage(format!(
            "{what}: expected at least {need} bytes ({cells} elements of {elem} bytes), got {}",
            b.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;
    use crate::plan::testing::oracle as fill;
    use crate::plan::Layout;

    fn as_buf(v: &mut [u64]) -> Buf {
        Buf::from_slice(bytemuck_words(v))
    }

    fn roundtrip(
        gdims: [i32; 3],
        pdims: [i32; 2],
        backend: TransposeBackend,
        contiguous: [bool; 3],
        in_place: bool,
        slice_bytes: Option<i64>,
    ) {
        let n = (pdims[0] * pdims[1]) as usize;
        mock::run(n, |c| {
            let h = Handle::new(c.split(0, c.rank() as i32).unwrap(), false);
            let cfg = GridConfig {
                gdims,
                pdims,
                transpose_comm_backend: backend as i32,
                transpose_axis_contiguous: contiguous,
                ..Default::default()
            };
            let mut g = h.create_grid(&cfg, MemorySpace::Host).unwrap();
            g.slice_bytes = slice_bytes;
            let gd = g.grid().gdims;
            for d in Direction::ALL {
                let lay = TransposeLayouts {
                    input_halo: [1, 0, 2],
                    output_padding: [0, 1, 1],
                    ..Default::default()
                };
                let lay = if in_place {
                    TransposeLayouts::default()
                } else {
                    lay
                };
                let (a, b) = d.axes();
                let pi = g
                    .grid()
                    .pencil_info(a as i64, g.rank(), lay.input_halo, lay.input_padding)
                    .unwrap();
                let po = g
                    .grid()
                    .pencil_info(b as i64, g.rank(), lay.output_halo, lay.output_padding)
                    .unwrap();
                let mut input = fill(&pi, gd, u64::MAX);
                let expect = fill(&po, gd, u64::MAX - 1);
                let before = input.clone();
                let out = if in_place {
                    input.resize(pi.size.max(po.size) as usize, 0);
                    let buf = as_buf(&mut input);
                    g.transpose_host(d, &lay, DataType::Double, buf, buf, None)
                        .unwrap();
                    input.truncate(po.size as usize);
                    input
                } else {
                    let mut out = vec![u64::MAX - 1; po.size as usize];
                    g.transpose_host(
                        d,
                        &lay,
                        DataType::Double,
                        as_buf(&mut input),
                        as_buf(&mut out),
                        None,
                    )
                    .unwrap();
                    assert_eq!(input, before, "{d:?} modified its input");
                    out
                };
                assert_eq!(out, expect, "{d:?} rank {} {backend:?}", g.rank());
            }
            g.destroy().unwrap();
        });
    }

    #[test]
    fn transposes_all_backends_on_mock() {
        for backend in [
            TransposeBackend::MpiP2p,
            TransposeBackend::MpiP2pPl,
            TransposeBackend::MpiA2a,
            TransposeBackend::Direct,
        ] {
            for (gdims, pdims) in [
                ([9, 10, 11], [2, 2]),
                ([5, 7, 3], [3, 1]),
                ([8, 8, 8], [1, 2]),
                ([4, 5, 6], [1, 1]),
            ] {
                for contiguous in [[false; 3], [true; 3], [true, false, true]] {
                    for in_place in [false, true] {
                        roundtrip(gdims, pdims, backend, contiguous, in_place, None);
                        if backend == TransposeBackend::Direct {
                            // Slices of two cells: many slices per chunk.
                            roundtrip(gdims, pdims, backend, contiguous, in_place, Some(16));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn mismatched_configs_fail_on_every_rank() {
        let res = mock::run(3, |c| {
            let h = Handle::new(c.split(0, c.rank() as i32).unwrap(), false);
            let cfg = GridConfig {
                gdims: [4, 4, 4 + (c.rank() == 1) as i32],
                pdims: [3, 1],
                ..Default::default()
            };
            h.create_grid(&cfg, MemorySpace::Host).err()
        });
        assert!(res
            .iter()
            .all(|e| matches!(e, Some(Error::InvalidUsage(_)))));
    }

    #[test]
    fn explicit_workspace_too_small() {
        mock::run(2, |c| {
            let h = Handle::new(c.split(0, c.rank() as i32).unwrap(), false);
            let cfg = GridConfig {
                gdims: [4, 4, 4],
                pdims: [2, 1],
                ..Default::default()
            };
            let g = h.create_grid(&cfg, MemorySpace::Host).unwrap();
            let mut a = vec![0u64; 64];
            let mut b = vec![0u64; 64];
            let mut w = vec![0u64; 4];
            let r = g.transpose_host(
                Direction::XToY,
                &TransposeLayouts::default(),
                DataType::Double,
                as_buf(&mut a),
                as_buf(&mut b),
                Some(as_buf(&mut w)),
            );
            assert!(matches!(r, Err(Error::InvalidUsage(_))));
        });
    }

    /// Reference §5 check: after updating dims 0, 1, 2 every non-padding cell holds the
    /// index of its (periodically wrapped) global point, or the sentinel where the point
    /// lies beyond a non-periodic boundary.
    fn halo_case(
        pdims: [i32; 2],
        axis: usize,
        periods: [bool; 3],
        backend: HaloBackend,
        slice_bytes: Option<i64>,
    ) {
        let n = (pdims[0] * pdims[1]) as usize;
        let halo = [1, 2, 1];
        let padding = [1, 0, 2];
        mock::run(n, |c| {
            let h = Handle::new(c.split(0, c.rank() as i32).unwrap(), false);
            let cfg = GridConfig {
                gdims: [9, 10, 11],
                pdims,
                halo_comm_backend: backend as i32,
                transpose_axis_contiguous: [true, false, true],
                ..Default::default()
            };
            let mut g = h.create_grid(&cfg, MemorySpace::Host).unwrap();
            g.slice_bytes = slice_bytes;
            let gd = g.grid().gdims;
            let info = g
                .grid()
                .pencil_info(axis as i64, g.rank(), halo, padding)
                .unwrap();
            let sentinel = u64::MAX;
            let mut data = fill(&info, gd, sentinel);
            for dim in 0..3 {
                let spec = HaloSpec {
                    axis,
                    dim,
                    halo,
                    periods,
                    padding,
                };
                g.update_halos_host(&spec, DataType::Double, as_buf(&mut data), None)
                    .unwrap();
            }
            let l = Layout::of_pencil(&info);
            let stored: [i64; 3] = std::array::from_fn(|gax| info.stored_extent(gax));
            for k in 0..stored[info.order[2]] {
                for j in 0..stored[info.order[1]] {
                    for i in 0..stored[info.order[0]] {
                        let mut local = [0i64; 3];
                        local[info.order[0]] = i;
                        local[info.order[1]] = j;
                        local[info.order[2]] = k;
                        let mut p: [i64; 3] = std::array::from_fn(|a| l.origin[a] + local[a]);
                        let at = data[l.offset(p) as usize];
                        let mut expect = None;
                        if (0..3).all(|a| local[a] < stored[a] - padding[a]) {
                            let mut inside = true;
                            for a in 0..3 {
                                if p[a] < 0 || p[a] >= gd[a] {
                                    if periods[a] {
                                        p[a] = p[a].rem_euclid(gd[a]);
                                    } else {
                                        inside = false;
                                    }
                                }
                            }
                            if inside {
                                expect = Some((p[0] + gd[0] * (p[1] + gd[1] * p[2])) as u64);
                            }
                        }
                        assert_eq!(
                            at,
                            expect.unwrap_or(sentinel),
                            "rank {} cell {local:?}",
                            g.rank()
                        );
                    }
                }
            }
            g.destroy().unwrap();
        });
    }

    #[test]
    fn halo_updates_on_mock() {
        for backend in [
            HaloBackend::Mpi,
            HaloBackend::MpiBlocking,
            HaloBackend::Direct,
        ] {
            for pdims in [[2, 2], [1, 2], [3, 1], [1, 1]] {
                for axis in 0..3 {
                    for periods in [[false; 3], [true; 3], [true, false, true]] {
                        halo_case(pdims, axis, periods, backend, None);
                        if backend == HaloBackend::Direct {
                            // Slices of two cells: many slices per face.
                            halo_case(pdims, axis, periods, backend, Some(16));
                        }
                    }
                }
            }
        }
    }
}
