//! Pure data-movement plans: where every chunk of a transpose or halo face comes from
//! and goes to.
//!
//! A plan is a function of (grid, rank, operation, halos, padding). Engines execute
//! plans; backends only move the bytes the plan describes. One plan serves every
//! backend and every memory space.

mod halo;
mod landing;
mod transpose;

pub use halo::HaloSpec;
pub(crate) use halo::{HaloPlan, HaloSide};
pub(crate) use landing::{landing_groups, Landing, LANDING_BYTES, MAX_LANDING_STEPS};
pub(crate) use transpose::{
    slice_box, slice_count, Side, Slicing, TransposePlan, MAX_SLICES, SLICE_BYTES, TAPER,
};
pub use transpose::{Direction, TransposeLayouts};

use crate::geometry::{Axis, Box3, PencilInfo};

/// Maps global coordinates to element offsets in a local buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Element offset of the cell at `origin`.
    pub base: i64,
    /// Global coordinate of local index 0 along each global axis.
    pub origin: [i64; 3],
    /// Element stride of each global axis.
    pub strides: [i64; 3],
}

impl Layout {
    /// The global axis whose cells are adjacent in memory (the rows' axis).
    pub fn fastest_axis(&self) -> Axis {
        (0..3).min_by_key(|&g| self.strides[g].abs()).unwrap_or(0)
    }

    /// The layout of a pencil buffer as described by its pencil info (halos and padding included).
    pub fn of_pencil(info: &PencilInfo) -> Layout {
        let mut strides = [0; 3];
        let mut s = 1;
        for k in 0..3 {
            strides[info.order[k]] = s;
            s *= info.shape[k];
        }
        let interior = info.interior();
        let origin = std::array::from_fn(|g| interior.lo[g] - info.halo_extents[g]);
        Layout {
            base: 0,
            origin,
            strides,
        }
    }

    /// A dense layout of `b` in memory order `order`, starting at element `base`.
    pub fn packed(b: &Box3, order: [Axis; 3], base: i64) -> Layout {
        let mut strides = [0; 3];
        let mut s = 1;
        for &g in &order {
            strides[g] = s;
            s *= b.len[g];
        }
        Layout {
            base,
            origin: b.lo,
            strides,
        }
    }

    /// Element offset of global point `p`.
    pub fn offset(&self, p: [i64; 3]) -> i64 {
        self.base
            + (0..3)
                .map(|g| (p[g] - self.origin[g]) * self.strides[g])
                .sum::<i64>()
    }

    /// The same memory seen with coordinates moved by `delta`: the cell this layout puts
    /// at `p + delta` is addressed as `p` in the result (used for periodic wrap copies).
    pub fn shifted(&self, delta: [i64; 3]) -> Layout {
        Layout {
            base: self.base,
            origin: std::array::from_fn(|g| self.origin[g] - delta[g]),
            strides: self.strides,
        }
    }

    /// How an array of `size` elements in this layout numbers its cells along global axis
    /// `g` (halo and padding cells counted).
    pub fn along(&self, g: Axis, size: i64) -> AxisCells {
        let stride = self.strides[g].max(1);
        let next = self.strides.into_iter().filter(|&s| s > stride).min();
        AxisCells {
            axis: g,
            stride,
            next: next.unwrap_or(i64::MAX),
            count: next.map_or((size + stride - 1) / stride, |n| n / stride),
        }
    }

    /// True when `b` occupies one dense run of this layout, laid out exactly as
    /// `Layout::packed(b, order, _)`: then it can be sent or received in place.
    pub fn holds_packed(&self, b: &Box3, order: [Axis; 3]) -> bool {
        let p = Layout::packed(b, order, 0);
        (0..3).all(|g| b.len[g] <= 1 || p.strides[g] == self.strides[g])
    }
}

/// The cells of an array along one axis (see [`Layout::along`]): the cell at element
/// offset `o` has index `(o mod next) / stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisCells {
    /// The global axis.
    pub axis: Axis,
    /// Its stride in elements.
    pub stride: i64,
    /// The next larger stride of the layout (`i64::MAX` for its slowest axis).
    pub next: i64,
    /// Cells along the axis.
    pub count: i64,
}

