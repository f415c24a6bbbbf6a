//! The live counters (`metrics`) against what the decisions said: this test process plays
//! a php-fpm master that made the shared mapping at module start-up (`init_shared`) and
//! forks its workers; each worker runs a random sequence of decisions (enforce and shadow
//! limiters, local denials, reservations, Valkey failing under `allow` and `deny`, time
//! moving) on an in-memory store and writes down what every decision answered; one worker
//! is killed (SIGKILL) after its sequence. The rendered counters must equal the sums of
//! what the workers wrote down, the killed one's included. Seed: `CG_MODEL_SEED`
//! (printed); on a failure the first differing series is named.
//!
//! One test in this file: the mapping is made once per process, before any fork.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use checkout_guard_config::Value;
use checkout_guard_runtime::store::Fault;
use checkout_guard_runtime::{denials, metrics};

#[allow(dead_code)]
mod memory_limiter;
#[allow(dead_code)]
mod seeded;

use memory_limiter::{bucket, limiter, shadow, store};

/// A small deterministic generator (xorshift), so a seed replays a sequence exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The series a worker expects: exposition line name with labels -> count.
type Expected = BTreeMap<String, u64>;

fn bump(e: &mut Expected, key: String, n: u64) {
    *e.entry(key).or_insert(0) += n;
}

/// One worker's sequence; returns what every decision answered, as series.
fn worker(seed: u64, ops: usize) -> Expected {
    let mut rng = Rng(seed | 1);
    let s = store();
    let clock = s.clock();
    let hot = vec![(
        "hot_shops".to_string(),
        Value::List(vec![Value::Str(b"h".to_vec())]),
    )];
    let limiters = [
        (
            "mx-enforce",
            limiter("mx-enforce", &s, "deny", true, hot.clone()),
        ),
        (
            "mx-shadow",
            limiter("mx-shadow", &s, "deny", false, shadow()),
        ),
        ("mx-allow", limiter("mx-allow", &s, "allow", true, vec![])),
        (
            "mx-small",
            limiter(
                "mx-small",
                &s,
                "deny",
                true,
                vec![("global".into(), bucket(6, 6.0))],
            ),
        ),
    ];
    let mut e = Expected::new();
    for _ in 0..ops {
        let (name, l) = &limiters[rng.below(limiters.len() as u64) as usize];
        let shop: &[u8] = [&b"a"[..], b"b", b"h"][rng.below(3) as usize];
        match rng.below(20) {
            0 => s.inject(Fault::Timeout {
                retry_in: Duration::from_millis(rng.below(300)),
            }),
            1 => s.inject(Fault::ErrorReply("OOM command not allowed".into())),
            2..=4 => clock.advance(Duration::from_millis(rng.below(400))),
            _ => {}
        }
        let tokens = 1 + rng.below(2) as i64;
        let reservation = rng.below(8) == 0;
        let d = if reservation {
            l.acquire_within(shop, tokens, 0.2).map(|(d, _)| d)
        } else {
            l.acquire(shop, tokens)
        }
        .expect("allow/deny policies never throw");
        let outcome = if d.allowed { "allowed" } else { "denied" };
        let mode = if d.shadow { "shadow" } else { "enforce" };
        bump(
            &mut e,
            format!(
                "checkout_guard_decisions_total{{limiter=\"{name}\",outcome=\"{outcome}\",reason=\"{}\",mode=\"{mode}\"}}",
                d.reason.as_str()
            ),
            1,
        );
        if d.waited > 0.0 {
            bump(
                &mut e,
                format!("checkout_guard_reservations_waited_total{{limiter=\"{name}\"}}"),
                1,
            );
        }
    }
    e
}

