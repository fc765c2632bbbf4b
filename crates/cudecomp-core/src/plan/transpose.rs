//! Transpose plans: per-peer chunks, packing order and peer schedule.

use super::{Copy3, Layout};
use crate::geometry::{align, Axis, Box3, CommAxis, Grid, PencilInfo};
use crate::Result;

/// Bytes per slice when stream-ordered pipelines cut chunks: below this, per-slice costs
/// (an event, an NCCL group or a copy launch) start to show next to the transfer itself.
pub(crate) const SLICE_BYTES: i64 = 32 << 20;

/// Most slices one chunk is cut into on GPUs (bounds the events each rank keeps per peer).
pub(crate) const MAX_SLICES: usize = 16;

/// How many times larger than the first and the last slice the inner slices of a chunk
/// usually are: a pipeline exposes the packing of its first slice and the unpacking of its
/// last, so those are cut small and the others large (same slice count).
pub(crate) const TAPER: i64 = 4;

/// Cuts `region`, packed in memory order `order`, into at most `n` boxes along its slowest
/// axis that has more than one cell; each box is one dense run of the packed chunk and the
/// boxes follow each other in memory. With three slices or more, the first and the last
/// are `taper` times thinner than the others (1: all alike) where the axis is long enough
/// for every slice to keep a cell. Empty regions have no slices.
pub(crate) fn slice_box(region: &Box3, order: [Axis; 3], n: usize, taper: i64) -> Vec<Box3> {
    if region.volume() <= 0 {
        return Vec::new();
    }
    let Some(&g) = order.iter().rev().find(|&&g| region.len[g] > 1) else {
        return vec![*region];
    };
    let len = region.len[g];
    let n = (n.max(1) as i64).min(len);
    let weight = |i: i64| {
        if n >= 3 && (i == 0 || i == n - 1) {
            1
        } else {
            taper.max(1)
        }
    };
    let total: i64 = (0..n).map(weight).sum();
    // Cut points at the cumulative weights; uniform cuts when the axis is too short.
    let tapered = len >= total;
    let mut acc = 0;
    let mut cuts = vec![0];
    for i in 0..n {
        acc += if tapered { weight(i) } else { 1 };
        cuts.push(len * acc / if tapered { total } else { n });
    }
    cuts.windows(2)
        .map(|w| {
            let mut s = *region;
            s.lo[g] += w[0];
            s.len[g] = w[1] - w[0];
            s
        })
        .collect()
}

/// How a pipeline cuts chunks into slices (always tapered, see [`TAPER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slicing {
    /// Bytes per slice, about.
    pub bytes: i64,
    /// Most slices per chunk.
    pub max: usize,
}

/// Number of slices for a chunk of `cells` elements of `elem` bytes, slices of about
/// `slice_bytes`, at most `max`; the same on sender and receiver: it depends on the chunk
/// alone.
pub(crate) fn slice_count(cells: i64, elem: usize, slice_bytes: i64, max: usize) -> usize {
    let max = max.max(1) as i64;
    ((cells * elem as i64) / slice_bytes.max(1)).clamp(1, max) as usize
}

/// The four global transposes; the discriminant is upstream's operation index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// X-pencils to Y-pencils, within each process-grid column.
    XToY = 0,
    /// Y-pencils to Z-pencils, within each process-grid row.
    YToZ = 1,
    /// Z-pencils to Y-pencils, within each process-grid row.
    ZToY = 2,
    /// Y-pencils to X-pencils, within each process-grid column.
    YToX = 3,
    /// X-pencils to Z-pencils in one exchange, over the whole process grid (not upstream's).
    XToZ = 4,
    /// Z-pencils to X-pencils in one exchange, over the whole process grid (not upstream's).
    ZToX = 5,
}

impl Direction {
    /// Upstream's four, in its order (what autotuning times).
    pub const ALL: [Direction; 4] = [Self::XToY, Self::YToZ, Self::ZToY, Self::YToX];

    /// `(input axis, output axis)`.
    pub fn axes(self) -> (Axis, Axis) {
        match self {
            Self::XToY => (0, 1),
            Self::YToZ => (1, 2),
            Self::ZToY => (2, 1),
            Self::YToX => (1, 0),
            Self::XToZ => (0, 2),
            Self::ZToX => (2, 0),
        }
    }

