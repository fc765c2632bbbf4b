//! Memory a handle allocates for its caller: workspace buffers ([`Handle::malloc`]) and
//! library arrays, the pencil arrays of DIRECT grids that the node's other ranks map
//! ([`GridDesc::library_array`]), so that transposes into them copy each cell once.

use crate::config::TransposeBackend;
use crate::cuda::nvshmem::SymmetricBuffer;
use crate::cuda::vmm::DeviceArray;
use crate::cuda::{self, DeviceAlloc, Stream};
use crate::handle::{GridDesc, Handle};
use crate::mem::shm::SharedArray;
use crate::notices::notice;
use crate::{invalid, Result};

/// A workspace buffer of a GPU handle, for the `work` argument of a grid's operations.
pub enum DeviceBuffer {
    /// Device memory.
    Plain(DeviceAlloc),
    /// NVSHMEM symmetric memory (grids with an NVSHMEM backend): NVSHMEM operations to
    /// which every rank passes it exchange through it. Freed collectively, never when
    /// dropped.
    Symmetric(SymmetricBuffer),
}

impl DeviceBuffer {
    /// Device address of the first byte.
    pub fn ptr(&self) -> u64 {
        match self {
            DeviceBuffer::Plain(a) => a.ptr(),
            DeviceBuffer::Symmetric(s) => s.ptr(),
        }
    }

    /// Bytes: what was asked for (symmetric: the most any rank asked for).
    pub fn len(&self) -> usize {
        match self {
            DeviceBuffer::Plain(a) => a.bytes(),
            DeviceBuffer::Symmetric(s) => s.bytes(),
        }
    }

    /// True for a buffer of no bytes (never made by [`Handle::malloc`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True for NVSHMEM symmetric memory.
    pub fn is_symmetric(&self) -> bool {
        matches!(self, DeviceBuffer::Symmetric(_))
    }

    /// False once the memory is gone (a symmetric buffer freed at the handle's
    /// `finalize`).
    pub fn is_live(&self) -> bool {
        match self {
            DeviceBuffer::Plain(_) => true,
            DeviceBuffer::Symmetric(s) => s.live(),
        }
    }
}

/// A library array: memory the node's other ranks map (node-shared host memory, or
/// exported device memory on GPUs). Freed when dropped.
pub enum LibraryArray {
    /// Node-shared host memory (the CPU variant).
    Host(SharedArray),
    /// Exported device memory of the handle's device (its ordinal).
    Device(DeviceArray, i32),
}

impl LibraryArray {
    /// Address of the first byte (host or device).
    pub fn ptr(&self) -> u64 {
        match self {
            LibraryArray::Host(a) => a.ptr() as u64,
            LibraryArray::Device(a, _) => a.ptr(),
        }
    }

    /// Bytes allocated (device memory: rounded up to the allocation granularity).
    pub fn len(&self) -> usize {
        match self {
            LibraryArray::Host(a) => a.len(),
            LibraryArray::Device(a, _) => a.len(),
        }
    }

    /// The ordinal of the device holding device memory (`None`: host memory).
    pub fn device(&self) -> Option<i32> {
        match self {
            LibraryArray::Host(_) => None,
            LibraryArray::Device(_, d) => Some(*d),
        }
    }

    /// True for an array of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Handle {
    /// Collective: `nbytes` (more than 0) of device memory for the `work` arguments of
    /// `grid`'s operations: NVSHMEM symmetric memory of the most bytes any rank asks for
    /// when one of the grid's backends is of the NVSHMEM family, else plain device memory.
    /// InvalidUsage on a host handle (whose callers allocate host memory themselves).
    pub fn malloc(&self, grid: &GridDesc, nbytes: usize) -> Result<DeviceBuffer> {
        self.check_alive()?;
        if nbytes == 0 {
            invalid!("malloc(): expected nbytes > 0, got 0");
        }
        let dev = self.device()?;
        let g = grid.grid();
        if g.transpose_backend.is_nvshmem() || g.halo_backend.is_nvshmem() {
            return self.malloc_symmetric(nbytes).map(DeviceBuffer::Symmetric);
        }
        DeviceAlloc::new(&dev.device, nbytes).map(DeviceBuffer::Plain)
    }

    /// Releases a buffer of [`Handle::malloc`] held in `slot` (emptied once freed): a
    /// symmetric one collectively (every rank must free the same buffer: checked, and
    /// nothing is freed otherwise), a plain one once the default stream has drained (work
    /// on other streams that uses it must be done). InvalidUsage when `slot` is empty
    /// (freed already).
    pub fn free(&self, slot: &mut Option<DeviceBuffer>) -> Result<()> {
        self.check_alive()?;
        match slot {
            None => invalid!("free(): the buffer was already freed"),
            Some(DeviceBuffer::Symmetric(s)) => {
                self.free_symmetric(s)?;
            }
            Some(DeviceBuffer::Plain(_)) => {
                self.device()?.device.bind()?;
                cuda::synchronize(Stream::from_handle(0))?;
            }
        }
        *slot = None;
        Ok(())
    }
}

impl GridDesc {
    /// Memory for a pencil array of `nbytes` that peers' DIRECT transposes write straight
    /// into: when the grid's transpose backend is DIRECT and the array holds at least the
    /// settings' `shared_array_min_bytes` (a single copy gains nothing on small
    /// transposes, and each library array holds a file descriptor). `None`: ordinary
    /// memory serves, also when library memory cannot be had (a notice then says why;
    /// transposes into ordinary arrays take two copies).
    pub fn library_array(&self, nbytes: usize) -> Result<Option<LibraryArray>> {
        let direct = self.grid().transpose_backend == TransposeBackend::Direct;
        if !direct || nbytes < self.handle().settings().shared_array_min_bytes {
            return Ok(None);
        }
        let h = self.handle();
        let made = if h.is_gpu() {
            h.device().and_then(|dev| {
                DeviceArray::new(&dev.device, nbytes)
                    .map(|a| LibraryArray::Device(a, dev.device.ordinal))
            })
        } else {
            SharedArray::new(nbytes).map(LibraryArray::Host)
        };
        match made {
            Ok(a) => Ok(Some(a)),
            Err(e) => {
                notice(format!(
                    "empty_pencil: memory other ranks can map is unavailable ({e}); allocating ordinary arrays, whose DIRECT transposes take two copies"
                ));
                Ok(None)
            }
        }
    }
}
