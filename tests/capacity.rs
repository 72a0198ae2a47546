//! Memory-only mode never evicts an unexpired key: a full namespace refuses (noeviction).

#![cfg(not(idem_loom))]

mod util;

use idem::{Claim, Error};
use util::*;

#[test]
fn exact_bound_accepts_max_keys_and_refuses_the_next() {
    for max in [1usize, 7, 64, 65, 1000, 5000] {
        let (e, ns, _c) = engine_with(small().max_keys(max));
        let mut guards = Vec::new();
        for i in 0..max as u64 {
            match ns.claim(key(i).as_bytes()) {
                Ok(Claim::Acquired(g)) => guards.push(g),
                other => panic!("max_keys={max}: key {i} refused: {other:?}"),
            }
        }
        let err = ns.claim(b"one-too-many").unwrap_err();
        assert_eq!(
            err,
            Error::CapacityExceeded {
                namespace: "ns".into(),
                max_keys: max
            }
        );
        let s = e.stats();
        assert_eq!(s.resident_keys, max as u64);
        assert_eq!(s.capacity_refusals, 1);
        // Duplicates of resident keys are still answered when full.
        assert!(ns.claim(key(0).as_bytes()).unwrap().is_in_progress());
        // The refused key left nothing behind.
        assert_eq!(ns.check(b"one-too-many").unwrap(), None);
        drop(guards);
        assert_eq!(e.stats().resident_keys, 0);
        assert!(ns.claim(b"one-too-many").unwrap().is_acquired());
    }
}

#[test]
fn done_keys_are_never_evicted_to_make_room() {
    let (_e, ns, clock) = engine_with(small().max_keys(100));
    for i in 0..100u64 {
        let g = acquire(&ns, key(i).as_bytes());
        g.complete().unwrap();
    }
    clock.advance(secs(59));
    assert!(matches!(
        ns.claim(b"new"),
        Err(Error::CapacityExceeded { .. })
    ));
    for i in 0..100u64 {
        assert!(ns.claim(key(i).as_bytes()).unwrap().is_duplicate());
    }
}

#[test]
fn expired_keys_free_capacity_even_without_a_maintenance_pass() {
    let (_e, ns, clock) = engine_with(small().max_keys(100));
    for i in 0..100u64 {
        let g = acquire(&ns, key(i).as_bytes());
        g.complete().unwrap();
    }
    clock.advance(secs(60));
    // The namespace is full of expired keys; a new claim reclaims them itself.
    for i in 100..200u64 {
        assert!(ns.claim(key(i).as_bytes()).unwrap().is_acquired());
    }
}

#[test]
fn capacity_freed_in_one_shard_serves_another() {
    // Many shards, tiny bound: slots must move between shards' reserves.
    let (e, ns, _c) = engine_with(small().max_keys(3).shards(64));
    let mut held = Vec::new();
    for round in 0..200u64 {
        let k = key(round);
        let claim = ns.claim(k.as_bytes()).unwrap();
        let Claim::Acquired(g) = claim else {
            panic!("round {round}: {claim:?}")
        };
        held.push(g);
        if held.len() == 3 {
            assert!(matches!(
                ns.claim(b"x"),
                Err(Error::CapacityExceeded { .. })
            ));
            held.remove(0).release().unwrap();
        }
    }
    assert_eq!(e.stats().resident_keys, held.len() as u64);
}

