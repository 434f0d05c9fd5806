//! Human-friendly durations in plan files: `"120s"`, `"2m"`, `"1h30m"`, `"500ms"`, or a bare
//! number of seconds.
//!
//! Implemented here rather than pulled from a crate so that the contract keeps its four
//! dependencies.

use std::time::Duration;

/// Why a duration's text could not be read. Each message names the text and shows what to
/// write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// The text is empty.
    #[error("empty duration: write e.g. \"30s\", \"2m\" or \"500ms\"")]
    Empty,
    /// A part has a unit but no number before it.
    #[error(
        "invalid duration `{text}`: expected a number before `{rest}` (e.g. \"30s\", \"2m\", \"500ms\")"
    )]
    MissingNumber {
        /// The whole text.
        text: String,
        /// Where the number was expected.
        rest: String,
    },
    /// A number does not parse (`1.2.3`).
    #[error("invalid number `{number}` in duration `{text}`")]
    InvalidNumber {
        /// The whole text.
        text: String,
        /// The number.
        number: String,
    },
    /// A number has no unit after it (`1m30`).
    #[error("invalid duration `{text}`: `{number}` has no unit (use ms, s, m or h)")]
    MissingUnit {
        /// The whole text.
        text: String,
        /// The number without a unit.
        number: String,
    },
    /// A unit is not one of ms, s, m, h.
    #[error("invalid duration `{text}`: unknown unit `{unit}` (use ms, s, m or h)")]
    UnknownUnit {
        /// The whole text.
        text: String,
        /// The unit.
        unit: String,
    },
    /// Negative, not finite, or longer than 10¹² seconds.
    #[error("invalid duration `{text}`: out of range")]
    OutOfRange {
        /// The whole text.
        text: String,
    },
}

/// Parses `"120s"`, `"2m"`, `"1h30m"`, `"250ms"`, `"1.5s"` or `"90"` (seconds).
///
/// # Errors
/// A [`DurationError`] naming the offending text when it is empty, has an unknown unit, a part
/// without a number or a unit, or is out of range.
///
/// ```
/// use std::time::Duration;
/// use nuvira_api::duration::{parse, DurationError};
/// assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
/// assert!(matches!(parse("ten seconds"), Err(DurationError::MissingNumber { .. })));
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(secs) = s.parse::<f64>() {
        return secs_to_duration(secs, text);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(DurationError::MissingNumber {
                text: text.to_owned(),
                rest: rest.to_owned(),
            });
        }
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = num.parse().map_err(|_| DurationError::InvalidNumber {
            text: text.to_owned(),
            number: num.to_owned(),
        })?;
        let factor = match unit.trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hours" => 3600.0,
            "" => {
                return Err(DurationError::MissingUnit {
                    text: text.to_owned(),
                    number: num.to_owned(),
                });
            }
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_owned(),
                    unit: other.to_owned(),
                });
            }
        };
        total += secs_to_duration(value * factor, text)?;
        rest = tail;
    }
    Ok(total)
}