/// One strided 3-D copy, axes in global order: `extent[g]` cells along global axis `g`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy3 {
    /// Element offset of the first cell in the source.
    pub src_offset: i64,
    /// Element stride of each global axis in the source.
    pub src_strides: [i64; 3],
    /// Element offset of the first cell in the destination.
    pub dst_offset: i64,
    /// Element stride of each global axis in the destination.
    pub dst_strides: [i64; 3],
    /// Cells copied along each global axis.
    pub extent: [i64; 3],
}

impl Copy3 {
    /// Copies the cells of box `b` from layout `src` to layout `dst`.
    pub fn between(b: &Box3, src: &Layout, dst: &Layout) -> Copy3 {
        Copy3 {
            src_offset: src.offset(b.lo),
            src_strides: src.strides,
            dst_offset: dst.offset(b.lo),
            dst_strides: dst.strides,
            extent: b.len,
        }
    }

    /// Number of cells moved.
    pub fn cells(&self) -> i64 {
        self.extent.iter().product()
    }

    /// One past the largest element offset touched on the source side.
    pub fn src_end(&self) -> i64 {
        end(self.src_offset, &self.src_strides, &self.extent)
    }

    /// One past the largest element offset touched on the destination side.
    pub fn dst_end(&self) -> i64 {
        end(self.dst_offset, &self.dst_strides, &self.extent)
    }

    /// Smallest element offset touched on the source side.
    pub fn src_start(&self) -> i64 {
        start(self.src_offset, &self.src_strides, &self.extent)
    }

    /// Smallest element offset touched on the destination side.
    pub fn dst_start(&self) -> i64 {
        start(self.dst_offset, &self.dst_strides, &self.extent)
    }

    /// How copy kernels walk the copy: the axes in destination memory order (unit-extent
    /// axes last) and the source's fastest axis among those longer than one cell; the two
    /// fastest differ when the copy transposes.
    pub fn walk_order(&self) -> ([Axis; 3], Axis) {
        let mut ax = [0usize, 1, 2];
        ax.sort_by_key(|&g| (self.extent[g] <= 1, self.dst_strides[g].abs()));
        let src_fast = (0..3)
            .filter(|&g| self.extent[g] > 1)
            .min_by_key(|&g| self.src_strides[g].abs())
            .unwrap_or(ax[0]);
        (ax, src_fast)
    }

    /// Cuts the copy into at most `parts` copies of nearly equal size along its longest
    /// axis other than the one it walks innermost, so every part still moves whole rows;
    /// a single part when no such axis is longer than one cell.
    pub fn split(&self, parts: usize) -> Vec<Copy3> {
        let (ax, _) = self.walk_order();
        let axis = if self.extent[ax[1]] >= self.extent[ax[2]] {
            ax[1]
        } else {
            ax[2]
        };
        self.split_along(axis, parts)
    }

    /// Cuts the copy into at most `parts` copies of nearly equal size along global axis
    /// `axis` (a single part when its extent is one cell).
    pub fn split_along(&self, axis: Axis, parts: usize) -> Vec<Copy3> {
        let n = self.extent[axis].max(1);
        let parts = (parts as i64).clamp(1, n);
        (0..parts)
            .map(|p| {
                let (lo, hi) = (n * p / parts, n * (p + 1) / parts);
                let mut c = *self;
                c.extent[axis] = hi - lo;
                c.src_offset += lo * self.src_strides[axis];
                c.dst_offset += lo * self.dst_strides[axis];
                c
            })
            .collect()
    }

    /// Elements of the copy when it is one dense block on both sides (a plain memcpy).
    pub fn dense_len(&self) -> Option<i64> {
        let mut ax = [0usize, 1, 2];
        ax.sort_by_key(|&g| self.dst_strides[g].abs());
        let mut len = 1;
        for g in ax {
            if self.extent[g] > 1 {
                if self.src_strides[g] != len || self.dst_strides[g] != len {
                    return None;
                }
                len *= self.extent[g];
            }
        }
        Some(self.cells().max(0))
    }