/// A namespace that is never full never refuses, whatever the threads do at once.
/// Four threads each keep at most a quarter of `max_keys` less one claims in flight,
/// releasing their oldest before each new claim, over many shards: units of capacity
/// keep moving between the shards' reserves and the pool, and a claim that finds its
/// shard's reserve and the pool empty while room sits in another shard's reserve must
/// still be admitted (its last attempt holds every shard's lock).
#[test]
fn a_namespace_never_full_never_refuses_under_concurrent_churn() {
    const MAX: usize = 1000;
    const THREADS: u64 = 4;
    let (e, ns, _c) = engine_with(small().max_keys(MAX).shards(16));
    let held_per_thread = MAX / THREADS as usize - 1;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let ns = ns.clone();
            s.spawn(move || {
                let mut held = std::collections::VecDeque::new();
                for i in 0..25_000u64 {
                    if held.len() == held_per_thread {
                        let g: idem::ClaimGuard = held.pop_front().unwrap();
                        g.release().unwrap();
                    }
                    match ns.claim(key(t << 40 | i).as_bytes()) {
                        Ok(Claim::Acquired(g)) => held.push_back(g),
                        other => panic!("thread {t}, claim {i}: {other:?}"),
                    }
                }
            });
        }
    });
    let s = e.stats();
    assert_eq!(s.capacity_refusals, 0);
    assert_eq!(s.resident_keys, 0);
    // All of it is still there: exactly MAX keys fit.
    let guards: Vec<_> = (0..MAX as u64)
        .map(|i| match ns.claim(key(1 << 50 | i).as_bytes()) {
            Ok(Claim::Acquired(g)) => g,
            other => panic!("key {i}: {other:?}"),
        })
        .collect();
    assert!(matches!(
        ns.claim(b"one-too-many"),
        Err(Error::CapacityExceeded { .. })
    ));
    drop(guards);
}

/// Steady traffic at `every_ms` a key (claimed and completed at once) for `for_ms`,
/// on an engine ticking every `tick_ms`: how many claims were refused.
fn refusals_at_a_steady_rate(tick_ms: u64, ttl_ms: u64, every_ms: u64, max_keys: usize) -> u64 {
    let clock = idem::ManualClock::new(T0 + 1);
    let engine = idem::Engine::builder()
        .namespace("ns", small().ttl(ms(ttl_ms)).max_keys(max_keys))
        .clock(clock.clone())
        .tick(ms(tick_ms))
        .maintenance_interval(None)
        .build()
        .expect("valid configuration");
    let ns = engine.namespace("ns").expect("configured namespace");
    let mut refused = 0;
    for i in 0..(4 * ttl_ms / every_ms) {
        match ns.claim(key(i).as_bytes()) {
            Ok(Claim::Acquired(g)) => g.complete().unwrap(),
            Err(Error::CapacityExceeded { .. }) => refused += 1,
            other => panic!("key {i}: {other:?}"),
        }
        clock.advance(ms(every_ms));
    }
    refused
}

/// A done key keeps its room until the tick its deadline falls on: with a tick
/// coarser than 1 ms, up to a tick less a millisecond past its TTL. Steady traffic
/// at the peak rate then needs rate x (TTL + tick - 1 ms) of `max_keys`, not rate x
/// TTL, as `NamespaceConfig::max_keys` and `idem plan`'s advice on the tick say.
#[test]
fn with_a_coarse_tick_a_done_key_keeps_its_room_up_to_a_tick_past_its_ttl() {
    // One key every 10 ms, a TTL of 2 s: 200 keys within any TTL.
    assert_eq!(refusals_at_a_steady_rate(1, 2_000, 10, 200), 0);
    // A 1 s tick: 200 keys of room refuse some, 300 (rate x 2.999 s) none.
    assert!(refusals_at_a_steady_rate(1_000, 2_000, 10, 200) > 0);
    assert_eq!(refusals_at_a_steady_rate(1_000, 2_000, 10, 300), 0);
    // The plan that advises a coarser tick says what it costs in room.
    let plan = idem::Sizing::new(1.0, ms((1 << 30) + 1)).plan().unwrap();
    let advice: Vec<String> = plan.warnings(None).iter().map(|w| w.to_string()).collect();
    assert!(
        advice
            .iter()
            .any(|w| w.contains(".tick(Duration::from_millis(2))")
                && w.contains("max_keys")
                && w.contains("rate x tick")),
        "{advice:?}"
    );
}
