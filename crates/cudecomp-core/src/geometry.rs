//! Pure geometry of a decomposition: rank ↔ process-grid coordinates, axis splits,
//! pencil info, shifted ranks and workspace sizes.
//!
//! Everything here is a function of (configuration, rank, query) and matches upstream
//! cuDecomp bit for bit; the golden tables of the reference are the unit tests below.

use crate::config::{GridConfig, HaloBackend, RankOrder, TransposeBackend};
use crate::{invalid, unsupported, Error, Result};

/// Global axis index: 0 = X, 1 = Y, 2 = Z.
pub type Axis = usize;

/// `(lo, len)` of coordinate `p` of `nparts` along an axis split as in reference §1.3:
/// `n` cells are distributed, the remainder goes to the lowest coordinates and the
/// `extra` cells (`gdims - gdims_dist`) to the last populated coordinate.
pub(crate) fn split(n: i64, extra: i64, nparts: usize, p: usize) -> (i64, i64) {
    let np = nparts as i64;
    let p = p as i64;
    let d = n / np;
    let m = n % np;
    let mut len = d + i64::from(p < m);
    if p == n.min(np) - 1 {
        len += extra;
    }
    (p * d + p.min(m), len)
}

/// The two axes split over the process grid for a pencil of `axis`: the first over
/// `pdims[0]` (the column communicator), the second over `pdims[1]` (the row communicator).
pub(crate) fn split_axes(axis: Axis) -> [Axis; 2] {
    match axis {
        0 => [1, 2],
        1 => [0, 2],
        _ => [0, 1],
    }
}

/// Which sub-communicator exchanges along a split axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommAxis {
    /// Ranks sharing a column coordinate (size `pdims[0]`); X↔Y transposes.
    Col = 0,
    /// Ranks sharing a row coordinate (size `pdims[1]`); Y↔Z transposes.
    Row = 1,
    /// Every rank of the grid; X↔Z transposes.
    All = 2,
}

/// A global-coordinate box: `lo` inclusive start and `len` extent per global axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Box3 {
    /// First global index along X, Y, Z.
    pub lo: [i64; 3],
    /// Number of cells along X, Y, Z (0 along any axis: an empty box).
    pub len: [i64; 3],
}

impl Box3 {
    /// The overlap of two boxes (zero extents when disjoint).
    pub fn intersect(&self, o: &Box3) -> Box3 {
        let mut r = Box3::default();
        for i in 0..3 {
            let lo = self.lo[i].max(o.lo[i]);
            let hi = (self.lo[i] + self.len[i]).min(o.lo[i] + o.len[i]);
            r.lo[i] = lo;
            r.len[i] = (hi - lo).max(0);
        }
        r
    }

    /// Number of cells.
    pub fn volume(&self) -> i64 {
        self.len.iter().product()
    }

    /// Number of cells, `None` where it does not fit in 64 bits.
    pub fn cells(&self) -> Option<i64> {
        self.len
            .iter()
            .try_fold(1i64, |n, &l| n.checked_mul(l.max(0)))
    }

    /// The box of the cells `lo[i]..=hi[i]` along each global axis (`what` names it in
    /// messages): InvalidUsage unless `lo >= 0`, and its end and cell count fit in 64
    /// bits. A `hi` below `lo` along any axis makes the box empty (the one empty box,
    /// lo and len zero).
    pub fn from_bounds(what: &str, lo: [i64; 3], hi: [i64; 3]) -> Result<Box3> {
        if lo.iter().any(|&l| l < 0) {
            invalid!("{what}: expected lo >= 0 along every axis, got lo {lo:?}");
        }
        if (0..3).any(|g| hi[g] < lo[g]) {
            return Ok(Box3::default());
        }
        // hi < i64::MAX, so that the end (hi + 1) and the extent fit.
        if hi.contains(&i64::MAX) {
            invalid!("{what}: expected hi below 2**63 - 1 along every axis, got hi {hi:?}");
        }
        let b = Box3 {
            lo,
            len: std::array::from_fn(|g| hi[g] - lo[g] + 1),
        };
        if b.cells().is_none() {
            invalid!(
                "{what}: a box of {} x {} x {} cells: its number of cells does not fit in 64 bits",
                b.len[0],
                b.len[1],
                b.len[2]
            );
        }
        Ok(b)
    }
}

