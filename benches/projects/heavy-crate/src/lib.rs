//! A record that is both serde- and zerocopy-derived.

use serde::{Deserialize, Serialize};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A fixed-layout record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Point {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
}

/// The record as JSON.
pub fn to_json(p: &Point) -> String {
    serde_json::to_string(p).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json() {
        let p = Point { x: 1, y: 2 };
        let back: Point = serde_json::from_str(&to_json(&p)).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn reads_from_bytes() {
        let p = Point { x: 7, y: 9 };
        let q = Point::read_from_bytes(p.as_bytes()).unwrap();
        assert_eq!(p, q);
    }
}
