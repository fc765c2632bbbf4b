//! What tests and examples check the library with (feature `testing`): the in-process
//! communicator that runs every rank as a thread of one process ([`mock`]), and the
//! global-index oracles: each interior cell holds the linear index `x + X*(y + Y*z)` of
//! its global point, every other cell a sentinel.

pub use crate::comm::mock;

use crate::geometry::PencilInfo;
use crate::plan::Layout;

/// Linear index of global point `p` in a grid of `gdims`.
fn index(p: [i64; 3], gdims: [i64; 3]) -> u64 {
    (p[0] + gdims[0] * (p[1] + gdims[1] * p[2])) as u64
}

/// A pencil buffer holding the global-index oracle (`sentinel` outside the interior).
pub fn oracle(info: &PencilInfo, gdims: [i64; 3], sentinel: u64) -> Vec<u64> {
    let l = Layout::of_pencil(info);
    let mut v = vec![sentinel; info.size as usize];
    let b = info.interior();
    for z in b.lo[2]..b.lo[2] + b.len[2] {
        for y in b.lo[1]..b.lo[1] + b.len[1] {
            for x in b.lo[0]..b.lo[0] + b.len[0] {
                v[l.offset([x, y, z]) as usize] = index([x, y, z], gdims);
            }
        }
    }
    v
}

/// The pencil `info` of [`oracle`] after halo updates along all three dimensions
/// (reference §5): every cell but the padding holds the index of its global point,
/// wrapped where `periods` says the axis is periodic, or `sentinel` where the point lies
/// beyond a non-periodic boundary; padding keeps `sentinel`.
pub fn halo_oracle(
    info: &PencilInfo,
    gdims: [i64; 3],
    periods: [bool; 3],
    sentinel: u64,
) -> Vec<u64> {
    let l = Layout::of_pencil(info);
    let stored: [i64; 3] = std::array::from_fn(|a| info.stored_extent(a));
    let mut v = vec![sentinel; info.size as usize];
    let mut local = [0i64; 3];
    for k in 0..stored[info.order[2]] {
        for j in 0..stored[info.order[1]] {
            for i in 0..stored[info.order[0]] {
                local[info.order[0]] = i;
                local[info.order[1]] = j;
                local[info.order[2]] = k;
                let at = std::array::from_fn(|a| l.origin[a] + local[a]);
                if (0..3).any(|a| local[a] >= stored[a] - info.padding[a]) {
                    continue;
                }
                let wrapped: Option<Vec<i64>> = (0..3)
                    .map(|a| {
                        let p: i64 = at[a];
                        match (0..gdims[a]).contains(&p) {
                            true => Some(p),
                            false if periods[a] => Some(p.rem_euclid(gdims[a])),
                            false => None,
                        }
                    })
                    .collect();
                if let Some(p) = wrapped {
                    v[l.offset(at) as usize] = index([p[0], p[1], p[2]], gdims);
                }
            }
        }
    }
    v
}
