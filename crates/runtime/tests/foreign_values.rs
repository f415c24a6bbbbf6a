//! Foreign values: the in-memory store reads what a hand (or a bug) wrote into Valkey as
//! the decision script reads it (a bucket value no engine reads, a hot flag of another
//! type). Needs a real Valkey (`VALKEY_SERVER` or the project's `.venv`).

#[allow(dead_code)]
mod common;

use checkout_guard_config::{Endpoint, Engine};
use checkout_guard_model::{
    AutoHotArgs, BucketSet, BucketSpec, DecideCall, DecideReply, Keys, LaneArgs, ShopKeys,
};
use checkout_guard_runtime::{MemoryStore, Store, ValkeyStore};
use common::Valkey;
use std::time::Duration;

fn set() -> BucketSet {
    BucketSet {
        global: BucketSpec::new("global", 10, 10.0).unwrap(),
        hot_lane: Some(BucketSpec::new("hot_lane", 6, 6.0).unwrap()),
        hot_shop: Some(BucketSpec::new("hot_shop", 4, 4.0).unwrap()),
    }
}

/// One decision for `shop`, asked of `store`, decoded as the limiter decodes it.
fn decide(store: &dyn Store, keys: &Keys, shop: &[u8]) -> Result<DecideReply, String> {
    let shop_keys = ShopKeys::new(keys, shop);
    let lanes = LaneArgs::new(&set());
    let auto = AutoHotArgs::new(None);
    let call = DecideCall {
        endpoint: None,
        share_ppm: 0,
        in_flight: &checkout_guard_model::InFlightArgs::off(),
        lease_id: b"",
        adapt: &checkout_guard_model::AdaptArgs::off(),
        keys: shop_keys.decide_keys(),
        tokens: 1,
        static_hot: false,
        lanes: &lanes,
        version: b"",
        shop,
        auto_hot: &auto,
        settings: "global=10/10",
        peek: false,
        max_wait_us: 0,
    };
    let ints = store.decide(&call).map_err(|e| e.to_string())?;
    DecideCall::decode_reply(&ints)
}

/// Outcome of a decision, reduced to what a caller sees: error, or (reason, hot).
fn outcome(r: Result<DecideReply, String>) -> String {
    match r {
        Ok(DecideReply::Decided(s)) => format!("decided reason={:?} hot={}", s.reason, s.hot),
        Ok(DecideReply::LimitsChanged) => "limits changed".into(),
        Err(_) => "error".into(),
    }
}

fn valkey_store(v: &Valkey) -> ValkeyStore {
    ValkeyStore::new(
        Endpoint::parse(&v.url).unwrap(),
        Duration::from_secs(2),
        Duration::ZERO,
        Engine::Lua,
    )
}

/// MemoryStore claims hand-written values "read as Valkey would read them". A bucket key
/// holding something no engine reads (another library's value, a hand edit) is a missing
/// key for the script and the in-memory store alike: a full bucket, and the call is
/// allowed (it was a script error, answered by `on_unavailable`, until issue 23). The
/// readable values here are TATs long past: full too.
#[test]
fn memory_store_and_script_agree_on_an_unreadable_bucket_value() {
    let valkey = Valkey::start();
    let real = valkey_store(&valkey);
    let mem = MemoryStore::new();
    let keys = Keys::new("review-garbage");
    for raw in [
        &b"garbage"[..],
        b"-5:100000:900000:",
        b"1:2:3:4:5",
        b"",
        b"1:2",
        b"1:-2:3",
        b"1 :2:3",
        b"123",
        b" 12 ",
        b"1:2:3",
        b"1:2:3:",
        b"1:2:3:4",
        b"99999999999999:100000:900000:1",
        br#"O:55:"Symfony\Component\RateLimiter\Tests\Resources\DummyWindow":0:{}"#,
        b"1e3",
        b"5.5",
        b"-3",
        b"99999999999999999999",
        b"1800000000000000junk",
    ] {
        redis::cmd("SET")
            .arg(keys.global())
            .arg(raw)
            .query::<()>(&mut valkey.connection())
            .unwrap();
        mem.set(&keys.global(), raw);
        let (r, m) = (
            outcome(decide(&real, &keys, b"s")),
            outcome(decide(&mem, &keys, b"s")),
        );
        assert_eq!(
            m,
            r,
            "global bucket = {:?}: MemoryStore answers {m}, the script {r}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(
            r,
            "decided reason=None hot=false",
            "global bucket = {:?}: a full bucket",
            String::from_utf8_lossy(raw)
        );
    }
}

/// A hot flag of another type (a hash written by hand): the script's MGET reads nil (not
/// hot), the in-memory store's PTTL finds the key (hot).
#[test]
fn memory_store_and_script_agree_on_a_hot_flag_of_another_type() {
    let valkey = Valkey::start();
    let real = valkey_store(&valkey);
    let mem = MemoryStore::new();
    let keys = Keys::new("review-flag");
    let flag = keys.hot_flag(b"s");
    redis::cmd("HSET")
        .arg(&flag)
        .arg("f")
        .arg("1")
        .query::<()>(&mut valkey.connection())
        .unwrap();
    mem.set_hash(&flag, &[(b"f", b"1")]);
    let (r, m) = (
        outcome(decide(&real, &keys, b"s")),
        outcome(decide(&mem, &keys, b"s")),
    );
    assert_eq!(m, r, "MemoryStore answers {m}, the script {r}");
}
