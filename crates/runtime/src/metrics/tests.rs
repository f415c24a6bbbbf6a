use super::*;
use render::render_region;

/// A region of the test's own (all-zero, as a fresh mapping), not the process's.
fn region() -> Box<Region> {
    // SAFETY: all-zero bytes are a valid Region (atomics only).
    unsafe { Box::<Region>::new_zeroed().assume_init() }
}

fn series<'r>(r: &'r Region, family: Family, values: &[&str]) -> &'r Series {
    r.series(&Key::new(family, values)).expect("a free slot")
}

fn line_value(text: &str, prefix: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .map(|l| l[prefix.len() + 1..].to_string())
}

#[test]
fn increments_from_many_threads_add_up_exactly_per_label_set() {
    let r: &'static Region = Box::leak(region());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    let limiter = format!("l{}", i % 50);
                    let s = series(
                        r,
                        Family::Decisions,
                        &[&limiter, "denied", "global", "enforce"],
                    );
                    s.add(1 + (t % 2));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let text = render_region(Some(r), false);
    // Per limiter: 8 threads x 400 calls, half adding 1 and half 2.
    for l in 0..50 {
        let v = line_value(
            &text,
            &format!(
                "checkout_guard_decisions_total{{limiter=\"l{l}\",outcome=\"denied\",reason=\"global\",mode=\"enforce\"}}"
            ),
        );
        assert_eq!(v.as_deref(), Some("4800"), "limiter l{l}:\n{text}");
    }
    assert_eq!(r.series_dropped(), 0);
}

#[test]
fn two_slots_claimed_for_one_label_set_are_added_up_and_a_gauge_keeps_the_latest() {
    let r = region();
    let key = Key::new(Family::NearLimit, &["a"]);
    // Two workers that claimed at once: the same key published in two slots.
    for (i, n) in [(3usize, 5u64), (700, 7)] {
        let s = &r.series[i];
        s.write_key(key.bytes());
        s.state.store(12345 | PUBLISHED, Ordering::Release);
        s.add(n);
    }
    let gauge = Key::new(Family::AdaptiveShare, &["a"]);
    for (i, v, at) in [(10usize, 0.4f64, 2000u64), (11, 0.7, 1000)] {
        let s = &r.series[i];
        s.write_key(gauge.bytes());
        s.state.store(777 | PUBLISHED, Ordering::Release);
        s.values[0].store(v.to_bits(), Ordering::Relaxed);
        s.values[1].store(at, Ordering::Relaxed);
    }
    let text = render_region(Some(&r), false);
    assert_eq!(
        line_value(&text, "checkout_guard_near_limit_total{limiter=\"a\"}").as_deref(),
        Some("12"),
        "{text}"
    );
    assert_eq!(
        line_value(&text, "checkout_guard_adaptive_share{limiter=\"a\"}").as_deref(),
        Some("0.4"),
        "{text}"
    );
    assert_eq!(
        text.matches("checkout_guard_near_limit_total{").count(),
        1,
        "{text}"
    );
}

#[test]
fn a_slot_left_claiming_by_a_killed_writer_is_passed_over_and_never_shown() {
    let r = region();
    let key = Key::new(Family::LocalDenials, &["k"]);
    let mut h = rustc_hash::FxHasher::default();
    h.write(key.bytes());
    let home = (h.finish() as usize) & (SERIES - 1);
    // The writer was killed after its compare-and-swap, before its key.
    r.series[home].state.store(CLAIMING, Ordering::Relaxed);
    series(&r, Family::LocalDenials, &["k"]).add(2);
    series(&r, Family::LocalDenials, &["k"]).add(3);
    let text = render_region(Some(&r), false);
    assert_eq!(
        line_value(&text, "checkout_guard_local_denials_total{limiter=\"k\"}").as_deref(),
        Some("5"),
        "{text}"
    );
    assert_eq!(r.series[home].state.load(Ordering::Relaxed), CLAIMING);
}

