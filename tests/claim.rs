//! The basic claim protocol: first sighting, duplicate, in progress, release, drop.

#![cfg(not(idem_loom))]

mod util;

use idem::{Claim, KeyState};
use util::*;

#[test]
fn first_claim_acquires_and_completion_makes_duplicates() {
    let (_e, ns, _c) = engine_with(small());
    let Claim::Acquired(g) = ns.claim(b"k1").unwrap() else {
        panic!("first sighting must acquire")
    };
    g.complete().unwrap();
    match ns.claim(b"k1").unwrap() {
        Claim::Duplicate(d) => {
            assert_eq!(d.result(), None);
            assert_eq!(d.completed_at_ms(), T0);
            assert_eq!(d.expires_at_ms(), T0 + 60_000);
        }
        other => panic!("expected Duplicate, got {other:?}"),
    }
}

#[test]
fn stored_result_is_returned_to_duplicates_and_check() {
    let (_e, ns, clock) = engine_with(small());
    let g = acquire(&ns, b"k");
    clock.advance(ms(1500));
    g.complete_with_result(b"receipt-9").unwrap();
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    assert_eq!(d.result(), Some(&b"receipt-9"[..]));
    assert_eq!(d.completed_at_ms(), T0 + 1500);
    match ns.check(b"k").unwrap() {
        Some(KeyState::Done {
            completed_at_ms,
            result,
            ..
        }) => {
            assert_eq!(completed_at_ms, T0 + 1500);
            assert_eq!(result.as_deref(), Some(&b"receipt-9"[..]));
        }
        other => panic!("expected Done, got {other:?}"),
    }
}

