//! The native module's command, `CG.DECIDE`, with a call's keys and arguments (the
//! script's KEYS then ARGV).
//!
//! On one server the command is packed here, by hand, in one buffer of the exact size: it
//! is on the hot path of every decision the module makes, and redis-rs's `Cmd` would
//! first copy every argument into its own buffer and then pack them into another. A test
//! holds the two byte for byte equal.

use checkout_guard_connection::scripts::command;
use checkout_guard_model::cmd::decide::MODULE_COMMAND;
use checkout_guard_model::cmd::{keys_then_argv, Part};
use checkout_guard_model::DecideCall;

const NAME: &[u8] = MODULE_COMMAND.as_bytes();

/// [`native`], packed as it goes on the wire (RESP), in one buffer of the exact size.
pub(super) fn pack_native(call: &DecideCall<'_>) -> Vec<u8> {
    pack(&[NAME], call)
}

/// `EVALSHA <sha> <number of keys> <keys> <args>` of `call` on the decision script whose
/// SHA1 is `sha`, packed as redis-rs packs it ([`checkout_guard_connection::scripts::evalsha`]),
/// in one buffer of the exact size: the script engine's every decision (redis-rs's
/// `ScriptInvocation` builds a `Cmd` of copies first, then packs it).
pub(super) fn pack_evalsha(sha: &str, call: &DecideCall<'_>) -> Vec<u8> {
    let mut keys = itoa::Buffer::new();
    let keys = keys.format(call.sent_key_count());
    pack(&[b"EVALSHA", sha.as_bytes(), keys.as_bytes()], call)
}

/// `head`, then `call`'s keys and arguments, as RESP bulk strings in one array.
fn pack(head: &[&[u8]], call: &DecideCall<'_>) -> Vec<u8> {
    let parts: Vec<Part<'_>> = keys_then_argv(call).collect();
    let count = head.len() + parts.len();
    let bulk = |len: usize| 1 + decimal_len(len) + 2 + len + 2;
    let size = 1
        + decimal_len(count)
        + 2
        + head.iter().map(|h| bulk(h.len())).sum::<usize>()
        + parts.iter().map(|p| bulk(p.bytes().len())).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(b'*');
    push_decimal(&mut out, count);
    out.extend_from_slice(b"\r\n");
    let mut put = |bytes: &[u8]| {
        out.push(b'$');
        push_decimal(&mut out, bytes.len());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    };
    for h in head {
        put(h);
    }
    for p in &parts {
        put(p.bytes());
    }
    debug_assert_eq!(out.len(), size);
    out
}

fn decimal_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

fn push_decimal(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `CG.DECIDE` with `call`'s keys and arguments, as a `Cmd` (a cluster connection routes
/// it by its keys).
pub(super) fn native(call: &DecideCall<'_>) -> redis::Cmd {
    command(MODULE_COMMAND, call)
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkout_guard_connection::scripts::DECIDE;
    use checkout_guard_model::{AutoHotArgs, BucketSet, BucketSpec, Keys, LaneArgs, ShopKeys};

    /// The commands packed by hand (`CG.DECIDE`, the script's `EVALSHA`) are byte for byte
    /// what redis-rs packs.
    #[test]
    fn the_packed_command_is_the_cmds() {
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 5, 1.0).unwrap()),
        };
        let lanes = LaneArgs::new(&set);
        let none = AutoHotArgs::new(None);
        for (shop, tokens, wait) in [
            (&b"s"[..], 1, 0),
            (b"s\x00p\r\n", 12, 250_000),
            (b"", 1_000_000_000, 10_000_000),
        ] {
            let keys = ShopKeys::new(&Keys::new("n"), shop);
            let call = DecideCall {
                endpoint: None,
                share_ppm: 0,
                in_flight: &checkout_guard_model::InFlightArgs::off(),
                lease_id: b"",
                adapt: &checkout_guard_model::AdaptArgs::off(),
                keys: keys.decide_keys(),
                tokens,
                static_hot: true,
                lanes: &lanes,
                version: b"3-ab-17",
                shop,
                auto_hot: &none,
                settings: "global=30/7.5",
                peek: false,
                max_wait_us: wait,
            };
            assert_eq!(pack_native(&call), native(&call).get_packed_command());
            let mut pipe = redis::pipe();
            checkout_guard_connection::scripts::evalsha(&mut pipe, &DECIDE, &call);
            assert_eq!(
                pack_evalsha(DECIDE.get_hash(), &call),
                pipe.get_packed_pipeline()
            );
        }
    }
}
