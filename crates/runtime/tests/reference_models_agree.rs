//! The two reference models agree: the Rust one (`model::step` behind the in-memory store,
//! what every Rust model-based test checks against) and the PHP one
//! (`tests/php/support/LimiterModel.php`, what the system suite's model test against real
//! Valkey and php-fpm checks against: it must place each operation in an interval of
//! wall-clock time, which `model::step` does not model, so it stays in PHP; see
//! docs/architecture.md).
//!
//! Random sequences of operations (acquire, hot marks with and without a TTL, unmark,
//! reset, provider feedback under the adaptive option, time passing) are run through a
//! `Limiter` on the in-memory store and replayed through the PHP model
//! (`tests/php/support/reference_replay.php`, run with `php`); every answer must be the
//! same. The seed is printed (`CG_AGREE_SEED` repeats one, `CG_AGREE_SEQUENCES` runs more
//! or fewer); a disagreement is reported with the shortest prefix of the sequence that
//! shows it and the operations that can be dropped from it greedily.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::Keys;
use checkout_guard_runtime::store::MemoryStore;
use checkout_guard_runtime::Limiter;
use serde_json::{json, Value as Json};

/// xorshift64*: a sequence from its seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        shop: &'static str,
        n: i64,
    },
    Mark {
        shop: &'static str,
        ttl: i64,
    },
    Unmark {
        shop: &'static str,
    },
    Reset,
    Feedback {
        status: i64,
        retry_after_ms: i64,
    },
    /// Time passes: whole seconds and 7 ms, so no operation falls on a mark's deadline.
    Wait {
        seconds: u64,
    },
}

const SHOPS: [&str; 4] = ["a", "b", "c", "flash"];

/// One limiter configuration of the sequence's seed: buckets so slow to refill (a token
/// in 1,000 s) that no bucket refills a whole token within a sequence (the PHP model's
/// levels are whole tokens), `flash` statically hot, `auto_hot` and `adaptive` on or off.
fn options(rng: &mut Rng) -> Json {
    let bucket = |cap: u64| json!({"capacity": cap, "refill_per_second": 0.001});
    // hot_shop <= hot_lane <= global, as the options require; every one holds 3 tokens.
    let hot_shop = 3 + rng.below(4);
    let hot_lane = hot_shop + rng.below(5);
    let global = hot_lane + 1 + rng.below(8);
    let mut o = json!({
        "global": bucket(global),
        "hot_lane": bucket(hot_lane),
        "hot_shop": bucket(hot_shop),
        "hot_shops": ["flash"],
    });
    if rng.below(2) == 0 {
        let ttl = [2, 5, 3600][rng.below(3) as usize];
        o["auto_hot"] = json!({
            "share": 0.5,
            "min_tokens": 2 + rng.below(3),
            "window_seconds": 10 + rng.below(20),
            "ttl_seconds": ttl,
        });
    }
    if rng.below(2) == 0 {
        o["adaptive"] = json!({"min_share": 0.2, "recover_seconds": 30, "decrease": 0.5});
    }
    o
}

fn ops(rng: &mut Rng) -> Vec<Op> {
    let len = 20 + rng.below(40);
    (0..len)
        .map(|_| {
            let shop = SHOPS[rng.below(SHOPS.len() as u64) as usize];
            match rng.below(20) {
                0..=10 => Op::Acquire {
                    shop,
                    n: 1 + rng.below(3) as i64,
                },
                11 | 12 => Op::Mark {
                    shop,
                    ttl: [1, 3, 3600][rng.below(3) as usize],
                },
                13 => Op::Unmark { shop },
                14 => Op::Reset,
                15 | 16 => Op::Feedback {
                    status: [200, 429, 429, 503][rng.below(4) as usize],
                    retry_after_ms: [0, 0, 500, 2000][rng.below(4) as usize],
                },
                _ => Op::Wait {
                    seconds: rng.below(4),
                },
            }
        })
        .collect()
}

fn value_of(j: &Json) -> Value {
    match j {
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap()),
        },
        Json::String(s) => Value::Str(s.as_bytes().to_vec()),
        Json::Array(a) => Value::List(a.iter().map(value_of).collect()),
        Json::Object(m) => Value::Map(m.iter().map(|(k, v)| (k.clone(), value_of(v))).collect()),
        Json::Null => Value::Null,
    }
}

