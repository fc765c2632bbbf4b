//! Settling the outcome of one collective call: every rank says which call it is at
//! (its name and the arguments that must be alike on every rank) and whether it failed
//! locally; all ranks then return the same verdict instead of one rank waiting in a
//! collective the others never enter. This is the one place where ranks share a
//! rank's error or compare their calls: grid and handle creation, the checking mode's
//! agreement before each operation, FFT plans and `cudecomp.io` all settle through it.
//!
//! The common case costs one allgather of three words per rank (status, the caller's
//! sequence number, a digest of the call); only when those differ does a second
//! allgather bring the texts that the message names.

use super::{allgather_bytes, allgather_words, Communicator};
use crate::fields::Fields;
use crate::{invalid, Result};

/// One collective call as a rank describes it: what the call is (for messages: "grid 3:
/// transpose_x_to_y(...)", "cudecomp.io.write('u.h5'): layout") and the named values that
/// must be the same on every rank.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call<'a> {
    /// The call, in words.
    pub what: &'a str,
    /// Its arguments that every rank must pass alike.
    pub fields: &'a Fields,
}

const OK: u64 = 0;
const FAILED: u64 = 1;

/// FNV-1a: a digest of the call's bytes, the same on every rank and machine.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The call as [`Fields::encode`] writes fields: its name as a first, unnamed field.
fn encode(call: &Call<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + call.what.len());
    for s in ["", call.what] {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    out.extend(call.fields.encode());
    out
}

fn decode(bytes: &[u8]) -> Option<(String, Fields)> {
    let all = Fields::decode(bytes)?;
    let mut it = all.iter();
    let (_, what) = it.next()?;
    let mut rest = Fields::new();
    for (n, v) in it {
        rest.push(n, v.to_owned());
    }
    Some((what.to_owned(), rest))
}

