//! Endpoints and priority classes (issue 42, [docs/endpoints.md]): per-endpoint buckets
//! under the global one, decided with it all or nothing, and priority classes that must
//! leave a share of every bucket's capacity untouched (a reserve for the classes with a
//! smaller share). The options as the decision takes them; `checkout-guard-config` builds
//! them from the options array.

use crate::bucket::BucketSpec;

/// Longest endpoint (and priority class) name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// A share's unit: parts per million of a bucket's capacity.
pub const SHARE_UNIT: i64 = 1_000_000;

/// Whether `name` is an endpoint or class name: 1 to 64 characters of
/// `A-Z a-z 0-9 _ . : / -` (none can close a key's hash tag or reach another kind of key).
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'))
}

/// The `endpoints` option: each endpoint's bucket, by name (sorted, names unique).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endpoints {
    by_name: Vec<(String, BucketSpec)>,
}

impl Endpoints {
    /// From (name, bucket) pairs; names must be valid and unique (the options' parser
    /// checks them), kept sorted.
    pub fn new(mut pairs: Vec<(String, BucketSpec)>) -> Self {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        Self { by_name: pairs }
    }

    /// The bucket of endpoint `name`, if configured.
    pub fn get(&self, name: &str) -> Option<&BucketSpec> {
        self.by_name
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.by_name[i].1)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &BucketSpec)> {
        self.by_name.iter().map(|(n, b)| (n.as_str(), b))
    }
}

/// The `priorities` and `default_priority` options: each class's share (ppm of every
/// bucket's capacity its calls must leave untouched), and the class of a call that names
/// none (`None`: such a call keeps no reserve).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Priorities {
    by_name: Vec<(String, i64)>,
    default: Option<String>,
}

impl Priorities {
    /// From (class, share in ppm) pairs, each share in `0..SHARE_UNIT`, and the default
    /// class (one of them); checked by the options' parser.
    pub fn new(mut pairs: Vec<(String, i64)>, default: Option<String>) -> Self {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        Self {
            by_name: pairs,
            default,
        }
    }

    /// The share (ppm) of class `name`, if configured.
    pub fn share_ppm(&self, name: &str) -> Option<i64> {
        self.by_name
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.by_name[i].1)
    }

    /// The class of a call that names none.
    pub fn default_class(&self) -> Option<&str> {
        self.default.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.by_name.iter().map(|(n, s)| (n.as_str(), *s))
    }
}

/// A share given as a number in `[0, 1)`, in ppm (rounded to the nearest; `None` outside
/// the range, or for a share that rounds to a whole bucket or, above 0, to none).
pub fn share_to_ppm(share: f64) -> Option<i64> {
    if !share.is_finite() || !(0.0..1.0).contains(&share) {
        return None;
    }
    let ppm = (share * SHARE_UNIT as f64).round() as i64;
    // A share kept as 0 or as the whole bucket is not what was asked: refused.
    (ppm < SHARE_UNIT && (ppm > 0 || share == 0.0)).then_some(ppm)
}

/// The reserve a class with share `ppm` leaves in a bucket of `tolerance_us`, µs:
/// `ceil(tolerance * ppm / 1e6)` (the class leaves at least its share). Computed as the
/// script computes it, every term below 2^53: `tolerance = q * 1e6 + r`,
/// `q * ppm + ceil(r * ppm / 1e6)`.
pub fn reserve_us(tolerance_us: i64, ppm: i64) -> i64 {
    if ppm <= 0 {
        return 0;
    }
    let (q, r) = (tolerance_us / SHARE_UNIT, tolerance_us % SHARE_UNIT);
    q * ppm + (r * ppm + SHARE_UNIT - 1) / SHARE_UNIT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_documented_characters() {
        for ok in [
            "a",
            "charges.create",
            "v1/charges:confirm",
            "A_Z-0.9",
            &"x".repeat(64),
        ] {
            assert!(valid_name(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "a b", "{x}", "a\n", "é", "a*", &"x".repeat(65)] {
            assert!(!valid_name(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn shares_are_ppm_and_reserves_round_up() {
        assert_eq!(share_to_ppm(0.2), Some(200_000));
        assert_eq!(share_to_ppm(0.0), Some(0));
        assert_eq!(share_to_ppm(0.125), Some(125_000));
        for bad in [1.0, -0.1, f64::NAN, f64::INFINITY, 0.9999999, 1e-7] {
            assert_eq!(share_to_ppm(bad), None, "{bad}");
        }
        // 100 tokens at 100/s: tolerance 1 s; 20% is 0.2 s exactly.
        assert_eq!(reserve_us(1_000_000, 200_000), 200_000);
        assert_eq!(reserve_us(1_000_000, 0), 0);
        // 3 tokens at 3/s: tolerance 1_000_002 µs; a third of it rounded up.
        assert_eq!(reserve_us(1_000_002, 333_334), 333_335);
        // The split computation is the exact ceiling, far beyond 2^53 for the product.
        for (t, p) in [
            (315_360_000_000_000i64, 999_999i64),
            (123_456_789, 1),
            (999_999, 999_999),
            (1, 1),
        ] {
            let exact = (t as i128 * p as i128 + 999_999) / 1_000_000;
            assert_eq!(reserve_us(t, p) as i128, exact, "{t} {p}");
        }
    }

    #[test]
    fn lookups_by_name() {
        let e = Endpoints::new(vec![
            ("b".into(), BucketSpec::new("endpoints.b", 2, 2.0).unwrap()),
            ("a".into(), BucketSpec::new("endpoints.a", 1, 1.0).unwrap()),
        ]);
        assert_eq!(e.get("a").map(|b| b.capacity()), Some(1));
        assert_eq!(e.get("b").map(|b| b.capacity()), Some(2));
        assert!(e.get("c").is_none());
        let p = Priorities::new(
            vec![("normal".into(), 200_000), ("critical".into(), 0)],
            Some("normal".into()),
        );
        assert_eq!(p.share_ppm("critical"), Some(0));
        assert_eq!(p.share_ppm("normal"), Some(200_000));
        assert_eq!(p.share_ppm("x"), None);
        assert_eq!(p.default_class(), Some("normal"));
    }
}
