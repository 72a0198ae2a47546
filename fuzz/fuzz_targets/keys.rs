//! Arbitrary bytes as keys, payloads and results. The engine must never panic, must
//! refuse bad input with the typed errors (`InvalidKey`, `ResultTooLarge`) and
//! nothing else, and must answer for whatever bytes a key is made of as a plain map
//! from the key's bytes would: every answer is checked against one (so two keys
//! that differ anywhere are two keys), including when the namespace is full.

#![no_main]

use std::time::Duration;

use std::collections::HashMap;

use idem::{
    Claim, ClaimGuard, Clock, Engine, Error, KeyError, KeyState, ManualClock, NamespaceConfig,
};
use libfuzzer_sys::fuzz_target;

const NAMESPACE: &str = "keys";
const MAX_KEY_LEN: usize = 24;
const MAX_RESULT_LEN: usize = 40;
const MAX_KEYS: usize = 16;
const TTL_MS: u64 = 1000;
const LEASE_MS: u64 = 300;

/// What the map says of a key.
#[derive(Debug, Clone)]
enum Model {
    /// Claimed by the guard numbered `guard` until `until` (ms, exclusive).
    Held {
        until: u64,
        guard: u64,
        payload: Option<Vec<u8>>,
    },
    /// Completed with `result`; a duplicate until `until` (ms, exclusive).
    Done {
        until: u64,
        result: Vec<u8>,
        payload: Option<Vec<u8>>,
    },
}

impl Model {
    fn live(&self, now: u64) -> bool {
        match self {
            Model::Held { until, .. } | Model::Done { until, .. } => now < *until,
        }
    }

    fn payload(&self) -> Option<&[u8]> {
        match self {
            Model::Held { payload, .. } | Model::Done { payload, .. } => payload.as_deref(),
        }
    }
}

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
        .ttl(Duration::from_millis(TTL_MS))
        .lease(Duration::from_millis(LEASE_MS))
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
    // Guards, each with its key and number.
    let mut held: Vec<(Vec<u8>, ClaimGuard, u64)> = Vec::new();
    let mut model: HashMap<Vec<u8>, Model> = HashMap::new();
    let mut guards = 0u64;
    let mut input = Input(data);

    while let Some(op) = input.byte() {
        let now = clock.now_ms();
        let live = |model: &HashMap<Vec<u8>, Model>| model.values().filter(|m| m.live(now)).count();
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
                let known = model.get(key).filter(|m| m.live(now)).cloned();
                let mismatch = with_payload
                    && known
                        .as_ref()
                        .and_then(Model::payload)
                        .is_some_and(|stored| stored != payload);
                match (got, known) {
                    (Err(e @ Error::PayloadMismatch), Some(_)) if mismatch => assert_displays(&e),
                    (got, _) if mismatch => panic!("another payload, but {got:?}"),
                    (Ok(Claim::Acquired(guard)), None) => {
                        assert!(live(&model) < MAX_KEYS, "acquired past max_keys");
                        let lease = guard.lease_expires_at_ms();
                        assert_eq!(lease, now + LEASE_MS);
                        match ns.check(key).unwrap() {
                            Some(KeyState::InProgress {
                                lease_expires_at_ms,
                                ..
                            }) => assert_eq!(lease_expires_at_ms, lease),
                            other => panic!("just acquired, but check says {other:?}"),
                        }
                        assert!(ns.claim(key).unwrap().is_in_progress());
                        guards += 1;
                        model.insert(
                            key.to_vec(),
                            Model::Held {
                                until: lease,
                                guard: guards,
                                payload: with_payload.then(|| payload.to_vec()),
                            },
                        );
                        held.push((key.to_vec(), guard, guards));
                    }
                    (
                        Err(Error::CapacityExceeded {
                            namespace,
                            max_keys,
                        }),
                        None,
                    ) => {
                        assert_eq!((namespace.as_str(), max_keys), (NAMESPACE, MAX_KEYS));
                        assert_eq!(live(&model), MAX_KEYS, "refused with room left");
                    }
                    (Ok(Claim::Duplicate(done)), Some(Model::Done { result, until, .. })) => {
                        assert_eq!(done.result(), Some(result.as_slice()));
                        assert_eq!(done.expires_at_ms(), until);
                        match ns.check(key).unwrap() {
                            Some(KeyState::Done { result, .. }) => {
                                assert_eq!(result.as_deref(), done.result())
                            }
                            other => panic!("a duplicate, but check says {other:?}"),
                        }
                    }
                    (Ok(Claim::InProgress(busy)), Some(Model::Held { until, .. })) => {
                        assert_eq!(busy.lease_expires_at_ms(), until);
                    }
                    (got, known) => panic!("claim answered {got:?} where the map holds {known:?}"),
                }
            }
            2 => {
                let key = input.bytes();
                match (ns.check(key), key_error(key)) {
                    (Err(e), Some(expected)) => {
                        assert_displays(&e);
                        assert_eq!(e, expected);
                    }
                    (Ok(state), None) => match (state, model.get(key).filter(|m| m.live(now))) {
                        (None, None) => {}
                        (
                            Some(KeyState::InProgress {
                                lease_expires_at_ms,
                                ..
                            }),
                            Some(Model::Held { until, .. }),
                        ) => assert_eq!(lease_expires_at_ms, *until),
                        (
                            Some(KeyState::Done { result, .. }),
                            Some(Model::Done { result: r, .. }),
                        ) => {
                            assert_eq!(result.as_deref(), Some(r.as_slice()))
                        }
                        (state, known) => {
                            panic!("check says {state:?} where the map holds {known:?}")
                        }
                    },
                    (got, expected) => panic!("check: got {got:?}, expected {expected:?}"),
                }
            }
            3 => {
                let key = input.bytes();
                match (ns.forget(key), key_error(key)) {
                    (Err(e), Some(expected)) => assert_eq!(e, expected),
                    (Ok(removed), None) => {
                        let known = model.remove(key).is_some_and(|m| m.live(now));
                        assert_eq!(removed, known, "forget's answer");
                        assert_eq!(ns.check(key).unwrap(), None);
                    }
                    (got, expected) => panic!("forget: got {got:?}, expected {expected:?}"),
                }
            }
            4 => {
                let pick = input.byte().unwrap_or(0) as usize;
                let result = input.bytes();
                if held.is_empty() {
                    continue;
                }
                let (key, guard, number) = held.swap_remove(pick % held.len());
                let holds = matches!(
                    model.get(&key),
                    Some(Model::Held { until, guard, .. }) if *guard == number && now < *until
                );
                match guard.complete_with_result(result) {
                    Ok(()) => {
                        assert!(holds, "completed a claim the map says it lost");
                        assert!(result.len() <= MAX_RESULT_LEN);
                        let payload = model.get(&key).and_then(Model::payload).map(<[u8]>::to_vec);
                        model.insert(
                            key.clone(),
                            Model::Done {
                                until: now + TTL_MS,
                                result: result.to_vec(),
                                payload,
                            },
                        );
                        let Ok(Claim::Duplicate(done)) = ns.claim(&key) else {
                            panic!("a completed key is not a duplicate")
                        };
                        assert_eq!(done.result(), Some(result));
                    }
                    Err(e @ Error::ResultTooLarge { len, max }) => {
                        // The claim stays held until its lease ends.
                        assert_displays(&e);
                        assert_eq!((len, max), (result.len(), MAX_RESULT_LEN));
                        assert!(len > max);
                    }
                    Err(Error::LeaseLost) => {
                        assert!(result.len() <= MAX_RESULT_LEN);
                        assert!(!holds, "lost a lease the map says it holds");
                    }
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
