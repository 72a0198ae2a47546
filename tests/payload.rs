//! Payload fingerprints: the same key with a different payload is key reuse.

#![cfg(not(idem_loom))]

mod util;

use idem::{Claim, Error};
use util::*;

#[test]
fn mismatch_against_a_done_key() {
    let (e, ns, _c) = engine_with(small());
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"amount=10").unwrap() else {
        panic!()
    };
    g.complete().unwrap();
    assert!(ns
        .claim_with_payload(b"k", b"amount=10")
        .unwrap()
        .is_duplicate());
    assert_eq!(
        ns.claim_with_payload(b"k", b"amount=99").unwrap_err(),
        Error::PayloadMismatch
    );
    assert_eq!(e.stats().payload_mismatches, 1);
    // Nothing changed: the original is still a duplicate.
    assert!(ns
        .claim_with_payload(b"k", b"amount=10")
        .unwrap()
        .is_duplicate());
}

#[test]
fn mismatch_against_an_in_progress_key() {
    let (_e, ns, _c) = engine_with(small());
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"v1").unwrap() else {
        panic!()
    };
    assert_eq!(
        ns.claim_with_payload(b"k", b"v2").unwrap_err(),
        Error::PayloadMismatch
    );
    assert!(ns.claim_with_payload(b"k", b"v1").unwrap().is_in_progress());
    g.complete().unwrap();
}

#[test]
fn plain_claims_are_not_compared() {
    let (_e, ns, _c) = engine_with(small());
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"v1").unwrap() else {
        panic!()
    };
    g.complete().unwrap();
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    let g = acquire(&ns, b"plain");
    g.complete().unwrap();
    assert!(ns
        .claim_with_payload(b"plain", b"anything")
        .unwrap()
        .is_duplicate());
}

#[test]
fn payload_is_forgotten_when_the_key_expires() {
    let (_e, ns, clock) = engine_with(small());
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"v1").unwrap() else {
        panic!()
    };
    g.complete().unwrap();
    clock.advance(secs(60));
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"v2").unwrap() else {
        panic!("an expired key is new again, whatever its old payload")
    };
    g.complete().unwrap();
    assert_eq!(
        ns.claim_with_payload(b"k", b"v1").unwrap_err(),
        Error::PayloadMismatch
    );
}

#[test]
fn payload_survives_a_result_and_a_release() {
    let (_e, ns, _c) = engine_with(small());
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"v1").unwrap() else {
        panic!()
    };
    g.release().unwrap();
    // Released: the next claim starts fresh and may carry any payload.
    let Claim::Acquired(g) = ns.claim_with_payload(b"k", b"v2").unwrap() else {
        panic!()
    };
    g.complete_with_result(b"r").unwrap();
    let Claim::Duplicate(d) = ns.claim_with_payload(b"k", b"v2").unwrap() else {
        panic!()
    };
    assert_eq!(d.result(), Some(&b"r"[..]));
    assert_eq!(
        ns.claim_with_payload(b"k", b"v1").unwrap_err(),
        Error::PayloadMismatch
    );
}