/// `cudecompPencilInfo_t`: shape/lo/hi in local memory order, halos and padding in global order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PencilInfo {
    /// Stored extents, halos and padding included, in memory order (fastest first).
    pub shape: [i64; 3],
    /// First global index of the owned cells, in memory order.
    pub lo: [i64; 3],
    /// Last global index (inclusive) of the owned cells, in memory order.
    pub hi: [i64; 3],
    /// The global axis at each memory position, fastest first.
    pub order: [Axis; 3],
    /// Halo cells on each side, per global axis (X, Y, Z).
    pub halo_extents: [i64; 3],
    /// Padding cells after the upper halo, per global axis (X, Y, Z).
    pub padding: [i64; 3],
    /// Number of stored elements (the product of `shape`).
    pub size: i64,
}

impl PencilInfo {
    /// The owned interior as a global box.
    pub fn interior(&self) -> Box3 {
        let mut b = Box3::default();
        for k in 0..3 {
            let g = self.order[k];
            b.lo[g] = self.lo[k];
            b.len[g] = self.hi[k] - self.lo[k] + 1;
        }
        b
    }

    /// Stored extent (with halos and padding) along global axis `g`.
    pub fn stored_extent(&self, g: Axis) -> i64 {
        self.shape[self.position(g)]
    }

    /// Position of global axis `g` in the memory order (0 = fastest).
    pub fn position(&self, g: Axis) -> usize {
        self.order.iter().position(|&a| a == g).unwrap_or(0)
    }

    /// A dense array of the cells of `b` with X fastest: no halos, no padding.
    pub fn of_box(b: &Box3) -> PencilInfo {
        PencilInfo {
            shape: b.len,
            lo: b.lo,
            hi: std::array::from_fn(|g| b.lo[g] + b.len[g] - 1),
            order: [0, 1, 2],
            halo_extents: [0; 3],
            padding: [0; 3],
            size: b.volume(),
        }
    }

    /// The C-contiguous array shape that holds this pencil (the reverse of `shape`).
    pub fn array_shape(&self) -> [i64; 3] {
        [self.shape[2], self.shape[1], self.shape[0]]
    }
}

/// A validated, resolved decomposition: everything the plans and queries need.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// Global extents along X, Y, Z.
    pub gdims: [i64; 3],
    /// Extents the axes are split as if they had (`gdims` unless all three were set).
    pub gdims_dist: [i64; 3],
    /// Process grid `[P_rows, P_cols]`.
    pub pdims: [usize; 2],
    /// How ranks fill the process grid (the default resolved).
    pub rank_order: RankOrder,
    /// Memory order of each pencil orientation (row `a` for the `a`-pencil).
    pub orders: [[Axis; 3]; 3],
    /// How this grid's transposes exchange data.
    pub transpose_backend: TransposeBackend,
    /// How this grid's halo updates exchange data.
    pub halo_backend: HaloBackend,
    /// The configuration as the user gave it (reported back unresolved where upstream does).
    pub config: GridConfig,
}

impl Grid {
    /// Validates `cfg` for a communicator of `nranks` ranks and resolves it (reference §2.4).
    /// `pdims` must be set (autotuning happens before).
    pub fn new(cfg: &GridConfig, nranks: usize, default_col_major: bool) -> Result<Grid> {
        cfg.validate_static()?;
        let [r, c] = cfg.pdims;
        if r == 0 {
            invalid!("pdims: expected a process grid, got [0, 0] (autotuning needs GridDescAutotuneOptions)");
        }
        if (r as i64) * (c as i64) != nranks as i64 {
            invalid!(
                "pdims: expected P_rows * P_cols == {nranks} (the communicator size), got [{r}, {c}] (product {})",
                (r as i64) * (c as i64)
            );
        }
        let gdims = cfg.gdims.map(i64::from);
        let gdims_dist = if cfg.gdims_dist.iter().all(|&d| d > 0) {
            cfg.gdims_dist.map(i64::from)
        } else {
            gdims
        };
        let orders = std::array::from_fn(|a| {
            if cfg.mem_order_set() {
                cfg.transpose_mem_order[a].map(|v| v as Axis)
            } else if cfg.transpose_axis_contiguous[a] {
                [a, (a + 1) % 3, (a + 2) % 3]
            } else {
                [0, 1, 2]
            }
        });
        let transpose_backend = TransposeBackend::from_i32(cfg.transpose_comm_backend)
            .ok_or_else(|| Error::Internal("transpose backend vanished".into()))?;
        let halo_backend = HaloBackend::from_i32(cfg.halo_comm_backend)
            .ok_or_else(|| Error::Internal("halo backend vanished".into()))?;
        Ok(Grid {
            gdims,
            gdims_dist,
            pdims: [r as usize, c as usize],
            rank_order: cfg.resolved_rank_order(default_col_major),
            orders,
            transpose_backend,
            halo_backend,
            config: cfg.clone(),
        })
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.pdims[0] * self.pdims[1]
    }