#[test]
fn a_held_key_answers_in_progress_with_its_lease() {
    let (_e, ns, clock) = engine_with(small());
    let g = acquire(&ns, b"k");
    clock.advance(ms(1000));
    match ns.claim(b"k").unwrap() {
        Claim::InProgress(f) => {
            assert_eq!(f.lease_expires_at_ms(), T0 + 5000);
            assert_eq!(f.retry_after(), ms(4000));
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    assert_eq!(g.lease_expires_at_ms(), T0 + 5000);
    assert!(matches!(
        ns.check(b"k").unwrap(),
        Some(KeyState::InProgress {
            lease_expires_at_ms: 1_700_000_005_000,
            ..
        })
    ));
    g.complete().unwrap();
}

#[test]
fn release_makes_the_key_claimable_at_once() {
    let (e, ns, _c) = engine_with(small());
    let g = acquire(&ns, b"k");
    g.release().unwrap();
    assert_eq!(ns.check(b"k").unwrap(), None);
    assert_eq!(e.stats().resident_keys, 0);
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn dropping_a_guard_releases_the_claim() {
    let (e, ns, _c) = engine_with(small());
    {
        let claim = ns.claim(b"k").unwrap();
        assert!(claim.is_acquired());
        // dropped here without completing: the worker failed
    }
    assert_eq!(e.stats().releases, 1);
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn forget_deletes_a_done_key() {
    let (e, ns, _c) = engine_with(small());
    let g = acquire(&ns, b"k");
    g.complete().unwrap();
    assert!(ns.forget(b"k").unwrap());
    assert!(!ns.forget(b"k").unwrap());
    assert_eq!(e.stats().forgotten, 1);
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn keys_are_independent_and_namespaces_are_independent() {
    let clock = idem::ManualClock::new(T0);
    let engine = idem::Engine::builder()
        .namespace("a", small())
        .namespace("b", small())
        .clock(clock)
        .maintenance_interval(None)
        .build()
        .unwrap();
    let a = engine.namespace("a").unwrap();
    let b = engine.namespace("b").unwrap();
    let g = acquire(&a, b"same");
    g.complete().unwrap();
    assert!(a.claim(b"same").unwrap().is_duplicate());
    assert!(a.claim(b"other").unwrap().is_acquired());
    let Claim::Acquired(g) = b.claim(b"same").unwrap() else {
        panic!("namespace b must not see namespace a's key")
    };
    g.complete().unwrap();
    assert_eq!(
        engine.namespace_names(),
        vec!["a".to_string(), "b".to_string()]
    );
}

#[test]
fn stats_count_each_answer() {
    let (e, ns, _c) = engine_with(small());
    let g = acquire(&ns, b"a");
    assert!(ns.claim(b"a").unwrap().is_in_progress());
    g.complete().unwrap();
    assert!(ns.claim(b"a").unwrap().is_duplicate());
    assert!(ns.claim(b"a").unwrap().is_duplicate());
    let s = e.stats();
    assert_eq!(s.acquired, 1);
    assert_eq!(s.in_progress, 1);
    assert_eq!(s.duplicates, 2);
    assert_eq!(s.completions, 1);
    assert_eq!(s.resident_keys, 1);
    assert!(s.hot_bytes > 0);
    assert_eq!(ns.stats(), s);
}

#[test]
fn guard_is_send_and_completes_from_another_thread() {
    let (_e, ns, _c) = engine_with(small());
    let g = acquire(&ns, b"k");
    std::thread::spawn(move || g.complete().unwrap())
        .join()
        .unwrap();
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

#[test]
fn a_batch_answers_as_claims_made_one_by_one_in_order() {
    let (_e, ns, _c) = engine_with(small());
    let done = acquire(&ns, b"done");
    done.complete().unwrap();
    let _held = acquire(&ns, b"held");
    let claims = ns
        .claim_batch(&[b"a", b"b", b"a", b"done", b"held"])
        .unwrap();
    let kinds: Vec<&str> = claims
        .iter()
        .map(|c| match c {
            Claim::Acquired(_) => "acquired",
            Claim::Duplicate(_) => "duplicate",
            Claim::InProgress(_) => "in progress",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "acquired",
            "acquired",
            "in progress",
            "duplicate",
            "in progress"
        ]
    );
    // The batch's guards complete together; their keys are then duplicates.
    let guards = claims
        .into_iter()
        .filter_map(|c| match c {
            Claim::Acquired(g) => Some(g),
            _ => None,
        })
        .collect();
    let outcomes = ns.complete_batch(guards).unwrap();
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.iter().all(|r| r.is_ok()));
    assert!(ns.claim(b"a").unwrap().is_duplicate());
    assert!(ns.claim(b"b").unwrap().is_duplicate());
}

/// An engine on a manual clock with namespaces "a" (of `a`) and "b" (`small()`).
fn two_namespaces(
    a: idem::NamespaceConfig,
) -> (
    idem::Engine,
    idem::Namespace,
    idem::Namespace,
    idem::ManualClock,
) {
    let clock = idem::ManualClock::new(T0);
    let engine = idem::Engine::builder()
        .namespace("a", a)
        .namespace("b", small())
        .clock(clock.clone())
        .maintenance_interval(None)
        .build()
        .unwrap();
    let (a, b) = (
        engine.namespace("a").unwrap(),
        engine.namespace("b").unwrap(),
    );
    (engine, a, b, clock)
}

#[test]
fn a_batch_completion_completes_guards_of_other_namespaces_through_their_own() {
    let (_engine, a, b, _clock) = two_namespaces(small());
    let guards = vec![acquire(&a, b"1"), acquire(&b, b"2"), acquire(&a, b"3")];
    // Before, the batch was refused and every guard dropped: all three claims were
    // released, and their side effects would have run again.
    let outcomes = a.complete_batch(guards).unwrap();
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes.iter().all(|r| r.is_ok()), "{outcomes:?}");
    assert!(a.claim(b"1").unwrap().is_duplicate());
    assert!(b.claim(b"2").unwrap().is_duplicate());
    assert!(a.claim(b"3").unwrap().is_duplicate());
    assert!(a.claim(b"2").unwrap().is_acquired());
}

#[test]
fn a_batch_completion_stores_each_claims_result() {
    let (engine, a, b, clock) = two_namespaces(small().max_result_len(8));
    let batch = vec![
        (acquire(&a, b"1"), &b"one"[..]),
        (acquire(&b, b"2"), &b"two, of b's"[..]),
        (acquire(&a, b"3"), &b"nine bytes"[..9]),
        (acquire(&a, b"4"), &b""[..]),
    ];
    let outcomes = a.complete_batch_with_results(batch).unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes[0].is_ok() && outcomes[1].is_ok() && outcomes[3].is_ok());
    // Over `a`'s 8-byte bound: that guard's own error, and nothing changed for it.
    assert!(
        matches!(
            outcomes[2],
            Err(idem::Error::ResultTooLarge { len: 9, max: 8 })
        ),
        "{outcomes:?}"
    );
    let result = |ns: &idem::Namespace, key: &[u8]| match ns.claim(key).unwrap() {
        Claim::Duplicate(d) => d.result().map(<[u8]>::to_vec),
        other => panic!("{other:?}"),
    };
    assert_eq!(result(&a, b"1").as_deref(), Some(&b"one"[..]));
    // The other namespace's guard is completed through its own, with its result.
    assert_eq!(result(&b, b"2").as_deref(), Some(&b"two, of b's"[..]));
    assert_eq!(result(&a, b"4").as_deref(), Some(&b""[..]));
    // As `complete_with_result` leaves it: held until its lease runs out.
    assert!(a.claim(b"3").unwrap().is_in_progress());
    let s = engine.stats();
    assert_eq!((s.completions, s.releases), (3, 0));
    clock.advance(ms(5_001));
    assert!(a.claim(b"3").unwrap().is_acquired());
}

#[test]
fn a_memory_only_batch_completion_refuses_lost_leases_and_completes_the_rest() {
    let (_e, ns, clock) = engine_with(small());
    let old = acquire(&ns, b"old");
    // `old`'s lease runs out and another worker takes the key over.
    clock.advance(ms(small().get_lease().as_millis() as u64 + 1));
    let Claim::Acquired(new_holder) = ns.claim(b"old").unwrap() else {
        panic!("an expired lease is claimable")
    };
    let fresh = acquire(&ns, b"fresh");
    let outcomes = ns.complete_batch(vec![old, fresh]).unwrap();
    assert!(matches!(outcomes[0], Err(idem::Error::LeaseLost)));
    assert!(outcomes[1].is_ok());
    assert!(ns.claim(b"fresh").unwrap().is_duplicate());
    // The key taken over is still held by its new holder.
    assert!(ns.claim(b"old").unwrap().is_in_progress());
    new_holder.complete().unwrap();
}

/// A clock that moves `step` ms at each reading once armed (and stands still before).
#[derive(Clone)]
struct Stepping(std::sync::Arc<(AtomicU64, AtomicBool)>, u64);

impl idem::Clock for Stepping {
    fn now_ms(&self) -> u64 {
        let (now, armed) = &*self.0;
        if armed.load(Ordering::SeqCst) {
            now.fetch_add(self.1, Ordering::SeqCst) + self.1
        } else {
            now.load(Ordering::SeqCst)
        }
    }
}

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// `complete_batch` and `complete_batch_with_results` check every guard against the
/// one clock reading each takes as it begins: with a clock that moves 3 s a reading
/// and 5 s leases, both guards of each batch complete, where at a reading each the
/// second guard's would be past its lease (as a single completion's is).
#[test]
fn a_batch_judges_every_lease_at_its_one_clock_reading() {
    let clock = Stepping(
        std::sync::Arc::new((AtomicU64::new(T0), AtomicBool::new(false))),
        3_000,
    );
    let armed = |on: bool| clock.0 .1.store(on, Ordering::SeqCst);
    let (_engine, ns) = engine_on(small(), clock.clone());
    // Claimed at T0: leases to T0 + 5 s.
    let batch = vec![acquire(&ns, b"a"), acquire(&ns, b"b")];
    let single = acquire(&ns, b"d");
    armed(true);
    // Read at T0 + 3 s (a reading each: b's at T0 + 6 s, past its lease).
    let outcomes = ns.complete_batch(batch).unwrap();
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    armed(false);
    // Claimed at T0 + 3 s: leases to T0 + 8 s.
    let (e, f) = (acquire(&ns, b"e"), acquire(&ns, b"f"));
    armed(true);
    // Read at T0 + 6 s (a reading each: f's at T0 + 9 s, past its lease).
    let outcomes = ns
        .complete_batch_with_results(vec![(e, &b"r"[..]), (f, &b"r"[..])])
        .unwrap();
    assert!(outcomes.iter().all(|o| o.is_ok()), "{outcomes:?}");
    // A single completion reads at its own turn: T0 + 9 s, past d's lease.
    assert!(matches!(single.complete(), Err(idem::Error::LeaseLost)));
    armed(false);
    for key in [b"a", b"b", b"e", b"f"] {
        assert!(matches!(
            ns.check(key).unwrap(),
            Some(KeyState::Done { .. })
        ));
    }
}
