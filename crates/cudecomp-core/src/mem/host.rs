//! Host memory: the strided 3-D copy kernel that packs, unpacks, permutes and copies
//! halo faces.

use super::{Buf, Mover};
use crate::plan::Copy3;
use crate::{Error, Result};

/// Moves bytes in host memory, synchronously.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostMover;

impl Mover for HostMover {
    fn copy(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
        copy3(elem, src, dst, c)
    }
}

/// Copies `c` (offsets and strides in elements of `elem` bytes) from `src` to `dst`,
/// after checking that every touched element lies inside both buffers.
pub fn copy3(elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
    if !super::check_copy(elem, src, dst, c)? {
        return Ok(());
    }
    // SAFETY: all touched elements are inside the buffers (checked above); sources and
    // destinations of one copy never overlap (plans route in-place work through the workspace).
    unsafe {
        match elem {
            4 => kernel::<u32>(src.ptr, dst.ptr, c),
            8 => kernel::<u64>(src.ptr, dst.ptr, c),
            16 => kernel::<[u64; 2]>(src.ptr, dst.ptr, c),
            _ => return Err(Error::Internal(format!("element size {elem}"))),
        }
    }
    Ok(())
}

/// Edge of the square tiles used when the fastest axis changes between source and
/// destination: 32 x 32 elements of 16 bytes still fit L1 twice over.
const TILE: i64 = 32;

/// # Safety
/// Every element described by `c` must be inside the allocations at `src` and `dst`,
/// which must not overlap.
unsafe fn kernel<T: Copy>(src: *const u8, dst: *mut u8, c: &Copy3) {
    let e = std::mem::size_of::<T>() as isize;
    let ext = c.extent;
    // Walk the destination in memory order; unit-extent axes go outermost.
    let (ax, src_fast) = c.walk_order();
    let inner = ax[0];
    let ss = c.src_strides.map(|s| s as isize * e);
    let ds = c.dst_strides.map(|s| s as isize * e);
    // SAFETY (whole body): offsets stay within the extents checked by the caller.
    unsafe {
        let sp = src.offset(c.src_offset as isize * e);
        let dp = dst.offset(c.dst_offset as isize * e);
        let at = |p: *const u8, s: &[isize; 3], i: [i64; 3]| {
            p.offset(i[0] as isize * s[0] + i[1] as isize * s[1] + i[2] as isize * s[2])
        };
        if src_fast == inner {
            let dense = c.src_strides[inner] == 1 && c.dst_strides[inner] == 1;
            let n = ext[inner];
            let (o1, o2) = (ax[1], ax[2]);
            for k in 0..ext[o2] {
                for j in 0..ext[o1] {
                    let mut idx = [0i64; 3];
                    idx[o1] = j;
                    idx[o2] = k;
                    let s = at(sp, &ss, idx);
                    let d = at(dp, &ds, idx).cast_mut();
                    if dense {
                        std::ptr::copy_nonoverlapping(s, d, n as usize * e as usize);
                    } else {
                        for i in 0..n as isize {
                            let v = std::ptr::read_unaligned(s.offset(i * ss[inner]).cast::<T>());
                            std::ptr::write_unaligned(d.offset(i * ds[inner]).cast::<T>(), v);
                        }
                    }
                }
            }
        } else {
            // The fastest axis changes: walk square tiles of the (destination-fast,
            // source-fast) plane so both sides stay in cache.
            let other = 3 - inner - src_fast;
            for k in 0..ext[other] {
                let mut jb = 0;
                while jb < ext[src_fast] {
                    let je = (jb + TILE).min(ext[src_fast]);
                    let mut ib = 0;
                    while ib < ext[inner] {
                        let ie = (ib + TILE).min(ext[inner]);
                        for j in jb..je {
                            let mut idx = [0i64; 3];
                            idx[other] = k;
                            idx[src_fast] = j;
                            idx[inner] = ib;
                            let s = at(sp, &ss, idx);
                            let d = at(dp, &ds, idx).cast_mut();
                            for i in 0..(ie - ib) as isize {
                                let v =
                                    std::ptr::read_unaligned(s.offset(i * ss[inner]).cast::<T>());
                                std::ptr::write_unaligned(d.offset(i * ds[inner]).cast::<T>(), v);
                            }
                        }
                        ib = ie;
                    }
                    jb = je;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Box3;
    use crate::mem::Buf;
    use crate::plan::Layout;

    fn run(elem: usize, src_order: [usize; 3], dst_order: [usize; 3]) {
        let b = Box3 {
            lo: [0, 0, 0],
            len: [37, 5, 41],
        };
        let n = b.volume() as usize;
        let sl = Layout::packed(&b, src_order, 0);
        let dl = Layout::packed(&b, dst_order, 0);
        let mut src = vec![0u8; n * elem];
        for x in 0..37 {
            for y in 0..5 {
                for z in 0..41 {
                    let o = sl.offset([x, y, z]) as usize * elem;
                    let v = (x + 100 * y + 10000 * z) as u32;
                    src[o..o + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let mut dst = vec![0u8; n * elem];
        let c = Copy3::between(&b, &sl, &dl);
        copy3(
            elem,
            Buf::from_slice(&mut src),
            Buf::from_slice(&mut dst),
            &c,
        )
        .unwrap();
        for x in 0..37 {
            for y in 0..5 {
                for z in 0..41 {
                    let o = dl.offset([x, y, z]) as usize * elem;
                    let v = (x + 100 * y + 10000 * z) as u32;
                    assert_eq!(&dst[o..o + 4], &v.to_le_bytes());
                }
            }
        }
    }

    #[test]
    fn permutations_all_element_sizes() {
        let perms = [
            [0, 1, 2],
            [1, 2, 0],
            [2, 0, 1],
            [0, 2, 1],
            [2, 1, 0],
            [1, 0, 2],
        ];
        for elem in [4, 8, 16] {
            for s in perms {
                for d in perms {
                    run(elem, s, d);
                }
            }
        }
    }

    #[test]
    fn out_of_bounds_is_rejected() {
        let b = Box3 {
            lo: [0; 3],
            len: [4, 4, 4],
        };
        let l = Layout::packed(&b, [0, 1, 2], 0);
        let mut small = vec![0u8; 63 * 4];
        let mut big = vec![0u8; 64 * 4];
        let c = Copy3::between(&b, &l, &l);
        assert!(copy3(
            4,
            Buf::from_slice(&mut big),
            Buf::from_slice(&mut small),
            &c
        )
        .is_err());
    }
}
