//! Human durations for config files, environment variables and flags: `250ms`, `60s`, `5m`,
//! `1h`, `7d` (a bare number means seconds). Serialized back in the same form.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration written as `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

/// Why a duration text was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDuration(pub String);

impl fmt::Display for BadDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid duration {:?}: expected a number with a unit ms, s, m, h or d (e.g. 250ms, 60s, 1h)",
            self.0
        )
    }
}

impl std::error::Error for BadDuration {}

impl HumanDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }

    /// Whole milliseconds, saturating.
    pub fn as_millis_u64(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

impl FromStr for HumanDuration {
    type Err = BadDuration;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let n: u64 = digits.parse().map_err(|_| BadDuration(s.to_string()))?;
        let d = match unit.trim() {
            "ms" => Duration::from_millis(n),
            "" | "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => return Err(BadDuration(s.to_string())),
        };
        Ok(HumanDuration(d))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.as_millis_u64();
        if ms == 0 {
            return f.write_str("0s");
        }
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1000),
        ] {
            #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.85
            if ms % size == 0 {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_and_print_back() {
        for (text, ms) in [
            ("250ms", 250),
            ("60s", 60_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("2d", 172_800_000),
            ("7", 7000),
        ] {
            let d: HumanDuration = text.parse().unwrap();
            assert_eq!(d.as_millis_u64(), ms, "{text}");
            let again: HumanDuration = d.to_string().parse().unwrap();
            assert_eq!(again, d);
        }
        assert_eq!(
            HumanDuration(Duration::from_millis(1500)).to_string(),
            "1500ms"
        );
    }

    #[test]
    fn units_that_do_not_exist_are_rejected() {
        for bad in ["", "s", "10 years", "1.5s", "-3s", "10y"] {
            assert!(bad.parse::<HumanDuration>().is_err(), "{bad:?}");
        }
    }
}