    /// Process-grid coordinates `[row, col]` of `rank`.
    pub fn coords(&self, rank: usize) -> [usize; 2] {
        let [pr, pc] = self.pdims;
        match self.rank_order {
            RankOrder::RowMajor => [rank / pc, rank % pc],
            RankOrder::ColMajor => [rank % pr, rank / pr],
        }
    }

    /// Global rank at process-grid coordinates `[row, col]`.
    pub fn rank_at(&self, coords: [usize; 2]) -> usize {
        let [pr, pc] = self.pdims;
        match self.rank_order {
            RankOrder::RowMajor => coords[0] * pc + coords[1],
            RankOrder::ColMajor => coords[0] + coords[1] * pr,
        }
    }

    /// Global ranks of `rank`'s sub-communicator along `comm`, ordered by coordinate
    /// (which is also global-rank order).
    pub fn comm_members(&self, comm: CommAxis, rank: usize) -> Vec<usize> {
        if comm == CommAxis::All {
            return (0..self.nranks()).collect();
        }
        let c = self.coords(rank);
        let n = self.pdims[comm as usize];
        (0..n)
            .map(|i| {
                let mut cc = c;
                cc[comm as usize] = i;
                self.rank_at(cc)
            })
            .collect()
    }

    /// `(lo, len)` of `rank`'s share of global axis `g` in the `axis`-pencil.
    pub fn axis_range(&self, axis: Axis, rank: usize, g: Axis) -> (i64, i64) {
        if g == axis {
            return (0, self.gdims[g]);
        }
        let k = if split_axes(axis)[0] == g { 0 } else { 1 };
        let coord = self.coords(rank)[k];
        split(
            self.gdims_dist[g],
            self.gdims[g] - self.gdims_dist[g],
            self.pdims[k],
            coord,
        )
    }

    /// The global box `rank` owns in the `axis`-pencil.
    pub fn owned_box(&self, axis: Axis, rank: usize) -> Box3 {
        let mut b = Box3::default();
        for g in 0..3 {
            (b.lo[g], b.len[g]) = self.axis_range(axis, rank, g);
        }
        b
    }

    /// `cudecompGetPencilInfo` (reference §1.6).
    pub fn pencil_info(
        &self,
        axis: i64,
        rank: usize,
        halo: [i64; 3],
        padding: [i64; 3],
    ) -> Result<PencilInfo> {
        if !(0..3).contains(&axis) {
            invalid!("axis: expected 0 (X), 1 (Y) or 2 (Z), got {axis}");
        }
        if halo.iter().any(|&h| h < 0) {
            invalid!("halo_extents: expected non-negative values, got {halo:?}");
        }
        if padding.iter().any(|&p| p < 0) {
            invalid!("padding: expected non-negative values, got {padding:?}");
        }
        let axis = axis as Axis;
        let order = self.orders[axis];
        let mut info = PencilInfo {
            shape: [0; 3],
            lo: [0; 3],
            hi: [0; 3],
            order,
            halo_extents: halo,
            padding,
            size: 0,
        };
        for (k, &g) in order.iter().enumerate() {
            let (lo, len) = self.axis_range(axis, rank, g);
            let extent = halo[g]
                .checked_mul(2)
                .and_then(|h| len.checked_add(h))
                .and_then(|v| v.checked_add(padding[g]))
                .filter(|&v| v <= i32::MAX as i64);
            let Some(extent) = extent else {
                invalid!(
                    "pencil extent along axis {g} exceeds INT32_MAX: {len} cells + 2*{} halo + {} padding",
                    halo[g],
                    padding[g]
                );
            };
            info.shape[k] = extent;
            info.lo[k] = lo;
            info.hi[k] = lo + len - 1;
        }
        let size = info
            .shape
            .iter()
            .try_fold(1i64, |acc, &s| acc.checked_mul(s))
            .filter(|&n| n <= MAX_PENCIL_ELEMS);
        let Some(size) = size else {
            invalid!(
                "halo_extents {halo:?} and padding {padding:?}: the {}-pencil of shape {:?} (halos and padding included) would hold more than 2^58 elements",
                ["X", "Y", "Z"][axis],
                info.shape
            );
        };
        info.size = size;
        Ok(info)
    }

