//! The adaptive budget in the worker (`Limiter::feedback`, the decisions at the share,
//! local denials while adapted) against the in-memory store on a fake clock: counts and
//! exact times, nothing sleeps.

use std::sync::Arc;
use std::time::Duration;

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::adaptive::MAX_RETRY_AFTER_SECONDS;
use checkout_guard_model::{LimiterError, Reason};
use checkout_guard_runtime::limiter::AdaptWhy;
use checkout_guard_runtime::store::{Fault, MemoryStore};
use checkout_guard_runtime::Limiter;

fn bucket(capacity: i64, rate: f64) -> Value {
    Value::Map(vec![
        ("capacity".into(), Value::Int(capacity)),
        ("refill_per_second".into(), Value::Float(rate)),
    ])
}

fn limiter(
    name: &str,
    store: &Arc<MemoryStore>,
    local_denials: bool,
    extra: Vec<(&str, Value)>,
) -> Limiter {
    let mut entries = vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("global".into(), bucket(10, 10.0)),
        ("adaptive".into(), Value::Bool(true)),
    ];
    for (k, v) in extra {
        entries.retain(|(e, _)| e != k);
        entries.push((k.to_string(), v));
    }
    let defaults = Defaults {
        local_denials,
        ..Defaults::default()
    };
    let options = LimiterOptions::from_value(&Value::Map(entries), &defaults).unwrap();
    Limiter::with_store(options, store.clone(), Arc::new(store.clock()))
}

fn option_of(e: LimiterError) -> String {
    match e {
        LimiterError::Config(c) => c.option,
        other => panic!("not a configuration error: {other}"),
    }
}

#[test]
fn without_the_option_or_for_a_success_feedback_costs_no_call() {
    let s = Arc::new(MemoryStore::new());
    let off = limiter("fb-off", &s, false, vec![("adaptive", Value::Bool(false))]);
    assert!(off.feedback(b"s", 429, Some(5.0)).unwrap().is_empty());
    let on = limiter("fb-on", &s, false, vec![]);
    for status in [200, 201, 302, 404, 500, 503] {
        assert!(on.feedback(b"s", status, None).unwrap().is_empty());
    }
    assert_eq!(s.stats().calls, 0, "no round trip");
    assert!(off.adapt_seen().is_none());
    let changes = on.feedback(b"s", 429, None).unwrap();
    assert_eq!(s.stats().calls, 1);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].why, AdaptWhy::Throttled);
    assert_eq!((changes[0].from, changes[0].to), (1.0, 0.7));
    assert_eq!(changes[0].status, Some(429));
}

#[test]
fn bad_arguments_name_themselves() {
    let s = Arc::new(MemoryStore::new());
    let l = limiter("fb-bad", &s, false, vec![]);
    for status in [-1, 0, 99, 600, 1000] {
        assert_eq!(
            option_of(l.feedback(b"s", status, None).unwrap_err()),
            "statusCode"
        );
    }
    // NAN and negatives are errors; +INF is not (the longest pause: see
    // an_infinite_or_huge_retry_after_is_the_longest_pause).
    for ra in [-0.001, f64::NAN, -f64::INFINITY] {
        assert_eq!(
            option_of(l.feedback(b"s", 429, Some(ra)).unwrap_err()),
            "retryAfterSeconds"
        );
    }
    assert_eq!(option_of(l.feedback(b"", 429, None).unwrap_err()), "shopId");
    // Also without the option: misuse is found in development, not when adaptive is on.
    let off = limiter(
        "fb-bad-off",
        &s,
        false,
        vec![("adaptive", Value::Bool(false))],
    );
    assert_eq!(
        option_of(off.feedback(b"s", 700, None).unwrap_err()),
        "statusCode"
    );
    assert_eq!(s.stats().calls, 0);
}

#[test]
fn one_decrease_per_second_however_many_report_and_decisions_follow_the_share() {
    let s = Arc::new(MemoryStore::new());
    let workers: Vec<_> = (0..5)
        .map(|_| limiter("fb-cool", &s, false, vec![]))
        .collect();
    let mut decreases = 0;
    for w in &workers {
        decreases += w.feedback(b"s", 429, None).unwrap().len();
    }
    assert_eq!(
        decreases, 1,
        "five reports in the same instant: one decrease"
    );
    assert_eq!(workers[4].adapt_seen().unwrap().permille, 700);
    // The global bucket (10 tokens) holds 7 at 0.7.
    let admitted = (0..20)
        .filter(|_| workers[0].acquire(b"s", 1).unwrap().allowed)
        .count();
    assert_eq!(admitted, 7);
    s.advance(Duration::from_millis(999));
    assert!(workers[1].feedback(b"s", 429, None).unwrap().is_empty());
    s.advance(Duration::from_millis(1));
    let c = workers[2].feedback(b"s", 429, None).unwrap();
    assert_eq!(c.len(), 1);
    assert!(c[0].from > 0.7, "climbing back for a second: {}", c[0].from);
    assert_eq!(c[0].to, (c[0].from * 1000.0 * 0.7).floor() / 1000.0);
}

