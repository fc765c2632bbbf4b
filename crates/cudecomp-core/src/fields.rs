//! Named values that every rank of a group must pass alike to a collective call (a
//! configuration, an operation's or an FFT plan's arguments), in a canonical form the
//! agreement ([`crate::comm::agree_on`]) compares and names in its messages.

use std::fmt::Debug;

/// Named values, in a fixed order, that every rank of a group must pass alike; each value
/// is kept as canonical text (its `Debug` form, or what the caller normalised it to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    /// No fields yet.
    pub fn new() -> Fields {
        Fields::default()
    }

    /// These fields followed by `name` with the canonical text of `value`.
    #[must_use]
    pub fn with(mut self, name: &str, value: impl Debug) -> Fields {
        self.push(name, format!("{value:?}"));
        self
    }

    /// Adds `name` with `text` (already canonical) at the end.
    pub fn push(&mut self, name: &str, text: String) {
        self.0.push((name.to_owned(), text));
    }

    /// These fields followed by every field of `other`.
    #[must_use]
    pub fn extended(mut self, other: Fields) -> Fields {
        self.0.extend(other.0);
        self
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no fields.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in &self.0 {
            for s in [n, v] {
                out.extend((s.len() as u64).to_le_bytes());
                out.extend(s.as_bytes());
            }
        }
        out
    }

    /// The fields of `bytes` as [`Fields::encode`] wrote them (`None` when malformed).
    pub(crate) fn decode(mut rest: &[u8]) -> Option<Fields> {
        let mut strings = Vec::new();
        while !rest.is_empty() {
            let len = usize::try_from(u64::from_le_bytes(rest.get(..8)?.try_into().ok()?)).ok()?;
            let end = len.checked_add(8)?;
            strings.push(String::from_utf8(rest.get(8..end)?.to_vec()).ok()?);
            rest = &rest[end..];
        }
        if strings.len() % 2 != 0 {
            return None;
        }
        let pairs = strings.chunks(2).map(|p| (p[0].clone(), p[1].clone()));
        Some(Fields(pairs.collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let f = Fields::new().with("pdims", [2, 2]).with("kind", "c2c");
        assert_eq!(Fields::decode(&f.encode()), Some(f));
        assert_eq!(Fields::decode(&[]), Some(Fields::new()));
        assert_eq!(Fields::decode(&[1, 2, 3]), None);
    }
}