/// Collective over `comm`: the outcome of one call, the same on every rank.
///
/// Every rank passes the call it is at (`seq`: its number in the caller's sequence of
/// calls over `comm`, or the same constant on every rank) and `local`, its own result so
/// far. A rank that failed gets its own error back. Otherwise every rank gets
/// `InvalidUsage`: naming the first rank that failed, the call it was at and its error;
/// or, where ranks are at different calls, both calls; or, at the same call with
/// different arguments, the first argument that differs and both values. `Ok` only when
/// every rank is at the same call with the same arguments and none failed.
pub(crate) fn settle(
    comm: &dyn Communicator,
    seq: u64,
    call: Call<'_>,
    local: &Result<()>,
) -> Result<()> {
    let encoded = encode(&call);
    let status = if local.is_ok() { OK } else { FAILED };
    let words = allgather_words(comm, [status, seq, digest(&encoded)])?;
    if words[0][0] == OK && words.iter().all(|w| *w == words[0]) {
        return Ok(());
    }
    // Something differs: bring every rank's text, for this rank's message.
    let text = match local {
        Ok(()) => encoded,
        Err(e) => format!("{}: {e}", call.what).into_bytes(),
    };
    let texts = allgather_bytes(comm, &text)?;
    local.clone()?;
    let failed: Vec<usize> = (0..words.len()).filter(|&r| words[r][0] != OK).collect();
    if let Some(&r) = failed.first() {
        let also = if failed.len() > 1 {
            format!(" (rank(s) {:?} failed too)", &failed[1..])
        } else {
            String::new()
        };
        let theirs = String::from_utf8_lossy(&texts[r]);
        let here = if theirs.starts_with(call.what) {
            String::new()
        } else {
            format!("; this rank was at {}", call.what)
        };
        invalid!("rank {r} failed in {theirs}{also}{here}");
    }
    let calls: Vec<Option<(String, Fields)>> = texts.iter().map(|t| decode(t)).collect();
    let Some(r) = (1..words.len()).find(|&r| words[r] != words[0]) else {
        return Ok(());
    };
    let others: Vec<usize> = (r + 1..words.len())
        .filter(|&q| words[q] != words[0])
        .collect();
    let also = if others.is_empty() {
        String::new()
    } else {
        format!(" (rank(s) {others:?} differ from rank 0 too)")
    };
    let (Some((what0, first)), Some((what_r, theirs))) = (&calls[0], &calls[r]) else {
        invalid!("ranks disagree on the collective call: rank {r} differs from rank 0{also}");
    };
    if what0 != what_r || words[0][1] != words[r][1] {
        invalid!(
            "ranks disagree on the collective call: rank 0 is at its call #{} {what0}, but rank {r} at its call #{} {what_r}{also}",
            words[0][1],
            words[r][1]
        );
    }
    let missing = ("(nothing)", "(nothing)");
    for i in 0..first.len().max(theirs.len()) {
        let a = first.iter().nth(i).unwrap_or(missing);
        let b = theirs.iter().nth(i).unwrap_or(missing);
        if a != b {
            let name = if a.0 == b.0 {
                a.0.to_owned()
            } else {
                format!("{} / {}", a.0, b.0)
            };
            invalid!(
                "{what0} arguments differ across ranks: expected the same values on every rank, but {name} is {} on rank 0 and {} on rank {r}{also}",
                a.1,
                b.1
            );
        }
    }
    invalid!("{what0} arguments differ across ranks: rank {r} differs from rank 0{also}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::mock;
    use crate::Error;

    fn call<'a>(what: &'a str, fields: &'a Fields) -> Call<'a> {
        Call { what, fields }
    }

    #[test]
    fn the_first_differing_field_is_named_on_every_rank() {
        let results = mock::run(3, |c| {
            let pdims = if c.rank() == 2 { [3, 1] } else { [1, 3] };
            let f = Fields::new().with("gdims", [8, 8, 8]).with("pdims", pdims);
            settle(c, 0, call("grid configuration", &f), &Ok(()))
        });
        for r in results {
            let e = r.expect_err("refused");
            assert!(matches!(e, Error::InvalidUsage(_)), "{e}");
            let m = e.to_string();
            assert!(
                m.contains("grid configuration arguments differ across ranks")
                    && m.contains("pdims is [1, 3] on rank 0 and [3, 1] on rank 2"),
                "{m}"
            );
        }
    }

    #[test]
    fn equal_calls_settle_and_a_failed_rank_is_named_with_its_call() {
        let f = Fields::new().with("a", 1);
        for r in mock::run(2, |c| settle(c, 4, call("x", &f), &Ok(()))) {
            r.expect("settled");
        }
        let results = mock::run(3, |c| {
            let local = if c.rank() == 1 {
                Err(Error::NotSupported("TypeError: bad".into()))
            } else {
                Ok(())
            };
            settle(c, 0, call("io.write: layout", &f), &local)
        });
        assert!(matches!(&results[1], Err(Error::NotSupported(m)) if m == "TypeError: bad"));
        for r in [&results[0], &results[2]] {
            let m = r.as_ref().expect_err("refused").to_string();
            assert!(
                m.contains("rank 1 failed in io.write: layout: TypeError: bad"),
                "{m}"
            );
        }
    }

    #[test]
    fn different_calls_and_positions_name_both() {
        let f = Fields::new();
        let results = mock::run(2, |c| {
            let what = if c.rank() == 0 {
                "grid 1: destroy()"
            } else {
                "redistribution 2: run"
            };
            settle(c, 7, call(what, &f), &Ok(()))
        });
        for r in results {
            let m = r.expect_err("refused").to_string();
            assert!(
                m.contains("#7 grid 1: destroy()") && m.contains("#7 redistribution 2: run"),
                "{m}"
            );
        }
        let results = mock::run(2, |c| settle(c, c.rank() as u64, call("t", &f), &Ok(())));
        for r in results {
            let m = r.expect_err("refused").to_string();
            assert!(m.contains("call #0 t") && m.contains("call #1 t"), "{m}");
        }
    }
}
