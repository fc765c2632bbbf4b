//! Host memory: the strided 3-D copy kernel that packs, unpacks, permutes and copies
//! halo faces.

use super::{Buf, Mover};
use crate::plan::Copy3;
use crate::{Error, Result};

/// Moves bytes in host memory, synchronously: large copies are cut into parts that run
/// on up to `threads` threads, and rows written into the operation's output may bypass
/// the cache.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostMover {
    threads: usize,
    /// Streaming stores are allowed (`CUDECOMP_HOST_STREAMING`).
    streaming: bool,
    /// The operation's output when large enough to write around the cache.
    streamed: Option<Buf>,
}

impl Default for HostMover {
    fn default() -> Self {
        HostMover::new(1)
    }
}

/// Copies smaller than this per thread are not worth waking another thread for.
const PART_MIN_BYTES: usize = 128 << 10;

/// Outputs of at least this size are written with streaming stores: they cannot stay in a
/// core's cache anyway, and skipping the read-for-ownership of every destination line
/// saves a third of the memory traffic of a copy.
const STREAM_MIN_BYTES: usize = 8 << 20;

impl HostMover {
    /// A mover using up to `threads` threads (at least one) for large copies.
    pub(crate) fn new(threads: usize) -> Self {
        HostMover {
            threads: threads.max(1),
            streaming: true,
            streamed: None,
        }
    }

    /// The same mover, allowed to use streaming stores or not.
    pub(crate) fn streaming(self, allowed: bool) -> Self {
        HostMover {
            streaming: allowed,
            ..self
        }
    }

    /// The same mover, writing rows into `output` with streaming stores when `output` is
    /// large (and streaming stores are allowed).
    pub(crate) fn streaming_into(self, output: Buf) -> Self {
        let on = output.len() >= STREAM_MIN_BYTES && self.streaming;
        HostMover {
            streamed: on.then_some(output),
            ..self
        }
    }

    /// Whether rows written into `dst` bypass the cache: `dst` is any part of the
    /// streamed output (a batch run field after field writes each field's slice of it).
    fn streams_into(&self, dst: &Buf) -> bool {
        self.streamed.is_some_and(|o| o.overlaps(dst))
    }
}

impl Mover for HostMover {
    fn copy(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
        if !super::check_copy(elem, src, dst, c)? {
            return Ok(());
        }
        let stream = self.streams_into(&dst);
        let bytes = c.cells() as usize * elem;
        // Parts run concurrently: only where what the copy reads and what it writes lie in
        // separate byte ranges, so that no thread can read what another one writes even
        // when the caller breaks the disjointness contract (see `copy3`).
        let parts = if spans_meet(elem, src, dst, c) {
            1
        } else {
            (bytes / PART_MIN_BYTES).clamp(1, self.threads)
        };
        if parts == 1 {
            return copy_checked(elem, src, dst, c, stream);
        }
        let pieces = c.split(parts);
        let pool = pool(self.threads)?;
        let results: Vec<Result<()>> = pool.install(|| {
            use rayon::prelude::*;
            pieces
                .par_iter()
                .map(|p| copy_checked(elem, src, dst, p, stream))
                .collect()
        });
        results.into_iter().collect()
    }
}

/// The process's copy threads, created on first use with `threads` workers (later requests
/// for more reuse it: parts then queue on the existing workers).
fn pool(threads: usize) -> Result<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    if let Some(p) = POOL.get() {
        return Ok(p);
    }
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("cudecomp-copy-{i}"))
        .build()
        .map_err(|e| Error::Internal(format!("starting {threads} copy threads: {e}")))?;
    Ok(POOL.get_or_init(|| built))
}

/// True when the byte range `c` reads from `src` and the one it writes in `dst` meet.
fn spans_meet(elem: usize, src: Buf, dst: Buf, c: &Copy3) -> bool {
    let e = elem as i64;
    let span = |b: Buf, lo: i64, hi: i64| (b.ptr() as i64 + lo * e, b.ptr() as i64 + hi * e);
    let (s0, s1) = span(src, c.src_start(), c.src_end());
    let (d0, d1) = span(dst, c.dst_start(), c.dst_end());
    s0 < d1 && d0 < s1
}

/// Copies `c` (offsets and strides in elements of `elem` bytes) from `src` to `dst`,
/// after checking that every touched element lies inside both buffers.
///
/// `src` and `dst` may be the same buffer: the contract is that the elements `c` reads
/// and the elements it writes are disjoint, as in a periodic halo wrap, which copies
/// interior cells into the halo of the same array. Where they are not, the values written
/// are unspecified (the copy order is), but memory safety holds: rows are moved with
/// overlap-tolerant copies, and [`HostMover`] runs such copies on one thread.
#[cfg(test)]
fn copy3(elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
    if !super::check_copy(elem, src, dst, c)? {
        return Ok(());
    }
    copy_checked(elem, src, dst, c, false)
}

