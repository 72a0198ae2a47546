//! Leases and fencing: an expired lease makes the key claimable and the old guard stale.

#![cfg(not(idem_loom))]

mod util;

use std::time::Duration;

use idem::{Claim, Error};
use util::*;

#[test]
fn lease_holds_until_its_last_millisecond() {
    let (_e, ns, clock) = engine_with(small());
    let _g = acquire(&ns, b"k");
    clock.advance(ms(4999));
    assert!(ns.claim(b"k").unwrap().is_in_progress());
    clock.advance(ms(1));
    assert!(
        ns.claim(b"k").unwrap().is_acquired(),
        "an expired lease makes the key claimable (orphan recovery)"
    );
}

#[test]
fn stale_guard_cannot_complete_after_reclaim() {
    let (e, ns, clock) = engine_with(small());
    let old = acquire(&ns, b"k");
    clock.advance(secs(6));
    let new = acquire(&ns, b"k");
    assert_eq!(old.complete(), Err(Error::LeaseLost));
    // The new holder is unaffected.
    assert!(ns.claim(b"k").unwrap().is_in_progress());
    new.complete_with_result(b"second").unwrap();
    let Claim::Duplicate(d) = ns.claim(b"k").unwrap() else {
        panic!()
    };
    assert_eq!(d.result(), Some(&b"second"[..]));
    assert_eq!(e.stats().lease_lost, 1);
}

#[test]
fn stale_guard_cannot_release_the_new_holders_claim() {
    let (_e, ns, clock) = engine_with(small());
    let old = acquire(&ns, b"k");
    clock.advance(secs(5));
    let _new = acquire(&ns, b"k");
    assert_eq!(old.release(), Err(Error::LeaseLost));
    assert!(ns.claim(b"k").unwrap().is_in_progress());
}

#[test]
fn dropping_a_stale_guard_leaves_the_new_claim_alone() {
    let (_e, ns, clock) = engine_with(small());
    let old = acquire(&ns, b"k");
    clock.advance(secs(5));
    let _new = acquire(&ns, b"k");
    drop(old);
    assert!(ns.claim(b"k").unwrap().is_in_progress());
}

#[test]
fn complete_after_lease_expiry_is_refused_even_without_reclaim() {
    let (_e, ns, clock) = engine_with(small());
    let g = acquire(&ns, b"k");
    clock.advance(secs(5));
    assert_eq!(g.complete(), Err(Error::LeaseLost));
    assert!(ns.claim(b"k").unwrap().is_acquired());
}

#[test]
fn forget_while_in_progress_fences_the_holder() {
    let (_e, ns, _c) = engine_with(small());
    let g = acquire(&ns, b"k");
    assert!(ns.forget(b"k").unwrap());
    let g2 = acquire(&ns, b"k");
    assert_eq!(g.complete(), Err(Error::LeaseLost));
    g2.complete().unwrap();
}

#[test]
fn expired_lease_is_reclaimed_by_maintenance() {
    let (e, _ns, clock) = engine_with(small());
    let ns = e.namespace("ns").unwrap();
    let g = acquire(&ns, b"k");
    assert_eq!(e.stats().resident_keys, 1);
    clock.advance(ms(4999));
    assert_eq!(e.run_maintenance(), 0);
    clock.advance(ms(1));
    assert_eq!(e.run_maintenance(), 1);
    let s = e.stats();
    assert_eq!(s.resident_keys, 0);
    assert_eq!(s.expirations, 1);
    assert_eq!(g.complete(), Err(Error::LeaseLost));
}

#[test]
fn a_guard_held_across_a_clock_jump_of_weeks_is_refused() {
    // Longer than the 2^31 ticks that 32-bit deadlines can tell apart.
    let (_e, ns, clock) = engine_with(small());
    let g = acquire(&ns, b"k");
    clock.advance(ms((1 << 31) + 1000));
    assert_eq!(g.lease_expires_at_ms(), T0 + 5000);
    assert_eq!(g.complete(), Err(Error::LeaseLost));
    assert!(ns.claim(b"k").unwrap().is_acquired());

    let g = acquire(&ns, b"j");
    clock.advance(ms((1 << 32) + 5000));
    assert_eq!(g.release(), Err(Error::LeaseLost));
}

#[test]
fn a_clock_near_the_end_of_time_neither_panics_nor_wraps() {
    // Started there, or jumped there from the start of time (ticks near 2^64 from
    // the engine's start: before the cap, a panic in the wheel in a debug build and
    // leases already expired at their claim in a release build).
    for (start, jump) in [(u64::MAX - 1000, false), (0, true)] {
        let clock = idem::ManualClock::new(start);
        let (_engine, ns) = engine_on(small(), clock.clone());
        if jump {
            acquire(&ns, b"early").complete().unwrap();
            clock.advance(Duration::MAX);
        }
        let g = acquire(&ns, b"k");
        assert_eq!(g.lease_expires_at_ms(), idem::LATEST_MS + 5000, "{start}");
        g.complete().unwrap();
        let Claim::Duplicate(done) = ns.claim(b"k").unwrap() else {
            panic!("done, not expired at once ({start})")
        };
        assert_eq!(
            done.completed_at_ms(),
            idem::LATEST_MS,
            "the clock read as the cap"
        );
        assert!(done.expires_at_ms() > idem::LATEST_MS, "not wrapped");
        clock.advance(secs(3600));
        assert_eq!(
            idem::Clock::now_ms(&clock),
            u64::MAX,
            "the manual clock stops at the end"
        );
        assert!(
            ns.claim(b"k").unwrap().is_duplicate(),
            "time stands still there"
        );
        // A lease taken there is still held: time does not move past the cap.
        let g = acquire(&ns, b"j");
        clock.advance(secs(3600));
        g.complete().unwrap();
        if jump {
            assert!(
                ns.claim(b"early").unwrap().is_acquired(),
                "a key done at the start expired long ago"
            );
        }
    }
}