#[test]
fn a_full_table_counts_what_it_lost_and_the_calls_apis_never_take_the_limiters_room() {
    let r = region();
    // A checkout measuring more api names than the table holds.
    for i in 0..(SERIES - LIMITER_SERIES) {
        series(&r, Family::HttpDuration, &[&format!("api-{i}"), "2xx"]).observe(0.01);
    }
    assert!(r
        .series(&Key::new(Family::HttpDuration, &["one-more", "2xx"]))
        .is_none());
    // The limiters' and sinks' families still find room, up to their own part.
    for i in 0..LIMITER_SERIES {
        series(&r, Family::EventsWritten, &[&format!("s{i}")]).add(1);
    }
    assert!(r
        .series(&Key::new(Family::EventsWritten, &["one-more"]))
        .is_none());
    assert!(r
        .series(&Key::new(
            Family::Decisions,
            &["late", "allowed", "allowed", "enforce"]
        ))
        .is_none());
    // Those it holds are still found.
    series(&r, Family::EventsWritten, &["s17"]).add(1);
    // Each lost increment is counted (the caller says so: `lost`).
    for _ in 0..3 {
        r.lost();
    }
    let text = render_region(Some(&r), false);
    assert_eq!(
        line_value(&text, "checkout_guard_metrics_series_dropped_total").as_deref(),
        Some("3")
    );
    assert_eq!(
        line_value(&text, "checkout_guard_events_written_total{sink=\"s17\"}").as_deref(),
        Some("2")
    );
    assert_eq!(
        text.matches("checkout_guard_events_written_total{").count(),
        LIMITER_SERIES
    );
    assert_eq!(
        text.matches("http_client_request_duration_seconds_count{")
            .count(),
        SERIES - LIMITER_SERIES
    );
}

#[test]
fn a_histograms_sum_saturates_instead_of_wrapping_past_zero() {
    let r = region();
    let s = series(&r, Family::HttpDuration, &["absurd", "2xx"]);
    let mut last = 0.0f64;
    for _ in 0..10 {
        // recordCall() takes any finite duration: 1e300 ms.
        s.observe(1e297);
        let text = render_region(Some(&r), false);
        let sum: f64 = line_value(
            &text,
            "http_client_request_duration_seconds_sum{api=\"absurd\",status_class=\"2xx\"}",
        )
        .unwrap()
        .parse()
        .unwrap();
        assert!(sum >= last, "the sum went back from {last} to {sum}");
        last = sum;
    }
}

#[test]
fn a_label_value_too_long_for_the_slot_is_cut_on_a_character_boundary() {
    let long = "é".repeat(200);
    let key = Key::new(Family::HttpDuration, &[&long, "2xx"]);
    assert!(key.bytes().len() <= KEY_BYTES);
    let (family, values) = decode(key.bytes()).expect("decodes");
    assert_eq!(family, Family::HttpDuration);
    assert!(
        long.starts_with(&values[0]) && !values[0].is_empty(),
        "{:?}",
        values[0]
    );
    assert_eq!(values[1], "2xx", "the later label keeps its room");
}

#[test]
fn the_histogram_is_cumulative_with_canonical_bounds_and_its_sum_in_seconds() {
    let r = region();
    let s = series(&r, Family::HttpDuration, &["pay\"ment\\x\ny", "4xx"]);
    for secs in [0.001, 0.005, 0.2, 0.2, 3.0, 11.0, f64::NAN] {
        s.observe(secs);
    }
    let text = render_region(Some(&r), false);
    let labels = "api=\"pay\\\"ment\\\\x\\ny\",status_class=\"4xx\"";
    let bucket = |le: &str| {
        line_value(
            &text,
            &format!("http_client_request_duration_seconds_bucket{{{labels},le=\"{le}\"}}"),
        )
        .unwrap_or_else(|| panic!("no bucket {le}:\n{text}"))
    };
    // NaN is counted as 0 s (a clock that misread is still a call).
    assert_eq!(bucket("0.005"), "3");
    assert_eq!(bucket("0.1"), "3");
    assert_eq!(bucket("0.25"), "5");
    assert_eq!(bucket("1.0"), "5");
    assert_eq!(bucket("5.0"), "6");
    assert_eq!(bucket("10.0"), "6");
    assert_eq!(bucket("+Inf"), "7");
    assert_eq!(
        line_value(
            &text,
            &format!("http_client_request_duration_seconds_count{{{labels}}}")
        )
        .as_deref(),
        Some("7")
    );
    let sum: f64 = line_value(
        &text,
        &format!("http_client_request_duration_seconds_sum{{{labels}}}"),
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!((sum - 14.406).abs() < 1e-6, "{sum}");
}

#[test]
fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
    let r = region();
    series(
        &r,
        Family::Decisions,
        &["x", "allowed", "allowed", "enforce"],
    )
    .add(4);
    let om = render_region(Some(&r), true);
    assert!(om.ends_with("# EOF\n"));
    assert!(
        om.contains("# TYPE checkout_guard_decisions counter\n"),
        "{om}"
    );
    assert!(om.contains("checkout_guard_decisions_total{limiter=\"x\",outcome=\"allowed\",reason=\"allowed\",mode=\"enforce\"} 4\n"));
    let prom = render_region(Some(&r), false);
    assert!(
        prom.contains("# TYPE checkout_guard_decisions_total counter\n"),
        "{prom}"
    );
    assert!(!prom.contains("# EOF"));
    // Every family announced once, in one order, in both formats.
    for text in [&om, &prom] {
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        assert_eq!(types.len(), Family::ALL.len() + 2, "{text}");
    }
}

