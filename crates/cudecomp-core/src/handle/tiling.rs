//! Whether the boxes of a layout, one per rank, cover a global grid exactly once: the
//! check every redistribution and every `cudecomp.io` call makes of the layouts it is
//! given, in 64-bit arithmetic that refuses to overflow.

use crate::comm::{allgather_bytes, allgather_words};
use crate::geometry::Box3;
use crate::handle::Handle;
use crate::{invalid, Error, Result};

/// Text of a box for messages: `lo (x, y, z) hi (x, y, z)` with `hi` inclusive.
pub(crate) fn box_text(b: &Box3) -> String {
    let hi: Vec<i64> = (0..3)
        .map(|g| b.lo[g].saturating_add(b.len[g]) - 1)
        .collect();
    format!("lo {:?} hi {:?}", b.lo, hi)
}

/// Cells of the global grid `gdims` (InvalidUsage naming `which` unless its extents are
/// non-negative and their product fits in 64 bits).
pub(crate) fn grid_cells(which: &str, gdims: [i64; 3]) -> Result<i64> {
    if gdims.iter().any(|&n| n < 0) {
        invalid!("{which}: expected non-negative global extents, got gdims {gdims:?}");
    }
    Box3 {
        lo: [0; 3],
        len: gdims,
    }
    .cells()
    .ok_or_else(|| {
        Error::InvalidUsage(format!(
            "{which}: a global grid of gdims {gdims:?}: its number of cells does not fit in 64 bits"
        ))
    })
}

/// InvalidUsage unless `boxes` (one per rank) cover every cell of the `gdims` grid
/// exactly once. Every rank holds the same boxes, so every rank raises the same.
pub(crate) fn check_tiling(which: &str, boxes: &[Box3], gdims: [i64; 3]) -> Result<()> {
    let total = grid_cells(which, gdims)?;
    let whole = Box3 {
        lo: [0; 3],
        len: gdims,
    };
    let mut covered: i64 = 0;
    for (r, b) in boxes.iter().enumerate() {
        let Some(cells) = b.cells() else {
            invalid!(
                "{which}: rank {r}'s box {}: its number of cells does not fit in 64 bits",
                box_text(b)
            );
        };
        let ends = (0..3).all(|g| b.lo[g] >= 0 && b.lo[g].checked_add(b.len[g]).is_some());
        if cells > 0 && (!ends || b.intersect(&whole) != *b) {
            invalid!(
                "{which}: rank {r}'s box {} reaches outside the global grid {gdims:?}",
                box_text(b)
            );
        }
        covered = covered.checked_add(cells).unwrap_or(i64::MAX);
    }
    for (r, a) in boxes.iter().enumerate() {
        for (q, b) in boxes.iter().enumerate().skip(r + 1) {
            let shared = a.intersect(b);
            if shared.volume() > 0 {
                invalid!(
                    "{which}: the boxes of ranks {r} ({}) and {q} ({}) overlap in {}",
                    box_text(a),
                    box_text(b),
                    box_text(&shared)
                );
            }
        }
    }
    if covered != total {
        invalid!(
            "{which}: expected boxes that cover the global grid {gdims:?} ({total} cells), got boxes that cover {covered}: some cells belong to no rank"
        );
    }
    Ok(())
}

/// The words of a box: lo and len, three each.
pub(crate) fn box_words(b: Box3) -> [u64; 6] {
    let mut w = [0u64; 6];
    for g in 0..3 {
        w[g] = b.lo[g] as u64;
        w[3 + g] = b.len[g] as u64;
    }
    w
}

/// The box of [`box_words`].
pub(crate) fn unbox_words(w: &[u64]) -> Box3 {
    let at = |i: usize| w[i] as i64;
    Box3 {
        lo: [at(0), at(1), at(2)],
        len: [at(3), at(4), at(5)],
    }
}

