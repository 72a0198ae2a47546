//! A durable namespace whose hot tier is full drops done keys (they stay in the
//! durable tier) to make room for new ones: which keys it drops.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use idem::{Engine, KeyState, ManualClock, Namespace};
use util::*;

/// A durable namespace "ns" (seed 7, TTL 1 h) whose hot tier holds `room` keys over
/// `shards` shards, in which keys 0 to `n` - 1 were claimed and completed one
/// millisecond apart.
fn completed_over_room(dir: &TempDir, room: usize, shards: usize, n: u64) -> (Engine, Namespace) {
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .clock(clock.clone())
        .maintenance_interval(None)
        .seed(7)
        .durable(dir.path())
        .namespace("ns", small().ttl(secs(3600)).max_keys(room).shards(shards))
        .build()
        .expect("opening the durable engine");
    let ns = engine.namespace("ns").unwrap();
    for i in 0..n {
        acquire(&ns, key(i).as_bytes()).complete().unwrap();
        clock.advance(ms(1));
    }
    (engine, ns)
}

/// Whether done key `i` is in memory: `check` reads the durable tier for a key that
/// is not, and brings nothing back.
fn resident(engine: &Engine, ns: &Namespace, i: u64) -> bool {
    let reads = engine.stats().durable_reads;
    match ns.check(key(i).as_bytes()) {
        Ok(Some(KeyState::Done { .. })) => {}
        other => panic!("{i}: expected a done key, got {other:?}"),
    }
    engine.stats().durable_reads == reads
}

#[test]
fn a_full_hot_tier_takes_its_eviction_groups_from_the_shards_in_turn() {
    // 256 keys of room over 4 shards, filled with done keys; then 192 new keys, so
    // that the hot tier drops three groups of done keys to make room. Taken from the
    // shards in turn, the groups are the first keys' (each shard's own are dropped
    // oldest first), and every key completed after them stays in memory. Before,
    // every group began at the first shard, and the second and third groups dropped
    // that shard's new keys while older keys stayed in the others.
    //
    // Each shard gives the same share, so this holds where every shard holds at
    // least three shares of the first 256 keys (48 of them): with a random seed,
    // about one run in 35 (by the keys' binomial spread) put fewer in some shard,
    // which then gave a few of its new keys, and the test failed. The fixed seed
    // spreads them 55, 65, 65 and 71 over the shards (checked below).
    let dir = TempDir::new();
    let (engine, ns) = completed_over_room(&dir, 256, 4, 448);
    let mut first = [0; 4];
    for i in 0..256 {
        first[idem::__bench::shard_of(&ns, key(i).as_bytes()).unwrap()] += 1;
    }
    assert!(first.iter().all(|&n| n >= 48), "{first:?}");
    let s = engine.stats();
    assert_eq!((s.evictions, s.resident_keys), (192, 256), "{s:?}");
    let reads = s.durable_reads;
    // `check` reads without bringing a key back into memory, so the look-ups drop
    // nothing more.
    for i in 256..448 {
        match ns.check(key(i).as_bytes()) {
            Ok(Some(KeyState::Done { .. })) => {}
            other => panic!("{i}: expected a done key, got {other:?}"),
        }
    }
    assert_eq!(engine.stats().evictions, 192);
    assert_eq!(
        engine.stats().durable_reads - reads,
        0,
        "keys completed after the first eviction were dropped: {:?}",
        engine.stats()
    );
}

#[test]
fn an_eviction_turn_takes_at_most_half_of_a_small_shards_keys() {
    // 512 keys of room over 128 shards, about 4 keys a shard: fewer than a share
    // (8), so a turn that took a whole share took a shard's newest keys too, while
    // the shards after it kept all theirs, the oldest included. One group of 64 now
    // takes the older half of each shard in turn, and every shard keeps its newer
    // half.
    let dir = TempDir::new();
    let (engine, ns) = completed_over_room(&dir, 512, 128, 513);
    let s = engine.stats();
    assert_eq!(s.evictions, 64, "{s:?}");
    // Each shard's first 512 keys, oldest first.
    let mut shards = vec![Vec::new(); ns.shard_count()];
    for i in 0..512 {
        shards[idem::__bench::shard_of(&ns, key(i).as_bytes()).unwrap()].push(i);
    }
    let resident = |i: u64| resident(&engine, &ns, i);
    for (si, keys) in shards.iter().enumerate() {
        let newer_half = &keys[keys.len().div_ceil(2)..];
        let dropped: Vec<u64> = newer_half
            .iter()
            .copied()
            .filter(|&i| !resident(i))
            .collect();
        assert!(
            dropped.is_empty(),
            "shard {si} of keys {keys:?} lost newer keys {dropped:?}"
        );
    }
}

#[test]
fn a_full_small_namespace_evicts_an_eighth_of_its_keys_and_keeps_the_rest() {
    // A group of 64 emptied a namespace of 64 keys or fewer: each shard gave half its
    // keys at every turn until none was left, and every key's next sighting read the
    // durable tier. The group is now an eighth of `max_keys` (at least one key), taken
    // from each shard's oldest.
    for (room, shards) in [
        (16, 1),
        (16, 4),
        (32, 1),
        (32, 8),
        (64, 1),
        (64, 4),
        (100, 1),
        (100, 16),
    ] {
        let dir = TempDir::new();
        let (engine, ns) = completed_over_room(&dir, room, shards, room as u64 + 1);
        let group = (room as u64 / 8).max(1);
        let s = engine.stats();
        assert_eq!(
            (s.evictions, s.resident_keys),
            (group, room as u64 + 1 - group),
            "{room} keys over {shards} shards: {s:?}"
        );
        let resident = |i: u64| resident(&engine, &ns, i);
        // Each shard's keys, oldest first: the ones dropped are its oldest.
        let mut by_shard = vec![Vec::new(); ns.shard_count()];
        for i in 0..=room as u64 {
            by_shard[idem::__bench::shard_of(&ns, key(i).as_bytes()).unwrap()].push(i);
        }
        let mut dropped = 0;
        for keys in &by_shard {
            let kept: Vec<bool> = keys.iter().map(|&i| resident(i)).collect();
            let gone = kept.iter().take_while(|&&k| !k).count();
            assert!(
                kept[gone..].iter().all(|&k| k),
                "{room}/{shards}: a shard of keys {keys:?} dropped other than its oldest: {kept:?}"
            );
            dropped += gone as u64;
        }
        assert_eq!(dropped, group, "{room}/{shards}");
        // The room made serves the next new keys without another eviction; the one
        // after them drops another group.
        for i in room as u64 + 1..room as u64 + group {
            acquire(&ns, key(i).as_bytes()).complete().unwrap();
        }
        assert_eq!(engine.stats().evictions, group, "{room}/{shards}");
        acquire(&ns, key(room as u64 + group).as_bytes())
            .complete()
            .unwrap();
        assert_eq!(engine.stats().evictions, 2 * group, "{room}/{shards}");
    }
}