/// Runs `ops` on a limiter on the in-memory store: each answer, and the operation log the
/// PHP model replays (with the store's instants).
fn run_rust(name: &str, opts: &Json, ops: &[Op]) -> (Vec<(usize, Json)>, Vec<Json>) {
    let store = Arc::new(MemoryStore::new());
    let mut o = opts.clone();
    o["name"] = json!(name);
    o["on_unavailable"] = json!("throw");
    let defaults = Defaults {
        local_denials: false,
        ..Defaults::default()
    };
    let options = LimiterOptions::from_value(&value_of(&o), &defaults)
        .unwrap_or_else(|e| panic!("options {o}: {e:?}"));
    let keys = Keys::new(name);
    let l = Limiter::with_store(options, store.clone(), Arc::new(store.clock()));
    let mut answers = Vec::new();
    let mut log = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let t_us = store.now_us();
        let t = t_us as f64 / 1e6;
        match op {
            Op::Acquire { shop, n } => {
                let d = l.acquire(shop.as_bytes(), *n).unwrap();
                answers.push((
                    i,
                    json!({"allowed": d.allowed, "reason": d.reason.as_str(),
                    "remaining": d.remaining, "hot_shop": d.hot_shop}),
                ));
                log.push(json!({"op": "acquire", "shop": shop, "n": n, "t": t, "t_us": t_us}));
            }
            Op::Mark { shop, ttl } => {
                l.mark_hot(shop.as_bytes(), *ttl).unwrap();
                answers.push((i, json!({"ok": true})));
                log.push(json!({"op": "mark", "shop": shop, "ttl": ttl, "t": t}));
            }
            Op::Unmark { shop } => {
                l.unmark_hot(shop.as_bytes()).unwrap();
                answers.push((i, json!({"ok": true})));
                log.push(json!({"op": "unmark", "shop": shop}));
            }
            Op::Reset => {
                l.reset().unwrap();
                answers.push((i, json!({"ok": true})));
                log.push(json!({"op": "reset"}));
            }
            Op::Feedback {
                status,
                retry_after_ms,
            } => {
                let retry = (*retry_after_ms > 0).then(|| *retry_after_ms as f64 / 1000.0);
                l.feedback(b"a", *status, retry).unwrap();
                let state = store.get(&keys.adapt()).map(|raw| {
                    String::from_utf8(raw)
                        .unwrap()
                        .split(':')
                        .map(|f| f.parse::<i64>().unwrap())
                        .collect::<Vec<_>>()
                });
                answers.push((i, json!({ "state": state })));
                log.push(json!({"op": "feedback", "status": status,
                    "retry_after_us": retry_after_ms * 1000, "t_us": t_us}));
            }
            Op::Wait { seconds } => {
                store.advance(Duration::from_secs(*seconds) + Duration::from_millis(7));
                continue;
            }
        }
    }
    (answers, log)
}

fn run_php(opts: &Json, log: &[Json]) -> Vec<Json> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/php/support/reference_replay.php"
    );
    let mut child = Command::new("php")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("php on the PATH (the PHP reference model runs in it)");
    let input = json!({"options": opts, "ops": log}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "reference_replay.php: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every run's limiter name is new: a limiter keeps process-wide state by name.
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The first operation (its index in `ops`) on which the two models disagree, if any,
/// with the two answers.
fn first_disagreement(name: &str, opts: &Json, ops: &[Op]) -> Option<(usize, Json, Json)> {
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (rust, log) = run_rust(&format!("{name}-{run}"), opts, ops);
    let php = run_php(opts, &log);
    assert_eq!(php.len(), rust.len(), "one answer an operation");
    rust.into_iter()
        .zip(php)
        .find(|((_, r), p)| r != p)
        .map(|((at, r), p)| (at, r, p))
}

#[test]
fn the_rust_and_php_reference_models_agree() {
    let fixed: Option<u64> = std::env::var("CG_AGREE_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let count: u64 = std::env::var("CG_AGREE_SEQUENCES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let base = fixed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    eprintln!("reference models: base seed {base} (CG_AGREE_SEED={base} repeats it)");
    let runs = if fixed.is_some() { 1 } else { count };
    for i in 0..runs {
        let seed = base.wrapping_add(i);
        let mut rng = Rng(seed | 1);
        let opts = options(&mut rng);
        let mut sequence = ops(&mut rng);
        let name = format!("agree-{seed}");
        let Some((at, _, _)) = first_disagreement(&name, &opts, &sequence) else {
            continue;
        };
        // The shortest prefix that disagrees, then each operation dropped that keeps it
        // (cut again after the operation that then disagrees).
        sequence.truncate(at + 1);
        let mut k = 0;
        while k + 1 < sequence.len() {
            let mut shorter = sequence.clone();
            shorter.remove(k);
            match first_disagreement(&name, &opts, &shorter) {
                Some((at, _, _)) => {
                    shorter.truncate(at + 1);
                    sequence = shorter;
                }
                None => k += 1,
            }
        }
        let (at, rust, php) = first_disagreement(&name, &opts, &sequence)
            .expect("the shortened sequence still disagrees");
        panic!(
            "seed {seed} (CG_AGREE_SEED={seed}): the models disagree at operation {at}: \
             Rust {rust}, PHP {php}\noptions {opts}\nsequence {sequence:?}"
        );
    }
}
