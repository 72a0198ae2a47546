//! Of any number of concurrent claims of one key, exactly one is Acquired.

#![cfg(not(idem_loom))]

mod util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use idem::Claim;
use util::*;

#[test]
fn exactly_one_of_many_concurrent_claims_acquires() {
    let (_e, ns, _c) = engine_with(small().max_keys(100_000));
    const THREADS: usize = 8;
    const KEYS: u64 = 2000;
    let acquired = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let mut handles = Vec::new();
    for _ in 0..THREADS {
        let ns = ns.clone();
        let acquired = acquired.clone();
        let barrier = barrier.clone();
        handles.push(std::thread::spawn(move || {
            barrier.wait();
            let mut guards = Vec::new();
            for i in 0..KEYS {
                match ns.claim(key(i).as_bytes()).unwrap() {
                    Claim::Acquired(g) => {
                        acquired.fetch_add(1, Ordering::Relaxed);
                        guards.push(g);
                    }
                    Claim::InProgress(_) | Claim::Duplicate(_) => {}
                }
            }
            for g in guards {
                g.complete().unwrap();
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(acquired.load(Ordering::Relaxed), KEYS as usize);
    for i in 0..KEYS {
        assert!(ns.claim(key(i).as_bytes()).unwrap().is_duplicate());
    }
}

#[test]
fn concurrent_claim_and_complete_streams_apply_each_key_once() {
    let (e, ns, _c) = engine_with(small().max_keys(100_000));
    const THREADS: usize = 4;
    const KEYS: u64 = 5000;
    let effects: Arc<Vec<AtomicUsize>> = Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let mut handles = Vec::new();
    for t in 0..THREADS as u64 {
        let ns = ns.clone();
        let effects = effects.clone();
        handles.push(std::thread::spawn(move || {
            // Each thread walks the keys from a different offset, so threads collide.
            for j in 0..KEYS {
                let i = (j + t * 997) % KEYS;
                loop {
                    match ns.claim(key(i).as_bytes()).unwrap() {
                        Claim::Acquired(g) => {
                            effects[i as usize].fetch_add(1, Ordering::Relaxed);
                            g.complete().unwrap();
                            break;
                        }
                        Claim::Duplicate(_) => break,
                        Claim::InProgress(_) => std::thread::yield_now(),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(effects.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    let s = e.stats();
    assert_eq!(s.acquired, KEYS);
    assert_eq!(s.completions, KEYS);
    assert_eq!(s.resident_keys, KEYS);
}
