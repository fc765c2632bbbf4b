//! Outputs taken in steps: where a single-copy transpose's receiver wants to hear that the
//! leading cells of its output along an axis are written, so that its own work on them can
//! start before the rest lands (a device transpose's `output_ready` events).
//!
//! Writers cut their copies into a receiver's output by the receiver's steps and signal
//! each step once its cells are written. A receiver publishes its steps in the records the
//! members of a single copy exchange at its start ([`Landing::encode`]); the caller's marks
//! are grouped first ([`landing_groups`]), since each writer has [`MAX_SLICES`] signals per
//! receiver and the cells past the last mark take one of them.

use super::{AxisCells, Copy3, Layout, MAX_SLICES};
use crate::geometry::Axis;
use crate::{Error, Result};

/// Most steps a receiver publishes: one signal per writer is left for the cells past them.
pub(crate) const MAX_LANDING_STEPS: usize = MAX_SLICES - 1;

/// Bytes of an encoded [`Landing`]: a header word, then the ends.
pub(crate) const LANDING_BYTES: usize = 8 * (1 + MAX_LANDING_STEPS);

/// How one member takes its output: step `s` covers cells `ends[s - 1]..ends[s]` along
/// `along` of its output array (step 0 from cell 0), and one more step the cells past the
/// last end. No ends: one step, the whole output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Landing {
    /// The output array's cells along the steps' axis (`None` with no ends).
    pub along: Option<AxisCells>,
    /// Non-decreasing ends of the steps, at most [`MAX_LANDING_STEPS`].
    pub ends: Vec<i64>,
}

impl Landing {
    /// Steps, the one past the last end included.
    pub(crate) fn steps(&self) -> usize {
        self.ends.len() + 1
    }

    /// The part of `c` (a copy into this member's output) that lands in step `s`; `None`
    /// when none does.
    pub(crate) fn part(&self, c: &Copy3, s: usize) -> Option<Copy3> {
        let Some(a) = &self.along else {
            return (s == 0).then_some(*c);
        };
        let lo = s.checked_sub(1).map_or(0, |p| self.ends[p]);
        let hi = self.ends.get(s).copied().unwrap_or(i64::MAX);
        c.dst_range(a, lo, hi)
    }

    /// The record of steps ending at `ends` along global `axis` of a member's output
    /// (`ends` at most [`MAX_LANDING_STEPS`]; none: the output whole).
    pub(crate) fn encode(axis: Axis, ends: &[i64]) -> Result<[u8; LANDING_BYTES]> {
        if ends.len() > MAX_LANDING_STEPS {
            return Err(Error::Internal(format!(
                "{} output steps published, at most {MAX_LANDING_STEPS} fit",
                ends.len()
            )));
        }
        let mut v = [0u8; LANDING_BYTES];
        let head = ends.len() as u64 | (axis as u64) << 32;
        v[..8].copy_from_slice(&head.to_le_bytes());
        for (j, e) in ends.iter().enumerate() {
            v[8 * (j + 1)..8 * (j + 2)].copy_from_slice(&e.to_le_bytes());
        }
        Ok(v)
    }

    /// The steps a member published in `v` (see [`Landing::encode`]), for its output of
    /// `size` elements in `layout`; zeros (or nothing) mean the output whole.
    pub(crate) fn decode(v: &[u8], layout: &Layout, size: i64) -> Result<Landing> {
        let word = |j: usize| {
            v.get(8 * j..8 * (j + 1))
                .and_then(|w| w.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let head = word(0).unwrap_or(0);
        let (count, axis) = ((head & 0xffff_ffff) as usize, (head >> 32) as usize);
        if count == 0 {
            return Ok(Landing::default());
        }
        let ends: Option<Vec<i64>> = (1..=count).map(|j| word(j).map(|w| w as i64)).collect();
        match ends {
            Some(ends) if count <= MAX_LANDING_STEPS && axis < 3 => Ok(Landing {
                along: Some(layout.along(axis, size)),
                ends,
            }),
            _ => Err(Error::Internal(format!(
                "a member published {count} output steps along axis {axis}"
            ))),
        }
    }
}

/// Groups a caller's steps (the ends `planes`, not decreasing) into at most `max`: the
/// index of the last step of each group, in order. Every step of a group is signalled
/// when the group's last one is, so none is signalled before its cells are written;
/// with `max` or fewer steps, each is a group of its own.
pub(crate) fn landing_groups(planes: &[i64], max: usize) -> Vec<usize> {
    let (k, g) = (planes.len(), planes.len().min(max));
    (1..=g).map(|j| k * j / g - 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Box3;

    #[test]
    fn groups_cover_every_step_in_order() {
        assert_eq!(landing_groups(&[], 15), Vec::<usize>::new());
        assert_eq!(landing_groups(&[2, 4, 6], 15), vec![0, 1, 2]);
        let planes: Vec<i64> = (1..=40).collect();
        let g = landing_groups(&planes, 15);
        assert_eq!(g.len(), 15);
        assert_eq!(*g.last().unwrap(), 39);
        assert!(g.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn records_round_trip_and_cut_copies() {
        let b = Box3 {
            lo: [0, 0, 0],
            len: [4, 3, 5],
        };
        let layout = Layout::packed(&b, [0, 1, 2], 0);
        let size = b.volume();
        let v = Landing::encode(2, &[1, 1, 4]).unwrap();
        let l = Landing::decode(&v, &layout, size).unwrap();
        assert_eq!(l.ends, vec![1, 1, 4]);
        assert_eq!(l.steps(), 4);
        let whole = Copy3::between(&b, &layout, &layout);
        let parts: Vec<Option<i64>> = (0..l.steps())
            .map(|s| l.part(&whole, s).map(|c| c.extent[2]))
            .collect();
        assert_eq!(parts, vec![Some(1), None, Some(3), Some(1)]);
        // No steps: the output whole, in one.
        let none = Landing::decode(&[0u8; LANDING_BYTES], &layout, size).unwrap();
        assert_eq!(none, Landing::default());
        assert_eq!(none.part(&whole, 0), Some(whole));
        assert_eq!(none.part(&whole, 1), None);
        assert!(Landing::encode(0, &[1; MAX_LANDING_STEPS + 1]).is_err());
        let mut bad = v;
        bad[..8].copy_from_slice(&(99u64).to_le_bytes());
        assert!(Landing::decode(&bad, &layout, size).is_err());
    }
}