    /// Upstream's operation name in reports (`TransposeXY`, ...).
    pub fn report_name(self) -> &'static str {
        match self {
            Self::XToY => "TransposeXY",
            Self::YToZ => "TransposeYZ",
            Self::ZToY => "TransposeZY",
            Self::YToX => "TransposeYX",
            Self::XToZ => "TransposeXZ",
            Self::ZToX => "TransposeZX",
        }
    }

    /// Python method name.
    pub fn method_name(self) -> &'static str {
        match self {
            Self::XToY => "transpose_x_to_y",
            Self::YToZ => "transpose_y_to_z",
            Self::ZToY => "transpose_z_to_y",
            Self::YToX => "transpose_y_to_x",
            Self::XToZ => "transpose_x_to_z",
            Self::ZToX => "transpose_z_to_x",
        }
    }

    /// The sub-communicator that exchanges data for this transpose.
    pub fn comm(self) -> CommAxis {
        match self {
            Self::XToY | Self::YToX => CommAxis::Col,
            Self::YToZ | Self::ZToY => CommAxis::Row,
            Self::XToZ | Self::ZToX => CommAxis::All,
        }
    }
}

/// Halos and padding of a transpose's input and output, global order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransposeLayouts {
    /// Halo cells on each side of the input pencil (left as they are).
    pub input_halo: [i64; 3],
    /// Padding after the input pencil's cells (never read).
    pub input_padding: [i64; 3],
    /// Halo cells on each side of the output pencil (not written).
    pub output_halo: [i64; 3],
    /// Padding after the output pencil's cells (not written).
    pub output_padding: [i64; 3],
}

/// One peer's share of a transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Global cells exchanged.
    pub region: Box3,
    /// Element offset inside the packed send or receive region.
    pub offset: i64,
    /// Number of elements.
    pub count: i64,
}

/// Everything a rank needs to execute one exchange between two layouts of a global
/// array: a transpose (pencils of one grid) or a redistribution (any two layouts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransposePlan {
    /// Which transpose (`None`: a redistribution).
    pub direction: Option<Direction>,
    /// This rank's input pencil.
    pub input: PencilInfo,
    /// This rank's output pencil.
    pub output: PencilInfo,
    /// Where each global cell of the input sits in its array.
    pub in_layout: Layout,
    /// Where each global cell of the output sits in its array.
    pub out_layout: Layout,
    /// Global ranks of the exchanging sub-communicator, by sub-communicator rank.
    pub members: Vec<usize>,
    /// This rank's index in `members`.
    pub me: usize,
    /// Memory order of packed chunks (the same on every rank).
    pub pack_order: [Axis; 3],
    /// What this rank sends to each peer (indexed by peer).
    pub sends: Vec<Chunk>,
    /// What this rank receives from each peer (indexed by peer).
    pub recvs: Vec<Chunk>,
    /// Element offset of the receive region in the workspace.
    pub recv_base: i64,
    /// Pairs `(send to, receive from)` for steps 1..P, in upstream's interleaved order.
    pub schedule: Vec<(usize, usize)>,
    /// Chunks are dense runs of the input, so they can be sent without packing.
    pub send_from_input: bool,
    /// Chunks are dense runs of the output, so they can be received without unpacking.
    pub recv_into_output: bool,
    /// No member of the sub-communicator sends from its input or receives into its
    /// output: every chunk travels between workspaces, on every rank alike (what NCCL's
    /// registered buffers need: a registered send must meet a registered receive).
    pub packed_everywhere: bool,
    /// Element offset, in each member's workspace, where this rank's chunk lands (its
    /// receive region plus the chunks of lower ranks): what a direct writer targets.
    pub peer_recv_offsets: Vec<i64>,
    /// Largest input, output or workspace (elements) of any member: decisions that every
    /// member must take alike (message counts fitting MPI's `int`) use this bound.
    pub max_member_elems: i64,
    /// Where each global cell of each member's output sits in its array (by member):
    /// what a rank writing straight into peers' outputs addresses.
    pub peer_out_layouts: Vec<Layout>,
    /// Elements of each member's output array (by member), halos and padding included.
    pub peer_out_elems: Vec<i64>,
}