#[test]
fn retry_after_pauses_every_shop_with_reason_provider_and_shadow_lets_through() {
    let s = Arc::new(MemoryStore::new());
    let l = limiter("fb-pause", &s, false, vec![]);
    let c = l.feedback(b"s", 429, Some(2.0)).unwrap();
    let whys: Vec<_> = c.iter().map(|c| c.why).collect();
    assert_eq!(whys, [AdaptWhy::Throttled, AdaptWhy::RetryAfter]);
    let until = c[1].paused_until_ms.unwrap();
    assert_eq!(until * 1000, s.now_us() / 1000 * 1000 + 2_000_000);
    for shop in [&b"a"[..], b"b", b"c"] {
        let d = l.acquire(shop, 1).unwrap();
        assert_eq!((d.allowed, d.reason), (false, Reason::Provider));
        assert_eq!(d.retry_after, 2.0);
    }
    let shadow = limiter(
        "fb-pause",
        &s,
        false,
        vec![("mode", Value::Str(b"shadow".to_vec()))],
    );
    let d = shadow.acquire(b"a", 1).unwrap();
    assert_eq!(
        (d.allowed, d.would_allow, d.reason),
        (true, false, Reason::Provider)
    );
    // A pause longer than 60 s is cut to 60 s.
    let c = l.feedback(b"s", 429, Some(3600.0)).unwrap();
    assert_eq!(
        c.last().unwrap().paused_until_ms.unwrap(),
        (s.now_us() + 60_000_000).div_euclid(1000)
    );
    s.advance(Duration::from_secs(60));
    assert!(l.acquire(b"a", 1).unwrap().allowed);
}

/// A Retry-After too large for a float (309 digits and more read as INF in PHP) or just
/// huge is the longest pause (60 s), not an error: a provider asking for a long pause
/// gets one. The event's `retry_after` is finite (bounded by MAX_RETRY_AFTER_SECONDS).
#[test]
fn an_infinite_or_huge_retry_after_is_the_longest_pause() {
    for (i, ra) in [f64::INFINITY, f64::MAX, 1e300, 9_007_199_254_740_993.0]
        .into_iter()
        .enumerate()
    {
        let s = Arc::new(MemoryStore::new());
        let name = format!("fb-inf-{i}");
        let l = limiter(&name, &s, false, vec![]);
        let c = l
            .feedback(b"s", 429, Some(ra))
            .unwrap_or_else(|e| panic!("{ra}: {e}"));
        let whys: Vec<_> = c.iter().map(|c| c.why).collect();
        assert_eq!(whys, [AdaptWhy::Throttled, AdaptWhy::RetryAfter], "{ra}");
        assert_eq!(
            c[1].paused_until_ms.unwrap(),
            (s.now_us() + 60_000_000).div_euclid(1000),
            "{ra}: paused for the longest pause"
        );
        let shown = c[1].retry_after.unwrap();
        assert!(shown.is_finite(), "{ra}: {shown}");
        assert_eq!(shown, MAX_RETRY_AFTER_SECONDS, "{ra}");
        let d = l.acquire(b"a", 1).unwrap();
        assert_eq!((d.allowed, d.reason), (false, Reason::Provider), "{ra}");
        assert_eq!(d.retry_after, 60.0, "{ra}");
        s.advance(Duration::from_secs(60));
        assert!(l.acquire(b"a", 1).unwrap().allowed, "{ra}");
    }
}

#[test]
fn a_store_error_is_counted_not_thrown() {
    let s = Arc::new(MemoryStore::new());
    let l = limiter("fb-err", &s, false, vec![]);
    s.inject(Fault::ErrorReply("OOM command not allowed".into()));
    assert!(l.feedback(b"s", 429, None).unwrap().is_empty());
    s.inject(Fault::Timeout {
        retry_in: Duration::from_secs(1),
    });
    assert!(l.feedback(b"s", 429, None).unwrap().is_empty());
    // The back-off: failed at once.
    assert!(l.feedback(b"s", 429, None).unwrap().is_empty());
    let seen = l.adapt_seen().unwrap();
    assert_eq!(seen.feedback_errors, 3);
    assert!(seen.last_feedback_error.is_some());
    assert_eq!(seen.permille, 0, "nothing seen");
}

