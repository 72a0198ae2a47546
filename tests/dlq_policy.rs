//! Dead-letter policies: the auto-archive's retention, on a manual clock.

#![cfg(not(idem_loom))]

mod util;

use idem::{Dlq, DlqPolicy, ManualClock, MessageState, ReplayMode, SchemaVerdict, Selection};
use util::*;

const OUTAGE: &str = "downstream-unavailable:payments-api";
const DAY: u64 = 24 * 3600;

fn any_schema(_: &[u8]) -> SchemaVerdict {
    SchemaVerdict::Compatible
}

/// Runs the auto-archive alone with a retention of `days`.
fn archive_after_days(dlq: &Dlq, days: u64) -> Vec<idem::MessageId> {
    dlq.run_policies(
        &DlqPolicy::new().archive_after(secs(days * DAY)),
        &any_schema,
        |_: &[u8], _: &[u8]| panic!("nothing to replay"),
    )
    .unwrap()
    .archived
}

/// Replays `id`, its handler failing: back in quarantine.
fn fail_replay(dlq: &Dlq, id: idem::MessageId) {
    let r = dlq
        .replay(
            &Selection::default().ids([id]),
            &any_schema,
            |_: &[u8], _: &[u8]| Err("boom: still down".into()),
            ReplayMode::Execute,
        )
        .unwrap();
    assert_eq!(r.failed, vec![id], "{r:?}");
}

/// The retention counts from when a message last entered quarantine: one replayed
/// 10 days after its quarantine and sent back by its handler waits the whole
/// retention again from that failure. (Before, it counted from the first quarantine:
/// the message an operator had just replayed was archived 4 days after it failed
/// again.) A message never replayed is archived at its retention, as before.
#[test]
fn the_auto_archive_counts_from_the_latest_return_to_quarantine() {
    let (engine, _ns, clock) = engine_with(small());
    let dlq = engine.dlq("ns").unwrap();
    let replayed = dlq.quarantine(b"r", b"p", OUTAGE).unwrap();
    let untouched = dlq.quarantine(b"u", b"p", OUTAGE).unwrap();
    clock.advance(secs(10 * DAY));
    fail_replay(&dlq, replayed);
    let failed_at = clock_now(&clock);
    let m = dlq.get(replayed).unwrap();
    assert_eq!(m.quarantined_at_ms(), T0);
    assert_eq!(m.waiting_since_ms(), failed_at);
    assert_eq!(dlq.get(untouched).unwrap().waiting_since_ms(), T0);
    // 14 days after the quarantine, 4 after the failure.
    clock.advance(secs(4 * DAY));
    assert_eq!(archive_after_days(&dlq, 14), vec![untouched]);
    assert_eq!(
        dlq.get(replayed).unwrap().state(),
        MessageState::Quarantined
    );
    // A millisecond short of 14 days after the failure, then 14 days after it.
    clock.set(failed_at + 14 * DAY * 1000 - 1);
    assert!(archive_after_days(&dlq, 14).is_empty());
    clock.advance(ms(1));
    assert_eq!(archive_after_days(&dlq, 14), vec![replayed]);
    let m = dlq.get(replayed).unwrap();
    assert_eq!(m.state(), MessageState::Archived);
    assert_eq!(m.history().last().unwrap().actor, idem::ACTOR_AUTO_ARCHIVE);
}

/// A message taken up for review, replayed and sent back waits from that failure
/// too, and a reopened store knows when (it reads it from the history).
#[cfg(feature = "durable")]
#[test]
fn a_reopened_store_counts_the_retention_from_the_latest_return_too() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let open = || {
        idem::Engine::builder()
            .namespace("ns", small())
            .clock(clock.clone())
            .maintenance_interval(None)
            .durable(dir.path())
            .build()
            .unwrap()
    };
    let id = {
        let engine = open();
        let dlq = engine.dlq("ns").unwrap();
        let id = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
        dlq.review(id, "hold: looking into it").unwrap();
        clock.advance(secs(20 * DAY));
        fail_replay(&dlq, id);
        id
    };
    clock.advance(secs(7 * DAY));
    let engine = open();
    let dlq = engine.dlq("ns").unwrap();
    assert_eq!(
        dlq.get(id).unwrap().waiting_since_ms(),
        T0 + 20 * DAY * 1000
    );
    assert!(archive_after_days(&dlq, 14).is_empty());
    clock.advance(secs(7 * DAY));
    assert_eq!(archive_after_days(&dlq, 14), vec![id]);
}

fn clock_now(clock: &ManualClock) -> u64 {
    use idem::Clock;
    clock.now_ms()
}
