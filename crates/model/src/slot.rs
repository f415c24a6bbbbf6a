//! A key's cluster slot, as Valkey (and Redis Cluster) computes it: CRC16 (XMODEM) of the
//! key's hash tag, or of the whole key when it has none, mod 16384.
//!
//! Pure: the Valkey module uses it to check that a key the call does not declare (an
//! `auto_hot` window key) hashes to the slot of the keys it does, as Valkey checks every
//! key a script's `redis.call` touches.

/// How many slots a cluster has.
pub const SLOTS: u16 = 16384;

/// CRC16, the XMODEM variant (polynomial 0x1021, initial value 0, no reflection), as
/// Valkey's `crc16()`.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}`
/// after it when there are any (the hash tag), else the whole key (no `{`, no `}` after
/// it, or an empty tag `{}`).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    key.iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key)
}

/// The cluster slot of `key` (0 to 16383), what `CLUSTER KEYSLOT` answers.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_crc16_of_the_check_string() {
        // The CRC-16/XMODEM check value, and the one Redis Cluster's specification gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slot_of_known_keys_is_redis_clusters() {
        // What `CLUSTER KEYSLOT` answers for these keys.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 0x31C3 % SLOTS);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn slot_of_a_hash_tag_is_the_tags() {
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // Only the first `{` and the first `}` after it count.
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(key_slot(b"{cg:R}:b:global"), key_slot(b"cg:R"));
    }

    #[test]
    fn slot_without_a_tag_hashes_the_whole_key() {
        // An empty tag, an unclosed `{`, a `}` before any `{`: the whole key is hashed.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(key_slot(b"{}"), crc16(b"{}") % SLOTS);
        assert_ne!(key_slot(b"{}a"), key_slot(b"{}b"));
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"}foo{"), b"}foo{");
        // `ah` and `{ah}:x` (the module's cluster test) hash alike: the tag is `ah`.
        assert_eq!(key_slot(b"ah"), key_slot(b"{ah}:b:global"));
    }
}