    /// The copy as rows for the copy engine: the axes that continue each other on both
    /// sides merged into one contiguous row (unit stride on both sides), then at most two
    /// outer axes, innermost first. `None` when no axis is unit-stride on both sides (the
    /// copy transposes) or a stride is negative.
    pub fn rows(&self) -> Option<Rows> {
        if self.cells() <= 0
            || self
                .src_strides
                .iter()
                .chain(&self.dst_strides)
                .any(|&s| s < 0)
        {
            return None;
        }
        let mut ax: Vec<Axis> = (0..3).filter(|&g| self.extent[g] > 1).collect();
        ax.sort_by_key(|&g| (self.dst_strides[g], self.src_strides[g]));
        let mut width = 1;
        let mut outer: Vec<Outer> = Vec::with_capacity(2);
        for g in ax {
            let (n, s, d) = (self.extent[g], self.src_strides[g], self.dst_strides[g]);
            match outer.last_mut() {
                None if s == width && d == width => width *= n,
                None if width == 1 => return None,
                Some(o) if s == o.src_stride * o.count && d == o.dst_stride * o.count => {
                    o.count *= n
                }
                _ => outer.push(Outer {
                    count: n,
                    src_stride: s,
                    dst_stride: d,
                }),
            }
        }
        let unit = Outer {
            count: 1,
            src_stride: width,
            dst_stride: width,
        };
        Some(Rows {
            src_offset: self.src_offset,
            dst_offset: self.dst_offset,
            width,
            outer: [
                outer.first().copied().unwrap_or(unit),
                outer.get(1).copied().unwrap_or(unit),
            ],
        })
    }

    /// The part of the copy whose source cells have index `lo..hi` along the source array's
    /// axis `a`; `None` when no cell does.
    pub fn src_range(&self, a: &AxisCells, lo: i64, hi: i64) -> Option<Copy3> {
        self.range(a, lo, hi, self.src_offset, self.src_strides)
    }

    /// The part of the copy whose destination cells have index `lo..hi` along the
    /// destination array's axis `a`; `None` when no cell does.
    pub fn dst_range(&self, a: &AxisCells, lo: i64, hi: i64) -> Option<Copy3> {
        self.range(a, lo, hi, self.dst_offset, self.dst_strides)
    }

    /// [`Copy3::src_range`] or [`Copy3::dst_range`], by the side's offset and strides. A
    /// copy that does not step along `a` as the array does is wholly in the first range
    /// holding index 0.
    fn range(
        &self,
        a: &AxisCells,
        lo: i64,
        hi: i64,
        offset: i64,
        strides: [i64; 3],
    ) -> Option<Copy3> {
        let (axis, stride) = (a.axis, a.stride);
        if strides[axis] != stride || self.cells() <= 0 {
            return (lo <= 0 && hi > 0 && self.cells() > 0).then_some(*self);
        }
        let first = offset.rem_euclid(a.next) / stride;
        let (from, to) = (lo.max(first), hi.min(first + self.extent[axis]));
        if from >= to {
            return None;
        }
        let mut c = *self;
        c.extent[axis] = to - from;
        c.src_offset += (from - first) * self.src_strides[axis];
        c.dst_offset += (from - first) * self.dst_strides[axis];
        Some(c)
    }

    /// The same copy in elements of up to `max` bytes: while the axis that is unit-stride
    /// on both sides has an even extent, and offsets and the other strides are even, pairs
    /// of cells along it become single cells of twice the size. Kernels then move as many
    /// bytes with half the loads and stores (float64 chunks go as 16-byte cells).
    /// `src_addr` and `dst_addr` are the buffers' addresses: wider cells stay aligned.
    pub fn widened(&self, elem: usize, max: usize, src_addr: u64, dst_addr: u64) -> (usize, Copy3) {
        let mut c = *self;
        let mut e = elem;
        let even = |v: i64| v % 2 == 0;
        while e * 2 <= max {
            let Some(g) =
                (0..3).find(|&g| c.extent[g] > 1 && c.src_strides[g] == 1 && c.dst_strides[g] == 1)
            else {
                break;
            };
            let w = 2 * e as u64;
            let others_even = (0..3)
                .filter(|&a| a != g && c.extent[a] > 1)
                .all(|a| even(c.src_strides[a]) && even(c.dst_strides[a]));
            if !(others_even
                && even(c.extent[g])
                && even(c.src_offset)
                && even(c.dst_offset)
                && src_addr % w == 0
                && dst_addr % w == 0)
            {
                break;
            }
            for a in (0..3).filter(|&a| a != g) {
                // Unit-extent axes never move: their strides only need to stay in range.
                c.src_strides[a] /= 2;
                c.dst_strides[a] /= 2;
            }
            c.extent[g] /= 2;
            c.src_offset /= 2;
            c.dst_offset /= 2;
            e *= 2;
        }
        (e, c)
    }
}