#[test]
fn a_decision_that_finds_the_budget_recovered_reports_it_once() {
    let s = Arc::new(MemoryStore::new());
    let l = limiter("fb-rec", &s, false, vec![]);
    l.feedback(b"s", 429, None).unwrap();
    let (_, n) = l.acquire_noticed(b"s", 1).unwrap();
    assert!(n.adapt.is_none());
    assert_eq!(l.adapt_seen().unwrap().permille, 700);
    s.advance(Duration::from_secs(61));
    let (_, n) = l.acquire_noticed(b"s", 1).unwrap();
    let r = n.adapt.expect("recovered");
    assert_eq!((r.why, r.from, r.to), (AdaptWhy::Recovered, 0.7, 1.0));
    let (_, n) = l.acquire_noticed(b"s", 1).unwrap();
    assert!(n.adapt.is_none(), "the state is gone: reported once");
    assert_eq!(l.adapt_seen().unwrap().permille, 1000);
}

/// With local denials on, every decision is the one the store makes with them off, with
/// throttling answers and the recovery in between: nothing learnt at one share answers
/// at another (LocalDenialsAgreeWithValkeyTest's question for the adaptive budget).
#[test]
fn local_denials_agree_with_the_store_while_the_budget_adapts() {
    let s = Arc::new(MemoryStore::new());
    let local = limiter("fb-local", &s, true, vec![]);
    let asked = limiter("fb-local", &s, false, vec![]);
    let mut local_answers = [0; 4];
    // Phases: the full share; after a throttling answer reported here; after one reported
    // by another worker with a Retry-After; the budget back at the limits.
    for (phase, answered_here) in local_answers.iter_mut().enumerate() {
        match phase {
            1 => assert_eq!(local.feedback(b"s", 429, None).unwrap().len(), 1),
            2 => assert_eq!(asked.feedback(b"s", 429, Some(0.3)).unwrap().len(), 2),
            // Back at the limits well within 120 s (0.7 then 0.49 in 60 s from the floor).
            3 => s.advance(Duration::from_secs(120)),
            _ => {}
        }
        for step in 0..150u32 {
            let calls = s.stats().calls;
            let d = local.acquire(b"s", 1).unwrap();
            if s.stats().calls == calls {
                *answered_here += 1;
                // What the store answers at the same instant, taking nothing.
                let v = asked.peek(b"s", 1).unwrap();
                assert_eq!(
                    (d.allowed, d.reason, d.retry_after, d.remaining),
                    (v.allowed, v.reason, v.retry_after, v.remaining),
                    "phase {phase} step {step}"
                );
            }
            s.advance(Duration::from_millis(if step % 3 == 0 { 40 } else { 7 }));
        }
    }
    assert!(
        local_answers[0] > 0 && local_answers[3] > 0,
        "the fast path ran: {local_answers:?}"
    );
    assert_eq!(
        local_answers[1..3],
        [0, 0],
        "none while adapted: {local_answers:?}"
    );
}

/// health()'s adaptive part: without a ping what this process last saw (the pause ends
/// on its clock), with one read from the store (another worker's answer included).
#[test]
fn adaptive_health_reads_the_store_when_pinging_else_what_the_process_saw() {
    let s = Arc::new(MemoryStore::new());
    let l = limiter("fb-health", &s, false, vec![]);
    let other = limiter("fb-health", &s, false, vec![]);
    let h = l.adaptive_health(false).unwrap();
    assert_eq!(
        (h.share, h.paused_until_us, h.last, h.from_valkey),
        (1.0, None, None, false)
    );
    l.feedback(b"s", 429, Some(2.0)).unwrap();
    let h = l.adaptive_health(false).unwrap();
    assert_eq!(h.share, 0.7);
    assert_eq!(h.paused_until_us, Some(s.now_us() + 2_000_000));
    assert_eq!(
        h.last.map(|t| (t.status, t.retry_after_us)),
        Some((429, 2_000_000))
    );
    s.advance(Duration::from_secs(3));
    assert_eq!(l.adaptive_health(false).unwrap().paused_until_us, None);
    // Another worker's answer: this one knows it only from the store.
    other.feedback(b"s", 429, None).unwrap();
    let seen = l.adaptive_health(false).unwrap();
    assert_eq!(seen.share, 0.7, "the process's view is its own");
    let h = l.adaptive_health(true).unwrap();
    assert!(h.from_valkey && h.read_error.is_none());
    assert!(
        h.share < 0.7,
        "decreased again by the other worker: {}",
        h.share
    );
    assert_eq!(h.last.map(|t| t.retry_after_us), Some(0));
    // The store unreachable: the process's view, and why.
    s.inject(Fault::ErrorReply("LOADING".into()));
    let h = l.adaptive_health(true).unwrap();
    assert_eq!((h.from_valkey, h.share), (false, 0.7));
    assert_eq!(h.read_error.as_deref(), Some("LOADING"));
    assert!(limiter(
        "fb-health-off",
        &s,
        false,
        vec![("adaptive", Value::Bool(false))]
    )
    .adaptive_health(true)
    .is_none());
}
