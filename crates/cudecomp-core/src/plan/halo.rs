//! Halo-update plans (reference §5): which faces go to which neighbour along one dimension.
//!
//! Faces span the full stored extent of the other two dimensions, their halos included and
//! padding excluded, so three successive updates (dims 0, 1, 2) fill edges and corners.

use super::{slice_box, Copy3, Layout, TAPER};
use crate::geometry::{align, face_cells, halo_workspace_elems, Axis, Box3, Grid, PencilInfo};
use crate::{invalid, Result};

/// Arguments of one halo update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HaloSpec {
    /// Pencil orientation (0 = X, 1 = Y, 2 = Z).
    pub axis: Axis,
    /// Global dimension whose halos are updated.
    pub dim: Axis,
    /// Halo extents of the pencil per global axis (X, Y, Z); `halo[dim]` cells move.
    pub halo: [i64; 3],
    /// Periodic boundaries per global axis: the first and last ranks are neighbours.
    pub periods: [bool; 3],
    /// Padding of the pencil per global axis, never exchanged.
    pub padding: [i64; 3],
}

/// One side of the exchange along `dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HaloSide {
    /// Towards lower coordinates.
    Left = 0,
    /// Towards higher coordinates.
    Right = 1,
}

impl HaloSide {
    /// Both sides.
    pub(crate) const BOTH: [HaloSide; 2] = [HaloSide::Left, HaloSide::Right];

    /// Tag of the message travelling *towards* this side. The receiver, for which the
    /// sender is on the opposite side, uses the same tag: this keeps the two messages apart
    /// when left and right neighbour are the same rank (two ranks, periodic).
    pub(crate) fn tag(self) -> i32 {
        1000 + self as i32 * 64
    }

    /// The other side.
    pub(crate) fn opposite(self) -> HaloSide {
        match self {
            HaloSide::Left => HaloSide::Right,
            HaloSide::Right => HaloSide::Left,
        }
    }
}

/// Everything one rank needs to execute a halo update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HaloPlan {
    /// The update this plan executes.
    pub spec: HaloSpec,
    /// This rank's pencil, halos and padding included.
    pub info: PencilInfo,
    /// Where each global cell of the pencil sits in the array.
    pub layout: Layout,
    /// Neighbour global ranks (`None` at a non-periodic boundary).
    pub neighbours: [Option<usize>; 2],
    /// Both neighbours are this rank: the update is a local periodic wrap.
    pub local_wrap: bool,
    /// Interior faces sent to each side.
    pub send: [Box3; 2],
    /// Halo faces received from each side.
    pub recv: [Box3; 2],
    /// Owned extent along `dim` (the periodic shift of a wrap copy).
    pub period_shift: i64,
    /// Elements per face.
    pub face: i64,
    /// Element stride between the four workspace slots (send L, send R, recv L, recv R).
    pub slot: i64,
    /// The largest halo workspace of any rank for this update (elements).
    pub max_workspace_elems: i64,
    /// No rank's faces are dense in its array: every rank packs and unpacks them through
    /// its workspace (what NCCL's registered buffers need: a registered send must meet a
    /// registered receive).
    pub packed_everywhere: bool,
}

/// The interior faces sent to each side and the halo faces received from each side of a
/// pencil: the full stored extent of the other dimensions, without padding.
fn faces(info: &PencilInfo, spec: &HaloSpec) -> ([Box3; 2], [Box3; 2]) {
    let d = spec.dim;
    let h = spec.halo[d];
    let interior = info.interior();
    let mut face = Box3::default();
    for g in 0..3 {
        face.lo[g] = interior.lo[g] - spec.halo[g];
        face.len[g] = interior.len[g] + 2 * spec.halo[g];
    }
    let slab = |lo: i64| {
        let mut b = face;
        b.lo[d] = lo;
        b.len[d] = h;
        b
    };
    let (lo, end) = (interior.lo[d], interior.lo[d] + interior.len[d]);
    ([slab(lo), slab(end - h)], [slab(lo - h), slab(end)])
}