/// A copy as contiguous rows (see [`Copy3::rows`]), in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Element offset of the first cell in the source.
    pub src_offset: i64,
    /// Element offset of the first cell in the destination.
    pub dst_offset: i64,
    /// Elements of one contiguous row.
    pub width: i64,
    /// The outer axes, innermost first (`count == 1` where there is none).
    pub outer: [Outer; 2],
}

impl Rows {
    /// How the copy engine takes these rows of `elem`-byte elements: one pitched copy (the
    /// planes a whole number of rows apart, `*_height` rows, on both sides), else one 2-D
    /// copy per plane when there are at most `max_calls` planes. `None` when a row pitch
    /// is beyond what the driver takes (2 GiB) or there would be more calls.
    pub fn engine_shape(&self, elem: usize, max_calls: i64) -> Option<EngineShape> {
        let e = elem as i64;
        let [a, b] = self.outer;
        let fits = |v: i64| v > 0 && v.checked_mul(e).is_some_and(|p| p <= i32::MAX as i64);
        if !(fits(a.src_stride) && fits(a.dst_stride)) {
            return None;
        }
        let rows_per = |plane: i64, row: i64| {
            (plane % row == 0 && plane / row >= a.count).then(|| plane / row)
        };
        match (
            b.count,
            rows_per(b.src_stride, a.src_stride),
            rows_per(b.dst_stride, a.dst_stride),
        ) {
            (1, _, _) => Some(EngineShape::Pitched {
                src_height: a.count,
                dst_height: a.count,
            }),
            (_, Some(hs), Some(hd)) => Some(EngineShape::Pitched {
                src_height: hs,
                dst_height: hd,
            }),
            (n, _, _) if n <= max_calls => Some(EngineShape::Planes),
            _ => None,
        }
    }
}

/// How the copy engine takes a [`Rows`] copy (see [`Rows::engine_shape`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineShape {
    /// One pitched copy: rows of each plane `*_height` rows apart in the planes' strides.
    Pitched {
        /// Rows per source plane (the source's plane stride over its row pitch).
        src_height: i64,
        /// Rows per destination plane.
        dst_height: i64,
    },
    /// One 2-D copy per plane.
    Planes,
}

/// One outer axis of [`Rows`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outer {
    /// Rows (or planes of rows) along the axis.
    pub count: i64,
    /// Element stride in the source.
    pub src_stride: i64,
    /// Element stride in the destination.
    pub dst_stride: i64,
}

fn end(offset: i64, strides: &[i64; 3], extent: &[i64; 3]) -> i64 {
    if extent.iter().any(|&e| e <= 0) {
        return offset;
    }
    offset
        + (0..3)
            .map(|g| (extent[g] - 1) * strides[g].max(0))
            .sum::<i64>()
        + 1
}

