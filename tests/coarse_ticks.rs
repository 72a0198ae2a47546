//! Deterministic cases on ticks coarser than 1 ms that the model checks
//! (`tests/model_durable.rs`, `tests/model.rs`) found.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use std::time::Duration;

use idem::{Claim, Engine, KeyState, ManualClock, NamespaceConfig, SyncPolicy};
use util::{acquire, TempDir, T0};

const TICK_MS: u64 = 250;
const TTL_MS: u64 = 1000;
const RETENTION_MS: u64 = 1166;

fn open(dir: &TempDir, clock: &ManualClock) -> (Engine, idem::Namespace) {
    let engine = Engine::builder()
        .namespace(
            "ns",
            NamespaceConfig::new()
                .ttl(Duration::from_millis(TTL_MS))
                .lease(Duration::from_millis(300))
                .retention(Duration::from_millis(RETENTION_MS))
                .extend_on_duplicate(true)
                .sync(SyncPolicy::Never),
        )
        .clock(clock.clone())
        .tick(Duration::from_millis(TICK_MS))
        .maintenance_interval(None)
        .durable(dir.path())
        .build()
        .expect("valid configuration");
    let ns = engine.namespace("ns").expect("configured namespace");
    (engine, ns)
}

/// A sliding window's sighting whose window end, rounded up to a 250 ms tick,
/// passes a retention boundary extends the record by a whole retention. After a
/// restart, whose ticks count from another reading, a sighting of the key reads the
/// record back (its answer is the record's expiry, exact) and holds it in the hot
/// tier with a window end that the new ticks do not round past that boundary: from
/// then on every `check` and every sighting answered from the hot tier reports the
/// window's end as the key's expiry, a retention short of the record that keeps
/// answering `Duplicate` until its own expiry. `Done::expires_at_ms` promises an
/// expiry at most a tick early.
#[test]
fn a_sliding_window_read_back_after_a_restart_reports_its_records_expiry() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let key = b"k";
    let (engine, ns) = open(&dir, &clock);
    acquire(&ns, key).complete().expect("completed");
    // Record: T0 + 1166 (the window's end, T0 + 1000, is within the first retention).
    // A sighting at T0 + 302: the window ends at T0 + 1302, rounded up to T0 + 1500,
    // whose end taken a tick earlier (T0 + 1251) is past T0 + 1166: the record is
    // rewritten to T0 + 2332.
    clock.advance(Duration::from_millis(302));
    let record_until = T0 + 2 * RETENTION_MS;
    match ns.claim(key).expect("claim") {
        Claim::Duplicate(d) => assert_eq!(d.expires_at_ms(), record_until),
        other => panic!("expected a duplicate, got {other:?}"),
    }
    drop(ns);
    drop(engine);
    // Reopened at T0 + 302: ticks now count from here. The sighting reads the
    // record back and answers its expiry exactly.
    let (_engine, ns) = open(&dir, &clock);
    match ns.claim(key).expect("claim") {
        Claim::Duplicate(d) => assert_eq!(d.expires_at_ms(), record_until),
        other => panic!("expected a duplicate, got {other:?}"),
    }
    // At the same instant `check` answers from the hot tier: its window ends at
    // T0 + 1302, on a tick boundary now, and the expiry it reports is T0 + 1302.
    let earliest = record_until - (TICK_MS - 1);
    let checked = ns.check(key).expect("check");
    match checked {
        Some(KeyState::Done { expires_at_ms, .. }) => assert!(
            (earliest..=record_until).contains(&expires_at_ms),
            "check reports the key expiring at T0 + {} ms; its record lasts to T0 + {} ms",
            expires_at_ms - T0,
            record_until - T0
        ),
        other => panic!("expected a done key, got {other:?}"),
    }
    // The record does keep the key a duplicate past that report.
    clock.advance(Duration::from_millis(1100));
    assert!(ns.claim(key).expect("claim").is_duplicate());
}