    /// True when some rank owns no cells in the `axis`-pencil (reference §1.7).
    pub fn has_empty_pencil(&self, axis: Axis) -> bool {
        split_axes(axis)
            .iter()
            .enumerate()
            .any(|(k, &g)| self.gdims_dist[g] < self.pdims[k] as i64)
    }

    /// Fails with NotSupported when an operation touches an orientation with empty pencils.
    pub fn check_not_empty(&self, axis: Axis, what: &str) -> Result<()> {
        if self.has_empty_pencil(axis) {
            unsupported!(
                "{what}: the {}-pencil has ranks that own no cells (gdims_dist {:?} over pdims {:?}); empty pencils are not supported in transposes and halo updates",
                ["X", "Y", "Z"][axis],
                self.gdims_dist,
                self.pdims
            );
        }
        Ok(())
    }

    /// `cudecompGetShiftedRank`: the rank `displacement` steps away along global `dim` for
    /// `rank`'s `axis`-pencil; `None` when there is no neighbour.
    pub fn shifted_rank(
        &self,
        axis: i64,
        rank: usize,
        dim: i64,
        displacement: i64,
        periodic: bool,
    ) -> Result<Option<usize>> {
        if !(0..3).contains(&axis) {
            invalid!("axis: expected 0 (X), 1 (Y) or 2 (Z), got {axis}");
        }
        if !(0..3).contains(&dim) {
            invalid!("dim: expected 0 (X), 1 (Y) or 2 (Z), got {dim}");
        }
        let (axis, dim) = (axis as Axis, dim as Axis);
        if displacement == 0 {
            return Ok(Some(rank));
        }
        if dim == axis {
            return Ok(periodic.then_some(rank));
        }
        let k = if split_axes(axis)[0] == dim { 0 } else { 1 };
        let n = self.pdims[k] as i64;
        let mut c = self.coords(rank);
        // In 128 bits: any displacement, however large, lands right.
        let shifted = c[k] as i128 + displacement as i128;
        if !periodic && !(0..n as i128).contains(&shifted) {
            return Ok(None);
        }
        c[k] = shifted.rem_euclid(n as i128) as usize;
        Ok(Some(self.rank_at(c)))
    }

    /// Largest pencil (over ranks, no halos) of each orientation (reference §6);
    /// InvalidUsage when one exceeds what the library addresses.
    pub fn max_pencil_sizes(&self) -> Result<[i64; 3]> {
        let mut out = [0; 3];
        for (axis, m) in out.iter_mut().enumerate() {
            let mut v = Some(self.gdims[axis]);
            for (k, &g) in split_axes(axis).iter().enumerate() {
                let p = self.pdims[k] as i64;
                let d = self.gdims_dist[g];
                v = v.and_then(|v| v.checked_mul((d + p - 1) / p + (self.gdims[g] - d)));
            }
            *m = v.filter(|&v| v <= MAX_PENCIL_ELEMS).ok_or_else(|| {
                Error::InvalidUsage(format!(
                    "gdims {:?} over pdims {:?}: the largest {}-pencil holds more than 2^58 elements",
                    self.gdims,
                    self.pdims,
                    ["X", "Y", "Z"][axis]
                ))
            })?;
        }
        Ok(out)
    }

    /// `cudecompGetTransposeWorkspaceSize` in elements.
    pub fn transpose_workspace_size(&self) -> Result<i64> {
        let [mx, my, mz] = self.max_pencil_sizes()?;
        // Each term is below 2^60: no overflow.
        // Upstream's four transposes, then X↔Z.
        Ok([
            align(mx) + my,
            align(my) + mx,
            align(my) + mz,
            align(mz) + my,
            align(mx) + mz,
            align(mz) + mx,
        ]
        .into_iter()
        .max()
        .unwrap_or(0))
    }