fn start(offset: i64, strides: &[i64; 3], extent: &[i64; 3]) -> i64 {
    if extent.iter().any(|&e| e <= 0) {
        return offset;
    }
    offset
        + (0..3)
            .map(|g| (extent[g] - 1) * strides[g].min(0))
            .sum::<i64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_bounds() {
        let b = Box3 {
            lo: [1, 2, 3],
            len: [2, 3, 4],
        };
        let l = Layout::packed(&b, [2, 0, 1], 10);
        let c = Copy3::between(&b, &l, &l);
        assert_eq!(c.src_start(), 10);
        assert_eq!(c.src_end(), 10 + 24);
    }

    #[test]
    fn dense_blocks_are_detected() {
        let b = Box3 {
            lo: [0, 0, 0],
            len: [4, 3, 2],
        };
        let full = Layout::packed(&b, [0, 1, 2], 0);
        assert_eq!(Copy3::between(&b, &full, &full).dense_len(), Some(24));
        let big = Box3 {
            lo: [0, 0, 0],
            len: [8, 3, 2],
        };
        let wide = Layout::packed(&big, [0, 1, 2], 0);
        assert_eq!(Copy3::between(&b, &wide, &full).dense_len(), None);
        let perm = Layout::packed(&b, [1, 0, 2], 0);
        assert_eq!(Copy3::between(&b, &full, &perm).dense_len(), None);
        let slab = Box3 {
            lo: [0, 0, 1],
            len: [8, 3, 1],
        };
        assert_eq!(
            Copy3::between(&slab, &wide, &Layout::packed(&slab, [0, 1, 2], 0)).dense_len(),
            Some(24)
        );
    }

    /// Moves cells of `elem` bytes as the copy says, byte by byte (a reference mover).
    fn run_bytes(elem: usize, c: &Copy3, src: &[u8], dst: &mut [u8]) {
        let e = elem as i64;
        for k in 0..c.extent[2] {
            for j in 0..c.extent[1] {
                for i in 0..c.extent[0] {
                    let at = |o: i64, s: &[i64; 3]| (o + i * s[0] + j * s[1] + k * s[2]) * e;
                    let (so, d) = (
                        at(c.src_offset, &c.src_strides),
                        at(c.dst_offset, &c.dst_strides),
                    );
                    for b in 0..e {
                        dst[(d + b) as usize] = src[(so + b) as usize];
                    }
                }
            }
        }
    }

    #[test]
    fn widened_copies_move_the_same_bytes() {
        let big = Box3 {
            lo: [0, 0, 0],
            len: [8, 6, 4],
        };
        let src = Layout::packed(&big, [0, 1, 2], 0);
        let bx = |lo, len| Box3 { lo, len };
        // (box, destination order, expected element size from 4-byte cells)
        let cases = [
            (bx([4, 1, 0], [4, 3, 2]), [0, 1, 2], 16),
            (bx([2, 1, 0], [6, 3, 2]), [0, 1, 2], 8),
            (bx([2, 1, 0], [4, 3, 2]), [0, 1, 2], 8),
            (bx([1, 1, 0], [4, 3, 2]), [0, 1, 2], 4),
            (bx([0, 0, 0], [4, 3, 2]), [1, 0, 2], 4),
            (bx([0, 2, 1], [1, 3, 2]), [0, 1, 2], 4),
        ];
        let bytes: Vec<u8> = (0..big.volume() * 4).map(|v| (v * 7 % 251) as u8).collect();
        for (b, order, want) in cases {
            let c = Copy3::between(&b, &src, &Layout::packed(&b, order, 0));
            let (e, w) = c.widened(4, 16, 0, 0);
            assert_eq!(e, want, "{b:?} {order:?}");
            assert_eq!(w.cells() * e as i64, c.cells() * 4);
            let mut a = vec![0u8; (b.volume() * 4) as usize];
            let mut z = a.clone();
            run_bytes(4, &c, &bytes, &mut a);
            run_bytes(e, &w, &bytes, &mut z);
            assert_eq!(a, z, "{b:?} {order:?}");
        }
        // Misaligned buffers keep the element size.
        let b = bx([0, 0, 0], [4, 3, 2]);
        let c = Copy3::between(&b, &src, &src);
        assert_eq!(c.widened(8, 16, 8, 0).0, 8);
        assert_eq!(c.widened(8, 16, 16, 32).0, 16);
    }

    /// An X-fastest array of `len` cells of 4 bytes, every byte distinct enough to
    /// tell misplaced cells: its layout and bytes.
    fn patterned(len: [i64; 3]) -> (Layout, Vec<u8>) {
        let big = Box3 { lo: [0, 0, 0], len };
        let bytes = (0..big.volume() * 4).map(|v| (v * 7 % 251) as u8).collect();
        (Layout::packed(&big, [0, 1, 2], 0), bytes)
    }

    /// Whether `pieces`, run one after the other, write what `c` writes in one go.
    fn pieces_move_like_whole(c: &Copy3, pieces: &[Copy3], bytes: &[u8], dst_len: usize) -> bool {
        let mut whole = vec![0u8; dst_len];
        run_bytes(4, c, bytes, &mut whole);
        let mut split = vec![0u8; dst_len];
        for p in pieces {
            run_bytes(4, p, bytes, &mut split);
        }
        split == whole
    }

    #[test]
    fn split_copies_move_the_same_cells() {
        let (src, bytes) = patterned([8, 7, 5]);
        let boxes = [
            Box3 {
                lo: [1, 1, 0],
                len: [6, 5, 5],
            },
            Box3 {
                lo: [0, 3, 2],
                len: [8, 1, 1],
            },
        ];
        for b in boxes {
            for order in [[0, 1, 2], [1, 2, 0], [2, 1, 0]] {
                let c = Copy3::between(&b, &src, &Layout::packed(&b, order, 0));
                for parts in [1, 2, 3, 4, 16] {
                    let pieces = c.split(parts);
                    let rows = b.len.iter().filter(|&&n| n > 1).count() > 1;
                    assert!(pieces.len() <= parts && (pieces.len() > 1) == (parts > 1 && rows));
                    assert_eq!(pieces.iter().map(Copy3::cells).sum::<i64>(), c.cells());
                    for p in &pieces {
                        assert_eq!(p.walk_order().0[0], c.walk_order().0[0]);
                    }
                    let len = (b.volume() * 4) as usize;
                    assert!(
                        pieces_move_like_whole(&c, &pieces, &bytes, len),
                        "{b:?} {order:?} {parts}"
                    );
                }
            }
        }
    }

    #[test]
    fn pieces_along_the_slowest_axis_read_separate_stretches() {
        // A chunk taking part of every row (as X->Y chunks do), cut along Z: each piece
        // reads its own stretch of input, after the previous one, and all move the chunk.
        let (src, bytes) = patterned([8, 3, 6]);
        let b = Box3 {
            lo: [2, 0, 0],
            len: [2, 3, 6],
        };
        let c = Copy3::between(&b, &src, &Layout::packed(&b, [0, 1, 2], 0));
        for parts in [1, 2, 4, 6, 9] {
            let pieces = c.split_along(2, parts);
            assert_eq!(pieces.len(), parts.min(6));
            for (p, q) in pieces.iter().zip(pieces.iter().skip(1)) {
                assert!(p.src_end() <= q.src_start(), "{parts}: {p:?} then {q:?}");
            }
            let len = (b.volume() * 4) as usize;
            assert!(pieces_move_like_whole(&c, &pieces, &bytes, len), "{parts}");
        }
    }

    #[test]
    fn shifted_layout_moves_boxes() {
        let b = Box3 {
            lo: [0, 0, 0],
            len: [4, 1, 1],
        };
        let l = Layout::packed(&b, [0, 1, 2], 0);
        assert_eq!(l.shifted([2, 0, 0]).offset([0, 0, 0]), l.offset([2, 0, 0]));
    }

    /// A slab chunk: whole X rows, the second half of Y, four Z planes of an 8x6x4 X-fastest
    /// array, into a packed X-fastest array of that half: (whole, its layout, the copy).
    fn slab_chunk() -> (Box3, Layout, Copy3) {
        let whole = Box3 {
            lo: [0, 0, 0],
            len: [8, 6, 4],
        };
        let part = Box3 {
            lo: [0, 3, 0],
            len: [8, 3, 4],
        };
        let src = Layout::packed(&whole, [0, 1, 2], 0);
        let dst = Layout::packed(&part, [0, 1, 2], 0);
        (whole, src, Copy3::between(&part, &src, &dst))
    }

    fn outer(count: i64, src_stride: i64, dst_stride: i64) -> Outer {
        Outer {
            count,
            src_stride,
            dst_stride,
        }
    }

    #[test]
    fn rows_merge_what_continues_on_both_sides() {
        let (whole, src, c) = slab_chunk();
        let r = c.rows().unwrap();
        assert_eq!((r.src_offset, r.dst_offset, r.width), (24, 0, 24));
        assert_eq!(r.outer[0], outer(4, 48, 24));
        assert_eq!(r.outer[1].count, 1);
        // Rows cut along X over all of Y: Y and Z merge into one outer axis.
        let cut = Box3 {
            lo: [2, 0, 0],
            len: [4, 6, 4],
        };
        let r = Copy3::between(&cut, &src, &Layout::packed(&cut, [0, 1, 2], 0))
            .rows()
            .unwrap();
        assert_eq!(r.width, 4);
        assert_eq!(r.outer[0], outer(24, 8, 4));
        assert_eq!(r.outer[1].count, 1);
        // ... over part of Y: two outer axes.
        let corner = Box3 {
            lo: [2, 3, 0],
            len: [4, 3, 4],
        };
        let r = Copy3::between(&corner, &src, &Layout::packed(&corner, [0, 1, 2], 0))
            .rows()
            .unwrap();
        assert_eq!(r.outer[0], outer(3, 8, 4));
        assert_eq!(r.outer[1], outer(4, 48, 12));
        // A transposing copy has no rows.
        let t = Layout::packed(&whole, [1, 0, 2], 0);
        assert_eq!(Copy3::between(&whole, &src, &t).rows(), None);
        // A dense block is one row.
        let r = Copy3::between(&whole, &src, &src).rows().unwrap();
        assert_eq!((r.width, r.outer[0].count, r.outer[1].count), (192, 1, 1));
    }

    #[test]
    fn the_engine_takes_rows_as_one_pitched_copy_or_plane_by_plane() {
        let (_, _, c) = slab_chunk();
        let r = c.rows().unwrap();
        // Rows merged with the planes: a single pitched copy of 4 rows.
        assert_eq!(
            r.engine_shape(8, 64),
            Some(EngineShape::Pitched {
                src_height: 4,
                dst_height: 4
            })
        );
        let two = Rows {
            src_offset: 0,
            dst_offset: 0,
            width: 4,
            // The second pitch is not a whole number of 8-element rows.
            outer: [outer(3, 8, 4), outer(5, 50, 12)],
        };
        assert_eq!(two.engine_shape(8, 64), Some(EngineShape::Planes));
        assert_eq!(two.engine_shape(8, 4), None);
        let planes = Rows {
            outer: [two.outer[0], outer(5, 48, 12)],
            ..two
        };
        assert_eq!(
            planes.engine_shape(8, 4),
            Some(EngineShape::Pitched {
                src_height: 6,
                dst_height: 3
            })
        );
        let wide = Rows {
            outer: [outer(3, 1 << 30, 4), two.outer[1]],
            ..two
        };
        assert_eq!(wide.engine_shape(8, 64), None); // an 8 GiB pitch
    }

    #[test]
    fn src_ranges_cut_along_an_axis() {
        let (whole, src, c) = slab_chunk();
        let z = src.along(2, whole.volume());
        let y = src.along(1, whole.volume());
        assert_eq!((z.stride, z.next, z.count), (48, i64::MAX, 4));
        assert_eq!((y.stride, y.next, y.count), (8, 48, 6));
        let cells: i64 = [(0, 1), (1, 3), (3, 9)]
            .iter()
            .filter_map(|&(lo, hi)| c.src_range(&z, lo, hi))
            .map(|p| p.cells())
            .sum();
        assert_eq!(cells, c.cells());
        let mid = c.src_range(&z, 1, 3).unwrap();
        assert_eq!(
            (mid.extent, mid.src_offset, mid.dst_offset),
            ([8, 3, 2], 48 + 24, 24)
        );
        assert_eq!(c.src_range(&z, 4, 9), None);
        // Along Y (the middle axis, stride 8 within planes of 48): rows 3..6 are the chunk's.
        let rows = c.src_range(&y, 4, 5).unwrap();
        assert_eq!(
            (rows.extent, rows.src_offset, rows.dst_offset),
            ([8, 1, 4], 32, 8)
        );
        assert_eq!(c.src_range(&y, 0, 3), None);
    }

    #[test]
    fn dst_ranges_cut_along_the_destination_axis() {
        let (_, _, c) = slab_chunk();
        // The packed destination: 8 x 3 x 4 cells, Z planes of 24 elements.
        let dst = Layout::packed(
            &Box3 {
                lo: [0, 0, 0],
                len: c.extent,
            },
            [0, 1, 2],
            0,
        );
        let z = dst.along(2, c.cells());
        assert_eq!((z.stride, z.count), (24, c.extent[2]));
        let parts: Vec<Copy3> = [(0, 1), (1, 2), (2, i64::MAX)]
            .iter()
            .filter_map(|&(lo, hi)| c.dst_range(&z, lo, hi))
            .collect();
        assert_eq!(parts.iter().map(Copy3::cells).sum::<i64>(), c.cells());
        assert_eq!(
            (parts[1].extent[2], parts[1].dst_offset, parts[1].src_offset),
            (1, 24, c.src_offset + c.src_strides[2])
        );
        assert_eq!(c.dst_range(&z, c.extent[2], i64::MAX), None);
    }
}
