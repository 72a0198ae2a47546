//! The `cas` and `cas12` reference peers of the workloads harness
//! (`benches/workloads/cas.rs`, `cas12.rs`): every fresh key is taken once,
//! duplicates answer duplicate, a key in progress answers in progress, two threads
//! racing on the same keys take each once, and the pool's bound is exact; for
//! `cas12`, keys that overflow their home bucket are found past it.

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
#[allow(dead_code)]
#[path = "../benches/workloads/cas12.rs"]
mod cas12;

use cas::{Cas, Claim, Guard};
use cas12::Cas12;

/// What the tests ask of a model.
trait Model: Peer + Sized {
    fn new(n: usize) -> Self;
    fn claim(&self, key: &Key) -> Claim;
    fn complete(&self, g: Guard) -> bool;
    fn resident(&self) -> u64;
}

macro_rules! model {
    ($t:ty) => {
        impl Model for $t {
            fn new(n: usize) -> Self {
                <$t>::new(n)
            }
            fn claim(&self, key: &Key) -> Claim {
                <$t>::claim(self, key)
            }
            fn complete(&self, g: Guard) -> bool {
                <$t>::complete(self, g)
            }
            fn resident(&self) -> u64 {
                <$t>::resident(self)
            }
        }
    };
}
model!(Cas);
model!(Cas12);

/// Runs test `$f` on both models.
macro_rules! both {
    ($($f:ident),*) => {
        mod on_cas {
            $(#[test] fn $f() { super::$f::<super::Cas>() })*
        }
        mod on_cas12 {
            $(#[test] fn $f() { super::$f::<super::Cas12>() })*
        }
    };
}

both!(
    fresh_then_duplicate_on_two_threads,
    a_key_in_progress_answers_in_progress,
    racing_claims_of_one_key_take_it_once
);

fn key(i: u64) -> Key {
    let s = format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut k = [0u8; 20];
    k.copy_from_slice(s.as_bytes());
    k
}

fn fresh_then_duplicate_on_two_threads<M: Model>() {
    let n = 20_000;
    let cas = M::new(n);
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

fn a_key_in_progress_answers_in_progress<M: Model>() {
    let cas = M::new(10);
    let Claim::Acquired(g) = cas.claim(&key(1)) else {
        panic!("fresh");
    };
    assert!(matches!(cas.claim(&key(1)), Claim::InProgress));
    assert!(cas.complete(g));
    assert!(matches!(cas.claim(&key(1)), Claim::Duplicate));
}

/// Two threads claiming the same keys: how many fresh claims they won together.
fn race<M: Model>(cas: &M, keys: &[Key]) -> u64 {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| s.spawn(move || keys.iter().filter(|k| cas.fresh(k)).count() as u64))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

fn racing_claims_of_one_key_take_it_once<M: Model>() {
    let cas = M::new(4_000);
    let keys: Vec<Key> = (0..2_000).map(key).collect();
    assert_eq!(race(&cas, &keys), 2_000);
    assert_eq!(cas.resident(), 2_000);
}

/// Keys that all share one home bucket of a small `cas12` table overflow it into the
/// next buckets, are all found there (by a look-up without lock and by one under
/// the home's lock), raise the counts of the buckets they pass, and take the table
/// to its exact bound; two threads racing on them take each once.
#[test]
fn cas12_keys_past_a_full_home_bucket() {
    let n = 30;
    let probe = Cas12::new(n);
    let (_, buckets) = probe.home_of(&key(0));
    assert_eq!(buckets, 4, "30 keys at 7/8 of 12 slots a bucket: 4 buckets");
    let keys: Vec<Key> = (0..)
        .map(key)
        .filter(|k| probe.home_of(k).0 == buckets - 1)
        .take(n)
        .collect();
    // Several times over: the two threads' overflow placements race.
    for _ in 0..50 {
        let cas = Cas12::new(n);
        assert_eq!(race(&cas, &keys), n as u64);
    }
    let cas = Cas12::new(n);
    assert_eq!(race(&cas, &keys), n as u64);
    assert_eq!(cas.resident(), n as u64);
    // Home is the last bucket: 12 there, 12 in bucket 0 (wrapped), 6 in bucket 1.
    assert_eq!(cas.over(3), 18);
    assert_eq!(cas.over(0), 6);
    assert_eq!(cas.over(1), 0);
    assert_eq!(cas.over(2), 0);
    assert!(keys.iter().all(|k| cas.duplicate(k)));
    // A key absent from the chain: the look-up ends, and there is no capacity left.
    let other = (0..)
        .map(key)
        .find(|k| cas.home_of(k).0 == 3 && !keys.contains(k));
    assert!(matches!(cas.claim(&other.unwrap()), Claim::Full));
}