impl Handle {
    /// Collective: every rank's box of one layout of the global grid `gdims` (`mine`:
    /// this rank's owned cells; `which` names the layout in messages), in rank order.
    /// InvalidUsage on every rank alike unless the boxes cover the grid exactly once:
    /// gaps, overlaps, boxes outside it, or sizes that do not fit in 64 bits.
    pub fn gather_boxes(&self, which: &str, gdims: [i64; 3], mine: Box3) -> Result<Vec<Box3>> {
        self.check_alive()?;
        let boxes: Vec<Box3> = allgather_words(self.comm(), box_words(mine))?
            .iter()
            .map(|w| unbox_words(w))
            .collect();
        check_tiling(which, &boxes, gdims)?;
        Ok(boxes)
    }

    /// Collective: rank 0's `bytes` on every rank (the others' are ignored).
    pub fn share_from_rank0(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        self.check_alive()?;
        let mine = if self.rank() == 0 { bytes } else { &[] };
        let mut all = allgather_bytes(self.comm(), mine)?;
        Ok(std::mem::take(&mut all[0]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(lo: [i64; 3], len: [i64; 3]) -> Box3 {
        Box3 { lo, len }
    }

    #[test]
    fn tiling_finds_gaps_overlaps_and_strays() {
        let g = [4, 4, 2];
        let halves = [b([0, 0, 0], [4, 2, 2]), b([0, 2, 0], [4, 2, 2])];
        assert!(check_tiling("t", &halves, g).is_ok());
        let gather = [b([0, 0, 0], [4, 4, 2]), Box3::default()];
        assert!(check_tiling("t", &gather, g).is_ok());
        let gap = [b([0, 0, 0], [4, 2, 2]), b([0, 2, 0], [4, 1, 2])];
        let e = check_tiling("t", &gap, g).unwrap_err().to_string();
        assert!(e.contains("cover 24") && e.contains("32 cells"), "{e}");
        let overlap = [b([0, 0, 0], [4, 3, 2]), b([0, 2, 0], [4, 2, 2])];
        let e = check_tiling("t", &overlap, g).unwrap_err().to_string();
        assert!(
            e.contains("ranks 0") && e.contains("overlap in lo [0, 2, 0] hi [3, 2, 1]"),
            "{e}"
        );
        let stray = [b([0, 0, 0], [4, 2, 2]), b([0, 2, 0], [4, 2, 3])];
        let e = check_tiling("t", &stray, g).unwrap_err().to_string();
        assert!(e.contains("rank 1's box") && e.contains("outside"), "{e}");
        // The same box twice, and a box beside an empty one: whole X rows or not.
        let g = [4, 4, 4];
        let twice = [b([0, 0, 0], [4, 4, 2]), b([0, 0, 0], [4, 4, 2])];
        assert!(check_tiling("t", &twice, g).is_err());
        let half = [b([0, 0, 0], [4, 4, 2]), Box3::default()];
        let e = check_tiling("t", &half, g).unwrap_err().to_string();
        assert!(e.contains("cover 32"), "{e}");
    }

    #[test]
    fn sizes_that_overflow_are_refused() {
        let big = [1 << 40, 1 << 20, 1 << 20];
        let e = grid_cells("t", big).unwrap_err().to_string();
        assert!(e.contains("does not fit in 64 bits"), "{e}");
        let e = check_tiling("t", &[b([0; 3], big)], big)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not fit in 64 bits"), "{e}");
        // Boxes that each fit but sum past 64 bits.
        let g = [1 << 31, 1 << 31, 1];
        let e = check_tiling("t", &[b([0; 3], g); 4], g)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlap") || e.contains("cover"), "{e}");
        let e = Box3::from_bounds("box", [0; 3], [(1 << 40) - 1, (1 << 20) - 1, (1 << 20) - 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not fit in 64 bits"), "{e}");
        assert!(Box3::from_bounds("box", [-1, 0, 0], [1, 1, 1]).is_err());
        assert!(Box3::from_bounds("box", [0; 3], [i64::MAX, 0, 0]).is_err());
        assert_eq!(
            Box3::from_bounds("box", [2, 0, 0], [1, 5, 5]).unwrap(),
            Box3::default()
        );
    }

    #[test]
    fn words_round_trip() {
        let s = b([1, 2, 3], [4, 5, 6]);
        assert_eq!(unbox_words(&box_words(s)), s);
    }
}