impl HaloPlan {
    /// Plans a halo update; `None` when it moves nothing (zero extent along `dim`, or no
    /// neighbour on either side).
    pub(crate) fn new(grid: &Grid, rank: usize, spec: HaloSpec) -> Result<Option<HaloPlan>> {
        let info = grid.pencil_info(spec.axis as i64, rank, spec.halo, spec.padding)?;
        let d = spec.dim;
        let h = spec.halo[d];
        if h == 0 {
            return Ok(None);
        }
        grid.check_not_empty(spec.axis, "update_halos")?;
        let periodic = spec.periods[d];
        let shifted = |disp| grid.shifted_rank(spec.axis as i64, rank, d as i64, disp, periodic);
        let neighbours = [shifted(-1)?, shifted(1)?];
        if neighbours == [None, None] {
            return Ok(None);
        }
        let own = grid.axis_range(spec.axis, rank, d).1;
        // Checked over every rank that exchanges, not just this one's neighbours: the
        // geometry is the same everywhere, so all ranks refuse alike instead of some
        // waiting for a face that a refusing rank never sends.
        for r in 0..grid.nranks() {
            let exchanges = [-1, 1].into_iter().any(|disp| {
                matches!(
                    grid.shifted_rank(spec.axis as i64, r, d as i64, disp, periodic),
                    Ok(Some(_))
                )
            });
            let len = grid.axis_range(spec.axis, r, d).1;
            if exchanges && h > len {
                invalid!(
                    "halo_extents[{d}] = {h} exceeds the {len} cells rank {r} owns along dimension {d}: a halo may not span more than the nearest neighbour"
                );
            }
        }
        let (send, recv) = faces(&info, &spec);
        let cells = face_cells(&info, d) * h;
        // Every rank's faces, for decisions all ranks take alike.
        let mut max_workspace_elems = 0;
        let mut packed_everywhere = true;
        for r in 0..grid.nranks() {
            let i = grid.pencil_info(spec.axis as i64, r, spec.halo, spec.padding)?;
            packed_everywhere &=
                !Layout::of_pencil(&i).holds_packed(&faces(&i, &spec).0[0], i.order);
            max_workspace_elems = max_workspace_elems.max(halo_workspace_elems(&i)?);
        }
        Ok(Some(HaloPlan {
            spec,
            layout: Layout::of_pencil(&info),
            info,
            local_wrap: neighbours == [Some(rank), Some(rank)],
            neighbours,
            send,
            recv,
            period_shift: own,
            face: cells,
            slot: align(cells),
            max_workspace_elems,
            packed_everywhere,
        }))
    }

    /// Copy of the interior face destined for `side` into the same array's opposite halo
    /// (periodic wrap with this rank as its own neighbour).
    pub(crate) fn wrap_copy(&self, side: HaloSide) -> Copy3 {
        let d = self.spec.dim;
        let mut delta = [0; 3];
        // The face sent left lands in the upper halo, one period further on.
        delta[d] = match side {
            HaloSide::Left => self.period_shift,
            HaloSide::Right => -self.period_shift,
        };
        Copy3::between(
            &self.send[side as usize],
            &self.layout,
            &self.layout.shifted(delta),
        )
    }

    fn slot_layout(&self, b: &Box3, slot: i64) -> Layout {
        Layout::packed(b, self.info.order, slot * self.slot)
    }

    /// Array → workspace slot of the face sent to `side`.
    pub(crate) fn pack(&self, side: HaloSide) -> Copy3 {
        self.pack_part(side, &self.send[side as usize])
    }

    /// Workspace slot of the face received from `side` → array halo.
    pub(crate) fn unpack(&self, side: HaloSide) -> Copy3 {
        self.unpack_part(side, &self.recv[side as usize])
    }

    /// [`HaloPlan::pack`] restricted to `part` of the face (a slice).
    pub(crate) fn pack_part(&self, side: HaloSide, part: &Box3) -> Copy3 {
        let b = &self.send[side as usize];
        Copy3::between(part, &self.layout, &self.slot_layout(b, side as i64))
    }

    /// [`HaloPlan::unpack`] restricted to `part` of the face (a slice).
    pub(crate) fn unpack_part(&self, side: HaloSide, part: &Box3) -> Copy3 {
        let b = &self.recv[side as usize];
        Copy3::between(part, &self.slot_layout(b, 2 + side as i64), &self.layout)
    }

    /// The face sent to (`receive` false) or received from `side`, cut into at most `n`
    /// slices (tapered, see [`slice_box`]), each a dense run of the packed face, in memory
    /// order. A face and the neighbour's matching face have the same shape, so both ends
    /// cut alike.
    pub(crate) fn face_slices(&self, side: HaloSide, receive: bool, n: usize) -> Vec<Box3> {
        let b = if receive {
            &self.recv[side as usize]
        } else {
            &self.send[side as usize]
        };
        slice_box(b, self.info.order, n, TAPER)
    }

    /// Element offset of slice `part` inside the packed face `face` (sent or received).
    pub(crate) fn offset_in_face(&self, face: &Box3, part: &Box3) -> i64 {
        Layout::packed(face, self.info.order, 0).offset(part.lo)
    }

    /// Element offset of a face in the workspace: send slots 0/1, receive slots 2/3.
    pub(crate) fn slot_offset(&self, side: HaloSide, receive: bool) -> i64 {
        (side as i64 + if receive { 2 } else { 0 }) * self.slot
    }

