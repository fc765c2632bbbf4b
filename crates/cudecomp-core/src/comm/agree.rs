//! Agreement on named values: every rank of a group must pass the same arguments to a
//! collective call (a configuration, an FFT plan's arguments). Where they differ, every
//! rank fails naming the first value that differs and what two ranks passed, instead of
//! one rank waiting in a collective the others never enter.

use super::{agree_parts, Communicator};
use crate::fields::Fields;
use crate::{invalid, Result};

/// Collective over `comm`: every rank passes `Ok(fields)`, the values it is about to use,
/// or `Err(text)` when it failed before it could say (its own error's text, which it then
/// raises itself). Unless every rank passed the same fields, every rank fails with
/// InvalidUsage: naming the first field that differs between rank 0 and the first rank
/// that differs from it, with both values (`what` names the call), or naming the rank
/// that failed.
pub fn agree_on(
    comm: &dyn Communicator,
    what: &str,
    mine: std::result::Result<&Fields, &str>,
) -> Result<()> {
    let encoded = mine.map(Fields::encode);
    let all = agree_parts(
        comm,
        &format!("its {what} could be compared"),
        encoded.as_deref().map_err(|e| *e),
    )?;
    let Some(r) = (1..all.len()).find(|&r| all[r] != all[0]) else {
        return Ok(());
    };
    let others: Vec<usize> = (r + 1..all.len()).filter(|&q| all[q] != all[0]).collect();
    let also = if others.is_empty() {
        String::new()
    } else {
        format!(" (rank(s) {others:?} differ from rank 0 too)")
    };
    let (first, theirs) = (Fields::decode(&all[0]), Fields::decode(&all[r]));
    let (Some(first), Some(theirs)) = (first, theirs) else {
        invalid!("{what} differ across ranks: rank {r} differs from rank 0{also}");
    };
    let missing = ("(nothing)", "(nothing)");
    let n = first.len().max(theirs.len());
    for i in 0..n {
        let a = first.iter().nth(i).unwrap_or(missing);
        let b = theirs.iter().nth(i).unwrap_or(missing);
        if a != b {
            let name = if a.0 == b.0 {
                a.0.to_owned()
            } else {
                format!("{} / {}", a.0, b.0)
            };
            invalid!(
                "{what} differ across ranks: expected the same values on every rank, but {name} is {} on rank 0 and {} on rank {r}{also}",
                a.1,
                b.1
            );
        }
    }
    invalid!("{what} differ across ranks: rank {r} differs from rank 0{also}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;
    use crate::Error;

    #[test]
    fn the_first_differing_field_is_named_on_every_rank() {
        let results = mock::run(3, |c| {
            let pdims = if c.rank() == 2 { [3, 1] } else { [1, 3] };
            let f = Fields::new().with("gdims", [8, 8, 8]).with("pdims", pdims);
            agree_on(c, "grid configuration", Ok(&f))
        });
        for r in results {
            let e = r.expect_err("refused");
            assert!(matches!(e, Error::InvalidUsage(_)), "{e}");
            let m = e.to_string();
            assert!(
                m.contains("pdims is [1, 3] on rank 0 and [3, 1] on rank 2"),
                "{m}"
            );
        }
    }

    #[test]
    fn equal_fields_agree_and_a_failed_rank_is_named() {
        for r in mock::run(2, |c| agree_on(c, "x", Ok(&Fields::new().with("a", 1)))) {
            r.expect("agreed");
        }
        let results = mock::run(2, |c| {
            let f = Fields::new().with("a", 1);
            let mine = if c.rank() == 1 {
                Err("TypeError: bad")
            } else {
                Ok(&f)
            };
            agree_on(c, "x", mine)
        });
        for r in results {
            let m = r.expect_err("refused").to_string();
            assert!(
                m.contains("rank 1 failed") && m.contains("TypeError: bad"),
                "{m}"
            );
        }
    }
}