#[test]
fn leases_and_ttls_whose_deadlines_cross_the_wrap_of_32_bit_ticks_hold() {
    // Deadlines are kept as their low 32 bits: at the default 1 ms tick these wrap
    // 2^32 ms (49.7 days) after the engine's start. A lease and a TTL begun just
    // before the wrap end just after it, and must last their whole length.
    let (engine, ns, clock) = engine_with(small());
    clock.advance(ms((1 << 32) - 3000));
    engine.run_maintenance();
    let held = acquire(&ns, b"k");
    assert_eq!(held.lease_expires_at_ms(), T0 + (1 << 32) + 2000);
    acquire(&ns, b"done").complete().unwrap();
    // Past the wrap of the clock's low 32 bits of ticks, before either deadline.
    clock.advance(ms(2500));
    assert!(ns.claim(b"k").unwrap().is_in_progress(), "before the wrap");
    clock.advance(ms(3000 - 2500 + 1999));
    assert!(ns.claim(b"k").unwrap().is_in_progress(), "after the wrap");
    assert!(ns.claim(b"done").unwrap().is_duplicate());
    engine.run_maintenance();
    assert!(
        ns.claim(b"done").unwrap().is_duplicate(),
        "maintenance kept it"
    );
    assert_eq!(engine.stats().resident_keys, 2);
    clock.advance(ms(1));
    assert!(ns.claim(b"k").unwrap().is_acquired(), "at the lease's end");
    assert_eq!(held.complete(), Err(Error::LeaseLost));
}

/// `extend_lease` moves the lease's end to the given time from now: the key stays
/// held past the old end (other claims answer `InProgress` with the new end), the
/// guard completes, and maintenance leaves the entry alone until the new end.
#[test]
fn an_extended_lease_holds_the_key_until_its_new_end() {
    let (e, ns, clock) = engine_with(small());
    let mut g = acquire(&ns, b"k");
    clock.advance(secs(4));
    g.extend_lease(secs(10)).unwrap();
    assert_eq!(g.lease_expires_at_ms(), T0 + 14_000);
    clock.advance(secs(9)); // 13 s after the claim, 8 s past the old end
    assert_eq!(e.run_maintenance(), 0, "nothing expired");
    let Claim::InProgress(busy) = ns.claim(b"k").unwrap() else {
        panic!("still held")
    };
    assert_eq!(busy.lease_expires_at_ms(), T0 + 14_000);
    g.complete().unwrap();
    assert!(ns.claim(b"k").unwrap().is_duplicate());
}

/// An extension may also shorten the lease; and once the new end has passed, the
/// key is claimable and the guard's lease is lost.
#[test]
fn an_extension_can_shorten_the_lease_and_then_it_runs_out() {
    let (_e, ns, clock) = engine_with(small());
    let mut g = acquire(&ns, b"k");
    g.extend_lease(secs(1)).unwrap();
    clock.advance(secs(1));
    let _new = acquire(&ns, b"k");
    assert_eq!(g.complete(), Err(Error::LeaseLost));
}

/// A lease that has run out, or a key claimed again, cannot be extended: the
/// extension is refused and changes nothing (the new holder keeps its claim).
#[test]
fn an_extension_after_the_lease_ran_out_is_refused_and_changes_nothing() {
    let (_e, ns, clock) = engine_with(small());
    let mut g = acquire(&ns, b"k");
    clock.advance(secs(5));
    assert_eq!(g.extend_lease(secs(60)), Err(Error::LeaseLost));
    let mut new = acquire(&ns, b"k");
    assert_eq!(g.extend_lease(secs(60)), Err(Error::LeaseLost));
    let Claim::InProgress(busy) = ns.claim(b"k").unwrap() else {
        panic!("held by the new claim")
    };
    assert_eq!(busy.lease_expires_at_ms(), T0 + 10_000, "its own lease");
    new.extend_lease(secs(1)).unwrap();
    new.complete().unwrap();
    assert_eq!(g.release(), Err(Error::LeaseLost));
}

/// A lease out of range is a typed error and changes nothing.
#[test]
fn an_extension_out_of_range_is_refused_and_changes_nothing() {
    let (_e, ns, clock) = engine_with(small());
    let mut g = acquire(&ns, b"k");
    for bad in [Duration::ZERO, Duration::MAX, secs(1 << 30)] {
        assert!(
            matches!(g.extend_lease(bad), Err(Error::InvalidLease(_))),
            "{bad:?}"
        );
    }
    assert_eq!(g.lease_expires_at_ms(), T0 + 5_000);
    clock.advance(secs(5));
    assert!(ns.claim(b"k").unwrap().is_acquired(), "the old end stands");
}
