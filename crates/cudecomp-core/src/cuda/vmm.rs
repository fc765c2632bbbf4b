//! Device arrays that other processes of the node can map (`GridDesc.empty_pencil` on
//! DIRECT grids of the GPU variant): allocations made through the driver's virtual memory
//! management, exportable as POSIX descriptors. Unlike legacy CUDA IPC, an importer's
//! mapping holds the physical memory: the owner may free its array while a peer still
//! has it mapped, and the memory goes when the last mapping does. Descriptors travel
//! through [`crate::mem::fdpass`].

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;

use super::{check, Device};
use crate::mem::fdpass::{self, Endpoint};
use crate::mem::registry::{self, Mapped, Registry};
use crate::mem::Buf;
use crate::{Error, Result};

fn properties(ordinal: i32) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes:
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal,
        },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// `bytes` rounded up to the device's recommended granularity.
fn rounded(ordinal: i32, bytes: usize) -> Result<usize> {
    let prop = properties(ordinal);
    let mut g: usize = 0;
    check(
        // SAFETY: writes one size_t.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        }
        .result(),
        "cuMemGetAllocationGranularity",
    )?;
    let g = g.max(1);
    Ok(bytes.max(1).div_ceil(g) * g)
}

/// A physical allocation mapped at a reserved range of this process, readable and
/// writable from `device`; unmapped and released on drop (after the device is idle: work
/// still queued on any stream may use it).
struct Mapping {
    ptr: sys::CUdeviceptr,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
    device: Arc<Device>,
}

// SAFETY: device addresses and handles may be used from any thread with the context bound.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `handle` (of `size` bytes, a multiple of the granularity; released on
    /// failure) for `device`.
    fn new(
        device: &Arc<Device>,
        handle: sys::CUmemGenericAllocationHandle,
        size: usize,
    ) -> Result<Mapping> {
        let mut m = Mapping {
            ptr: 0,
            size,
            handle,
            device: device.clone(),
        };
        check(
            // SAFETY: reserves address space only.
            unsafe { sys::cuMemAddressReserve(&mut m.ptr, size, 0, 0, 0) }.result(),
            "cuMemAddressReserve",
        )?;
        check(
            // SAFETY: maps the whole allocation at the range just reserved.
            unsafe { sys::cuMemMap(m.ptr, size, 0, handle, 0) }.result(),
            "cuMemMap",
        )?;
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: device.ordinal,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        check(
            // SAFETY: the range is mapped; one descriptor.
            unsafe { sys::cuMemSetAccess(m.ptr, size, &access, 1) }.result(),
            "cuMemSetAccess",
        )?;
        Ok(m)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.device.bind().is_err() {
            return;
        }
        // SAFETY: unmaps what `new` mapped (steps that failed there are undone alike),
        // once no queued work can touch it.
        unsafe {
            let _ = sys::cuCtxSynchronize();
            if self.ptr != 0 {
                let _ = sys::cuMemUnmap(self.ptr, self.size);
                let _ = sys::cuMemAddressFree(self.ptr, self.size);
            }
            let _ = sys::cuMemRelease(self.handle);
        }
    }
}

impl Mapped for Mapping {
    fn base(&self) -> *mut u8 {
        self.ptr as usize as *mut u8
    }
    fn bytes(&self) -> usize {
        self.size
    }
}

/// Serial numbers of this process's device arrays (the keys their descriptors are
/// offered under).
static NEXT: AtomicU64 = AtomicU64::new(1);

/// What peers need to map a device array: where to ask for its descriptor, its key and
/// size, and where the buffer asked about lies in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceArrayRef {
    at: Endpoint,
    serial: u64,
    /// Bytes of the whole allocation.
    pub len: usize,
    /// Byte offset of the buffer asked about.
    pub offset: usize,
}

/// Bytes of an encoded [`DeviceArrayRef`] (fixed: it travels in fixed-size records).
pub(crate) const DEVICE_ARRAY_REF_BYTES: usize = 32;

impl DeviceArrayRef {
    /// The fixed-size record peers decode with [`DeviceArrayRef::decode`].
    pub fn encode(&self) -> [u8; DEVICE_ARRAY_REF_BYTES] {
        let mut v = [0u8; DEVICE_ARRAY_REF_BYTES];
        v[0..4].copy_from_slice(&self.at.pid.to_le_bytes());
        v[4..8].copy_from_slice(&self.at.nonce.to_le_bytes());
        v[8..16].copy_from_slice(&self.serial.to_le_bytes());
        v[16..24].copy_from_slice(&(self.len as u64).to_le_bytes());
        v[24..32].copy_from_slice(&(self.offset as u64).to_le_bytes());
        v
    }

    /// The reference in `v`; `None` for a record of zeros (no array) or a short one.
    pub fn decode(v: &[u8]) -> Option<DeviceArrayRef> {
        let w4 = |i: usize| Some(u32::from_le_bytes(v.get(i..i + 4)?.try_into().ok()?));
        let w8 = |i: usize| Some(u64::from_le_bytes(v.get(i..i + 8)?.try_into().ok()?));
        let serial = w8(8)?;
        (serial != 0).then_some(DeviceArrayRef {
            at: Endpoint {
                pid: w4(0)?,
                nonce: w4(4)?,
            },
            serial,
            len: w8(16)? as usize,
            offset: w8(24)? as usize,
        })
    }

