//! The `cas` reference peer of the workloads harness (`benches/workloads/cas.rs`):
//! every fresh key is taken once, duplicates answer duplicate, a key in progress
//! answers in progress, two threads racing on the same keys take each once, and the
//! pool's bound is exact.

use std::time::Duration;

use xxhash_rust::xxh3::xxh3_128_with_seed;

// What the peer module needs from the harness around it (`super::` there).
type Key = [u8; 20];
const TTL: Duration = Duration::from_secs(3600);

fn fp(key: &Key) -> u128 {
    xxh3_128_with_seed(key, 0x5EED_1DE4_0000_0001)
}

trait Peer: Sync {
    fn fresh(&self, key: &Key) -> bool;
    fn duplicate(&self, key: &Key) -> bool;
    fn own_bytes(&self) -> Option<u64> {
        None
    }
}

#[allow(dead_code)]
#[path = "../benches/workloads/cas.rs"]
mod cas;

use cas::{Cas, Claim};

fn key(i: u64) -> Key {
    let s = format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut k = [0u8; 20];
    k.copy_from_slice(s.as_bytes());
    k
}

#[test]
fn fresh_then_duplicate_on_two_threads() {
    let n = 20_000;
    let cas = Cas::new(n);
    let keys: Vec<Key> = (0..n as u64).map(key).collect();
    std::thread::scope(|s| {
        for part in keys.chunks(n / 2) {
            let cas = &cas;
            s.spawn(move || assert!(part.iter().all(|k| cas.fresh(k))));
        }
    });
    assert_eq!(cas.resident(), n as u64);
    std::thread::scope(|s| {
        for part in keys.chunks(n / 3) {
            let cas = &cas;
            s.spawn(move || assert!(part.iter().all(|k| cas.duplicate(k))));
        }
    });
    // Full: the pool held exactly n.
    assert!(matches!(cas.claim(&key(n as u64)), Claim::Full));
    assert!(cas.own_bytes().unwrap() > (n * 28) as u64);
}

#[test]
fn a_key_in_progress_answers_in_progress() {
    let cas = Cas::new(10);
    let Claim::Acquired(g) = cas.claim(&key(1)) else {
        panic!("fresh");
    };
    assert!(matches!(cas.claim(&key(1)), Claim::InProgress));
    assert!(cas.complete(g));
    assert!(matches!(cas.claim(&key(1)), Claim::Duplicate));
}

#[test]
fn racing_claims_of_one_key_take_it_once() {
    let cas = Cas::new(4_000);
    let keys: Vec<Key> = (0..2_000).map(key).collect();
    let won: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (cas, keys) = (&cas, &keys);
                s.spawn(move || keys.iter().filter(|k| cas.fresh(k)).count() as u64)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(won, 2_000);
    assert_eq!(cas.resident(), 2_000);
}