    /// Element offset, in the workspace of the neighbour on `side`, of the receive slot
    /// the face this rank sends there lands in (the neighbour receives it from its
    /// opposite side; neighbours along `dim` share the face shape, so the slot size too).
    pub(crate) fn peer_slot_offset(&self, side: HaloSide) -> i64 {
        self.slot_offset(side.opposite(), true)
    }

    /// Array → this rank's send slot for `side`, or the face as it lies in the array when
    /// faces are dense: `(from the array?, element offset)` of the face to deliver.
    pub(crate) fn send_source(&self, side: HaloSide) -> (bool, i64) {
        if self.faces_dense() {
            (true, self.array_offset(&self.send[side as usize]))
        } else {
            (false, self.slot_offset(side, false))
        }
    }

    /// True when faces are dense runs of the array (the update dimension is the slowest
    /// in memory and the faster ones carry no padding): they go straight to and from MPI.
    pub(crate) fn faces_dense(&self) -> bool {
        self.layout.holds_packed(&self.send[0], self.info.order)
    }

    /// Element offset in the array of a face.
    pub(crate) fn array_offset(&self, b: &Box3) -> i64 {
        self.layout.offset(b.lo)
    }

    /// Workspace elements this plan uses.
    pub(crate) fn workspace_elems(&self) -> i64 {
        4 * self.slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridConfig;

    fn grid(pdims: [i32; 2]) -> Grid {
        let cfg = GridConfig {
            gdims: [9, 10, 11],
            pdims,
            ..Default::default()
        };
        Grid::new(&cfg, (pdims[0] * pdims[1]) as usize, false).unwrap()
    }

    #[test]
    fn every_rank_fields_agree_with_each_rank() {
        let mut seen = [false; 2];
        for pdims in [[2, 2], [1, 4], [4, 1]] {
            let g = grid(pdims);
            for axis in 0..3 {
                for dim in 0..3 {
                    for padding in [[0; 3], [1, 0, 0]] {
                        let spec = HaloSpec {
                            axis,
                            dim,
                            halo: [1, 1, 1],
                            periods: [true; 3],
                            padding,
                        };
                        let plans: Vec<_> = (0..4)
                            .filter_map(|r| HaloPlan::new(&g, r, spec).unwrap())
                            .collect();
                        let packed = plans.iter().all(|p| !p.faces_dense());
                        let largest = (0..4)
                            .map(|r| g.halo_workspace_size(axis as i64, r, spec.halo).unwrap())
                            .max();
                        for p in &plans {
                            assert_eq!(p.packed_everywhere, packed, "{pdims:?} {spec:?}");
                            assert!(p.max_workspace_elems >= p.workspace_elems());
                            assert_eq!(p.max_workspace_elems, plans[0].max_workspace_elems);
                            assert_eq!(Some(p.max_workspace_elems), largest);
                        }
                        seen[usize::from(packed)] = true;
                    }
                }
            }
        }
        // Both answers occur in this matrix.
        assert_eq!(seen, [true, true]);
    }

    #[test]
    fn faces_and_neighbours() {
        let g = grid([2, 2]);
        let spec = HaloSpec {
            axis: 0,
            dim: 1,
            halo: [1, 2, 1],
            periods: [false, true, false],
            padding: [0; 3],
        };
        let p = HaloPlan::new(&g, 0, spec).unwrap().unwrap();
        assert_eq!(p.neighbours, [Some(2), Some(2)]);
        assert_eq!(p.send[0].lo[1], 0);
        assert_eq!(p.send[1].lo[1], 3);
        assert_eq!(p.recv[0].lo[1], -2);
        assert_eq!(p.recv[1].lo[1], 5);
        assert_eq!(p.send[0].len, [11, 2, 8]);
        assert!(p.workspace_elems() <= g.halo_workspace_size(0, 0, [1, 2, 1]).unwrap());
    }

    #[test]
    fn no_ops_and_errors() {
        let g = grid([2, 2]);
        let mut spec = HaloSpec {
            axis: 0,
            dim: 0,
            halo: [1, 1, 1],
            ..Default::default()
        };
        assert!(HaloPlan::new(&g, 0, spec).unwrap().is_none()); // dim == axis, non-periodic
        spec.periods[0] = true;
        assert!(HaloPlan::new(&g, 0, spec).unwrap().unwrap().local_wrap);
        spec.dim = 2;
        spec.halo = [0, 0, 7]; // rank 1 owns 5 cells of Z
        assert!(HaloPlan::new(&g, 0, spec).is_err());
        spec.halo = [0, 0, 0];
        assert!(HaloPlan::new(&g, 0, spec).unwrap().is_none());
    }
}