    fn id(&self) -> String {
        format!("{}-{:08x}-{}", self.at.pid, self.at.nonce, self.serial)
    }
}

/// Device arrays of this process that peers may map.
static ARRAYS: Registry<DeviceArrayRef> = Registry::new();

/// Device memory handed to the user as an array, registered so that DIRECT transposes of
/// other ranks can write straight into it. Unregistered on drop; peers that mapped it
/// keep the memory until they unmap it.
pub struct DeviceArray {
    map: Mapping,
    serial: u64,
}

impl DeviceArray {
    /// `bytes` (rounded up to the allocation granularity) of device memory on `device`,
    /// zero-filled and exported.
    pub fn new(device: &Arc<Device>, bytes: usize) -> Result<DeviceArray> {
        device.bind()?;
        let size = rounded(device.ordinal, bytes)?;
        let prop = properties(device.ordinal);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        check(
            // SAFETY: creates a physical allocation described by `prop`.
            unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }.result(),
            "cuMemCreate (exportable device memory)",
        )?;
        let map = Mapping::new(device, handle, size)?;
        check(
            // SAFETY: the whole mapped range.
            unsafe { sys::cuMemsetD8_v2(map.ptr, 0, size) }.result(),
            "cuMemsetD8",
        )?;
        // The zeros are there before any stream, blocking or not, uses the array.
        check(
            // SAFETY: waits for the legacy default stream the memset ran on.
            unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }.result(),
            "cuStreamSynchronize",
        )?;
        let mut raw: libc::c_int = -1;
        check(
            // SAFETY: writes one int (the new descriptor, owned by this process).
            unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut raw as *mut libc::c_int).cast(),
                    handle,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    0,
                )
            }
            .result(),
            "cuMemExportToShareableHandle",
        )?;
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        let at = fdpass::offer(serial, fd)?;
        let r = DeviceArrayRef {
            at,
            serial,
            len: size,
            offset: 0,
        };
        ARRAYS.insert(map.ptr as usize, size, r);
        Ok(DeviceArray { map, serial })
    }

    /// Device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.map.ptr
    }

    /// Bytes allocated (at least those asked for).
    pub fn len(&self) -> usize {
        self.map.size
    }

    /// Never true (at least one granule is allocated).
    pub fn is_empty(&self) -> bool {
        self.map.size == 0
    }

    /// How peers find `buf` when it lies inside a device array of this process.
    pub fn find(buf: Buf) -> Option<DeviceArrayRef> {
        ARRAYS
            .find(buf)
            .map(|(r, offset)| DeviceArrayRef { offset, ..r })
    }
}

impl Drop for DeviceArray {
    fn drop(&mut self) {
        ARRAYS.remove(self.map.ptr as usize);
        fdpass::withdraw(self.serial);
    }
}

/// Peers' device arrays mapped into this process.
pub(crate) type PeerDeviceArrays = registry::PeerArrays<PeerMapping>;

/// A peer's device array imported here.
pub(crate) struct PeerMapping(Mapping);

impl Mapped for PeerMapping {
    fn base(&self) -> *mut u8 {
        self.0.base()
    }
    fn bytes(&self) -> usize {
        self.0.bytes()
    }
}

impl PeerDeviceArrays {
    /// The buffer of `bytes` that rank `r` described with `a`, mapped here for `device`.
    pub(crate) fn map_device(
        &mut self,
        device: &Arc<Device>,
        r: usize,
        a: &DeviceArrayRef,
        bytes: usize,
    ) -> Result<Buf> {
        let open = || -> Result<PeerMapping> {
            let fd = fdpass::fetch(a.at, a.serial)?;
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            let raw = fd.as_raw_fd();
            check(
                // SAFETY: the descriptor stays open during the call; the driver takes its
                // own reference to the allocation.
                unsafe {
                    sys::cuMemImportFromShareableHandle(
                        &mut handle,
                        raw as usize as *mut std::ffi::c_void,
                        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    )
                }
                .result(),
                "cuMemImportFromShareableHandle",
            )
            .map_err(|e| Error::Internal(format!("DIRECT: importing rank {r}'s array: {e}")))?;
            drop(fd);
            Mapping::new(device, handle, a.len).map(PeerMapping)
        };
        // An evicted mapping is unmapped after the device is idle (see `Mapping`).
        self.map(r, &a.id(), a.offset, bytes, open, || Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_references_round_trip_and_zeros_mean_none() {
        let r = DeviceArrayRef {
            at: Endpoint {
                pid: 4242,
                nonce: 0xdead_beef,
            },
            serial: 9,
            len: 1 << 21,
            offset: 4096,
        };
        assert_eq!(DeviceArrayRef::decode(&r.encode()), Some(r));
        assert_eq!(DeviceArrayRef::decode(&[0u8; DEVICE_ARRAY_REF_BYTES]), None);
        assert_eq!(DeviceArrayRef::decode(&[1u8; 12]), None);
    }
}
