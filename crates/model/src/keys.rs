//! Key naming. Every key of one limiter shares the hash tag `{cg:<name>}`, so a decision's
//! keys live in one Valkey Cluster slot and the script may touch them all. The limiter name
//! is restricted to `[A-Za-z0-9_.:-]`, so it cannot close the tag early; the shop ID comes
//! after the tag and a fixed kind prefix, so no shop ID (braces, colons, binary) can reach
//! another limiter's keys or another kind of key.

/// The keys of one limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: Vec<u8>,
}

impl Keys {
    /// `name` must already be validated (see `LimiterOptions`).
    pub fn new(name: &str) -> Self {
        Self {
            prefix: format!("{{cg:{name}}}:").into_bytes(),
        }
    }

    fn key(&self, kind: &str, shop: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + kind.len() + shop.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(kind.as_bytes());
        k.extend_from_slice(shop);
        k
    }

    /// The global bucket.
    pub fn global(&self) -> Vec<u8> {
        self.key("b:global", b"")
    }

    /// The bucket shared by all hot shops.
    pub fn hot_lane(&self) -> Vec<u8> {
        self.key("b:lane", b"")
    }

    /// One hot shop's own bucket.
    pub fn hot_shop(&self, shop: &[u8]) -> Vec<u8> {
        self.key("b:shop:", shop)
    }

    /// One endpoint's bucket (the `endpoints` option): `endpoint` is a validated name
    /// ([`crate::endpoints::valid_name`]). Not under `b:`: every `b:*` key other than the
    /// global and lane buckets is a hot shop's.
    pub fn endpoint(&self, endpoint: &str) -> Vec<u8> {
        self.key("e:", endpoint.as_bytes())
    }

    /// The flag that marks a shop hot until it expires.
    pub fn hot_flag(&self, shop: &[u8]) -> Vec<u8> {
        self.key("hot:", shop)
    }

    /// The live limits (a hash: per bucket "capacity refill_per_second", version, by, at).
    pub fn limits(&self) -> Vec<u8> {
        self.key("limits", b"")
    }

    /// The live limits' version, read by every decision (absent = none ever set).
    pub fn limits_version(&self) -> Vec<u8> {
        self.key("limits:v", b"")
    }

    /// Every change of the live limits: who, when, old, new (a stream).
    pub fn changes(&self) -> Vec<u8> {
        self.key("changes", b"")
    }

    /// The adaptive budget's state (`adaptive` option): see [`crate::adaptive`].
    pub fn adapt(&self) -> Vec<u8> {
        self.key("adapt", b"")
    }

    /// The last throttling answer reported (`"<status>:<µs>:<retry after µs>"`).
    pub fn adapt_last(&self) -> Vec<u8> {
        self.key("adapt:last", b"")
    }

    /// The settings the workers run with, published for the CLI.
    pub fn settings(&self) -> Vec<u8> {
        self.key("settings", b"")
    }

    /// The prefix of the auto-hot window counters (`<prefix><window number>`, hashes of
    /// tokens per shop and in all, field "").
    pub fn auto_hot_prefix(&self) -> Vec<u8> {
        self.key("ah:", b"")
    }

    /// The in-flight leases of `lane`'s level (a sorted set: member the lease id, score
    /// its expiry in µs): `shop` names the hot shop's level (ignored for the others).
    pub fn leases(&self, lane: crate::Lane, shop: &[u8]) -> Vec<u8> {
        match lane {
            crate::Lane::Global => self.key("f:global", b""),
            crate::Lane::HotLane => self.key("f:lane", b""),
            crate::Lane::HotShop => self.key("f:shop:", shop),
        }
    }

    /// What happened to this limiter's leases (a hash of counters: see
    /// [`crate::in_flight::stats`]).
    pub fn lease_stats(&self) -> Vec<u8> {
        self.key("f:stats", b"")
    }

    /// A SCAN pattern matching every hot shop's lease set of this limiter.
    pub fn shop_leases_pattern(&self) -> Vec<u8> {
        self.key("f:shop:*", b"")
    }

    /// A SCAN pattern matching every hot flag of this limiter.
    pub fn hot_flag_pattern(&self) -> Vec<u8> {
        self.key("hot:*", b"")
    }

    /// A SCAN pattern matching every endpoint's bucket of this limiter.
    pub fn endpoint_pattern(&self) -> Vec<u8> {
        self.key("e:*", b"")
    }

    /// A SCAN pattern matching every bucket key (not the hot flags) of this limiter.
    /// `{`, `}` and the name's characters are not glob-special.
    pub fn bucket_pattern(&self) -> Vec<u8> {
        self.key("b:*", b"")
    }

    /// The hash tag shared by all keys, e.g. `{cg:default}`.
    pub fn hash_tag(&self) -> &[u8] {
        &self.prefix[..self.prefix.len() - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot-defining part of a key, as Valkey Cluster computes it.
    fn hash_tag_of(key: &[u8]) -> &[u8] {
        if let Some(open) = key.iter().position(|&b| b == b'{') {
            if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
                if len > 0 {
                    return &key[open + 1..open + 1 + len];
                }
            }
        }
        key
    }

    #[test]
    fn every_key_shares_the_hash_tag_whatever_the_shop_id() {
        let keys = Keys::new("checkout.v2");
        for shop in [
            &b"shop-1"[..],
            b"}{evil}",
            b"a:b c",
            b"\xff\x00\x01",
            &[b'x'; 128],
        ] {
            for key in [
                keys.global(),
                keys.hot_lane(),
                keys.hot_shop(shop),
                keys.hot_flag(shop),
                keys.leases(crate::Lane::HotShop, shop),
            ] {
                assert_eq!(hash_tag_of(&key), b"cg:checkout.v2");
            }
        }
        assert_eq!(keys.hash_tag(), b"{cg:checkout.v2}");
        assert_eq!(
            hash_tag_of(&keys.endpoint("v1/charges:confirm")),
            b"cg:checkout.v2"
        );
    }

    #[test]
    fn kinds_do_not_collide() {
        let keys = Keys::new("default");
        assert_eq!(keys.global(), b"{cg:default}:b:global");
        assert_eq!(keys.hot_shop(b"global"), b"{cg:default}:b:shop:global");
        assert_ne!(keys.hot_flag(b"x"), keys.hot_shop(b"x"));
        assert_eq!(keys.bucket_pattern(), b"{cg:default}:b:*");
        assert_eq!(keys.endpoint("items"), b"{cg:default}:e:items");
        assert_eq!(
            keys.leases(crate::Lane::HotShop, b"7"),
            b"{cg:default}:f:shop:7"
        );
        assert_ne!(
            keys.leases(crate::Lane::HotShop, b"stats"),
            keys.lease_stats()
        );
    }
}