impl TransposePlan {
    /// Plans `direction` for `rank` with the given halos and padding.
    pub fn new(
        grid: &Grid,
        rank: usize,
        direction: Direction,
        layouts: &TransposeLayouts,
    ) -> Result<TransposePlan> {
        let (a, b) = direction.axes();
        let what = direction.method_name();
        grid.check_not_empty(a, what)?;
        grid.check_not_empty(b, what)?;
        let members = grid.comm_members(direction.comm(), rank);
        let pencils = |axis: Axis, halo, padding| {
            members
                .iter()
                .map(|&r| grid.pencil_info(axis as i64, r, halo, padding))
                .collect::<Result<Vec<_>>>()
        };
        let inputs = pencils(a, layouts.input_halo, layouts.input_padding)?;
        let outputs = pencils(b, layouts.output_halo, layouts.output_padding)?;
        Ok(TransposePlan::between(
            Some(direction),
            members,
            rank,
            Side {
                pencils: &inputs,
                axis: Some(a),
            },
            Side {
                pencils: &outputs,
                axis: Some(b),
            },
        ))
    }

    /// Plans the exchange of `rank` (one of `members`, handle ranks in the order of the
    /// exchanging communicator's ranks) from layout `src` to layout `dst`, each given for
    /// every member; together the members' boxes of each side must cover the same cells,
    /// each once (checked by the caller). Every member computes the same shared
    /// decisions (packing order, who packs), from the same descriptions.
    pub fn between(
        direction: Option<Direction>,
        members: Vec<usize>,
        rank: usize,
        src: Side<'_>,
        dst: Side<'_>,
    ) -> TransposePlan {
        let me = members.iter().position(|&r| r == rank).unwrap_or(0);
        let (input, output) = (src.pencils[me], dst.pencils[me]);
        let in_boxes: Vec<Box3> = src.pencils.iter().map(PencilInfo::interior).collect();
        let out_boxes: Vec<Box3> = dst.pencils.iter().map(PencilInfo::interior).collect();
        let pack_order = pack_order(&src, &dst);
        let sends = chunks(&in_boxes[me], &out_boxes);
        let recvs = chunks(&out_boxes[me], &in_boxes);
        let in_layout = Layout::of_pencil(&input);
        let out_layout = Layout::of_pencil(&output);
        let (send_from_input, recv_into_output) =
            dense_chunks(&sends, &in_layout, &recvs, &out_layout, pack_order);
        let recv_base = align(in_boxes[me].volume());
        let schedule = peer_schedule(me, members.len());
        // Whether a member packs depends on its chunk shapes alone. Members of an X↔Y or
        // Y↔Z transpose share the third axis and each pencil is whole along its own axis,
        // so members with the same pencil shapes have the same chunk shapes: each shape
        // is checked once. Elsewhere chunk shapes depend on where the boxes lie.
        let by_shape = direction.is_some_and(|d| d.comm() != CommAxis::All);
        let mut seen = vec![(
            input.shape,
            output.shape,
            in_boxes[me].len,
            out_boxes[me].len,
        )];
        let mut packed_everywhere = !send_from_input && !recv_into_output;
        let mut max_member_elems = 0;
        for (k, (i, o)) in src.pencils.iter().zip(dst.pencils).enumerate() {
            let (ib, ob) = (in_boxes[k], out_boxes[k]);
            let work = align(ib.volume()) + ob.volume();
            max_member_elems = max_member_elems.max(i.size).max(o.size).max(work);
            let key = (i.shape, o.shape, ib.len, ob.len);
            if packed_everywhere && !(by_shape && seen.contains(&key)) {
                seen.push(key);
                let (s, rv) = dense_chunks(
                    &chunks(&ib, &out_boxes),
                    &Layout::of_pencil(i),
                    &chunks(&ob, &in_boxes),
                    &Layout::of_pencil(o),
                    pack_order,
                );
                packed_everywhere = !s && !rv;
            }
        }
        let peer_recv_offsets = (0..members.len())
            .map(|k| {
                let out_k = out_boxes[k];
                align(in_boxes[k].volume())
                    + in_boxes[..me]
                        .iter()
                        .map(|b| out_k.intersect(b).volume())
                        .sum::<i64>()
            })
            .collect();
        TransposePlan {
            direction,
            input,
            output,
            in_layout,
            out_layout,
            members,
            me,
            pack_order,
            sends,
            recvs,
            recv_base,
            schedule,
            send_from_input,
            recv_into_output,
            packed_everywhere,
            peer_recv_offsets,
            max_member_elems,
            peer_out_layouts: dst.pencils.iter().map(Layout::of_pencil).collect(),
            peer_out_elems: dst.pencils.iter().map(|o| o.size).collect(),
        }
    }

