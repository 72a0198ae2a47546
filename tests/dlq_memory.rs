//! What a dead-letter store holds in memory: opening it (with an engine, or
//! read-only) reads every letter once to check it and index it, but copies and keeps
//! no payload; a listing without payloads holds none either; a message's payload is
//! read when that message is read, one at a time.
//!
//! Measured by this test binary's allocator, which counts the bytes each thread has
//! allocated and not freed, and the peak of that count: per thread, so the tests
//! running beside one another do not disturb it, and RocksDB's own (C++) memory is
//! not counted. The counts are of this process's own allocations, exactly, not a
//! timing: the same on every run.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use idem::{
    Dlq, Engine, ManualClock, ReplayMode, SchemaVerdict, Selection, MAX_DEAD_LETTER_PAYLOAD,
};
use util::per_thread::peak_growth;
use util::*;

#[global_allocator]
static ALLOCATOR: util::Counting = util::Counting(util::per_thread::count);

const MIB: isize = 1 << 20;
/// Letters of the largest payload: before, opening their store held every payload
/// (and a copy of each stored letter), well over `LETTERS` MiB.
const LETTERS: usize = 24;

fn open(dir: &TempDir, clock: &ManualClock) -> Engine {
    Engine::builder()
        .namespace("ns", small())
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
        .build()
        .expect("opening the durable engine")
}

/// Payload `i`: the largest a dead letter takes, starting with `i`.
fn payload(i: usize) -> Vec<u8> {
    let mut p = vec![b'x'; MAX_DEAD_LETTER_PAYLOAD];
    p[..8].copy_from_slice(&(i as u64).to_be_bytes());
    p
}

#[test]
fn opening_a_dead_letter_store_holds_no_payload_and_reads_them_one_at_a_time() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let engine = open(&dir, &clock);
        let dlq = engine.dlq("ns").unwrap();
        for i in 0..LETTERS {
            let key = format!("k{i}");
            dlq.quarantine(key.as_bytes(), &payload(i), "outage:payments-api 503")
                .unwrap();
        }
    }
    let engine = open(&dir, &clock);

    // The open: every letter is read and checked, and its summary indexed; no
    // payload is copied or kept. (Before: about 2 x 24 MiB.)
    let (dlq, grew) = peak_growth(|| engine.dlq("ns").unwrap());
    assert!(grew < MIB, "opening the store took {grew} bytes");
    let h = dlq.health();
    assert_eq!((h.depth, h.corrupt), (LETTERS as u64, 0));

    // A listing without payloads, by reason class (read from each letter) too.
    let sel = Selection::all().reason_class("outage");
    let (headers, grew) = peak_growth(|| dlq.list_headers(&sel).unwrap());
    assert!(grew < MIB, "listing the headers took {grew} bytes");
    assert_eq!(headers.len(), LETTERS);
    assert!(headers
        .iter()
        .all(|m| m.payload_len() == MAX_DEAD_LETTER_PAYLOAD));

    // One message: its payload, once (it is read in place, then copied out).
    let (m, grew) = peak_growth(|| dlq.get(headers[3].id()).unwrap());
    assert_eq!(m.payload(), payload(3));
    assert!(
        (MIB..2 * MIB).contains(&grew),
        "reading one message took {grew} bytes"
    );
    assert_eq!(m.header(), &headers[3]);
    drop(m);

    // A replay takes the payloads up one message at a time: the letter, the
    // replayed letter made from it, and its encoding, for one message. (A first
    // completion first, outside the measure: it makes the namespace's prefilter
    // segment, about 3 MiB, which the replay's would otherwise.)
    match engine.namespace("ns").unwrap().claim(b"first").unwrap() {
        idem::Claim::Acquired(g) => g.complete().unwrap(),
        other => panic!("{other:?}"),
    }
    let (r, grew) = peak_growth(|| {
        dlq.replay(
            &Selection::default(),
            &|_: &[u8]| SchemaVerdict::Compatible,
            |_: &[u8], p: &[u8]| {
                assert_eq!(p.len(), MAX_DEAD_LETTER_PAYLOAD);
                Ok(())
            },
            ReplayMode::Execute,
        )
        .unwrap()
    });
    assert_eq!(r.replayed.len(), LETTERS, "{r:?}");
    assert!(grew < 4 * MIB, "the replay took {grew} bytes");
    drop((dlq, engine));

    // A read-only open (`idem dlq list`) holds no payload either.
    let (ro, grew) = peak_growth(|| Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap());
    assert!(grew < MIB, "opening the store read-only took {grew} bytes");
    assert_eq!(ro.health().replayed, LETTERS as u64);
}

/// The open still checks every letter as strictly as a full decode: a letter whose
/// payload is cut short is counted corrupt and refused by id, and the others are
/// served.
#[test]
fn a_letter_whose_payload_is_cut_short_is_still_found_corrupt_at_open() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (a, b);
    {
        let engine = open(&dir, &clock);
        let dlq = engine.dlq("ns").unwrap();
        a = dlq.quarantine(b"a", &payload(1), "outage:x").unwrap();
        b = dlq.quarantine(b"b", &payload(2), "outage:x").unwrap();
    }
    {
        let opts = rocksdb::Options::default();
        let cfs = rocksdb::DB::list_cf(&opts, dir.path()).unwrap();
        let db = rocksdb::DB::open_cf(&opts, dir.path(), &cfs).unwrap();
        let cf = db.cf_handle("dlq:ns").unwrap();
        let mut key = vec![b'm'];
        key.extend_from_slice(&b.get().to_be_bytes());
        let stored = db.get_cf(cf, &key).unwrap().unwrap();
        // Its payload's last kilobyte and everything after it gone.
        let cut = 16 + 4 + 1 + 4 + MAX_DEAD_LETTER_PAYLOAD - 1024;
        db.put_cf(cf, &key, &stored[..cut]).unwrap();
    }
    let engine = open(&dir, &clock);
    let dlq = engine.dlq("ns").unwrap();
    assert_eq!(dlq.health().corrupt, 1);
    assert_eq!(dlq.health().depth, 1);
    assert!(matches!(
        dlq.get(b),
        Err(idem::Error::CorruptDeadLetter { .. })
    ));
    assert!(matches!(
        dlq.list_headers(&Selection::default().ids([b])),
        Err(idem::Error::CorruptDeadLetter { .. })
    ));
    assert_eq!(dlq.get(a).unwrap().payload(), payload(1));
    let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
    assert_eq!(ro.health().corrupt, 1);
}
