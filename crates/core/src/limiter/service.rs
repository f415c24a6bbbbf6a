use std::time::Duration;

use super::bucket::Lane;
use super::decision::Decision;
use super::denials;
use super::error::LimiterError;
use super::keys::Keys;
use super::options::{
    validate_shop_id, validate_tokens, validate_ttl, LimiterOptions, OnUnavailable,
};
use super::script::{DECIDE, RESET_STEP};
use super::step::{lanes_in, StepReply};
use crate::store::{self, StoreError};

/// A configured limiter: validated options plus everything per-call work can reuse.
/// Cheap to build; all limiters of a process share the pooled connections.
#[derive(Debug, Clone)]
pub struct Limiter {
    options: LimiterOptions,
    keys: Keys,
    /// ARGV[3..8] of the script: interval and tolerance per lane ("0" when not configured).
    lane_args: [String; 6],
    /// Per lane, the prefix of its local-denial keys (`{cg:<name>}:<lane>`), built once.
    denial_tags: [Vec<u8>; 3],
    /// The local-denial key of the global bucket (the same for every shop).
    global_denial_key: u64,
}

impl Limiter {
    pub fn new(options: LimiterOptions) -> Self {
        let keys = Keys::new(&options.name);
        let mut lane_args: [String; 6] = Default::default();
        for lane in Lane::ALL {
            let (interval, tolerance) = options
                .buckets
                .get(lane)
                .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
            lane_args[2 * lane as usize] = interval.to_string();
            lane_args[2 * lane as usize + 1] = tolerance.to_string();
        }
        let denial_tags =
            Lane::ALL.map(|lane| [keys.hash_tag(), b":", lane.as_str().as_bytes()].concat());
        let mut limiter = Self {
            options,
            keys,
            lane_args,
            denial_tags,
            global_denial_key: 0,
        };
        limiter.global_denial_key = limiter.hashed_denial_key(Lane::Global, b"");
        limiter
    }

    /// The local-denial key of one bucket as `shop` sees it: the global bucket is shared
    /// by every shop; the hot lane is shared too but applies only to hot shops, so each
    /// hot shop learns its state for itself.
    fn hashed_denial_key(&self, lane: Lane, shop: &[u8]) -> u64 {
        let (interval, tolerance) = self
            .options
            .buckets
            .get(lane)
            .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
        let shop = if lane == Lane::Global { &b""[..] } else { shop };
        denials::key(&self.denial_tags[lane as usize], shop, interval, tolerance)
    }

    fn denial_key(&self, lane: Lane, shop: &[u8]) -> u64 {
        if lane == Lane::Global {
            self.global_denial_key
        } else {
            self.hashed_denial_key(lane, shop)
        }
    }

    /// The local-denial keys of the configured buckets for `shop`, computed once per
    /// acquire and used both to check and to learn.
    fn denial_keys(&self, shop: &[u8]) -> [Option<u64>; 3] {
        Lane::ALL.map(|lane| {
            self.options
                .buckets
                .get(lane)
                .map(|_| self.denial_key(lane, shop))
        })
    }

    /// The flood fast path: a denial Valkey is certain to make, made here (`denials.rs`).
    fn deny_locally(
        &self,
        keys: &[Option<u64>; 3],
        tokens: i64,
        static_hot: bool,
    ) -> Option<Decision> {
        let now = denials::now_ns();
        let mut first: Option<Lane> = None;
        let mut until = 0;
        for lane in Lane::ALL {
            let Some(key) = keys[lane as usize] else {
                continue;
            };
            if let Some(u) = denials::denied_until(key, tokens as u64, now) {
                first.get_or_insert(lane);
                until = until.max(u);
            }
        }
        let lane = first?;
        Some(Decision::local_denial(
            lane,
            (until - now) as f64 / 1e9,
            static_hot,
        ))
    }

    /// Remembers what a reply proved: for each bucket it applied, the local instant at
    /// which it holds no token (see `denials.rs` for why this is conservative).
    fn learn(&self, keys: &[Option<u64>; 3], reply: &StepReply, sent_ns: u64) {
        let now = denials::now_ns();
        for lane in lanes_in(reply) {
            let (Some(spec), Some(key)) = (self.options.buckets.get(lane), keys[lane as usize])
            else {
                continue;
            };
            let tat = reply.tats[lane as usize];
            // Local ns at which the bucket is empty: sent + (tat - tolerance - now_valkey).
            let offset_ns = (tat - spec.tolerance_us() - reply.now_us).saturating_mul(1000);
            let base = (sent_ns as i64).saturating_add(offset_ns).max(0) as u64;
            let interval_ns = spec.interval_us() as u64 * 1000;
            if base + interval_ns > now {
                denials::record(key, base, interval_ns, sent_ns);
            } else if denials::denied_until(key, 1, now).is_some() {
                // Valkey just said there is room: an entry from before a reset() is stale.
                denials::forget(key);
            }
        }
    }

    pub fn options(&self) -> &LimiterOptions {
        &self.options
    }

    /// Whether `shop` is listed in the `hot_shops` option (no Valkey needed).
    pub fn is_statically_hot(&self, shop: &[u8]) -> bool {
        self.options.hot_shops.contains(shop)
    }