    /// Number of peers in the exchanging sub-communicator.
    pub fn npeers(&self) -> usize {
        self.members.len()
    }

    /// Input → packed send slot of `peer` (send region at workspace offset 0).
    pub fn pack(&self, peer: usize) -> Copy3 {
        self.pack_part(peer, &self.sends[peer].region)
    }

    /// Packed receive slot of `peer` (at `base`) → output.
    pub fn unpack_from(&self, peer: usize, base: i64) -> Copy3 {
        self.unpack_part(peer, base, &self.recvs[peer].region)
    }

    /// [`TransposePlan::pack`] restricted to `part` of the chunk (a slice).
    pub fn pack_part(&self, peer: usize, part: &Box3) -> Copy3 {
        let c = &self.sends[peer];
        let dst = Layout::packed(&c.region, self.pack_order, c.offset);
        Copy3::between(part, &self.in_layout, &dst)
    }

    /// [`TransposePlan::unpack_from`] restricted to `part` of the chunk (a slice).
    pub fn unpack_part(&self, peer: usize, base: i64, part: &Box3) -> Copy3 {
        let c = &self.recvs[peer];
        let src = Layout::packed(&c.region, self.pack_order, base + c.offset);
        Copy3::between(part, &src, &self.out_layout)
    }

    /// Slices of the chunk sent to `peer` (see [`slice_box`]).
    pub fn send_slices(&self, peer: usize, elem: usize, cut: &Slicing) -> Vec<Box3> {
        self.slices(&self.sends[peer], elem, cut)
    }

    /// Slices of the chunk received from `peer`: the sender's slices of the same chunk.
    pub fn recv_slices(&self, peer: usize, elem: usize, cut: &Slicing) -> Vec<Box3> {
        self.slices(&self.recvs[peer], elem, cut)
    }

    fn slices(&self, c: &Chunk, elem: usize, cut: &Slicing) -> Vec<Box3> {
        let n = slice_count(c.count, elem, cut.bytes, cut.max);
        slice_box(&c.region, self.pack_order, n, TAPER)
    }

    /// Element offset of `part` inside the packed chunk whose region is `region`.
    pub fn packed_offset(&self, region: &Box3, part: &Box3) -> i64 {
        Layout::packed(region, self.pack_order, 0).offset(part.lo)
    }

    /// This rank's own chunk, packed in the send region → output (in-place runs).
    pub fn unpack_self_packed(&self) -> Copy3 {
        let c = &self.sends[self.me];
        let src = Layout::packed(&c.region, self.pack_order, c.offset);
        Copy3::between(&c.region, &src, &self.out_layout)
    }

    /// `part` of the chunk for `peer`: input → this rank's receive slot, packed, in the
    /// peer's workspace.
    pub fn pack_into_peer(&self, peer: usize, part: &Box3) -> Copy3 {
        let c = &self.sends[peer];
        let dst = Layout::packed(&c.region, self.pack_order, self.peer_recv_offsets[peer]);
        Copy3::between(part, &self.in_layout, &dst)
    }

    /// The chunk for `peer`: input → the peer's output array (single-copy exchanges).
    pub fn peer_output_copy(&self, peer: usize) -> Copy3 {
        Copy3::between(
            &self.sends[peer].region,
            &self.in_layout,
            &self.peer_out_layouts[peer],
        )
    }

    /// Input → output for the cells that stay on this rank.
    pub fn self_copy(&self) -> Copy3 {
        Copy3::between(
            &self.sends[self.me].region,
            &self.in_layout,
            &self.out_layout,
        )
    }

    /// Element offset of `peer`'s chunk in the input, when sending without packing.
    pub fn send_offset_in_input(&self, peer: usize) -> i64 {
        let r = &self.sends[peer].region;
        self.in_layout.offset(r.lo)
    }

    /// Element offset of `peer`'s chunk in the output, when receiving without unpacking.
    pub fn recv_offset_in_output(&self, peer: usize) -> i64 {
        let r = &self.recvs[peer].region;
        self.out_layout.offset(r.lo)
    }

