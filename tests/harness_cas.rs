//! The `cas`, `cas12` and `cas12m` reference peers of the workloads harness
//! (`benches/workloads/cas.rs`, `cas12.rs`, `cas12m.rs`): every fresh key is taken
//! once, duplicates answer duplicate, a key in progress answers in progress, two
//! threads racing on the same keys take each once, and the pool's bound is exact; for
//! `cas12`, keys that overflow their home bucket are found past it; for `cas12m`,
//! claims completed on another thread than the claimer's, and the maintenance pass's
//! lazy move of a completed entry to its TTL's wheel slot.

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
#[allow(dead_code)]
#[path = "../benches/workloads/cas12m.rs"]
mod cas12m;

use cas::{Cas, Claim, Guard, Lanes, Pass};
use cas12::Cas12;
use cas12m::Cas12m;

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
model!(Cas12m);

/// Runs test `$f` on every model.
macro_rules! all {
    ($($f:ident),*) => {
        mod on_cas {
            $(#[test] fn $f() { super::$f::<super::Cas>() })*
        }
        mod on_cas12 {
            $(#[test] fn $f() { super::$f::<super::Cas12>() })*
        }
        mod on_cas12m {
            $(#[test] fn $f() { super::$f::<super::Cas12m>() })*
        }
    };
}

all!(
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
    // W2's answer is not a duplicate for a key never claimed (nor, next, for one in
    // progress): a look-up that answered yes whatever it found would pass W2.
    assert!(!cas.duplicate(&key(2)), "a key never claimed");
    let Claim::Acquired(g) = cas.claim(&key(1)) else {
        panic!("fresh");
    };
    assert!(matches!(cas.claim(&key(1)), Claim::InProgress));
    assert!(!cas.duplicate(&key(1)), "a key in progress");
    assert!(cas.complete(g));
    assert!(matches!(cas.claim(&key(1)), Claim::Duplicate));
    assert!(cas.duplicate(&key(1)));
}

/// Two threads claiming the same keys, let go together: how many fresh claims they
/// won together.
fn race<M: Model>(cas: &M, keys: &[Key]) -> u64 {
    let go = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let go = &go;
                s.spawn(move || {
                    go.wait();
                    keys.iter().filter(|k| cas.fresh(k)).count() as u64
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

/// Rounds of two threads racing on the same keys, each round on a new model: the
/// threads meet on a key often only in some rounds.
fn racing_claims_of_one_key_take_it_once<M: Model>() {
    let keys: Vec<Key> = (0..2_000).map(key).collect();
    for round in 0..300 {
        let cas = M::new(4_000);
        assert_eq!(race(&cas, &keys), 2_000, "round {round}");
        assert_eq!(cas.resident(), 2_000, "round {round}");
    }
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

/// `cas12m`: keys claimed by two threads and completed by a third, which takes
/// their guards over a channel, while the maintenance thread passes. Every
/// completion holds, every key then answers duplicate, and the bound stays exact.
#[test]
fn cas12m_completes_on_another_thread_than_the_claimer() {
    let n = 20_000;
    let cas = Cas12m::new(n);
    let keys: Vec<Key> = (0..n as u64).map(key).collect();
    let (tx, rx) = std::sync::mpsc::channel::<(Guard, std::thread::ThreadId)>();
    let done = std::thread::scope(|s| {
        let cas = &cas;
        let completer = s.spawn(move || {
            let me = std::thread::current().id();
            rx.into_iter()
                .map(|(g, claimer)| {
                    assert_ne!(claimer, me);
                    cas.complete(g)
                })
                .filter(|&ok| ok)
                .count()
        });
        for part in keys.chunks(n / 2) {
            let tx = tx.clone();
            s.spawn(move || {
                for k in part {
                    let Claim::Acquired(g) = cas.claim(k) else {
                        panic!("fresh");
                    };
                    // In progress until the other thread completes it.
                    assert!(matches!(cas.claim(k), Claim::InProgress));
                    tx.send((g, std::thread::current().id())).unwrap();
                }
            });
        }
        drop(tx);
        completer.join().unwrap()
    });
    assert_eq!(done, n);
    assert_eq!(cas.resident(), n as u64);
    assert!(keys.iter().all(|k| cas.duplicate(k)));
    assert!(matches!(cas.claim(&key(n as u64)), Claim::Full));
    // Nothing was due (lease 30 s, TTL 3600 s).
    let (_, relinked, expired) = cas.passes();
    assert_eq!((relinked, expired), (0, 0));
}

/// `cas12m`'s maintenance thread makes passes on its own, and its peer's drop
/// stops and joins it. (Bounded waits: a thread that never passed, or a drop that
/// never returned, fails the test rather than hanging it.)
#[test]
fn cas12m_maintenance_passes_until_dropped() {
    let bound = Duration::from_secs(60);
    let cas = Cas12m::new(100);
    assert!(cas.fresh(&key(1)));
    let started = cas.passes().0;
    let since = std::time::Instant::now();
    while cas.passes().0 < started + 2 {
        assert!(since.elapsed() < bound, "no maintenance pass");
        std::thread::yield_now();
    }
    let (dropped, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(cas);
        dropped.send(()).unwrap();
    });
    rx.recv_timeout(bound)
        .expect("the drop stopped and joined the maintenance thread");
}

/// `cas12m`'s lazy move, driven by passes at given ticks (no maintenance thread):
/// entries completed after their claim stay at their lease's wheel slot until a pass
/// reaches it, which links them again at their TTL's; a lease never completed is
/// marked lapsed there, and its late completion fails; at the TTL the completed
/// entries are due.
#[test]
fn cas12m_a_pass_moves_completed_entries_to_their_ttl_slot() {
    let lease = Duration::from_secs(10);
    let ttl = Duration::from_secs(1_000);
    let cas = Cas12m::with(10, lease, ttl, false);
    let lanes: &Lanes = cas.lanes();
    let claim = |i| match cas.claim(&key(i)) {
        Claim::Acquired(g) => g,
        _ => panic!("fresh"),
    };
    let (a, b, c) = (claim(1), claim(2), claim(3));
    let spots = [a.spot(), b.spot(), c.spot()];
    let slot = |(lane, index): (usize, u32)| lanes.linked_slot(lane, index);
    let lease_slots = spots.map(|(l, i)| Lanes::slot_of(lanes.deadline_at(l, i)));
    assert_eq!(spots.map(slot), lease_slots.map(Some));
    // Completed on another thread: deadlines moved, the wheel not.
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(cas.complete(a));
            assert!(cas.complete(b));
        });
    });
    let ttl_slots = spots.map(|(l, i)| Lanes::slot_of(lanes.deadline_at(l, i)));
    assert_eq!(spots.map(slot), lease_slots.map(Some));
    assert!(matches!(cas.claim(&key(1)), Claim::Duplicate));
    // Before the lease: nothing due, nothing walked but by chance of slot.
    let early = cas.advance_to(5_000);
    assert_eq!((early.relinked, early.expired), (0, 0));
    // Past the lease (more than a turn of the wheel: every slot once).
    let p = cas.advance_to(60_000);
    assert_eq!((p.relinked, p.expired), (2, 1), "{p:?}");
    assert_eq!(slot(spots[0]), Some(ttl_slots[0]));
    assert_eq!(slot(spots[1]), Some(ttl_slots[1]));
    assert_eq!(slot(spots[2]), None);
    assert!(!cas.complete(c), "a lapsed lease");
    // Again at the same tick: nothing.
    assert_eq!(cas.advance_to(60_000), Pass::default());
    // Past the TTL: both due.
    let p = cas.advance_to(2_000_000);
    assert_eq!((p.relinked, p.expired), (0, 2), "{p:?}");
    assert_eq!(spots.map(slot), [None; 3]);
    assert_eq!(cas.passes(), (4, 2, 3));
}