    /// `cudecompGetHaloWorkspaceSize` in elements for `rank`'s `axis`-pencil.
    pub fn halo_workspace_size(&self, axis: i64, rank: usize, halo: [i64; 3]) -> Result<i64> {
        halo_workspace_elems(&self.pencil_info(axis, rank, halo, [0; 3])?)
    }
}

/// Most elements a pencil (halos and padding included) may hold: 2^58, so that byte
/// sizes of several pencils of 16-byte elements stay far inside `i64`.
pub(crate) const MAX_PENCIL_ELEMS: i64 = 1 << 58;

/// Halo workspace (elements) of a pencil: four slots (send and receive, both sides) of
/// the largest face layer times its halo extent. Padding does not count (faces exclude it).
pub(crate) fn halo_workspace_elems(info: &PencilInfo) -> Result<i64> {
    let mut most = 0;
    for d in 0..3 {
        // A face is part of the pencil (at most 2^58 elements), but its halo extent may
        // be as large as the pencil's: multiply checked.
        let slots = face_cells(info, d)
            .checked_mul(info.halo_extents[d])
            .filter(|&n| n <= MAX_PENCIL_ELEMS)
            .map(|n| 4 * align(n))
            .ok_or_else(|| {
                Error::InvalidUsage(format!(
                    "halo_extents[{d}] = {}: the halo workspace would exceed 2^58 elements",
                    info.halo_extents[d]
                ))
            })?;
        most = most.max(slots);
    }
    Ok(most)
}

/// Cells in one halo-face layer normal to global axis `d`: the product of the other two
/// stored extents (halos included, padding excluded).
pub(crate) fn face_cells(info: &PencilInfo, d: Axis) -> i64 {
    (0..3)
        .filter(|&g| g != d)
        .map(|g| info.stored_extent(g) - info.padding[g])
        .product()
}

