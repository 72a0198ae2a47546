//! TTL windows: fixed by default, sliding on request; expiry with and without traffic.

#![cfg(not(idem_loom))]

mod util;

use idem::{Claim, Engine, ManualClock, NamespaceConfig};
use util::*;

fn done(ns: &idem::Namespace, key: &[u8]) {
    let Claim::Acquired(g) = ns.claim(key).unwrap() else {
        panic!("expected Acquired")
    };
    g.complete().unwrap();
}

#[test]
fn duplicate_until_the_last_millisecond_of_the_ttl() {
    let (_e, ns, clock) = engine_with(small());
    done(&ns, b"k");
    clock.advance(ms(59_999));
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    clock.advance(ms(1));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn fixed_window_is_not_extended_by_duplicates() {
    let (_e, ns, clock) = engine_with(small());
    done(&ns, b"k");
    for _ in 0..5 {
        clock.advance(secs(10));
        assert!(ns.claim(b"k").unwrap().is_duplicate());
    }
    clock.advance(secs(10));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn sliding_window_restarts_on_each_duplicate() {
    let (_e, ns, clock) = engine_with(small().extend_on_duplicate(true));
    done(&ns, b"k");
    for _ in 0..10 {
        clock.advance(secs(50));
        let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
            panic!("sliding window must keep the key alive")
        };
        assert_eq!(
            d.completed_at_ms(),
            T0,
            "completion time survives extension"
        );
    }
    clock.advance(secs(60));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn expired_keys_are_reclaimed_without_traffic() {
    let (e, ns, clock) = engine_with(small());
    for i in 0..1000u64 {
        done(&ns, key(i).as_bytes());
        clock.advance(ms(10));
    }
    assert_eq!(e.stats().resident_keys, 1000);
    // 10 s have passed; the first key expires at 60 s, the second 10 ms later.
    clock.advance(ms(49_999));
    assert_eq!(e.run_maintenance(), 0);
    clock.advance(ms(1));
    assert_eq!(e.run_maintenance(), 1);
    assert_eq!(e.stats().resident_keys, 999);
    clock.advance(secs(10));
    assert_eq!(e.run_maintenance(), 999);
    let s = e.stats();
    assert_eq!(s.resident_keys, 0);
    assert_eq!(s.expirations, 1000);
}

#[test]
fn a_ttl_shorter_than_the_lease_is_reclaimed_at_the_ttl() {
    // Completion moves the key's deadline earlier than its lease: expiry follows it.
    let (e, ns, clock) = engine_with(small().ttl(secs(2)).lease(secs(30)));
    for i in 0..100u64 {
        done(&ns, key(i).as_bytes());
    }
    clock.advance(ms(1_999));
    assert_eq!(e.run_maintenance(), 0);
    assert_eq!(e.stats().resident_keys, 100);
    clock.advance(ms(1));
    assert_eq!(e.run_maintenance(), 100);
    assert_eq!(e.stats().resident_keys, 0);
}

#[test]
fn check_reports_nothing_for_an_expired_key_before_maintenance() {
    let (e, ns, clock) = engine_with(small());
    done(&ns, b"k");
    clock.advance(secs(60));
    assert_eq!(ns.check(b"k").unwrap(), None);
    assert_eq!(
        e.stats().resident_keys,
        1,
        "check reads, it does not reclaim"
    );
}

#[test]
fn background_maintenance_thread_reclaims_and_stops_on_drop() {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", small())
        .clock(clock.clone())
        .maintenance_interval(Some(ms(1)))
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    done(&ns, b"k");
    clock.advance(secs(61));
    // The thread runs every millisecond of real time; wait for it by polling the
    // gauge (no fixed sleep: the loop ends as soon as it has run).
    let mut spins = 0u64;
    while engine.stats().resident_keys != 0 {
        std::thread::yield_now();
        spins += 1;
        assert!(spins < 50_000_000, "maintenance thread never ran");
    }
    drop(engine);
    // The handle keeps working without the engine.
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn long_clock_jump_without_maintenance_expires_everything() {
    // A coarse tick so the jump spans more than the wheel's serial range.
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", NamespaceConfig::new().ttl(secs(60)))
        .clock(clock.clone())
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    done(&ns, b"k");
    clock.advance(secs(40 * 24 * 3600));
    assert!(ns.claim(b"k").unwrap().is_acquired());
    assert_eq!(ns.check(b"other").unwrap(), None);
}

#[test]
fn clock_stepping_backwards_never_expires_early() {
    let (_e, ns, clock) = engine_with(small());
    clock.advance(secs(100));
    done(&ns, b"k");
    clock.set(T0);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    clock.set(T0 + 100_000 + 59_999);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

#[test]
fn a_clock_stepped_back_further_than_a_deadline_reaches_reads_as_stopped() {
    // More than 2^31 ticks of 1 ms: a 32-bit deadline compared with serial arithmetic
    // read live keys as expired after such a step.
    let step = 3u64 << 30;
    let (e, ns, clock) = engine_with(small());
    clock.set(T0 + 2 * step);
    done(&ns, b"done");
    let held = acquire(&ns, b"held");
    clock.set(T0 + step);
    // Before: Acquired twice over.
    assert!(ns.claim(b"done").unwrap().is_duplicate());
    assert!(ns.claim(b"held").unwrap().is_in_progress());
    // A key completed while the clock reads behind gets its deadlines from the latest
    // time seen, and maintenance reclaims it once the clock has passed them (before,
    // the wheel had parked it wrongly and kept it some 2^32 ticks more).
    done(&ns, b"during");
    assert_eq!(e.stats().resident_keys, 3);
    clock.set(T0 + 2 * step + 60_000);
    assert_eq!(e.run_maintenance(), 3, "{:?}", e.stats());
    assert_eq!(e.stats().resident_keys, 0);
    assert_eq!(held.complete(), Err(idem::Error::LeaseLost));
}

#[test]
fn coarse_tick_rounds_expiry_up_never_down() {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", NamespaceConfig::new().ttl(ms(1500)))
        .clock(clock.clone())
        .tick(secs(1))
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    done(&ns, b"k");
    clock.advance(ms(1999));
    assert!(ns.claim(b"k").unwrap().is_duplicate(), "never early");
    clock.advance(ms(1));
    assert!(
        ns.claim(b"k").unwrap().is_acquired(),
        "at most one tick late"
    );
}

#[test]
fn a_sliding_sighting_never_shortens_a_promised_window() {
    let (_e, ns, clock) = engine_with(small().extend_on_duplicate(true));
    clock.advance(secs(100));
    done(&ns, b"k");
    // A sighting with an earlier clock reading (a claimant that read the clock before
    // another sighting took the lock, or a clock stepped back) must not pull the
    // expiry in.
    clock.set(T0);
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    assert_eq!(d.expires_at_ms(), T0 + 160_000);
    clock.set(T0 + 159_999);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

#[test]
fn completion_time_is_never_reported_in_the_future_with_a_coarse_tick() {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", NamespaceConfig::new().ttl(ms(1500)))
        .clock(clock.clone())
        .tick(secs(1))
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("ns").unwrap();
    clock.advance(ms(250));
    done(&ns, b"k");
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    assert!(d.completed_at_ms() <= T0 + 250, "{}", d.completed_at_ms());
    assert!(d.completed_at_ms() + 1000 > T0 + 250, "within one tick");
}