/// The samples of an exposition: `name{labels}` -> value (text).
fn samples(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("a sample has a value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn every_workers_decisions_are_counted_once_in_the_masters_shared_counters() {
    let seed = seeded::seed();
    println!("metrics: seed {seed} (CG_MODEL_SEED={seed} replays it)");
    denials::init_shared();
    let dir = std::env::temp_dir().join(format!("cg-metrics-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let workers = 4u64;
    let mut pids = Vec::new();
    for w in 0..workers {
        // SAFETY: one test in this binary; the child runs its sequence and leaves with
        // _exit (or is killed).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                let e = worker(seed.wrapping_add(w * 7919), 400);
                let mut f = std::fs::File::create(dir.join(format!("w{w}"))).unwrap();
                for (k, n) in &e {
                    writeln!(f, "{k}\t{n}").unwrap();
                }
                f.sync_all().unwrap();
                drop(f);
                std::fs::write(dir.join(format!("w{w}.done")), b"").unwrap();
                // The last worker waits to be killed, as a worker is at an unlucky instant.
                if w == workers - 1 {
                    std::thread::sleep(Duration::from_secs(60));
                }
                0
            })
            .unwrap_or(99);
            unsafe { libc::_exit(code) };
        }
        pids.push(pid);
    }
    let last = *pids.last().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !dir.join(format!("w{}.done", workers - 1)).exists() {
        let mut status = 0;
        // SAFETY: our own child; WNOHANG only asks whether it ended.
        let ended = unsafe { libc::waitpid(last, &mut status, libc::WNOHANG) };
        assert!(
            ended == 0,
            "seed {seed}: the last worker ended before its sequence was done (status {status})"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the last worker never finished"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: our own child.
    unsafe { libc::kill(last, libc::SIGKILL) };
    for pid in pids {
        let mut status = 0;
        // SAFETY: our own children.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            pid == last || (libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0),
            "worker {pid} failed (status {status})"
        );
    }
    let mut expected = Expected::new();
    for w in 0..workers {
        for line in std::fs::read_to_string(dir.join(format!("w{w}")))
            .unwrap()
            .lines()
        {
            let (k, n) = line.split_once('\t').unwrap();
            bump(&mut expected, k.to_string(), n.parse().unwrap());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let text = metrics::render(false);
    let got = samples(&text);
    for (k, n) in &expected {
        assert_eq!(
            got.get(k).map(String::as_str),
            Some(n.to_string().as_str()),
            "seed {seed}: {k} (want {n})\n{text}"
        );
    }
    // Nothing counted that no worker saw.
    for (k, v) in &got {
        if k.starts_with("checkout_guard_decisions_total{") {
            assert!(
                expected.contains_key(k),
                "seed {seed}: {k} = {v} counted, never answered"
            );
        }
    }
    // Local denials are a part of the denials, Valkey's decisions the rest of them.
    for name in ["mx-enforce", "mx-allow", "mx-small"] {
        let count = |prefix: &str| -> u64 {
            got.iter()
                .filter(|(k, _)| {
                    k.starts_with(prefix) && k.contains(&format!("limiter=\"{name}\""))
                })
                .map(|(_, v)| v.parse::<u64>().unwrap())
                .sum()
        };
        let decisions = count("checkout_guard_decisions_total{");
        let unavailable: u64 = got
            .iter()
            .filter(|(k, _)| {
                k.starts_with("checkout_guard_decisions_total{")
                    && k.contains(&format!("limiter=\"{name}\""))
                    && k.contains("reason=\"unavailable\"")
            })
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum();
        let local = count("checkout_guard_local_denials_total{");
        let by_valkey = count("checkout_guard_valkey_decisions_total{");
        assert!(
            local > 0,
            "seed {seed}: {name}: a flood of 400 calls met no local denial\n{text}"
        );
        assert_eq!(
            local + by_valkey + unavailable,
            decisions,
            "seed {seed}: {name}: every decision made in the worker, by Valkey, or by the policy\n{text}"
        );
    }
    assert!(
        text.contains("checkout_guard_metrics_series_dropped_total 0\n"),
        "{text}"
    );
}