/// Rounds an element count up to a multiple of 64 (256 bytes of 4-byte elements), the
/// alignment upstream gives workspace regions.
pub(crate) fn align(n: i64) -> i64 {
    (n + 63) / 64 * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(gdims: [i32; 3], pdims: [i32; 2], order: i32) -> Grid {
        let cfg = GridConfig {
            gdims,
            pdims,
            rank_order: order,
            ..Default::default()
        };
        Grid::new(&cfg, (pdims[0] * pdims[1]) as usize, false).unwrap()
    }

    type Row = ([i64; 3], [i64; 3], [i64; 3], i64);

    fn check_table(g: &Grid, halo: [i64; 3], pad: [i64; 3], table: &[[Row; 4]; 3]) {
        for (axis, rows) in table.iter().enumerate() {
            for (rank, &(shape, lo, hi, size)) in rows.iter().enumerate() {
                let info = g.pencil_info(axis as i64, rank, halo, pad).unwrap();
                assert_eq!(
                    (info.shape, info.lo, info.hi, info.size),
                    (shape, lo, hi, size),
                    "axis {axis} rank {rank}"
                );
            }
        }
    }

    /// Reference §1.6 golden table.
    fn golden() -> [[Row; 4]; 3] {
        [
            [
                ([12, 9, 10], [0, 0, 0], [8, 4, 5], 1080),
                ([12, 9, 9], [0, 0, 6], [8, 4, 10], 972),
                ([12, 9, 10], [0, 5, 0], [8, 9, 5], 1080),
                ([12, 9, 9], [0, 5, 6], [8, 9, 10], 972),
            ],
            [
                ([8, 14, 10], [0, 0, 0], [4, 9, 5], 1120),
                ([8, 14, 9], [0, 0, 6], [4, 9, 10], 1008),
                ([7, 14, 10], [5, 0, 0], [8, 9, 5], 980),
                ([7, 14, 9], [5, 0, 6], [8, 9, 10], 882),
            ],
            [
                ([8, 9, 15], [0, 0, 0], [4, 4, 10], 1080),
                ([8, 9, 15], [0, 5, 0], [4, 9, 10], 1080),
                ([7, 9, 15], [5, 0, 0], [8, 4, 10], 945),
                ([7, 9, 15], [5, 5, 0], [8, 9, 10], 945),
            ],
        ]
    }

    #[test]
    fn pencil_info_golden_row_major() {
        let g = grid([9, 10, 11], [2, 2], 0);
        check_table(&g, [1, 2, 1], [1, 0, 2], &golden());
    }

    #[test]
    fn pencil_info_golden_col_major_swaps_ranks_1_and_2() {
        let g = grid([9, 10, 11], [2, 2], 2);
        let mut t = golden();
        for row in t.iter_mut() {
            row.swap(1, 2);
        }
        check_table(&g, [1, 2, 1], [1, 0, 2], &t);
    }

    #[test]
    fn pencil_info_gdims_dist() {
        let cfg = GridConfig {
            gdims: [9, 10, 11],
            gdims_dist: [8, 9, 10],
            pdims: [2, 2],
            ..Default::default()
        };
        let g = Grid::new(&cfg, 4, false).unwrap();
        let q = |axis, rank| {
            let i = g.pencil_info(axis, rank, [1, 2, 1], [1, 0, 2]).unwrap();
            (i.shape, i.lo, i.hi)
        };
        assert_eq!(q(0, 0), ([12, 9, 9], [0, 0, 0], [8, 4, 4]));
        assert_eq!(q(0, 1), ([12, 9, 10], [0, 0, 5], [8, 4, 10]));
        assert_eq!(q(1, 0), ([7, 14, 9], [0, 0, 0], [3, 9, 4]));
        assert_eq!(q(1, 2), ([8, 14, 9], [4, 0, 0], [8, 9, 4]));
    }

    #[test]
    fn pencil_info_axis_contiguous_orders() {
        let cfg = GridConfig {
            gdims: [4, 6, 8],
            pdims: [1, 1],
            transpose_axis_contiguous: [true, true, true],
            ..Default::default()
        };
        let g = Grid::new(&cfg, 1, false).unwrap();
        assert_eq!(
            g.pencil_info(1, 0, [0; 3], [0; 3]).unwrap().shape,
            [6, 8, 4]
        );
        assert_eq!(
            g.pencil_info(2, 0, [0; 3], [0; 3]).unwrap().order,
            [2, 0, 1]
        );
    }

    #[test]
    fn pencil_info_errors() {
        let g = grid([9, 10, 11], [2, 2], 0);
        assert!(matches!(
            g.pencil_info(-1, 0, [0; 3], [0; 3]),
            Err(Error::InvalidUsage(_))
        ));
        assert!(matches!(
            g.pencil_info(3, 0, [0; 3], [0; 3]),
            Err(Error::InvalidUsage(_))
        ));
        assert!(matches!(
            g.pencil_info(0, 0, [-1, 0, 0], [0; 3]),
            Err(Error::InvalidUsage(_))
        ));
        assert!(matches!(
            g.pencil_info(0, 0, [0; 3], [0, -2, 0]),
            Err(Error::InvalidUsage(_))
        ));
        let big = grid([i32::MAX, 1, 1], [1, 1], 0);
        assert!(matches!(
            big.pencil_info(0, 0, [1, 0, 0], [0; 3]),
            Err(Error::InvalidUsage(_))
        ));
        let huge = grid([i32::MAX, i32::MAX, i32::MAX], [1, 1], 0);
        assert!(matches!(
            huge.pencil_info(0, 0, [0; 3], [0; 3]),
            Err(Error::InvalidUsage(_))
        ));
    }

    #[test]
    fn empty_pencils_describe_size_zero() {
        let g = grid([2, 2, 8], [4, 1], 0);
        assert!(g.has_empty_pencil(0));
        let info = g.pencil_info(0, 3, [0; 3], [0; 3]).unwrap();
        assert_eq!(info.size, 0);
        assert!(g.check_not_empty(0, "transpose").is_err());
    }

    /// Reference §2.3 shifted-rank golden table (4 ranks, 2x2, X-pencil).
    #[test]
    fn shifted_rank_golden() {
        let g = grid([9, 10, 11], [2, 2], 1);
        let s = |dim, d, p| -> Vec<i64> {
            (0..4)
                .map(|r| {
                    g.shifted_rank(0, r, dim, d, p)
                        .unwrap()
                        .map_or(-1, |v| v as i64)
                })
                .collect()
        };
        assert_eq!(s(1, 1, false), [2, 3, -1, -1]);
        assert_eq!(s(1, -1, false), [-1, -1, 0, 1]);
        assert_eq!(s(1, 1, true), [2, 3, 0, 1]);
        assert_eq!(s(2, 1, false), [1, -1, 3, -1]);
        assert_eq!(s(2, -1, false), [-1, 0, -1, 2]);
        assert_eq!(s(2, 1, true), [1, 0, 3, 2]);
        assert_eq!(s(0, 1, false), [-1; 4]);
        assert_eq!(s(0, 1, true), [0, 1, 2, 3]);
        assert_eq!(s(1, 2, true), [0, 1, 2, 3]);
        assert_eq!(s(1, 0, false), [0, 1, 2, 3]);
        let cm = grid([9, 10, 11], [2, 2], 2);
        let sc = |dim, d, p| -> Vec<i64> {
            (0..4)
                .map(|r| {
                    cm.shifted_rank(0, r, dim, d, p)
                        .unwrap()
                        .map_or(-1, |v| v as i64)
                })
                .collect()
        };
        assert_eq!(sc(2, 1, false), [2, 3, -1, -1]);
        assert_eq!(sc(1, 1, false), [1, -1, 3, -1]);
        assert!(g.shifted_rank(0, 0, 3, 1, false).is_err());
        assert!(g.shifted_rank(-1, 0, 1, 1, false).is_err());
    }

    /// Reference §6 worked examples.
    #[test]
    fn workspace_sizes() {
        let g = grid([9, 10, 11], [2, 2], 0);
        assert_eq!(g.max_pencil_sizes().unwrap(), [270, 300, 275]);
        assert_eq!(g.transpose_workspace_size().unwrap(), 620);
        assert_eq!(g.halo_workspace_size(0, 0, [1, 3, 2]).unwrap(), 1536);
    }

    #[test]
    fn split_rule() {
        // 10 over 4: 3,3,2,2 ; extra cells land on the last populated rank.
        let v: Vec<_> = (0..4).map(|p| split(10, 0, 4, p)).collect();
        assert_eq!(v, [(0, 3), (3, 3), (6, 2), (8, 2)]);
        let v: Vec<_> = (0..4).map(|p| split(2, 1, 4, p)).collect();
        assert_eq!(v, [(0, 1), (1, 2), (2, 0), (2, 0)]);
    }

    #[test]
    fn config_validation() {
        let ok = GridConfig {
            gdims: [4, 4, 4],
            pdims: [2, 2],
            ..Default::default()
        };
        assert!(Grid::new(&ok, 4, false).is_ok());
        let bad = |f: &dyn Fn(&mut GridConfig), n| {
            let mut c = ok.clone();
            f(&mut c);
            assert!(
                matches!(Grid::new(&c, n, false), Err(Error::InvalidUsage(_))),
                "{c:?}"
            );
        };
        bad(&|c| c.pdims = [2, 2], 3);
        bad(&|c| c.pdims = [0, 4], 4);
        bad(&|c| c.pdims = [-1, -4], 4);
        bad(&|c| c.pdims = [0, 0], 4);
        bad(&|c| c.transpose_comm_backend = 10, 4);
        bad(&|c| c.halo_comm_backend = 0, 4);
        bad(&|c| c.rank_order = 3, 4);
        bad(&|c| c.gdims_dist = [5, 4, 4], 4);
        bad(&|c| c.gdims = [0, 4, 4], 4);
        bad(&|c| c.transpose_mem_order[0] = [0, 1, 2], 4);
        bad(&|c| c.transpose_mem_order = [[0, 1, 1]; 3], 4);
        let mut c = ok.clone();
        c.transpose_mem_order = [[2, 1, 0], [1, 0, 2], [0, 2, 1]];
        let g = Grid::new(&c, 4, false).unwrap();
        assert_eq!(g.orders[2], [0, 2, 1]);
    }

    #[test]
    fn rank_order_resolution() {
        let cfg = GridConfig {
            gdims: [4, 4, 4],
            pdims: [2, 2],
            ..Default::default()
        };
        assert_eq!(
            Grid::new(&cfg, 4, true).unwrap().rank_order,
            RankOrder::ColMajor
        );
        assert_eq!(
            Grid::new(&cfg, 4, false).unwrap().rank_order,
            RankOrder::RowMajor
        );
    }
}
