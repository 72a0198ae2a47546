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
