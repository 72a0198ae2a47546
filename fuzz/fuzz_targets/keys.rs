//! Arbitrary bytes as keys, payloads and results. The engine must never panic, must
//! refuse bad input with the typed errors (`InvalidKey`, `ResultTooLarge`) and
//! nothing else, and must answer consistently for whatever bytes a key is made of.

#![no_main]

use std::time::Duration;

use idem::{Claim, ClaimGuard, Engine, Error, KeyError, KeyState, ManualClock, NamespaceConfig};
use libfuzzer_sys::fuzz_target;

const NAMESPACE: &str = "keys";
const MAX_KEY_LEN: usize = 24;
const MAX_RESULT_LEN: usize = 40;
const MAX_KEYS: usize = 16;

/// Reads the input front to back; lengths come from the input too, so keys and
/// results are regularly over the limits.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn bytes(&mut self) -> &'a [u8] {
        let want = self.byte().unwrap_or(0) as usize;
        let (taken, rest) = self.0.split_at(want.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

/// The error a key must be refused with, if any.
fn key_error(key: &[u8]) -> Option<Error> {
    if key.is_empty() {
        Some(Error::InvalidKey(KeyError::Empty))
    } else if key.len() > MAX_KEY_LEN {
        Some(Error::InvalidKey(KeyError::TooLong {
            len: key.len(),
            max: MAX_KEY_LEN,
        }))
    } else {
        None
    }
}

fn assert_displays(e: &Error) {
    assert!(!e.to_string().is_empty(), "{e:?} displays as nothing");
}

fuzz_target!(|data: &[u8]| {
    let clock = ManualClock::new(1_700_000_000_000);
    let cfg = NamespaceConfig::new()
        .ttl(Duration::from_millis(1000))
        .lease(Duration::from_millis(300))
        .max_keys(MAX_KEYS)
        .max_key_len(MAX_KEY_LEN)
        .max_result_len(MAX_RESULT_LEN)
        .shards(4);
    let engine = Engine::builder()
        .namespace(NAMESPACE, cfg)
        .clock(clock.clone())
        .maintenance_interval(None)
        .seed(0x6b65_7973)
        .build()
        .expect("valid configuration");
    let ns = engine.namespace(NAMESPACE).expect("configured namespace");
    let mut held: Vec<(Vec<u8>, ClaimGuard)> = Vec::new();
    let mut input = Input(data);

    while let Some(op) = input.byte() {
        match op % 6 {
            0 | 1 => {
                let key = input.bytes();
                let with_payload = op % 6 == 1;
                let payload = if with_payload { input.bytes() } else { &[] };
                let got = if with_payload {
                    ns.claim_with_payload(key, payload)
                } else {
                    ns.claim(key)
                };
                if let Some(expected) = key_error(key) {
                    assert_eq!(got.err(), Some(expected));
                    continue;
                }
                match got {
                    Ok(Claim::Acquired(guard)) => {
                        let lease = guard.lease_expires_at_ms();
                        match ns.check(key).unwrap() {
                            Some(KeyState::InProgress {
                                lease_expires_at_ms,
                                ..
                            }) => assert_eq!(lease_expires_at_ms, lease),
                            other => panic!("just acquired, but check says {other:?}"),
                        }
                        assert!(ns.claim(key).unwrap().is_in_progress());
                        held.push((key.to_vec(), guard));
                    }
                    Ok(Claim::Duplicate(done)) => match ns.check(key).unwrap() {
                        Some(KeyState::Done { result, .. }) => {
                            assert_eq!(result.as_deref(), done.result())
                        }
                        other => panic!("a duplicate, but check says {other:?}"),
                    },
                    Ok(Claim::InProgress(_)) => {}
                    Err(e @ Error::PayloadMismatch) if with_payload => assert_displays(&e),
                    Err(Error::CapacityExceeded {
                        namespace,
                        max_keys,
                    }) => {
                        assert_eq!((namespace.as_str(), max_keys), (NAMESPACE, MAX_KEYS));
                        assert!(engine.stats().resident_keys <= MAX_KEYS as u64);
                    }
                    Err(e) => panic!("claim of a valid key failed with {e:?}"),
                }
            }
            2 => {
                let key = input.bytes();
                match (ns.check(key), key_error(key)) {
                    (Err(e), Some(expected)) => {
                        assert_displays(&e);
                        assert_eq!(e, expected);
                    }
                    (Ok(_), None) => {}
                    (got, expected) => panic!("check: got {got:?}, expected {expected:?}"),
                }
            }
            3 => {
                let key = input.bytes();
                match (ns.forget(key), key_error(key)) {
                    (Err(e), Some(expected)) => assert_eq!(e, expected),
                    (Ok(_), None) => assert_eq!(ns.check(key).unwrap(), None),
                    (got, expected) => panic!("forget: got {got:?}, expected {expected:?}"),
                }
            }
            4 => {
                let pick = input.byte().unwrap_or(0) as usize;
                let result = input.bytes();
                if held.is_empty() {
                    continue;
                }
                let (key, guard) = held.swap_remove(pick % held.len());
                match guard.complete_with_result(result) {
                    Ok(()) => {
                        assert!(result.len() <= MAX_RESULT_LEN);
                        let Ok(Claim::Duplicate(done)) = ns.claim(&key) else {
                            panic!("a completed key is not a duplicate")
                        };
                        assert_eq!(done.result(), Some(result));
                    }
                    Err(e @ Error::ResultTooLarge { len, max }) => {
                        assert_displays(&e);
                        assert_eq!((len, max), (result.len(), MAX_RESULT_LEN));
                        assert!(len > max);
                    }
                    Err(Error::LeaseLost) => assert!(result.len() <= MAX_RESULT_LEN),
                    Err(e) => panic!("complete_with_result failed with {e:?}"),
                }
            }
            _ => {
                let by = input.byte().unwrap_or(0);
                clock.advance(Duration::from_millis(u64::from(by) * 8));
                if by % 4 == 0 {
                    engine.run_maintenance();
                }
            }
        }
    }
    drop(held);
    let stats = engine.stats();
    assert!(stats.resident_keys <= MAX_KEYS as u64);
});
