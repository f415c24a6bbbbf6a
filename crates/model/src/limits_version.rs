//! The live limits' version as stored in `limits:v`: `"<n>-<epoch>-<µs>"` (see
//! `checkout-guard-config`'s `live` for the codec of the limits themselves). The decision
//! reads the instant of the change from it ([`change_instant`]): the buckets carry their
//! level over from that instant.

/// The change count of a stored version (`"3-9f0c..."` → 3; a hand-written `"7"` → 7).
pub fn version_number(id: &[u8]) -> i64 {
    let digits = id.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&id[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// The instant (Valkey µs) of the change a version comes from: `"<n>-<epoch>-<µs>"`.
pub fn change_instant(id: &[u8]) -> Option<i64> {
    let id = std::str::from_utf8(id).ok()?;
    let mut parts = id.splitn(3, '-');
    let (n, epoch, at) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str, alnum: bool| {
        !s.is_empty()
            && s.bytes().all(|b| {
                if alnum {
                    b.is_ascii_alphanumeric()
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    (digits(n, false) && digits(epoch, true) && digits(at, false))
        .then(|| at.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_changes_and_carry_their_instant() {
        assert_eq!(version_number(b"3-9f0c"), 3);
        assert_eq!(version_number(b"7"), 7);
        assert_eq!(version_number(b""), 0);
        assert_eq!(version_number(b"\xff"), 0);
        assert_eq!(
            change_instant(b"3-9f0c-1800000000000123"),
            Some(1_800_000_000_000_123)
        );
        assert_eq!(change_instant(b"3-9f0c"), None);
        assert_eq!(change_instant(b"7"), None);
        assert_eq!(change_instant(b"x-9f0c-12"), None);
    }
}
