//! Memory spaces. Buffers are borrowed, never owned: the library moves bytes inside
//! memory that Python (NumPy, CuPy, ...) or the handle's workspace owns.

pub(crate) mod fdpass;
pub(crate) mod host;
pub(crate) mod registry;
pub(crate) mod shm;

use crate::plan::Copy3;
use crate::{Error, Result};

pub(crate) use host::HostMover;

/// A borrowed address range: host memory, or device memory when used with a device mover
/// or transport (it is then never dereferenced on the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Buf is a plain address range; whoever creates one promises (see `new`)
// that nothing else touches it while the library works on it, from whatever thread.
unsafe impl Send for Buf {}
// SAFETY: as above.
unsafe impl Sync for Buf {}

impl Buf {
    /// Wraps `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes (in its memory space) for as long
    /// as the returned value (or a copy) is used, and must not be accessed by anything else
    /// meanwhile, except through other `Buf`s handed to the same operation.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Buf {
        Buf { ptr, len }
    }

    /// The empty buffer, for operations that need none (nothing can be read or written
    /// through it, so no promise is needed).
    pub fn empty() -> Buf {
        Buf {
            ptr: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// A buffer over a mutable slice.
    ///
    /// # Safety
    /// The slice must outlive every use of the returned value (and of its copies), and be
    /// accessed by nothing else meanwhile, as for [`Buf::new`].
    pub unsafe fn from_slice(s: &mut [u8]) -> Buf {
        Buf {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    /// Start address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the two ranges share at least one byte.
    pub fn overlaps(&self, other: &Buf) -> bool {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        self.len > 0
            && other.len > 0
            && a < b.saturating_add(other.len)
            && b < a.saturating_add(self.len)
    }

    /// The sub-range `[offset, offset + len)` after checking it lies inside.
    pub fn slice(&self, offset: i64, len: i64) -> Result<Buf> {
        let ptr = self.range(offset, len)?;
        Ok(Buf {
            ptr,
            len: len as usize,
        })
    }

    /// Address of the range `[offset, offset + len)` after checking it lies inside.
    pub fn range(&self, offset: i64, len: i64) -> Result<*mut u8> {
        if offset < 0 || len < 0 || (offset + len) as u128 > self.len as u128 {
            return Err(Error::Internal(format!(
                "byte range {offset}..{} outside a buffer of {} bytes",
                offset + len,
                self.len
            )));
        }
        // SAFETY: offset is inside the buffer (checked above).
        Ok(unsafe { self.ptr.add(offset as usize) })
    }
}

/// Test helper: a buffer over a slice the test keeps alive while it uses the buffer.
#[cfg(test)]
pub(crate) fn test_buf(s: &mut [u8]) -> Buf {
    // SAFETY: test code keeps the slice alive and otherwise untouched while using the buffer.
    unsafe { Buf::from_slice(s) }
}

/// A batch's fields as one copy sees them: `count` copies of one shape, field `f`'s
/// `f * src` elements further in the source and `f * dst` in the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FieldSteps {
    /// Fields copied.
    pub count: i64,
    /// Elements from one field's source to the next.
    pub src: i64,
    /// Elements from one field's destination to the next.
    pub dst: i64,
}

impl FieldSteps {
    /// One field.
    pub(crate) const ONE: FieldSteps = FieldSteps {
        count: 1,
        src: 0,
        dst: 0,
    };

    /// `count` fields, `src` elements apart in a copy's source and `dst` in its destination.
    pub(crate) fn new(count: i64, src: i64, dst: i64) -> FieldSteps {
        FieldSteps { count, src, dst }
    }

    /// Field `f`'s copy, where field 0's is `c`.
    pub(crate) fn of(&self, c: &Copy3, f: i64) -> Copy3 {
        let mut c = *c;
        c.src_offset += f * self.src;
        c.dst_offset += f * self.dst;
        c
    }
}

/// Executes strided copies in one memory space (host: synchronously; device: enqueued
/// on a stream).
pub(crate) trait Mover: Sync {
    /// Copies `c` (offsets and strides in elements of `elem` bytes) from `src` to `dst`.
    fn copy(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()>;
    /// Copies `c` for each field of `fields` (field 0's copy is `c`): on the host one copy
    /// after another, on a device in one launch, since a batch of small fields would
    /// otherwise pay a launch per field.
    fn copy_fields(
        &self,
        elem: usize,
        src: Buf,
        dst: Buf,
        c: &Copy3,
        fields: FieldSteps,
    ) -> Result<()> {
        (0..fields.count).try_for_each(|f| self.copy(elem, src, dst, &fields.of(c, f)))
    }
    /// Copies enqueued from now on run beside a transfer that needs the same SMs and
    /// memory (`true`), or alone (`false`, the default); host movers ignore it.
    fn background(&self, _on: bool) {}
}

/// Checks that every element `c` touches lies inside `src` and `dst`; false when the copy
/// is empty.
pub(crate) fn check_copy(elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<bool> {
    if c.cells() <= 0 {
        return Ok(false);
    }
    if !matches!(elem, 4 | 8 | 16) {
        return Err(Error::Internal(format!("element size {elem}")));
    }
    let e = elem as i64;
    src.range(c.src_start() * e, (c.src_end() - c.src_start()) * e)?;
    dst.range(c.dst_start() * e, (c.dst_end() - c.dst_start()) * e)?;
    Ok(true)
}
