//! `Namespace::router`: keys split among worker threads by the shards they fall in.

use std::collections::{BTreeMap, BTreeSet};

use idem::{Claim, Engine, Error, KeyError, NamespaceConfig};

fn namespace(config: NamespaceConfig) -> (Engine, idem::Namespace) {
    let engine = Engine::builder()
        .maintenance_interval(None)
        .namespace("n", config)
        .build()
        .unwrap();
    let ns = engine.namespace("n").unwrap();
    (engine, ns)
}

fn key(i: usize) -> Vec<u8> {
    format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

/// For each shard the keys `0..n` fall in, the workers the router sends them to.
fn workers_by_shard(
    ns: &idem::Namespace,
    router: &idem::Router,
    n: usize,
) -> BTreeMap<usize, BTreeSet<usize>> {
    let mut by_shard: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for i in 0..n {
        let k = key(i);
        let shard = idem::__bench::shard_of(ns, &k).unwrap();
        let worker = router.worker(&k).unwrap();
        assert!(worker < router.workers());
        by_shard.entry(shard).or_default().insert(worker);
    }
    by_shard
}

#[test]
fn with_a_shard_count_a_multiple_of_the_workers_each_shard_has_one_worker() {
    let (_engine, ns) = namespace(NamespaceConfig::new().max_keys(100_000).shards(24));
    for workers in [1, 2, 3, 4, 6, 8, 12, 24] {
        let router = ns.router(workers).unwrap();
        let by_shard = workers_by_shard(&ns, &router, 20_000);
        assert_eq!(by_shard.len(), 24, "every shard was hit");
        for (shard, ws) in &by_shard {
            assert_eq!(
                ws.len(),
                1,
                "{workers} workers: shard {shard} went to {ws:?}"
            );
        }
        // And every worker has shards of its own: 24 / workers each.
        let mut shards_a_worker = vec![0; workers];
        for ws in by_shard.values() {
            shards_a_worker[*ws.first().unwrap()] += 1;
        }
        assert!(
            shards_a_worker.iter().all(|&s| s == 24 / workers),
            "{shards_a_worker:?}"
        );
    }
}

#[test]
fn otherwise_fewer_shards_than_there_are_workers_take_keys_of_two() {
    let (_engine, ns) = namespace(NamespaceConfig::new().max_keys(100_000).shards(7));
    for workers in [2, 3, 4, 5, 6] {
        let router = ns.router(workers).unwrap();
        let by_shard = workers_by_shard(&ns, &router, 20_000);
        let shared = by_shard.values().filter(|ws| ws.len() > 1).count();
        assert!(
            shared >= 1 && shared < workers,
            "{workers} workers: {by_shard:?}"
        );
        assert!(by_shard.values().all(|ws| ws.len() <= 2), "{by_shard:?}");
    }
}

#[test]
fn the_workers_get_even_shares_of_the_keys_whatever_the_shard_count() {
    // One shard (fewer than the workers), and the default count for 1 M keys.
    for config in [
        NamespaceConfig::new().max_keys(1_000).shards(1),
        NamespaceConfig::new().max_keys(1_000_000),
    ] {
        let (_engine, ns) = namespace(config);
        for workers in [2, 3, 5] {
            let router = ns.router(workers).unwrap();
            let n = 60_000;
            let mut counts = vec![0usize; workers];
            for i in 0..n {
                counts[router.worker(&key(i)).unwrap()] += 1;
            }
            let each = n / workers;
            for c in &counts {
                // Within 5 % of an equal share (the hash's spread is about 1 %).
                assert!(
                    c.abs_diff(each) * 20 < each,
                    "{workers} workers: {counts:?}"
                );
            }
        }
    }
}

#[test]
fn a_key_gets_one_worker_from_every_handle_and_its_claims_are_as_without_a_router() {
    let (engine, ns) = namespace(NamespaceConfig::new().shards(4));
    let other = engine.namespace("n").unwrap();
    let (a, b) = (ns.router(2).unwrap(), other.router(2).unwrap());
    assert_eq!(a, b);
    for i in 0..1_000 {
        assert_eq!(a.worker(&key(i)).unwrap(), b.worker(&key(i)).unwrap());
    }
    // Two workers, each claiming the keys routed to it, on threads of their own.
    let n = 2_000;
    std::thread::scope(|s| {
        for w in 0..2 {
            let ns = ns.clone();
            s.spawn(move || {
                for i in (0..n).filter(|&i| a.worker(&key(i)).unwrap() == w) {
                    let Claim::Acquired(g) = ns.claim(&key(i)).unwrap() else {
                        panic!("a new key is acquired")
                    };
                    g.complete().unwrap();
                }
            });
        }
    });
    assert_eq!(engine.stats().resident_keys, n as u64);
    for i in 0..n {
        assert!(ns.claim(&key(i)).unwrap().is_duplicate());
    }
}

#[test]
fn zero_workers_and_keys_a_claim_refuses_are_refused() {
    let (_engine, ns) = namespace(NamespaceConfig::new().max_key_len(8));
    assert!(matches!(
        ns.router(0),
        Err(Error::InvalidConfig { namespace, .. }) if namespace == "n"
    ));
    let router = ns.router(3).unwrap();
    assert_eq!(router.worker(b""), Err(Error::InvalidKey(KeyError::Empty)));
    assert_eq!(
        router.worker(b"123456789"),
        Err(Error::InvalidKey(KeyError::TooLong { len: 9, max: 8 }))
    );
    assert_eq!(
        ns.claim(b"123456789").unwrap_err(),
        router.worker(b"123456789").unwrap_err()
    );
    assert!(router.worker(b"12345678").unwrap() < 3);
}

#[test]
fn every_namespace_of_an_engine_routes_a_key_alike_and_its_shards_follow() {
    // Two namespaces of other sizes (so other shard counts) in one engine.
    let engine = Engine::builder()
        .maintenance_interval(None)
        .namespace("small", NamespaceConfig::new().max_keys(10_000).shards(4))
        .namespace("large", NamespaceConfig::new().max_keys(100_000).shards(16))
        .build()
        .unwrap();
    let small = engine.namespace("small").unwrap();
    let large = engine.namespace("large").unwrap();
    let (rs, rl) = (small.router(4).unwrap(), large.router(4).unwrap());
    for i in 0..5_000 {
        assert_eq!(rs.worker(&key(i)).unwrap(), rl.worker(&key(i)).unwrap());
    }
    // In each, every shard's keys go to one worker.
    for (ns, router) in [(&small, rs), (&large, rl)] {
        let by_shard = workers_by_shard(ns, &router, 5_000);
        assert!(by_shard.values().all(|ws| ws.len() == 1), "{by_shard:?}");
    }
}

/// `Namespace::shard_count` is the configured count, or the one derived from
/// `max_keys`; it is the count whose multiples of workers share no shard: 39 shards
/// by default at 100,000 keys, so two workers share one, three none.
#[test]
fn the_shard_count_is_the_one_whose_divisors_route_whole_shards() {
    let (_engine, set) = namespace(NamespaceConfig::new().max_keys(100_000).shards(24));
    assert_eq!(set.shard_count(), 24);
    for most in [1, 4096] {
        let (_engine, ns) = namespace(NamespaceConfig::new().shards(most));
        assert_eq!(ns.shard_count(), most, "taken as set, not clamped");
    }
    let (_engine, derived) = namespace(NamespaceConfig::new().max_keys(100_000));
    let shards = derived.shard_count();
    assert_eq!(shards, 39);
    for (workers, straddling) in [(2, 1), (3, 0)] {
        let router = derived.router(workers).unwrap();
        let by_shard = workers_by_shard(&derived, &router, 20_000);
        assert_eq!(by_shard.len(), shards, "every shard was hit");
        let shared = by_shard.values().filter(|ws| ws.len() > 1).count();
        assert_eq!(shared, straddling, "{workers} workers: {by_shard:?}");
    }
}