fn secs_to_duration(secs: f64, text: &str) -> Result<Duration, DurationError> {
    if !secs.is_finite() || !(0.0..=1e12).contains(&secs) {
        return Err(DurationError::OutOfRange {
            text: text.to_owned(),
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration the way [`parse`] reads it back (`"1m30s"`, `"250ms"`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 || out.is_empty() {
        out.push_str(&format!("{secs}s"));
    }
    out
}

/// Why a zero timeout is refused, and what to write instead.
pub const ZERO_TIMEOUT: &str = "a timeout of 0s would stop the step before it starts: give a positive duration such as \"30s\", or leave `timeout` out for the default";

/// The JSON Schema of a step's `timeout`, accepting exactly the text and numbers
/// [`serde_opt_nonzero`] reads: a positive number of seconds (at most 10¹²), or text of
/// number-unit parts (`"1h30m"`, `"90s"`, `"500ms"`, `"1.5 min"`) or a bare number, none of
/// them all zeros. The range limit on text (10¹² s in all) is checked on load only.
#[cfg(feature = "schemars")]
pub fn timeout_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A positive duration: seconds as a number, or text such as \"90s\", \"10m\", \"1h30m\", \"500ms\".",
        "anyOf": [
            {
                "type": "string",
                "pattern": TIMEOUT_TEXT_PATTERN,
                "not": { "pattern": ZERO_TEXT_PATTERN }
            },
            { "type": "number", "exclusiveMinimum": 0, "maximum": 1e12 },
            { "type": "null" }
        ]
    })
}

/// What [`parse`] reads as text (after trimming): a bare number of seconds, or one or more
/// number-unit parts.
pub const TIMEOUT_TEXT_PATTERN: &str = concat!(
    r"^\s*(\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?",
    r"|(([0-9]+\.?[0-9]*|\.[0-9]+)\s*(ms|secs|sec|s|mins|min|m|hours|hr|h)\s*)+)\s*$"
);

/// Text whose every number is zero (`"0"`, `"0s"`, `"0m0.0s"`), which a timeout refuses.
pub const ZERO_TEXT_PATTERN: &str = concat!(
    r"^\s*(\+?(0+\.?0*|\.0+)([eE][+-]?[0-9]+)?",
    r"|((0+\.?0*|\.0+)\s*(ms|secs|sec|s|mins|min|m|hours|hr|h)\s*)+)\s*$"
);

/// Like [`serde_opt`], for a step's timeout: also refuses a zero duration ([`ZERO_TIMEOUT`]).
pub mod serde_opt_nonzero {
    use serde::{Deserializer, de::Error as _};
    use std::time::Duration;

    pub use super::serde_opt::serialize;

    /// Accepts what [`super::serde_opt::deserialize`] does, except zero.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match super::serde_opt::deserialize(d)? {
            Some(t) if t.is_zero() => Err(D::Error::custom(super::ZERO_TIMEOUT)),
            other => Ok(other),
        }
    }
}

/// Serde helpers for `Option<Duration>` written as text (`"120s"`) or a number of seconds.
pub mod serde_opt {
    use super::{format, parse};
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};
    use std::time::Duration;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Secs(f64),
    }

    /// Serializes as `"1m30s"`-style text, or `null`.
    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&format(*d)),
            None => s.serialize_none(),
        }
    }

    /// Accepts text such as `"120s"`, a number of seconds, or `null`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<Raw>::deserialize(d)? {
            None => Ok(None),
            Some(Raw::Text(t)) => parse(&t).map(Some).map_err(D::Error::custom),
            Some(Raw::Secs(n)) => parse(&n.to_string()).map(Some).map_err(D::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_round_trip() {
        for (text, secs) in [
            ("90", 90.0),
            ("1h30m", 5400.0),
            ("2m", 120.0),
            ("0.5s", 0.5),
        ] {
            let d = parse(text).unwrap();
            assert_eq!(d, Duration::from_secs_f64(secs), "{text}");
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }

    #[test]
    fn rejects_garbage_with_the_text_named() {
        let err = parse("5 parsecs").unwrap_err();
        assert!(err.to_string().contains("parsecs"), "{err}");
        assert_eq!(
            parse("1m30").unwrap_err().to_string(),
            "invalid duration `1m30`: `30` has no unit (use ms, s, m or h)"
        );
        assert!(parse("").is_err());
        assert!(parse("-3").is_err());
        assert!(parse("s").is_err());
    }

    #[test]
    fn a_zero_step_timeout_is_refused_with_what_to_write() {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(default, with = "serde_opt_nonzero")]
            #[allow(dead_code)]
            t: Option<Duration>,
        }
        let err = serde_json::from_str::<T>(r#"{"t":"0s"}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("30s"), "{err}");
        assert!(serde_json::from_str::<T>(r#"{"t":0}"#).is_err());
        assert!(serde_json::from_str::<T>(r#"{"t":"1s"}"#).is_ok());
    }
}