    /// One decision for `tokens` tokens of `shop`: one script call, one round trip.
    /// When Valkey cannot be asked, `on_unavailable` decides (or the error is returned
    /// for "throw").
    pub fn acquire(&self, shop: &[u8], tokens: i64) -> Result<Decision, LimiterError> {
        validate_shop_id(shop)?;
        validate_tokens(tokens, &self.options.buckets)?;
        let static_hot = self.is_statically_hot(shop);
        // With the fast path off, no key is hashed and nothing is learnt.
        let denial_keys = self.options.local_denials.then(|| self.denial_keys(shop));
        if let Some(keys) = &denial_keys {
            if let Some(d) = self.deny_locally(keys, tokens, static_hot) {
                return Ok(d);
            }
        }
        let sent_ns = denials::now_ns();
        let result = self.with_valkey(|c| {
            let mut inv = DECIDE.prepare_invoke();
            inv.key(self.keys.global())
                .key(self.keys.hot_lane())
                .key(self.keys.hot_shop(shop))
                .key(self.keys.hot_flag(shop))
                .arg(tokens)
                .arg(if static_hot { "1" } else { "0" });
            for a in &self.lane_args {
                inv.arg(a.as_str());
            }
            inv.invoke::<Vec<i64>>(c)
        });
        let failure = match result {
            Ok(ints) => match StepReply::from_ints(&ints) {
                Some(reply) => {
                    if let Some(keys) = &denial_keys {
                        self.learn(keys, &reply, sent_ns);
                    }
                    return Ok(Decision::from_reply(&self.options.buckets, tokens, &reply));
                }
                None => StoreError::Failed {
                    cause: format!("unexpected script reply {ints:?}"),
                    retry_in: Duration::ZERO,
                },
            },
            Err(e) => e,
        };
        let retry = match failure.retry_in() {
            Duration::ZERO => self.options.retry_interval,
            d => d,
        };
        match self.options.on_unavailable {
            OnUnavailable::Allow => Ok(Decision::unavailable(true, 0.0, static_hot)),
            OnUnavailable::Deny => Ok(Decision::unavailable(
                false,
                retry.as_secs_f64(),
                static_hot,
            )),
            OnUnavailable::Throw => Err(self.unavailable(failure)),
        }
    }

    /// Marks `shop` hot for every worker at once until `ttl_seconds` run out.
    pub fn mark_hot(&self, shop: &[u8], ttl_seconds: i64) -> Result<(), LimiterError> {
        validate_shop_id(shop)?;
        validate_ttl(ttl_seconds)?;
        let key = self.keys.hot_flag(shop);
        self.admin(|c| {
            redis::cmd("SET")
                .arg(&key)
                .arg(1)
                .arg("EX")
                .arg(ttl_seconds)
                .query::<()>(c)
        })
    }

    /// Ends a `markHot()` early. Shops listed in `hot_shops` stay hot.
    pub fn unmark_hot(&self, shop: &[u8]) -> Result<(), LimiterError> {
        validate_shop_id(shop)?;
        let key = self.keys.hot_flag(shop);
        self.admin(|c| redis::cmd("DEL").arg(&key).query::<()>(c))?;
        // The shop's hot buckets no longer apply: forget what this host knew of them.
        denials::forget(self.denial_key(Lane::HotLane, shop));
        denials::forget(self.denial_key(Lane::HotShop, shop));
        Ok(())
    }

    /// Whether `shop` is hot: listed in `hot_shops`, or marked and not yet expired.
    pub fn is_hot(&self, shop: &[u8]) -> Result<bool, LimiterError> {
        validate_shop_id(shop)?;
        if self.is_statically_hot(shop) {
            return Ok(true);
        }
        let key = self.keys.hot_flag(shop);
        self.admin(|c| redis::cmd("EXISTS").arg(&key).query::<bool>(c))
    }

    /// Forgets every bucket of this limiter (all full again). Hot marks are kept.
    ///
    /// A script step at a time (SCAN + UNLINK inside Valkey, 1000 keys per step) routed by
    /// the limiter's hash tag, so on a cluster it runs on the node holding the limiter's
    /// slot, and no step blocks Valkey for long.
    pub fn reset(&self) -> Result<(), LimiterError> {
        let pattern = self.keys.bucket_pattern();
        let routing_key = self.keys.global();
        self.admin(|c| {
            let mut cursor = b"0".to_vec();
            loop {
                let (next, _removed): (Vec<u8>, i64) = RESET_STEP
                    .key(&routing_key)
                    .arg(&cursor)
                    .arg(&pattern)
                    .invoke(c)?;
                if next == b"0" {
                    return Ok(());
                }
                cursor = next;
            }
        })?;
        // Every bucket is full again: nothing this host knew still holds.
        denials::forget_all();
        Ok(())
    }

    /// The state of this limiter's pooled connection; with `ping`, after one PING over it
    /// (see [`store::ping`]: no new connection per check, none during the back-off).
    pub fn health(&self, ping: bool) -> store::Health {
        let o = &self.options;
        if ping {
            store::ping(
                &o.endpoint,
                o.timeout,
                o.retry_interval,
                &self.keys.global(),
            )
        } else {
            store::status(&o.endpoint)
        }
    }

    fn with_valkey<T>(
        &self,
        op: impl FnMut(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        store::with_connection(
            &self.options.endpoint,
            self.options.timeout,
            self.options.retry_interval,
            op,
        )
    }

    /// Administrative calls have no safe default: a failure is always an error.
    fn admin<T>(
        &self,
        op: impl FnMut(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, LimiterError> {
        self.with_valkey(op).map_err(|e| self.unavailable(e))
    }

    fn unavailable(&self, e: StoreError) -> LimiterError {
        LimiterError::Unavailable {
            url: self.options.endpoint.display_url().to_string(),
            cause: e.to_string(),
        }
    }
}