    /// Elements of workspace this plan needs (never more than the grid's transpose workspace size).
    pub fn workspace_elems(&self) -> i64 {
        self.recv_base + self.output.interior().volume()
    }

    /// True when nothing moves between ranks and input and output coincide cell for cell.
    pub fn is_identity_in_place(&self) -> bool {
        self.npeers() == 1 && self.in_layout == self.out_layout
    }
}

/// The chunks `own` (a member's box) shares with each member's box of the other side,
/// packed one after the other in member order.
fn chunks(own: &Box3, others: &[Box3]) -> Vec<Chunk> {
    let mut off = 0;
    others
        .iter()
        .map(|b| {
            let region = own.intersect(b);
            let count = region.volume();
            let c = Chunk {
                region,
                offset: off,
                count,
            };
            off += count;
            c
        })
        .collect()
}

/// One side of an exchange: every member's array, and the axis every box spans whole
/// where the side is a pencil (`None`: boxes).
#[derive(Clone, Copy, Debug)]
pub struct Side<'a> {
    /// Each member's array (by member).
    pub pencils: &'a [PencilInfo],
    /// The pencil axis, if the side is a pencil.
    pub axis: Option<Axis>,
}

/// Memory order of packed chunks, decided from the descriptions alone so that every
/// member takes the same: the input's order, unless only the output's makes the chunks
/// land as dense runs (its slowest axis is its pencil axis while the input's is not its
/// own).
fn pack_order(src: &Side<'_>, dst: &Side<'_>) -> [Axis; 3] {
    let order = |s: &Side<'_>| s.pencils.first().map_or([0, 1, 2], |p| p.order);
    let (in_order, out_order) = (order(src), order(dst));
    if Some(in_order[2]) == src.axis || Some(out_order[2]) != dst.axis {
        in_order
    } else {
        out_order
    }
}

/// Whether every non-empty chunk is a dense run of the input layout (sent without
/// packing) and of the output layout (received without unpacking).
fn dense_chunks(
    sends: &[Chunk],
    in_layout: &Layout,
    recvs: &[Chunk],
    out_layout: &Layout,
    order: [Axis; 3],
) -> (bool, bool) {
    let dense = |cs: &[Chunk], l: &Layout| {
        cs.iter()
            .all(|c| c.count == 0 || l.holds_packed(&c.region, order))
    };
    (dense(sends, in_layout), dense(recvs, out_layout))
}