#[test]
fn statuses_fall_in_their_classes() {
    assert_eq!(status_class(204, false), "2xx");
    assert_eq!(status_class(429, false), "4xx");
    assert_eq!(status_class(503, true), "5xx");
    assert_eq!(status_class(0, true), "error");
    assert_eq!(status_class(0, false), "none");
    assert_eq!(status_class(99, false), "none");
}

#[test]
fn keys_of_other_families_or_labels_never_match() {
    let r = region();
    series(&r, Family::LocalDenials, &["ab"]).add(1);
    series(&r, Family::NearLimit, &["ab"]).add(2);
    series(&r, Family::ValkeyDecisions, &["a", "blua"]).add(3);
    series(&r, Family::ValkeyDecisions, &["ab", "lua"]).add(4);
    let text = render_region(Some(&r), false);
    assert_eq!(
        line_value(&text, "checkout_guard_local_denials_total{limiter=\"ab\"}").as_deref(),
        Some("1")
    );
    assert_eq!(
        line_value(&text, "checkout_guard_near_limit_total{limiter=\"ab\"}").as_deref(),
        Some("2")
    );
    assert_eq!(
        line_value(
            &text,
            "checkout_guard_valkey_decisions_total{limiter=\"a\",engine=\"blua\"}"
        )
        .as_deref(),
        Some("3")
    );
    assert_eq!(
        line_value(
            &text,
            "checkout_guard_valkey_decisions_total{limiter=\"ab\",engine=\"lua\"}"
        )
        .as_deref(),
        Some("4")
    );
}

#[test]
fn a_new_generation_of_the_master_starts_the_counters_again_and_the_same_one_keeps_them() {
    let r = region();
    r.adopt_generation(5);
    series(&r, Family::LocalDenials, &["g"]).add(3);
    let started = r.started_ms();
    // Another worker of the same master: nothing changes.
    r.adopt_generation(5);
    let text = render_region(Some(&r), false);
    assert_eq!(
        line_value(&text, "checkout_guard_local_denials_total{limiter=\"g\"}").as_deref(),
        Some("3")
    );
    // The master re-executed (a reload): its first worker clears them, with a new start time.
    r.dropped.store(2, Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_millis(5));
    r.adopt_generation(9);
    let text = render_region(Some(&r), false);
    assert!(
        !text.contains("checkout_guard_local_denials_total{"),
        "{text}"
    );
    assert_eq!(
        line_value(&text, "checkout_guard_metrics_series_dropped_total").as_deref(),
        Some("0")
    );
    assert!(r.started_ms() > started);
    // And counting goes on from zero.
    series(&r, Family::LocalDenials, &["g"]).add(1);
    let text = render_region(Some(&r), false);
    assert_eq!(
        line_value(&text, "checkout_guard_local_denials_total{limiter=\"g\"}").as_deref(),
        Some("1")
    );
}

#[test]
fn the_exec_generation_is_one_value_for_the_process() {
    let g = exec_generation();
    assert_ne!(g, 0);
    assert_eq!(std::thread::spawn(exec_generation).join().unwrap(), g);
}
