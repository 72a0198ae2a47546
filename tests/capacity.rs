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