/// Upstream's peer order (reference §7.2): step `j` is remapped to interleave near and far
/// peers; power-of-two sizes pair by XOR, others go round a ring.
pub(crate) fn peer_schedule(me: usize, p: usize) -> Vec<(usize, usize)> {
    (1..p)
        .map(|j| {
            let s = if j % 2 == 1 { j / 2 + 1 } else { p / 2 + j / 2 };
            if p.is_power_of_two() {
                (me ^ s, me ^ s)
            } else {
                ((me + s) % p, (me + p - s) % p)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GridConfig;

    fn grid(gdims: [i32; 3], pdims: [i32; 2], contiguous: bool) -> Grid {
        let cfg = GridConfig {
            gdims,
            pdims,
            transpose_axis_contiguous: [contiguous; 3],
            ..Default::default()
        };
        Grid::new(&cfg, (pdims[0] * pdims[1]) as usize, false).unwrap()
    }

    #[test]
    fn schedule_is_a_permutation_and_symmetric() {
        for p in 1..=9 {
            for me in 0..p {
                let s = peer_schedule(me, p);
                let mut sends: Vec<_> = s.iter().map(|x| x.0).collect();
                sends.sort();
                assert_eq!(sends, (0..p).filter(|&x| x != me).collect::<Vec<_>>());
                for (j, &(to, _)) in s.iter().enumerate() {
                    // The peer I send to at step j receives from me at the same step.
                    assert_eq!(peer_schedule(to, p)[j].1, me);
                }
            }
        }
    }

    #[test]
    fn chunks_cover_pencils_and_match_peers() {
        for contiguous in [false, true] {
            let g = grid([9, 10, 11], [2, 3], contiguous);
            for d in Direction::ALL {
                for rank in 0..6 {
                    let p = TransposePlan::new(&g, rank, d, &TransposeLayouts::default()).unwrap();
                    let total: i64 = p.sends.iter().map(|c| c.count).sum();
                    assert_eq!(total, p.input.size);
                    let total: i64 = p.recvs.iter().map(|c| c.count).sum();
                    assert_eq!(total, p.output.size);
                    assert!(p.workspace_elems() <= g.transpose_workspace_size().unwrap());
                    for (j, &peer) in p.members.iter().enumerate() {
                        let q =
                            TransposePlan::new(&g, peer, d, &TransposeLayouts::default()).unwrap();
                        // Every member takes the same MPI_A2A / point-to-point decision.
                        assert_eq!(p.max_member_elems, q.max_member_elems);
                        assert!(p.max_member_elems >= p.workspace_elems());
                        let (s, r) = (p.sends[j], q.recvs[p.me]);
                        assert_eq!((s.region, s.count), (r.region, r.count));
                    }
                }
            }
        }
    }

    #[test]
    fn plans_between_any_boxes_match_their_peers() {
        // Z slabs of 9x10x11 over 3 ranks to bricks over the same 3 ranks (one empty),
        // and the X↔Z transposes of a 2x3 grid: what each member sends another is what
        // that one receives from it, and every cell of each side is sent and received.
        let slabs: Vec<PencilInfo> = [(0, 4), (4, 3), (7, 4)]
            .iter()
            .map(|&(lo, n)| {
                PencilInfo::of_box(&Box3 {
                    lo: [0, 0, lo],
                    len: [9, 10, n],
                })
            })
            .collect();
        let bricks: Vec<PencilInfo> = [
            Box3 {
                lo: [0, 0, 0],
                len: [5, 10, 11],
            },
            Box3::default(),
            Box3 {
                lo: [5, 0, 0],
                len: [4, 10, 11],
            },
        ]
        .iter()
        .map(PencilInfo::of_box)
        .collect();
        let boxes = |p: &[PencilInfo]| p.to_vec();
        let (s, b) = (boxes(&slabs), boxes(&bricks));
        let plans: Vec<_> = (0..3)
            .map(|r| {
                let side = |p| Side {
                    pencils: p,
                    axis: None,
                };
                TransposePlan::between(None, vec![0, 1, 2], r, side(&s), side(&b))
            })
            .collect();
        let g = grid([9, 10, 11], [2, 3], true);
        for d in [Direction::XToZ, Direction::ZToX] {
            let xz: Vec<_> = (0..6)
                .map(|r| TransposePlan::new(&g, r, d, &TransposeLayouts::default()).unwrap())
                .collect();
            assert!(xz.iter().all(|p| p.npeers() == 6));
            check_peers(&xz);
        }
        check_peers(&plans);
        assert_eq!(plans[1].sends.iter().map(|c| c.count).sum::<i64>(), 3 * 90);
        assert_eq!(plans[1].recvs.iter().map(|c| c.count).sum::<i64>(), 0);
    }

    fn check_peers(plans: &[TransposePlan]) {
        for p in plans {
            assert_eq!(
                p.sends.iter().map(|c| c.count).sum::<i64>(),
                p.input.interior().volume()
            );
            assert_eq!(
                p.recvs.iter().map(|c| c.count).sum::<i64>(),
                p.output.interior().volume()
            );
            for (j, &peer) in p.members.iter().enumerate() {
                let q = &plans[peer];
                assert_eq!(p.sends[j].region, q.recvs[p.me].region);
                assert_eq!(p.pack_order, q.pack_order);
                assert_eq!(p.packed_everywhere, q.packed_everywhere);
            }
        }
    }

    #[test]
    fn packed_everywhere_agrees_with_every_member() {
        let layouts = [
            TransposeLayouts::default(),
            TransposeLayouts {
                input_halo: [1, 0, 2],
                output_padding: [0, 1, 0],
                ..Default::default()
            },
        ];
        let shapes = [
            ([8, 8, 8], [2, 1]),
            ([8, 8, 8], [1, 2]),
            ([9, 10, 11], [2, 3]),
        ];
        let mut seen = [false; 2];
        for contiguous in [false, true] {
            for (gdims, pdims) in shapes {
                let g = grid(gdims, pdims, contiguous);
                let n = (pdims[0] * pdims[1]) as usize;
                for d in Direction::ALL {
                    for l in &layouts {
                        let plans: Vec<_> = (0..n)
                            .map(|r| TransposePlan::new(&g, r, d, l).unwrap())
                            .collect();
                        for p in &plans {
                            let want = p
                                .members
                                .iter()
                                .all(|&r| !plans[r].send_from_input && !plans[r].recv_into_output);
                            assert_eq!(p.packed_everywhere, want, "{gdims:?} {pdims:?} {d:?}");
                            // A single-copy writer addresses each member's own output layout;
                            // decisions all members take alike read one bound.
                            for (k, &r) in p.members.iter().enumerate() {
                                assert_eq!(p.peer_out_layouts[k], plans[r].out_layout);
                                assert_eq!(p.max_member_elems, plans[r].max_member_elems);
                            }
                            seen[usize::from(want)] = true;
                        }
                    }
                }
            }
        }
        // Both answers occur in this matrix.
        assert_eq!(seen, [true, true]);
    }

    #[test]
    fn slices_tile_the_packed_chunk_in_order() {
        let g = grid([9, 10, 11], [2, 3], false);
        for d in Direction::ALL {
            for rank in 0..6 {
                let p = TransposePlan::new(&g, rank, d, &TransposeLayouts::default()).unwrap();
                for peer in 0..p.npeers() {
                    let c = p.sends[peer];
                    let cut = Slicing {
                        bytes: 40,
                        max: MAX_SLICES,
                    };
                    let parts = p.send_slices(peer, 8, &cut);
                    let mut next = 0;
                    for part in &parts {
                        assert_eq!(p.packed_offset(&c.region, part), next);
                        next += part.volume();
                    }
                    assert_eq!(next, c.count);
                    let want = slice_count(c.count, 8, 40, MAX_SLICES).min(if c.count > 0 {
                        11
                    } else {
                        0
                    });
                    assert!(parts.len() <= want.max(1));
                    if c.count > 0 {
                        assert!(parts.len() > 1 || slice_count(c.count, 8, 40, MAX_SLICES) == 1);
                    }
                }
            }
        }
        assert_eq!(slice_count(1, 16, SLICE_BYTES, MAX_SLICES), 1);
        assert_eq!(
            slice_count(1 << 30, 16, SLICE_BYTES, MAX_SLICES),
            MAX_SLICES
        );
        assert_eq!(slice_count(1 << 30, 16, SLICE_BYTES, 8), 8);
        let one = Box3 {
            lo: [3, 4, 5],
            len: [1, 1, 1],
        };
        assert_eq!(slice_box(&one, [0, 1, 2], 4, TAPER), vec![one]);
        // Tapered ends on a long axis, uniform cuts on a short one, always in order.
        let long = Box3 {
            lo: [0, 0, 2],
            len: [3, 1, 100],
        };
        let lens = |b: &Box3, n| {
            slice_box(b, [0, 1, 2], n, TAPER)
                .iter()
                .map(|s| s.len[2])
                .collect::<Vec<_>>()
        };
        assert_eq!(lens(&long, 4), vec![10, 40, 40, 10]);
        assert_eq!(lens(&long, 2), vec![50, 50]);
        let short = Box3 {
            len: [3, 1, 9],
            ..long
        };
        assert_eq!(lens(&short, 4), vec![2, 2, 2, 3]);
        assert_eq!(lens(&short, 12), vec![1; 9]);
        let even = slice_box(&long, [0, 1, 2], 4, 1);
        assert!(even.len() == 4 && even.iter().all(|s| s.len[2] == 25));
    }

    #[test]
    fn direct_paths_for_default_layout() {
        // Default layout: X->Y chunks are cut along X (fastest): neither side is dense.
        let g = grid([8, 8, 8], [2, 1], false);
        let p = TransposePlan::new(&g, 0, Direction::XToY, &TransposeLayouts::default()).unwrap();
        assert!(!p.send_from_input);
        // Y->Z with Z slowest: chunks are Z slabs of the output.
        let g = grid([8, 8, 8], [1, 2], false);
        let p = TransposePlan::new(&g, 0, Direction::YToZ, &TransposeLayouts::default()).unwrap();
        assert!(p.recv_into_output);
        let halo = TransposeLayouts {
            output_halo: [1, 0, 0],
            ..Default::default()
        };
        let p = TransposePlan::new(&g, 0, Direction::YToZ, &halo).unwrap();
        assert!(!p.recv_into_output);
    }
}