/// [`copy3`] after the bounds check; `stream` writes long dense rows around the cache.
fn copy_checked(elem: usize, src: Buf, dst: Buf, c: &Copy3, stream: bool) -> Result<()> {
    // SAFETY: all touched elements are inside the buffers (checked by the caller), which
    // their creators keep valid for the operation (`Buf::new`); the kernel tolerates reads
    // and writes of the same bytes, and concurrent parts (`HostMover::copy`) write
    // disjoint cells and never read the byte range any part writes.
    unsafe {
        match elem {
            4 => kernel::<u32>(src.ptr(), dst.ptr(), c, stream),
            8 => kernel::<u64>(src.ptr(), dst.ptr(), c, stream),
            16 => kernel::<[u64; 2]>(src.ptr(), dst.ptr(), c, stream),
            _ => return Err(Error::Internal(format!("element size {elem}"))),
        }
    }
    Ok(())
}

/// Edge of the square tiles used when the fastest axis changes between source and
/// destination: 32 x 32 elements of 16 bytes still fit L1 twice over.
const TILE: i64 = 32;

/// # Safety
/// Every element described by `c` must be inside the allocations at `src` and `dst`, valid
/// for reads and writes, with no other thread writing what this copy reads or touching
/// what it writes. The two may be the same allocation; where written elements are also
/// read, the values written depend on the copy order.
unsafe fn kernel<T: Copy>(src: *const u8, dst: *mut u8, c: &Copy3, stream: bool) {
    let e = std::mem::size_of::<T>() as isize;
    let ext = c.extent;
    // Walk the destination in memory order; unit-extent axes go outermost.
    let (ax, src_fast) = c.walk_order();
    let inner = ax[0];
    let ss = c.src_strides.map(|s| s as isize * e);
    let ds = c.dst_strides.map(|s| s as isize * e);
    // SAFETY: (whole body) every offset stays within the extents the caller checked; all
    // accesses go through raw pointers, unaligned, and rows are moved with overlap-tolerant
    // copies, so reads and writes of the same bytes are well defined.
    unsafe {
        let sp = src.offset(c.src_offset as isize * e);
        let dp = dst.offset(c.dst_offset as isize * e);
        let at = |p: *const u8, s: &[isize; 3], i: [i64; 3]| {
            p.offset(i[0] as isize * s[0] + i[1] as isize * s[1] + i[2] as isize * s[2])
        };
        if src_fast == inner {
            let dense = c.src_strides[inner] == 1 && c.dst_strides[inner] == 1;
            let n = ext[inner];
            let stream = stream && n * e as i64 >= STREAM_MIN_ROW;
            let (o1, o2) = (ax[1], ax[2]);
            for k in 0..ext[o2] {
                for j in 0..ext[o1] {
                    let mut idx = [0i64; 3];
                    idx[o1] = j;
                    idx[o2] = k;
                    let s = at(sp, &ss, idx);
                    let d = at(dp, &ds, idx).cast_mut();
                    if dense && stream {
                        copy_streaming(s, d, n as usize * e as usize);
                    } else if dense {
                        std::ptr::copy(s, d, n as usize * e as usize);
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
        #[cfg(target_arch = "x86_64")]
        if stream {
            // Streaming stores are weakly ordered: fence them before whatever publishes
            // the copy to another rank.
            std::arch::x86_64::_mm_sfence();
        }
    }
}

/// Rows shorter than a cache line are copied through the cache even in streaming mode.
/// Short rows still stream well when they fill whole lines (measured; see the benchmark record).
const STREAM_MIN_ROW: i64 = 64;

/// Copies `n` bytes with stores that bypass the cache (no read-for-ownership of the
/// destination lines).
///
/// # Safety
/// `s..s+n` must be readable and `d..d+n` writable, with no other thread writing the one
/// or touching the other. Where the two overlap, the bytes written depend on the copy
/// order.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(s: *const u8, d: *mut u8, n: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = d.align_offset(16).min(n);
    // SAFETY: every access stays inside the ranges the caller vouches for, through raw
    // pointers (unaligned loads; the streamed stores are 16-byte aligned after `head`).
    unsafe {
        // Rows are often aligned and a multiple of 16 bytes: no calls for empty ends.
        if head > 0 {
            std::ptr::copy(s, d, head);
        }
        let mut i = head;
        while i + 64 <= n {
            let v0 = _mm_loadu_si128(s.add(i).cast::<__m128i>());
            let v1 = _mm_loadu_si128(s.add(i + 16).cast::<__m128i>());
            let v2 = _mm_loadu_si128(s.add(i + 32).cast::<__m128i>());
            let v3 = _mm_loadu_si128(s.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(d.add(i).cast::<__m128i>(), v0);
            _mm_stream_si128(d.add(i + 16).cast::<__m128i>(), v1);
            _mm_stream_si128(d.add(i + 32).cast::<__m128i>(), v2);
            _mm_stream_si128(d.add(i + 48).cast::<__m128i>(), v3);
            i += 64;
        }
        while i + 16 <= n {
            _mm_stream_si128(
                d.add(i).cast::<__m128i>(),
                _mm_loadu_si128(s.add(i).cast::<__m128i>()),
            );
            i += 16;
        }
        if i < n {
            std::ptr::copy(s.add(i), d.add(i), n - i);
        }
    }
}

/// Other architectures copy through the cache.
///
/// # Safety
/// As for the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_streaming(s: *const u8, d: *mut u8, n: usize) {
    // SAFETY: the caller vouches for both ranges; `copy` tolerates their overlap.
    unsafe { std::ptr::copy(s, d, n) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Box3;
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
            crate::mem::test_buf(&mut src),
            crate::mem::test_buf(&mut dst),
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

    /// Threaded and streamed copies (rows of 1 KiB and more, misaligned destinations
    /// included) write exactly what the single-threaded cached copy writes.
    #[test]
    fn threaded_streaming_copies_match() {
        let b = Box3 {
            lo: [0, 0, 0],
            len: [300, 40, 30],
        };
        let big = Box3 {
            lo: [0, 0, 0],
            len: [301, 40, 30],
        };
        for elem in [4, 8, 16] {
            let src_l = Layout::packed(&big, [0, 1, 2], 0);
            let mut src: Vec<u8> = (0..big.volume() as usize * elem)
                .map(|v| (v * 13 % 251) as u8)
                .collect();
            for (order, shift) in [([0, 1, 2], 1), ([0, 2, 1], 0), ([1, 0, 2], 0)] {
                let dl = Layout::packed(&b, order, shift);
                let len = (b.volume() + shift) as usize * elem;
                let c = Copy3::between(&b, &src_l, &dl);
                let mut want = vec![0u8; len];
                copy3(
                    elem,
                    crate::mem::test_buf(&mut src),
                    crate::mem::test_buf(&mut want),
                    &c,
                )
                .unwrap();
                for threads in [1, 3, 8] {
                    let mut got = vec![0u8; len];
                    let out = crate::mem::test_buf(&mut got);
                    let m = HostMover {
                        threads,
                        streaming: true,
                        streamed: Some(out),
                    };
                    m.copy(elem, crate::mem::test_buf(&mut src), out, &c)
                        .unwrap();
                    assert!(got == want, "elem {elem} order {order:?} threads {threads}");
                }
            }
        }
    }

    /// Every field's slice of a streamed output streams, as the whole output does; other
    /// buffers (the workspace) go through the cache.
    #[test]
    fn slices_of_the_streamed_output_stream() {
        let mut out = vec![0u8; STREAM_MIN_BYTES * 3];
        let mut work = vec![0u8; 64];
        let o = crate::mem::test_buf(&mut out);
        let m = HostMover::new(1).streaming_into(o);
        let field = STREAM_MIN_BYTES as i64;
        assert!(m.streams_into(&o));
        assert!(m.streams_into(&o.slice(2 * field, field).unwrap()));
        assert!(!m.streams_into(&crate::mem::test_buf(&mut work)));
        assert!(!HostMover::new(1)
            .streaming(false)
            .streaming_into(o)
            .streams_into(&o));
    }

    /// A periodic wrap's shape: the left half of every row copied onto its right half,
    /// within one buffer (interleaved spans), threads offered.
    #[test]
    fn copies_within_one_buffer() {
        let (w, h) = (128i64, 1024i64);
        let b = Box3 {
            lo: [0; 3],
            len: [w / 2, h, 1],
        };
        let l = Layout::packed(
            &Box3 {
                lo: [0; 3],
                len: [w, h, 1],
            },
            [0, 1, 2],
            0,
        );
        let c = Copy3::between(&b, &l, &l.shifted([w / 2, 0, 0]));
        let mut v: Vec<u64> = (0..(w * h) as u64).collect();
        let buf = crate::mem::test_buf(bytemuck_u8(&mut v));
        HostMover::new(4).copy(8, buf, buf, &c).unwrap();
        for y in 0..h {
            for x in 0..w {
                let from = if x < w / 2 { x } else { x - w / 2 };
                assert_eq!(v[(y * w + x) as usize], (y * w + from) as u64);
            }
        }
    }

    fn bytemuck_u8(v: &mut [u64]) -> &mut [u8] {
        let n = std::mem::size_of_val(v);
        // SAFETY: u64 has no padding and any byte pattern is a valid u8; the length covers
        // exactly the vector's elements, borrowed mutably for the result's lifetime.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), n) }
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
            crate::mem::test_buf(&mut big),
            crate::mem::test_buf(&mut small),
            &c
        )
        .is_err());
    }
}
