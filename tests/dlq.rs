//! Dead-letter replay: the incident walkthrough, dry run against execute, handler
//! failures, keys held elsewhere, schema transforms, bad input, history, policies,
//! health, restarts, corrupt records and store failures.
//!
//! Every test runs on a manual clock. Durable tests (feature `durable`) work in their own temporary
//! directory; a restart drops the engine and every handle, then reopens the directory.

#![cfg(not(idem_loom))]

mod util;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use idem::{
    Claim, DeadLetter, Dlq, DlqPolicy, Engine, Error, HandlerFailure, KeyError, KeyState,
    ManualClock, MessageId, MessageState, Namespace, NamespaceConfig, ReplayMode, ReplayOutcome,
    ReplayReport, SchemaVerdict, Selection, MAX_DEAD_LETTER_PAYLOAD,
};
use util::*;

const OUTAGE: &str = "downstream-unavailable:payments-api";

fn config() -> NamespaceConfig {
    small().max_keys(100_000)
}

/// A durable engine in a new directory on a clock at `T0`, with one message of
/// `key` quarantined (payload "v2:" and the key); the directory first, so that it is
/// dropped last.
#[cfg(feature = "durable")]
fn durable_with_a_letter(key: &[u8]) -> (TempDir, ManualClock, Engine, Namespace, Dlq, MessageId) {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns, dlq) = open(&dir, &clock);
    let id = dlq
        .quarantine(key, &[b"v2:", key].concat(), OUTAGE)
        .unwrap();
    (dir, clock, engine, ns, dlq, id)
}

#[cfg(feature = "durable")]
/// A durable engine with namespace "ns" in `dir` on `clock`.
fn open(dir: &TempDir, clock: &ManualClock) -> (Engine, Namespace, Dlq) {
    open_with(dir, clock, config())
}

#[cfg(feature = "durable")]
/// A durable engine with namespace "ns" of `cfg` in `dir` on `clock`.
fn open_with(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace, Dlq) {
    let (engine, ns) = durable_on(dir.path(), cfg, clock);
    let dlq = engine.dlq("ns").unwrap();
    (engine, ns, dlq)
}

/// A memory-only engine with namespace "ns".
fn memory() -> (Engine, Namespace, Dlq, ManualClock) {
    let (engine, ns, clock) = engine_with(config());
    let dlq = engine.dlq("ns").unwrap();
    (engine, ns, dlq, clock)
}

/// The schema after the migration: payloads start with "v2:". "v1:" payloads are
/// from before it.
fn schema_v2(payload: &[u8]) -> SchemaVerdict {
    if payload.starts_with(b"v2:") {
        SchemaVerdict::Compatible
    } else {
        SchemaVerdict::Incompatible(format!(
            "unknown schema {:?}",
            String::from_utf8_lossy(&payload[..payload.len().min(3)])
        ))
    }
}

fn any_schema(_: &[u8]) -> SchemaVerdict {
    SchemaVerdict::Compatible
}

/// Replays the quarantined messages in `mode`, every handler succeeding.
fn replay_all(dlq: &Dlq, schema: &dyn idem::SchemaCheck, mode: ReplayMode) -> ReplayReport {
    dlq.replay(
        &Selection::default(),
        schema,
        |_: &[u8], _: &[u8]| Ok(()),
        mode,
    )
    .expect("the replay runs")
}

/// Replays `sel` for real, every payload compatible, through `handler`.
fn execute(
    dlq: &Dlq,
    sel: &Selection,
    handler: impl FnMut(&[u8], &[u8]) -> Result<(), String>,
) -> ReplayReport {
    dlq.replay(sel, &any_schema, handler, ReplayMode::Execute)
        .expect("the replay runs")
}

/// Side effects by key, as a test handler applies them.
#[derive(Default)]
struct Ledger(RefCell<HashMap<Vec<u8>, u32>>);

impl Ledger {
    fn apply(&self, key: &[u8]) {
        *self.0.borrow_mut().entry(key.to_vec()).or_insert(0) += 1;
    }

    fn count(&self, key: &[u8]) -> u32 {
        self.0.borrow().get(key).copied().unwrap_or(0)
    }

    fn total(&self) -> u32 {
        self.0.borrow().values().sum()
    }
}

/// The live path: claim, apply, complete.
fn live_apply(ns: &Namespace, ledger: &Ledger, key: &[u8]) {
    match ns.claim(key).unwrap() {
        Claim::Acquired(g) => {
            ledger.apply(key);
            g.complete().unwrap();
        }
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn ids(v: &[DeadLetter]) -> Vec<MessageId> {
    v.iter().map(DeadLetter::id).collect()
}

fn everything(dlq: &Dlq) -> Vec<DeadLetter> {
    dlq.list(&Selection::all()).unwrap()
}

/// The classic incident: 200 messages quarantined during an outage; 12 of them went
/// through afterwards on a delayed retry, 3 carry a payload from before a schema
/// migration. The replay reports 185 / 12 / 3 and the ledger shows 185 new effects,
/// each key applied exactly once overall.
fn incident_walkthrough(ns: &Namespace, dlq: &Dlq, clock: &ManualClock) -> Ledger {
    let ledger = Ledger::default();
    let key = |i: u32| format!("pay-{i:04}").into_bytes();
    let mut quarantined = Vec::new();
    for i in 0..200u32 {
        let payload = if (50..53).contains(&i) {
            format!("v1:amount={i}")
        } else {
            format!("v2:{{\"amount\":{i}}}")
        };
        let reason = format!("{OUTAGE} 503 Service Unavailable after 5 retries");
        quarantined.push(
            dlq.quarantine(&key(i), payload.as_bytes(), &reason)
                .unwrap(),
        );
        clock.advance(ms(10));
    }
    // The delayed retries that succeeded through the live path after the outage.
    let retried: Vec<u32> = (0..12).map(|j| 100 + j * 7).collect();
    for &i in &retried {
        live_apply(ns, &ledger, &key(i));
    }
    assert_eq!(ledger.total(), 12);
    clock.advance(secs(30));

    let handler = |k: &[u8], _p: &[u8]| -> Result<(), String> {
        ledger.apply(k);
        Ok(())
    };
    let dry = dlq
        .replay(
            &Selection::default(),
            &schema_v2,
            handler,
            ReplayMode::DryRun,
        )
        .unwrap();
    assert_eq!(ledger.total(), 12, "a dry run runs no handler");
    assert_eq!(
        (
            dry.replayed.len(),
            dry.already_done.len(),
            dry.archived.len(),
            dry.failed.len(),
            dry.skipped_in_progress.len()
        ),
        (185, 12, 3, 0, 0)
    );
    for id in &quarantined {
        assert_eq!(dlq.get(*id).unwrap().state(), MessageState::Quarantined);
    }

    let run = dlq
        .replay(
            &Selection::default(),
            &schema_v2,
            |k: &[u8], _p: &[u8]| {
                ledger.apply(k);
                Ok(())
            },
            ReplayMode::Execute,
        )
        .unwrap();
    assert_eq!(run.mode, ReplayMode::Execute);
    assert_eq!(run.replayed, dry.replayed, "dry run and execute agree");
    assert_eq!(run.already_done, dry.already_done);
    assert_eq!(run.archived, dry.archived);
    assert_eq!(run.skipped_in_progress, dry.skipped_in_progress);
    assert!(run.failed.is_empty());
    assert_eq!(
        (
            run.replayed.len(),
            run.already_done.len(),
            run.archived.len()
        ),
        (185, 12, 3)
    );
    // 185 new effects; every key took effect exactly once, except the archived ones.
    assert_eq!(ledger.total(), 12 + 185);
    for i in 0..200u32 {
        let expected = u32::from(!(50..53).contains(&i));
        assert_eq!(ledger.count(&key(i)), expected, "pay-{i:04}");
    }
    let expected_done: Vec<MessageId> = retried.iter().map(|&i| quarantined[i as usize]).collect();
    assert_eq!(run.already_done, expected_done);
    assert_eq!(run.archived, quarantined[50..53].to_vec());
    for id in &run.archived {
        assert!(run.notes[id].starts_with("schema-incompatible: unknown schema"));
    }
    ledger
}

fn check_outcome(dlq: &Dlq, ns: &Namespace) {
    let all = everything(dlq);
    assert_eq!(all.len(), 200);
    let count = |f: &dyn Fn(&DeadLetter) -> bool| all.iter().filter(|m| f(m)).count();
    assert_eq!(
        count(&|m| m.replay_outcome() == Some(ReplayOutcome::Applied)),
        185
    );
    assert_eq!(
        count(&|m| m.replay_outcome() == Some(ReplayOutcome::AlreadyDone)),
        12
    );
    assert_eq!(count(&|m| m.state() == MessageState::Archived), 3);
    for m in &all {
        // Every replayed message's key is done; no archived one's is.
        let done = matches!(ns.check(m.key()).unwrap(), Some(KeyState::Done { .. }));
        assert_eq!(done, m.state() == MessageState::Replayed, "{}", m.id());
        let steps: Vec<(Option<MessageState>, MessageState)> =
            m.history().iter().map(|t| (t.from, t.to)).collect();
        use MessageState::*;
        let mut expected = vec![
            (None, Quarantined),
            (Some(Quarantined), UnderReview),
            (Some(UnderReview), SchemaCheck),
        ];
        if m.state() == Archived {
            expected.push((Some(SchemaCheck), Archived));
        } else {
            expected.push((Some(SchemaCheck), IdempotencyCheck));
            expected.push((Some(IdempotencyCheck), Replayed));
        }
        assert_eq!(steps, expected, "{}", m.id());
    }
    // Nothing is left to replay, and replaying an explicit replayed message is refused.
    assert!(dlq.list(&Selection::default()).unwrap().is_empty());
    let first = all[0].id();
    let before = everything(dlq);
    let err = dlq
        .replay(
            &Selection::default().ids([first]),
            &any_schema,
            |_: &[u8], _: &[u8]| panic!("no handler may run"),
            ReplayMode::Execute,
        )
        .unwrap_err();
    assert_eq!(
        err,
        Error::InvalidTransition {
            id: first,
            from: MessageState::Replayed,
            to: MessageState::UnderReview
        }
    );
    assert_eq!(everything(dlq), before);
}

#[cfg(feature = "durable")]
#[test]
fn incident_walkthrough_durable_survives_a_restart() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns, dlq) = open(&dir, &clock);
        assert!(dlq.is_durable());
        incident_walkthrough(&ns, &dlq, &clock);
        check_outcome(&dlq, &ns);
    }
    let (_engine, ns, dlq) = open(&dir, &clock);
    check_outcome(&dlq, &ns);
    let h = dlq.health();
    assert_eq!((h.replayed, h.archived, h.depth), (197, 3, 0));
    assert_eq!(h.replay_success_rate(), Some(1.0));
}

#[test]
fn incident_walkthrough_memory_only() {
    let (_engine, ns, dlq, clock) = memory();
    assert!(!dlq.is_durable());
    incident_walkthrough(&ns, &dlq, &clock);
    check_outcome(&dlq, &ns);
}

#[test]
fn a_dry_run_changes_nothing() {
    let (_engine, ns, dlq, _clock) = memory();
    for i in 0..5u64 {
        dlq.quarantine(key(i).as_bytes(), b"p", OUTAGE).unwrap();
    }
    live_apply(&ns, &Ledger::default(), key(3).as_bytes());
    let before = everything(&dlq);
    let calls = AtomicUsize::new(0);
    let report = dlq
        .replay(
            &Selection::default(),
            &any_schema,
            |_: &[u8], _: &[u8]| {
                calls.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
            ReplayMode::DryRun,
        )
        .unwrap();
    assert_eq!(report.mode, ReplayMode::DryRun);
    assert_eq!(report.replayed.len(), 4);
    assert_eq!(report.already_done, vec![before[3].id()]);
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    assert_eq!(everything(&dlq), before, "no message changed");
    for i in [0u64, 1, 2, 4] {
        assert_eq!(ns.check(key(i).as_bytes()).unwrap(), None, "never claimed");
    }
}

#[test]
fn two_dead_letters_of_one_key_take_effect_once_and_the_dry_run_says_so() {
    let (_engine, _ns, dlq, _clock) = memory();
    let a = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let b = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let dry = dlq
        .replay(
            &Selection::default(),
            &any_schema,
            |_: &[u8], _: &[u8]| Ok(()),
            ReplayMode::DryRun,
        )
        .unwrap();
    let ledger = Ledger::default();
    let run = execute(&dlq, &Selection::default(), |k: &[u8], _: &[u8]| {
        ledger.apply(k);
        Ok(())
    });
    assert_eq!(
        (dry.replayed.clone(), dry.already_done.clone()),
        (vec![a], vec![b])
    );
    assert_eq!(
        (run.replayed, run.already_done),
        (dry.replayed, dry.already_done)
    );
    assert_eq!(ledger.count(b"k"), 1);
}

/// A replay claims its key with the letter's payload, as the consumer that
/// quarantined it would have: a key recorded, done or held, with another payload's
/// fingerprint is a payload mismatch, reported and left as it was (nothing stored,
/// no handler run), and the dry run predicts it.
#[test]
fn a_key_recorded_with_another_payload_is_a_payload_mismatch_left_as_it_was() {
    let (_engine, ns, dlq, _clock) = memory();
    let complete = |key: &[u8], payload: &[u8]| match ns.claim_with_payload(key, payload) {
        Ok(Claim::Acquired(g)) => g.complete().unwrap(),
        other => panic!("{other:?}"),
    };
    // The live path completed "done" with another payload, and "same" with the
    // letter's own; it holds "held" with another payload.
    complete(b"done", b"v2:other");
    complete(b"same", b"v2:same");
    let _held = match ns.claim_with_payload(b"held", b"v2:other") {
        Ok(Claim::Acquired(g)) => g,
        other => panic!("{other:?}"),
    };
    let done = dlq.quarantine(b"done", b"v2:done", OUTAGE).unwrap();
    let held = dlq.quarantine(b"held", b"v2:held", OUTAGE).unwrap();
    let same = dlq.quarantine(b"same", b"v2:same", OUTAGE).unwrap();
    // Two messages under one key: the first completes it with its payload's
    // fingerprint, which the second's does not match.
    let first = dlq.quarantine(b"twice", b"v2:one", OUTAGE).unwrap();
    let second = dlq.quarantine(b"twice", b"v2:two", OUTAGE).unwrap();
    let before = everything(&dlq);

    let dry = replay_all(&dlq, &any_schema, ReplayMode::DryRun);
    let mut applied = Vec::new();
    let run = execute(&dlq, &Selection::default(), |k: &[u8], p: &[u8]| {
        applied.push((k.to_vec(), p.to_vec()));
        Ok(())
    });
    for r in [&dry, &run] {
        // Before, "done" and "twice" #2 were recorded as already done, and "held"
        // skipped as in progress: the payload was never compared.
        assert_eq!(r.payload_mismatch, vec![done, held, second], "{r:?}");
        assert_eq!(r.already_done, vec![same], "{r:?}");
        assert_eq!(r.replayed, vec![first], "{r:?}");
        assert!(r.skipped_in_progress.is_empty(), "{r:?}");
        assert_eq!(r.total(), 5, "{r:?}");
        for id in [done, held, second] {
            assert!(r.notes[&id].starts_with("payload-mismatch"), "{r:?}");
        }
    }
    assert_eq!(applied, [(b"twice".to_vec(), b"v2:one".to_vec())]);
    // The mismatched letters are exactly as they were, still waiting.
    let now = everything(&dlq);
    for id in [done, held, second] {
        let at = |v: &[DeadLetter]| v.iter().find(|m| m.id() == id).cloned().unwrap();
        assert_eq!(at(&now), at(&before));
        assert_eq!(at(&now).state(), MessageState::Quarantined);
    }
    // The keys' records are untouched: their own payloads still answer as before.
    assert!(ns
        .claim_with_payload(b"done", b"v2:other")
        .unwrap()
        .is_duplicate());
    assert!(matches!(
        ns.claim_with_payload(b"twice", b"v2:two"),
        Err(Error::PayloadMismatch)
    ));
    assert_eq!(dlq.health().depth, 3);
}

/// A dry run's partition against an `Execute` right after it, when a handler fails:
/// the failed message moves from `replayed` to `failed`, and a later message of its
/// key, which the dry run counted as done by it (a payload mismatch with another
/// payload, already done with the same one), finds the key released, takes it and
/// is replayed.
#[test]
fn a_handler_failure_also_moves_a_later_message_of_its_key_to_replayed() {
    let (_engine, _ns, dlq, _clock) = memory();
    let k1 = dlq.quarantine(b"k", b"v2:one", OUTAGE).unwrap();
    let k2 = dlq.quarantine(b"k", b"v2:two", OUTAGE).unwrap();
    let j1 = dlq.quarantine(b"j", b"v2:one", OUTAGE).unwrap();
    let j2 = dlq.quarantine(b"j", b"v2:one", OUTAGE).unwrap();
    let dry = replay_all(&dlq, &any_schema, ReplayMode::DryRun);
    assert_eq!(dry.replayed, vec![k1, j1], "{dry:?}");
    assert_eq!(dry.payload_mismatch, vec![k2], "{dry:?}");
    assert_eq!(dry.already_done, vec![j2], "{dry:?}");
    // Each key's first handler call fails.
    let mut seen = HashSet::new();
    let run = execute(&dlq, &Selection::default(), |k: &[u8], _: &[u8]| match seen
        .insert(k.to_vec())
    {
        true => Err("downstream-unavailable".to_owned()),
        false => Ok(()),
    });
    assert_eq!(run.failed, vec![k1, j1], "{run:?}");
    assert_eq!(run.replayed, vec![k2, j2], "{run:?}");
    assert!(run.payload_mismatch.is_empty(), "{run:?}");
    assert!(run.already_done.is_empty(), "{run:?}");
}

/// A replayed completion stores the fingerprint of the payload the message was
/// quarantined with (not of a schema transform of it), as a live completion with it
/// would: a later redelivery of the key with another payload is a payload mismatch,
/// after a restart too, and a replay (or a read-only dry run) of another letter of
/// the key with another payload is reported as one.
#[cfg(feature = "durable")]
#[test]
fn a_replayed_completion_records_the_letters_payload_fingerprint() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let upgrade = |p: &[u8]| match p.strip_prefix(b"v1:") {
        Some(rest) => SchemaVerdict::Transform([b"v2:", rest].concat()),
        None => SchemaVerdict::Compatible,
    };
    {
        let (_engine, ns, dlq) = open(&dir, &clock);
        let a = dlq.quarantine(b"a", b"v2:a", OUTAGE).unwrap();
        let b = dlq.quarantine(b"b", b"v1:b", OUTAGE).unwrap();
        let r = dlq
            .replay(
                &Selection::default(),
                &upgrade,
                |_: &[u8], _: &[u8]| Ok(()),
                ReplayMode::Execute,
            )
            .unwrap();
        assert_eq!((r.replayed, r.transformed), (vec![a, b], vec![b]));
        // Before, the replay's completion stored no fingerprint: any payload was a
        // duplicate.
        assert!(matches!(
            ns.claim_with_payload(b"a", b"v2:other"),
            Err(Error::PayloadMismatch)
        ));
        assert!(ns.claim_with_payload(b"a", b"v2:a").unwrap().is_duplicate());
        assert!(ns.claim_with_payload(b"b", b"v1:b").unwrap().is_duplicate());
        // A claim by key alone is not compared, as on the live path.
        assert!(ns.claim(b"a").unwrap().is_duplicate());
    }
    // After a restart only the durable tier knows the keys, fingerprints included.
    let c = {
        let (_engine, ns, dlq) = open(&dir, &clock);
        assert!(matches!(
            ns.claim_with_payload(b"a", b"v2:other"),
            Err(Error::PayloadMismatch)
        ));
        assert!(ns.claim_with_payload(b"b", b"v1:b").unwrap().is_duplicate());
        dlq.quarantine(b"a", b"v2:other", OUTAGE).unwrap()
    };
    let dry = |d: &Dlq| {
        d.replay(
            &Selection::default(),
            &upgrade,
            |_: &[u8], _: &[u8]| panic!("a dry run calls no handler"),
            ReplayMode::DryRun,
        )
        .unwrap()
    };
    let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
    assert_eq!(dry(&ro).payload_mismatch, vec![c]);
    drop(ro);
    let (_engine, _ns, dlq) = open(&dir, &clock);
    assert_eq!(dry(&dlq).payload_mismatch, vec![c]);
    let r = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        panic!("the key was used for another message")
    });
    assert_eq!((r.total(), r.payload_mismatch), (1, vec![c]));
    assert_eq!(dlq.get(c).unwrap().state(), MessageState::Quarantined);
}

#[cfg(feature = "durable")]
#[test]
fn a_failing_handler_sends_the_message_back_with_its_attempts_and_reason() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let id;
    {
        let (_engine, ns, dlq) = open(&dir, &clock);
        id = dlq.quarantine(b"pay-1", b"v2:x", OUTAGE).unwrap();
        clock.advance(secs(1));
        let report = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
            Err("downstream-unavailable:ledger-api timeout".into())
        });
        assert_eq!(report.failed, vec![id]);
        assert_eq!(
            report.notes[&id],
            "downstream-unavailable:ledger-api timeout"
        );
        let m = dlq.get(id).unwrap();
        assert_eq!(m.state(), MessageState::Quarantined);
        assert_eq!(m.attempts(), 1);
        assert_eq!(m.reason_class(), "downstream-unavailable:ledger-api");
        let last = m.history().last().unwrap();
        assert_eq!(
            (last.from, last.to, last.reason.as_str(), last.at_ms),
            (
                Some(MessageState::IdempotencyCheck),
                MessageState::Quarantined,
                "downstream-unavailable:ledger-api timeout",
                T0 + 1000
            )
        );
        // The claim was released: the key is not done and can be claimed at once.
        assert_eq!(ns.check(b"pay-1").unwrap(), None);
        let h = dlq.health();
        assert_eq!((h.replay_successes, h.replay_failures), (0, 1));
        assert_eq!(h.replay_success_rate(), Some(0.0));
    }
    // After a restart the next replay succeeds: two attempts, one failure, one success.
    let (_engine, ns, dlq) = open(&dir, &clock);
    let report = execute(
        &dlq,
        &Selection::default().reason_class("downstream-unavailable"),
        |_: &[u8], _: &[u8]| Ok(()),
    );
    assert_eq!(report.replayed, vec![id]);
    let m = dlq.get(id).unwrap();
    assert_eq!((m.state(), m.attempts()), (MessageState::Replayed, 2));
    assert!(matches!(
        ns.check(b"pay-1").unwrap(),
        Some(KeyState::Done { .. })
    ));
    assert_eq!(dlq.health().replay_success_rate(), Some(0.5));
}

#[test]
fn a_key_held_by_a_live_claim_is_left_quarantined() {
    let (_engine, ns, dlq, _clock) = memory();
    let id = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let guard = match ns.claim(b"k").unwrap() {
        Claim::Acquired(g) => g,
        other => panic!("{other:?}"),
    };
    let before = dlq.get(id).unwrap();
    for mode in [ReplayMode::DryRun, ReplayMode::Execute] {
        let r = dlq
            .replay(
                &Selection::default(),
                &any_schema,
                |_: &[u8], _: &[u8]| panic!("the key is held elsewhere"),
                mode,
            )
            .unwrap();
        assert_eq!(r.skipped_in_progress, vec![id], "{mode:?}");
        assert!(r.notes[&id].starts_with("key held by a live claim until"));
        assert_eq!(dlq.get(id).unwrap(), before, "{mode:?}");
    }
    // Once the live path completes the key, the replay records it as already done.
    guard.complete().unwrap();
    let r = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        panic!("already done")
    });
    assert_eq!(r.already_done, vec![id]);
    assert_eq!(
        dlq.get(id).unwrap().replay_outcome(),
        Some(ReplayOutcome::AlreadyDone)
    );
}

#[test]
fn a_transform_feeds_the_handler_and_leaves_the_stored_payload() {
    let (_engine, _ns, dlq, _clock) = memory();
    let id = dlq.quarantine(b"k", b"v1:7", OUTAGE).unwrap();
    let upgrade = |p: &[u8]| match p.strip_prefix(b"v1:") {
        Some(rest) => SchemaVerdict::Transform([&b"v2:"[..], rest].concat()),
        None => SchemaVerdict::Compatible,
    };
    let seen = RefCell::new(Vec::new());
    let r = dlq
        .replay(
            &Selection::default(),
            &upgrade,
            |_: &[u8], p: &[u8]| {
                seen.borrow_mut().push(p.to_vec());
                Ok(())
            },
            ReplayMode::Execute,
        )
        .unwrap();
    assert_eq!(
        (r.replayed.clone(), r.transformed.clone()),
        (vec![id], vec![id])
    );
    assert_eq!(seen.into_inner(), vec![b"v2:7".to_vec()]);
    let m = dlq.get(id).unwrap();
    assert_eq!(m.payload(), b"v1:7");
    assert!(m
        .history()
        .iter()
        .any(|t| t.reason == "schema-transformed: 4 -> 4 bytes"));
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let (_engine, _ns, dlq, _clock) = memory();
    let id = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let done = dlq.quarantine(b"k2", b"p", OUTAGE).unwrap();
    dlq.archive(done, "duplicate-of:#1 archived by hand")
        .unwrap();
    let before = everything(&dlq);
    let unknown = MessageId::new(999);
    let no_such = Error::UnknownMessage {
        namespace: "ns".into(),
        id: unknown,
    };
    assert_eq!(dlq.get(unknown).unwrap_err(), no_such);
    assert_eq!(dlq.archive(unknown, "x").unwrap_err(), no_such);
    assert_eq!(dlq.review(unknown, "x").unwrap_err(), no_such);
    assert_eq!(
        dlq.list(&Selection::default().ids([id, unknown]))
            .unwrap_err(),
        no_such
    );
    assert_eq!(
        dlq.archive(done, "again").unwrap_err(),
        Error::InvalidTransition {
            id: done,
            from: MessageState::Archived,
            to: MessageState::Archived
        }
    );
    let big = vec![0u8; MAX_DEAD_LETTER_PAYLOAD + 1];
    assert_eq!(
        dlq.quarantine(b"k3", &big, OUTAGE).unwrap_err(),
        Error::PayloadTooLarge {
            len: MAX_DEAD_LETTER_PAYLOAD + 1,
            max: MAX_DEAD_LETTER_PAYLOAD
        }
    );
    assert_eq!(
        dlq.quarantine(b"", b"p", OUTAGE).unwrap_err(),
        Error::InvalidKey(KeyError::Empty)
    );
    assert!(matches!(
        dlq.quarantine(&[b'k'; 5000], b"p", OUTAGE),
        Err(Error::InvalidKey(KeyError::TooLong {
            len: 5000,
            max: 4096
        }))
    ));
    for reason in ["", " leading-space", "x".repeat(5000).as_str()] {
        assert!(matches!(
            dlq.quarantine(b"k3", b"p", reason),
            Err(Error::InvalidReason(_))
        ));
    }
    assert!(matches!(dlq.archive(id, ""), Err(Error::InvalidReason(_))));
    assert!(matches!(
        dlq.as_actor("two words"),
        Err(Error::InvalidReason(_))
    ));
    // A replay naming an unknown or archived message is refused before doing anything.
    for sel in [
        Selection::default().ids([id, unknown]),
        Selection::default().ids([id, done]),
    ] {
        assert!(dlq
            .replay(
                &sel,
                &any_schema,
                |_: &[u8], _: &[u8]| panic!("refused before any handler"),
                ReplayMode::Execute,
            )
            .is_err());
    }
    assert_eq!(everything(&dlq), before);
    // The payload limit is inclusive, and ids are not reused after refusals.
    let at_limit = dlq
        .quarantine(b"k3", &big[..MAX_DEAD_LETTER_PAYLOAD], OUTAGE)
        .unwrap();
    assert_eq!(at_limit.get(), done.get() + 1);
    assert!(matches!(
        Engine::builder().build().unwrap().dlq("nope"),
        Err(Error::UnknownNamespace(_))
    ));
}

#[test]
fn history_records_time_actor_and_reason_of_every_transition() {
    let (_engine, _ns, dlq, clock) = memory();
    let consumer = dlq.as_actor("consumer:orders-7").unwrap();
    let alice = dlq.as_actor("alice").unwrap();
    let id = consumer
        .quarantine(b"k", b"p", "poison:json unexpected token at 17")
        .unwrap();
    clock.advance(secs(5));
    alice.review(id, "looking at the parser bug").unwrap();
    assert_eq!(dlq.get(id).unwrap().state(), MessageState::UnderReview);
    // Under review: not picked by the default selection, picked when named.
    assert!(dlq.list(&Selection::default()).unwrap().is_empty());
    clock.advance(secs(5));
    execute(
        &alice,
        &Selection::default().state(MessageState::UnderReview),
        |_: &[u8], _: &[u8]| Ok(()),
    );
    let m = dlq.get(id).unwrap();
    let h: Vec<(u64, &str, Option<MessageState>, MessageState, &str)> = m
        .history()
        .iter()
        .map(|t| (t.at_ms, t.actor.as_str(), t.from, t.to, t.reason.as_str()))
        .collect();
    use MessageState::*;
    assert_eq!(
        h,
        vec![
            (
                T0,
                "consumer:orders-7",
                None,
                Quarantined,
                "poison:json unexpected token at 17"
            ),
            (
                T0 + 5000,
                "alice",
                Some(Quarantined),
                UnderReview,
                "looking at the parser bug"
            ),
            (
                T0 + 10_000,
                "alice",
                Some(UnderReview),
                SchemaCheck,
                "schema-check"
            ),
            (
                T0 + 10_000,
                "alice",
                Some(SchemaCheck),
                IdempotencyCheck,
                "schema-compatible"
            ),
            (
                T0 + 10_000,
                "alice",
                Some(IdempotencyCheck),
                Replayed,
                "applied"
            ),
        ]
    );
    assert_eq!(m.reason_class(), "poison:json");
    assert_eq!(m.quarantined_at_ms(), T0);
}

#[test]
fn selection_by_state_class_window_and_limit() {
    let (_engine, _ns, dlq, clock) = memory();
    let a = dlq
        .quarantine(b"a", b"p", "downstream-unavailable:payments-api x")
        .unwrap();
    clock.advance(secs(10));
    let b = dlq
        .quarantine(b"b", b"p", "downstream-unavailable:ledger-api")
        .unwrap();
    clock.advance(secs(10));
    let c = dlq.quarantine(b"c", b"p", "poison:json").unwrap();
    let d = dlq
        .quarantine(b"d", b"p", "downstream-unavailable-ish")
        .unwrap();
    let e = dlq.quarantine(b"e", b"p", "poison:json").unwrap();
    dlq.archive(e, "test").unwrap();
    let pick = |s: Selection| ids(&dlq.list(&s).unwrap());
    assert_eq!(pick(Selection::default()), vec![a, b, c, d]);
    assert_eq!(pick(Selection::all()), vec![a, b, c, d, e]);
    assert_eq!(
        pick(Selection::default().state(MessageState::Archived)),
        vec![e]
    );
    assert_eq!(
        pick(Selection::default().reason_class("downstream-unavailable")),
        vec![a, b],
        "a class selects its sub-classes, not names that merely share a prefix"
    );
    assert_eq!(
        pick(Selection::default().reason_class("downstream-unavailable:payments-api")),
        vec![a]
    );
    assert_eq!(
        pick(Selection::default().quarantined_between(T0 + 10_000, T0 + 20_000)),
        vec![b],
        "the window includes its start and excludes its end"
    );
    assert_eq!(pick(Selection::default().limit(2)), vec![a, b]);
    assert_eq!(pick(Selection::default().ids([c, e])), vec![c, e]);
    assert_eq!(
        pick(
            Selection::default()
                .ids([c, e])
                .state(MessageState::Quarantined)
        ),
        vec![c]
    );
}

#[test]
fn policies_auto_archive_past_retention_and_auto_replay_only_what_is_approved() {
    let (_engine, ns, dlq, clock) = memory();
    let old = dlq.quarantine(b"old", b"v2:", "poison:json").unwrap();
    let reviewed = dlq.quarantine(b"rev", b"v2:", "poison:json").unwrap();
    dlq.review(reviewed, "keep").unwrap();
    clock.advance(secs(10 * 24 * 3600));
    let from = clock_now(&clock);
    let approved = dlq.quarantine(b"ok", b"v2:", OUTAGE).unwrap();
    let approved_old_schema = dlq.quarantine(b"v1", b"v1:", OUTAGE).unwrap();
    let approved_done = dlq.quarantine(b"done", b"v2:", OUTAGE).unwrap();
    let other_class = dlq.quarantine(b"other", b"v2:", "poison:json").unwrap();
    clock.advance(secs(3600));
    let after_window = dlq.quarantine(b"late", b"v2:", OUTAGE).unwrap();
    clock.advance(secs(5 * 24 * 3600));
    // A delayed retry went through the live path (within the namespace's TTL).
    live_apply(&ns, &Ledger::default(), b"done");

    let policy = DlqPolicy::new()
        .archive_after(secs(14 * 24 * 3600))
        .auto_replay(OUTAGE, from, from + 3_600_000);
    let ledger = Ledger::default();
    let r = dlq
        .run_policies(&policy, &schema_v2, |k: &[u8], _: &[u8]| {
            ledger.apply(k);
            Ok(())
        })
        .unwrap();
    assert_eq!(r.archived, vec![old]);
    assert_eq!(r.replay.replayed, vec![approved]);
    assert_eq!(r.replay.archived, vec![approved_old_schema]);
    assert_eq!(r.replay.already_done, vec![approved_done]);
    assert_eq!(ledger.total(), 1);
    let m = dlq.get(old).unwrap();
    let last = m.history().last().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.to, last.reason.as_str()),
        (
            idem::ACTOR_AUTO_ARCHIVE,
            MessageState::Archived,
            "retention: quarantined for 1209600 s or more"
        )
    );
    assert_eq!(
        dlq.get(approved).unwrap().history().last().unwrap().actor,
        idem::ACTOR_AUTO_REPLAY
    );
    // Everything else waits for an explicit call.
    assert_eq!(
        dlq.get(reviewed).unwrap().state(),
        MessageState::UnderReview
    );
    assert_eq!(
        dlq.get(other_class).unwrap().state(),
        MessageState::Quarantined
    );
    assert_eq!(
        dlq.get(after_window).unwrap().state(),
        MessageState::Quarantined
    );
    // Running the policies again finds nothing new to do.
    let again = dlq
        .run_policies(&policy, &schema_v2, |_: &[u8], _: &[u8]| {
            panic!("nothing left")
        })
        .unwrap();
    assert!(again.archived.is_empty());
    assert_eq!(again.replay.total(), 0);
}

#[cfg(feature = "durable")]
#[test]
fn a_message_whose_keys_record_does_not_decode_is_left_and_the_rest_replayed() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (a, b, c);
    {
        let (_engine, ns, dlq) = open(&dir, &clock);
        a = dlq.quarantine(b"a", b"v2:a", OUTAGE).unwrap();
        b = dlq.quarantine(b"b", b"v2:b", OUTAGE).unwrap();
        c = dlq.quarantine(b"c", b"v2:c", OUTAGE).unwrap();
        live_apply(&ns, &Ledger::default(), b"b");
        ns.debug_corrupt_record(b"b").unwrap();
    }
    // After a restart, only the durable tier knows b (and cannot read it).
    let (_engine, _ns, dlq) = open(&dir, &clock);
    for mode in [ReplayMode::DryRun, ReplayMode::Execute] {
        let r = replay_all(&dlq, &any_schema, mode);
        assert_eq!(r.replayed, vec![a, c], "{mode:?}");
        assert_eq!(r.unreadable_key, vec![b], "{mode:?}");
        assert!(r.notes[&b].starts_with("key-unreadable"), "{:?}", r.notes);
    }
    assert_eq!(dlq.get(b).unwrap().state(), MessageState::Quarantined);
}

#[cfg(feature = "durable")]
#[test]
fn a_replay_whose_sync_fails_after_its_write_lists_the_message_as_stored() {
    let (_dir, _clock, engine, _ns, dlq, id) = durable_with_a_letter(b"k");
    // The completion's write lands; the group commit's fsync after it fails.
    engine.debug_fail_syncs(true);
    let r = dlq.replay(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| Ok(()),
        ReplayMode::Execute,
    );
    engine.debug_fail_syncs(false);
    assert!(matches!(r, Err(Error::Store(_))), "{r:?}");
    // The letter on disk says replayed, and so do the listing and the health.
    assert_eq!(dlq.get(id).unwrap().state(), MessageState::Replayed);
    assert!(dlq.list(&Selection::default()).unwrap().is_empty());
    let h = dlq.health();
    assert_eq!((h.depth, h.replayed), (0, 1));
}

#[test]
fn overlapping_auto_replays_take_a_message_up_once_a_run() {
    let (_engine, _ns, dlq, clock) = memory();
    let from = clock_now(&clock);
    let id = dlq.quarantine(b"k", b"v2:k", OUTAGE).unwrap();
    clock.advance(secs(60));
    // A class and one of its sub-classes; the handler's failure keeps the message in
    // both.
    let policy = DlqPolicy::new()
        .auto_replay("downstream-unavailable", from, from + 3_600_000)
        .auto_replay(OUTAGE, from, from + 3_600_000);
    let calls = std::cell::Cell::new(0);
    let r = dlq
        .run_policies(&policy, &any_schema, |_: &[u8], _: &[u8]| {
            calls.set(calls.get() + 1);
            Err(format!("{OUTAGE} 503"))
        })
        .unwrap();
    assert_eq!(calls.get(), 1);
    assert_eq!(r.replay.failed, vec![id]);
    assert_eq!(r.replay.total(), 1);
    assert_eq!(dlq.get(id).unwrap().attempts(), 1);
}

/// A policy run's report keeps each list in id order, whatever the order of the
/// auto-replay entries that took the messages up.
#[test]
fn a_policy_runs_lists_are_in_id_order() {
    let (_engine, _ns, dlq, clock) = memory();
    let from = clock_now(&clock);
    let a = dlq.quarantine(b"a", b"v2:a", "timeout:x").unwrap();
    let b = dlq.quarantine(b"b", b"v2:b", OUTAGE).unwrap();
    clock.advance(secs(60));
    let policy = DlqPolicy::new()
        .auto_replay(OUTAGE, from, from + 3_600_000)
        .auto_replay("timeout", from, from + 3_600_000);
    let r = dlq
        .run_policies(&policy, &any_schema, |_: &[u8], _: &[u8]| Ok(()))
        .unwrap();
    assert_eq!(r.replay.replayed, vec![a, b]);
}

#[test]
fn a_message_taken_up_for_review_during_a_policy_run_is_left_to_its_reviewer() {
    let (_engine, _ns, dlq, clock) = memory();
    let from = clock_now(&clock);
    let a = dlq.quarantine(b"a", b"v2:a", OUTAGE).unwrap();
    let b = dlq.quarantine(b"b", b"v2:b", OUTAGE).unwrap();
    let c = dlq.quarantine(b"c", b"v2:c", OUTAGE).unwrap();
    clock.advance(secs(3600));
    let applied = RefCell::new(Vec::new());
    let r = dlq
        .run_policies(
            &DlqPolicy::new().auto_replay(OUTAGE, from, from + 3_600_000),
            &any_schema,
            |k: &[u8], _: &[u8]| {
                // An operator takes b up for review while a's handler runs.
                if k == b"a" {
                    dlq.review(b, "hold: checking this one by hand").unwrap();
                }
                applied.borrow_mut().push(k.to_vec());
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(r.replay.replayed, vec![a, c]);
    assert_eq!(r.replay.skipped_in_progress, vec![b]);
    assert_eq!(*applied.borrow(), vec![b"a".to_vec(), b"c".to_vec()]);
    assert_eq!(dlq.get(b).unwrap().state(), MessageState::UnderReview);
    // Nor does the auto-archive take it.
    let d = dlq.quarantine(b"d", b"v2:d", OUTAGE).unwrap();
    clock.advance(secs(3600));
    let r = dlq
        .run_policies(
            &DlqPolicy::new().archive_after(secs(60)),
            &any_schema,
            |_: &[u8], _: &[u8]| panic!("nothing to replay"),
        )
        .unwrap();
    assert_eq!(r.archived, vec![d]);
    assert_eq!(dlq.get(b).unwrap().state(), MessageState::UnderReview);
}

#[test]
fn the_auto_archive_takes_nothing_that_has_not_waited_its_time() {
    // A clock that reads less than the wait (a test clock near zero), and a wait
    // longer than any clock reading: nothing has waited that long.
    for (start, wait) in [(0, secs(3600)), (T0, std::time::Duration::MAX)] {
        let clock = ManualClock::new(start);
        let engine = Engine::builder()
            .namespace("ns", config())
            .clock(clock.clone())
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("ns").unwrap();
        let id = dlq.quarantine(b"k", b"v2:k", OUTAGE).unwrap();
        clock.advance(secs(60));
        let r = dlq
            .run_policies(
                &DlqPolicy::new().archive_after(wait),
                &any_schema,
                |_: &[u8], _: &[u8]| panic!("nothing to replay"),
            )
            .unwrap();
        assert!(r.archived.is_empty(), "{start}: {:?}", r.archived);
        assert_eq!(dlq.get(id).unwrap().state(), MessageState::Quarantined);
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use idem::Clock;
    clock.now_ms()
}

#[test]
fn health_reports_depth_age_success_rate_and_arrival_rates() {
    let (_engine, _ns, dlq, clock) = memory();
    let h = dlq.health();
    assert_eq!(
        (h.depth, h.oldest_age, h.replay_success_rate()),
        (0, None, None)
    );
    // Baseline: 4 arrivals over the 24 hours before the recent hour.
    for n in 0..4 {
        dlq.quarantine(format!("base-{n}").as_bytes(), b"p", OUTAGE)
            .unwrap();
        clock.advance(secs(6 * 3600));
    }
    clock.advance(secs(3600));
    // Recent hour: 12 arrivals (a spike).
    for i in 0..12u64 {
        dlq.quarantine(key(i).as_bytes(), b"p", OUTAGE).unwrap();
        clock.advance(secs(60));
    }
    let now = clock_now(&clock);
    assert_eq!(now, T0 + 25 * 3_600_000 + 12 * 60_000);
    let h = dlq.health_over(secs(3600), secs(24 * 3600)).unwrap();
    assert_eq!(h.depth, 16);
    assert_eq!(h.oldest_age, Some(ms(now - T0)));
    assert_eq!(h.arrivals_recent, 12);
    // The baseline window is (now - 25 h, now - 1 h]: it holds the arrivals at
    // T0 + 6 h, 12 h and 18 h, not the one at T0 (12 minutes before its start).
    assert_eq!(h.arrivals_baseline, 3);
    assert_eq!(h.arrival_rate_recent(), 12.0);
    assert_eq!(h.arrival_rate_baseline(), 3.0 / 24.0);
    assert_eq!(h.arrival_ratio(), Some(96.0));
    // Replays: one success, one failure; archivals are not replays.
    let first = dlq.list(&Selection::default().limit(3)).unwrap();
    execute(
        &dlq,
        &Selection::default().ids([first[0].id()]),
        |_: &[u8], _: &[u8]| Ok(()),
    );
    execute(
        &dlq,
        &Selection::default().ids([first[1].id()]),
        |_: &[u8], _: &[u8]| Err("boom".into()),
    );
    dlq.archive(first[2].id(), "test").unwrap();
    let h = dlq.health();
    assert_eq!(
        (h.depth, h.quarantined, h.replayed, h.archived),
        (14, 14, 1, 1)
    );
    assert_eq!((h.replay_successes, h.replay_failures), (1, 1));
    assert_eq!(h.replay_success_rate(), Some(0.5));
    // The oldest waiting message is now the one whose replay failed: back in
    // quarantine, it keeps its first quarantine time (T0 + 6 h).
    assert_eq!(h.oldest_age, Some(ms(now - (T0 + 6 * 3_600_000))));
}

#[cfg(feature = "durable")]
#[test]
fn ids_continue_after_a_restart_and_messages_keep_their_history() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (a, before) = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        let a = dlq.quarantine(b"a", b"pa", OUTAGE).unwrap();
        let b = dlq.quarantine(b"b", b"pb", OUTAGE).unwrap();
        dlq.review(b, "mine").unwrap();
        (a, everything(&dlq))
    };
    let (_engine, _ns, dlq) = open(&dir, &clock);
    assert_eq!(everything(&dlq), before);
    let c = dlq.quarantine(b"c", b"pc", OUTAGE).unwrap();
    assert_eq!(c.get(), a.get() + 2);
    assert_eq!(dlq.health().depth, 3);
}

#[cfg(feature = "durable")]
#[test]
fn replay_never_processes_a_key_done_before_a_restart_long_ago() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let id = {
        let (_engine, ns, dlq) = open(&dir, &clock);
        let id = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
        live_apply(&ns, &Ledger::default(), b"k");
        id
    };
    // The hot TTL (60 s) ran out long ago; retention (7 x TTL) has not.
    clock.advance(secs(300));
    let (_engine, _ns, dlq) = open(&dir, &clock);
    for mode in [ReplayMode::DryRun, ReplayMode::Execute] {
        let r = dlq
            .replay(
                &Selection::default(),
                &any_schema,
                |_: &[u8], _: &[u8]| panic!("the key is done"),
                mode,
            )
            .unwrap();
        assert_eq!(r.already_done, vec![id], "{mode:?}");
    }
}

#[test]
fn only_replayed_or_failed_messages_are_listed_as_transformed() {
    let (_engine, ns, dlq, _clock) = memory();
    let fresh = dlq.quarantine(b"fresh", b"v1:a", OUTAGE).unwrap();
    let done = dlq.quarantine(b"done", b"v1:b", OUTAGE).unwrap();
    acquire(&ns, b"done").complete().unwrap();
    let upgrade = |p: &[u8]| SchemaVerdict::Transform([b"v2:", &p[3..]].concat());
    for mode in [ReplayMode::DryRun, ReplayMode::Execute] {
        let r = replay_all(&dlq, &upgrade, mode);
        assert_eq!(r.replayed, vec![fresh], "{mode:?}");
        assert_eq!(r.already_done, vec![done], "{mode:?}");
        // Before, the done key's message was listed as transformed too.
        assert_eq!(r.transformed, vec![fresh], "{mode:?}");
    }
}

#[test]
fn a_handler_that_outlives_its_claim_is_recorded_as_applied_not_sent_back() {
    let (_engine, ns, dlq, clock) = memory();
    let slow = dlq.quarantine(b"slow", b"p", OUTAGE).unwrap();
    let taken = dlq.quarantine(b"taken", b"p", OUTAGE).unwrap();
    let mut applied = Vec::new();
    let mut other = None;
    let r = execute(&dlq, &Selection::default(), |key: &[u8], _: &[u8]| {
        applied.push(key.to_vec());
        // The handler takes longer than the lease (5 s).
        clock.advance(secs(6));
        if key == b"taken" {
            // Meanwhile a live redelivery claims the key.
            other = Some(acquire(&ns, key));
        }
        Ok(())
    });
    // Before, both went back to quarantine and the next replay applied them again.
    assert_eq!(r.replayed, vec![slow, taken], "{r:?}");
    assert!(r.failed.is_empty(), "{r:?}");
    assert!(ns.claim(b"slow").unwrap().is_duplicate());
    assert!(ns.claim(b"taken").unwrap().is_in_progress());
    assert!(r.notes[&taken].contains("held by another claim"), "{r:?}");
    for id in [slow, taken] {
        assert_eq!(dlq.get(id).unwrap().state(), MessageState::Replayed);
    }
    let again = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        panic!("nothing is left to apply")
    });
    assert!(
        again.replayed.is_empty() && again.failed.is_empty(),
        "{again:?}"
    );
    assert_eq!(applied.len(), 2);
    drop(other);
}

#[test]
fn a_handler_that_outlives_its_claim_is_recorded_as_applied_when_the_key_cannot_be_claimed_again() {
    // Room for one key: the handler's own claim takes it once the replay's lease has
    // run out, so the replay cannot claim its key again to complete it.
    let (engine, ns, clock) = engine_with(small().max_keys(1));
    let dlq = engine.dlq("ns").unwrap();
    let id = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let mut applied = 0;
    let mut other = None;
    let r = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        applied += 1;
        clock.advance(secs(6));
        other = Some(acquire(&ns, b"x"));
        Ok(())
    });
    assert_eq!(r.replayed, vec![id], "{r:?}");
    assert!(r.notes[&id].contains("not recorded as done"), "{r:?}");
    assert_eq!(dlq.get(id).unwrap().state(), MessageState::Replayed);
    drop(other);
    // Before, the letter stayed quarantined, and this replay applied it again.
    let again = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        panic!("nothing is left to apply")
    });
    assert_eq!(again.total(), 0, "{again:?}");
    assert_eq!(applied, 1);
}

/// A handler that outlives its claim's lease: the replay claims the key again and
/// completes it with the message's record in one write, which lands, and whose
/// grouped fsync fails. The key is done and the message replayed, and the report
/// says so (before, its note said the key was "not recorded as done", and the
/// replay tried to store the letter once more, over the one written).
#[cfg(feature = "durable")]
#[test]
fn a_claim_again_whose_fsync_fails_after_its_write_is_reported_as_done() {
    let (dir, clock, engine, ns, dlq, id) = durable_with_a_letter(b"k");
    let mut applied = 0;
    let r = dlq.replay(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| {
            applied += 1;
            // Past the lease (5 s); from here every fsync the engine asks for fails.
            clock.advance(secs(6));
            engine.debug_fail_syncs(true);
            Ok(())
        },
        ReplayMode::Execute,
    );
    engine.debug_fail_syncs(false);
    let r = r.expect("the message is recorded as replayed: the report comes back");
    assert_eq!(r.replayed, vec![id], "{r:?}");
    let note = &r.notes[&id];
    assert!(!note.contains("not recorded as done"), "{note}");
    assert!(note.contains("claimed again and completed"), "{note}");
    assert!(note.contains("fsync"), "{note}");
    // As the note says: the key is done, the message replayed.
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    assert_eq!(dlq.get(id).unwrap().state(), MessageState::Replayed);
    assert_eq!(
        dlq.get(id).unwrap().replay_outcome(),
        Some(ReplayOutcome::Applied)
    );
    // Written (a process that goes on, or restarts, reads both): after a restart the
    // key is done on disk and nothing is applied again.
    drop((dlq, ns, engine));
    let (_engine, ns, dlq) = open(&dir, &clock);
    assert!(ns.claim(b"k").unwrap().is_duplicate());
    assert_eq!(dlq.get(id).unwrap().state(), MessageState::Replayed);
    let again = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        panic!("nothing is left to apply")
    });
    assert_eq!(again.total(), 0, "{again:?}");
    assert_eq!(applied, 1);
}

/// A clock that moves on by `step` at every reading while `racing` is set: every
/// claim's lease has run out by its completion.
#[derive(Clone)]
struct Racing {
    inner: ManualClock,
    step: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl idem::Clock for Racing {
    fn now_ms(&self) -> u64 {
        let step = self.step.load(std::sync::atomic::Ordering::SeqCst);
        self.inner.advance(std::time::Duration::from_millis(step));
        self.inner.now_ms()
    }
}

#[test]
fn a_handler_applied_once_is_recorded_as_applied_when_the_claim_that_completes_it_loses_its_lease_too(
) {
    let clock = Racing {
        inner: ManualClock::new(T0),
        step: Default::default(),
    };
    let engine = Engine::builder()
        .namespace("ns", small())
        .clock(clock.clone())
        .maintenance_interval(None)
        .build()
        .unwrap();
    let dlq = engine.dlq("ns").unwrap();
    let first = dlq.quarantine(b"k", b"p", OUTAGE).unwrap();
    let second = dlq.quarantine(b"j", b"p", OUTAGE).unwrap();
    let mut applied = Vec::new();
    let r = execute(&dlq, &Selection::default(), |key: &[u8], _: &[u8]| {
        applied.push(key.to_vec());
        // From here on, every reading is 6 s past the one before (the lease is
        // 5 s): the replay's claim, and the one that would complete it, run out.
        clock.step.store(6_000, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    });
    // Before, the replay stopped with `LeaseLost`: the first message stayed
    // quarantined (the next replay applied it again) and the second was not reached.
    assert_eq!(r.replayed, vec![first, second], "{r:?}");
    assert!(r.notes[&first].contains("not recorded as done"), "{r:?}");
    assert_eq!(dlq.get(first).unwrap().state(), MessageState::Replayed);
    clock.step.store(0, std::sync::atomic::Ordering::SeqCst);
    let again = execute(&dlq, &Selection::default(), |_: &[u8], _: &[u8]| {
        panic!("nothing is left to apply")
    });
    assert_eq!(again.total(), 0, "{again:?}");
    assert_eq!(applied, [b"k".to_vec(), b"j".to_vec()]);
}

#[test]
fn a_handler_with_no_verdict_leaves_its_message_as_it_was_and_stops_the_replay() {
    let (_engine, ns, dlq, _clock) = memory();
    let ids: Vec<_> = [b"a", b"b", b"c"]
        .iter()
        .map(|k| dlq.quarantine(*k, b"p", OUTAGE).unwrap())
        .collect();
    let before = dlq.get(ids[1]).unwrap();
    let mut seen = Vec::new();
    let r = dlq
        .replay_with(
            &Selection::default(),
            &any_schema,
            |key: &[u8], _: &[u8]| {
                seen.push(key.to_vec());
                match key {
                    b"b" => Err(HandlerFailure::NoVerdict("could not start".to_owned())),
                    _ => Ok(()),
                }
            },
            ReplayMode::Execute,
        )
        .unwrap();
    assert_eq!(r.replayed, [ids[0]], "{r:?}");
    assert_eq!(r.stopped, Some((ids[1], "could not start".to_owned())));
    assert!(r.failed.is_empty(), "{r:?}");
    assert_eq!(seen, [b"a".to_vec(), b"b".to_vec()], "stopped before c");
    // b exactly as it was (no attempt, same reason and history), its key free.
    assert_eq!(dlq.get(ids[1]).unwrap(), before);
    assert!(ns.claim(b"b").unwrap().is_acquired());
    assert_eq!(dlq.get(ids[2]).unwrap().state(), MessageState::Quarantined);
    // A failure the handler reports as one still sends its message back.
    let r = dlq
        .replay_with(
            &Selection::default().ids([ids[2]]),
            &any_schema,
            |_: &[u8], _: &[u8]| Err(HandlerFailure::Failed("downstream-unavailable:x".into())),
            ReplayMode::Execute,
        )
        .unwrap();
    assert_eq!((r.failed, r.stopped), (vec![ids[2]], None));
    assert_eq!(dlq.get(ids[2]).unwrap().attempts(), 1);
}

#[test]
fn a_replays_limit_counts_the_messages_it_can_replay() {
    let (_engine, _ns, dlq, _clock) = memory();
    let ids: Vec<_> = [b"a", b"b", b"c"]
        .iter()
        .map(|k| dlq.quarantine(*k, b"p", OUTAGE).unwrap())
        .collect();
    let replay = |sel: &Selection| execute(&dlq, sel, |_: &[u8], _: &[u8]| Ok(()));
    assert_eq!(
        replay(&Selection::default().ids([ids[0]])).replayed,
        [ids[0]]
    );
    // Before, the limit took the oldest message, replayed already, and the replay
    // did nothing.
    let r = replay(&Selection::all().limit(1));
    assert_eq!(r.replayed, [ids[1]], "{r:?}");
    let r = replay(&Selection::all().limit(5));
    assert_eq!(r.replayed, [ids[2]], "{r:?}");
}

#[test]
fn a_message_archived_by_an_earlier_handler_of_the_same_replay_is_in_its_report() {
    let (_engine, _ns, dlq, _clock) = memory();
    let first = dlq.quarantine(b"a", b"p", OUTAGE).unwrap();
    let second = dlq.quarantine(b"b", b"p", OUTAGE).unwrap();
    let r = execute(&dlq, &Selection::default(), |key: &[u8], _: &[u8]| {
        assert_eq!(key, b"a", "the archived message is not handled");
        dlq.archive(second, "manual").unwrap();
        Ok(())
    });
    assert_eq!(r.replayed, vec![first], "{r:?}");
    // Before, it was in no list: the report covered one message of two.
    assert_eq!(r.skipped_in_progress, vec![second], "{r:?}");
    assert_eq!(r.total(), 2);
    assert!(r.notes[&second].contains("archived"), "{r:?}");
    assert_eq!(dlq.get(second).unwrap().state(), MessageState::Archived);
}

#[cfg(feature = "durable")]
#[test]
fn a_store_failure_leaves_every_message_as_it_was() {
    let (_dir, _clock, engine, ns, dlq, id) = durable_with_a_letter(b"k");
    let before = everything(&dlq);
    engine.debug_fail_store_writes(true);
    assert!(matches!(
        dlq.quarantine(b"k2", b"p", OUTAGE),
        Err(Error::Store(_))
    ));
    assert!(matches!(dlq.archive(id, "x"), Err(Error::Store(_))));
    // The claim's marker goes to the journal (no store write), so the handler runs;
    // the completion's write fails: nothing changed.
    let calls = std::cell::Cell::new(0);
    let err = replay_counting(&dlq, &calls).unwrap_err();
    assert!(matches!(err, Error::Store(_)));
    // (Without Linux there is no journal: the marker's write refuses the claim.)
    assert_eq!(calls.get(), usize::from(cfg!(target_os = "linux")));
    assert_eq!(everything(&dlq), before);
    assert_eq!(ns.check(b"k").unwrap(), None);
    engine.debug_fail_store_writes(false);
    // The completion write fails after the handler ran: the key is not done and the
    // message is still quarantined (one atomic write for both).
    let fail_now = || engine.debug_fail_store_writes(true);
    let err = dlq
        .replay(
            &Selection::default(),
            &any_schema,
            |_: &[u8], _: &[u8]| {
                fail_now();
                Ok(())
            },
            ReplayMode::Execute,
        )
        .unwrap_err();
    assert!(matches!(err, Error::Store(_)));
    engine.debug_fail_store_writes(false);
    assert_eq!(everything(&dlq), before);
    assert_eq!(ns.check(b"k").unwrap(), None);
    let next = dlq.quarantine(b"k2", b"p", OUTAGE).unwrap();
    assert_eq!(
        next.get(),
        id.get() + 1,
        "the refused quarantine took no id"
    );
}

/// Runs `f` on the database in `dir` opened with RocksDB directly (no engine), and the
/// dead letters' column family of namespace "ns": damage done at rest.
#[cfg(feature = "durable")]
fn raw_dlq(dir: &TempDir, f: &dyn Fn(&rocksdb::DB, &rocksdb::ColumnFamily)) {
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, dir.path()).unwrap();
    let db = rocksdb::DB::open_cf(&opts, dir.path(), &cfs).unwrap();
    f(&db, db.cf_handle("dlq:ns").unwrap());
}

#[cfg(feature = "durable")]
#[test]
fn an_id_counter_at_its_end_refuses_new_messages_instead_of_wrapping_round() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let a = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        dlq.quarantine(b"a", b"p", OUTAGE).unwrap()
    };
    raw_dlq(&dir, &|db, cf| {
        db.put_cf(cf, b"next", u64::MAX.to_le_bytes()).unwrap()
    });
    let (_engine, _ns, dlq) = open(&dir, &clock);
    let before = everything(&dlq);
    let err = dlq.quarantine(b"b", b"p", OUTAGE).unwrap_err();
    assert!(
        matches!(&err, Error::CorruptDeadLetter { id: None, .. }),
        "{err:?}"
    );
    assert_eq!(everything(&dlq), before);
    assert_eq!(dlq.get(a).unwrap().key(), b"a");
}

#[cfg(feature = "durable")]
#[test]
fn a_corrupt_dead_letter_is_reported_and_the_others_are_served() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (a, b) = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        (
            dlq.quarantine(b"a", b"p", OUTAGE).unwrap(),
            dlq.quarantine(b"b", b"p", OUTAGE).unwrap(),
        )
    };
    {
        let opts = rocksdb::Options::default();
        let cfs = rocksdb::DB::list_cf(&opts, dir.path()).unwrap();
        assert!(cfs.iter().any(|c| c == "dlq:ns"), "{cfs:?}");
        let db = rocksdb::DB::open_cf(&opts, dir.path(), &cfs).unwrap();
        let cf = db.cf_handle("dlq:ns").unwrap();
        let mut k = vec![b'm'];
        k.extend_from_slice(&b.get().to_be_bytes());
        db.put_cf(cf, k, b"\x01\x09garbage").unwrap();
    }
    let (_engine, _ns, dlq) = open(&dir, &clock);
    assert!(matches!(
        dlq.get(b),
        Err(Error::CorruptDeadLetter { id: Some(id), .. }) if id == b
    ));
    assert_eq!(dlq.get(a).unwrap().state(), MessageState::Quarantined);
    assert_eq!(ids(&everything(&dlq)), vec![a]);
    assert_eq!(dlq.health().corrupt, 1);
    assert!(matches!(
        dlq.archive(b, "x"),
        Err(Error::CorruptDeadLetter { .. })
    ));
    // A new message never takes the corrupt one's id.
    assert_eq!(
        dlq.quarantine(b"c", b"p", OUTAGE).unwrap().get(),
        b.get() + 1
    );
}

/// A key in the letters' range that is not a letter's (damaged: no id can be read
/// from it) is counted as corrupt and left in place, alike by the engine and by a
/// read-only open (short keys that sort before letter 0's included); the letters
/// are served.
#[cfg(feature = "durable")]
#[test]
fn a_damaged_dead_letter_key_is_counted_and_the_letters_are_served() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let a = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        dlq.quarantine(b"a", b"p", OUTAGE).unwrap()
    };
    let damaged: [&[u8]; 4] = [
        b"m",
        b"m\x00",
        b"m\x01",
        b"m\x00\x00\x00\x00\x00\x00\x00\x00\x07",
    ];
    let raw = |f: &dyn Fn(&rocksdb::DB, &rocksdb::ColumnFamily)| raw_dlq(&dir, f);
    raw(&|db, cf| {
        for k in damaged {
            db.put_cf(cf, k, b"junk").unwrap();
        }
    });
    {
        let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
        assert_eq!(ids(&everything(&ro)), vec![a]);
        assert_eq!(ro.health().corrupt, 4);
    }
    {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        assert_eq!(ids(&everything(&dlq)), vec![a]);
        assert_eq!(dlq.get(a).unwrap().key(), b"a");
        assert_eq!(dlq.health().corrupt, 4);
        let b = dlq.quarantine(b"b", b"p", OUTAGE).unwrap();
        assert_eq!(ids(&everything(&dlq)), vec![a, b]);
    }
    // Never dropped.
    raw(&|db, cf| {
        for k in damaged {
            assert_eq!(db.get_cf(cf, k).unwrap().as_deref(), Some(&b"junk"[..]));
        }
    });
}

/// Every key of the dead-letter store that is neither a letter's nor the id counter
/// is damaged and counted, wherever it sorts: before the letters (a letter whose tag
/// byte was damaged, the empty key), between them and the counter, or after it.
/// Before, only the letters' prefix was scanned, and a key sorting between the
/// letters and the counter also hid a damaged counter from the count.
#[cfg(feature = "durable")]
#[test]
fn a_damaged_key_outside_the_letters_prefix_is_counted_too() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let a = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        dlq.quarantine(b"a", b"p", OUTAGE).unwrap()
    };
    let damaged: [&[u8]; 6] = [
        b"",
        b"l\x00\x00\x00\x00\x00\x00\x00\x05",
        b"n",
        b"nexs",
        b"nextt",
        b"\xff",
    ];
    let raw = |f: &dyn Fn(&rocksdb::DB, &rocksdb::ColumnFamily)| raw_dlq(&dir, f);
    raw(&|db, cf| {
        for k in damaged {
            db.put_cf(cf, k, b"junk").unwrap();
        }
        db.put_cf(cf, b"next", b"xyz").unwrap();
    });
    // The six keys and the damaged counter.
    {
        let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
        assert_eq!(ids(&everything(&ro)), vec![a]);
        assert_eq!(ro.health().corrupt, 7);
    }
    {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        assert_eq!(ids(&everything(&dlq)), vec![a]);
        assert_eq!(dlq.health().corrupt, 7);
        let b = dlq.quarantine(b"b", b"p", OUTAGE).unwrap();
        assert_eq!(b.get(), a.get() + 1);
        assert_eq!(dlq.health().corrupt, 6, "the counter was written again");
    }
    {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        assert_eq!(dlq.health().corrupt, 6);
    }
    // Never dropped.
    raw(&|db, cf| {
        for k in damaged {
            assert_eq!(db.get_cf(cf, k).unwrap().as_deref(), Some(&b"junk"[..]));
        }
    });
}

/// A damaged id counter does not close the dead-letter store: it is counted as a
/// damaged key, ids go on after the letters' own, and the next quarantine writes the
/// counter again.
#[cfg(feature = "durable")]
#[test]
fn a_damaged_id_counter_is_counted_and_ids_go_on_after_the_letters() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (a, b) = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        let a = dlq.quarantine(b"a", b"p", OUTAGE).unwrap();
        (a, dlq.quarantine(b"b", b"p", OUTAGE).unwrap())
    };
    let raw = |f: &dyn Fn(&rocksdb::DB, &rocksdb::ColumnFamily)| raw_dlq(&dir, f);
    raw(&|db, cf| db.put_cf(cf, b"next", b"xyz").unwrap());
    {
        let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
        assert_eq!(ids(&everything(&ro)), vec![a, b]);
        assert_eq!(ro.health().corrupt, 1);
    }
    let c = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        assert_eq!(ids(&everything(&dlq)), vec![a, b]);
        assert_eq!(dlq.health().corrupt, 1);
        let c = dlq.quarantine(b"c", b"p", OUTAGE).unwrap();
        assert_eq!(c.get(), b.get() + 1);
        c
    };
    let (_engine, _ns, dlq) = open(&dir, &clock);
    assert_eq!(ids(&everything(&dlq)), vec![a, b, c]);
    assert_eq!(dlq.health().corrupt, 0, "the counter was written again");
}

/// Under `SyncPolicy::Periodic` the sync thread stops with the engine: a dead letter
/// quarantined afterwards, through a handle that outlived it, is fsynced itself
/// (here the sync fails, and the quarantine says so).
#[cfg(feature = "durable")]
#[test]
fn a_dead_letter_after_the_engine_is_dropped_is_synced_under_periodic() {
    let dir = TempDir::new();
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::builder()
        .namespace(
            "ns",
            config().sync(idem::SyncPolicy::Periodic(std::time::Duration::from_secs(
                3_600,
            ))),
        )
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
        .build()
        .unwrap();
    let dlq = engine.dlq("ns").unwrap();
    engine.debug_fail_syncs(true);
    // While the engine runs, the write leaves the sync to its thread.
    dlq.quarantine(b"before", b"p", OUTAGE).unwrap();
    drop(engine);
    let r = dlq.quarantine(b"after", b"p", OUTAGE);
    assert!(matches!(r, Err(Error::Store(_))), "{r:?}");
}

/// `Dlq::open_read_only`: beside an engine that holds the database, the store reads
/// as the engine's does, a dry run looks keys up in the database as of its clock (a
/// claim marker past its lease and a done record past its retention no longer
/// count), and every change is refused with nothing written.
#[cfg(feature = "durable")]
#[test]
fn a_store_opened_read_only_reads_dry_runs_and_refuses_every_change() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (_engine, ns, dlq) = open(&dir, &clock);
    let [a, b, c] = [b"a", b"b", b"c"].map(|k| dlq.quarantine(k, b"p", OUTAGE).unwrap());
    dlq.review(c, "looking-at-it").unwrap();
    acquire(&ns, b"a").complete().unwrap();
    let _held = acquire(&ns, b"b");
    let before = everything(&dlq);

    let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
    assert!(ro.is_read_only() && ro.is_durable() && !dlq.is_read_only());
    assert_eq!(ro.namespace(), "ns");
    assert_eq!(everything(&ro), before);
    assert_eq!(ro.get(c).unwrap(), dlq.get(c).unwrap());
    assert_eq!(ro.health(), dlq.health());

    let dry = |d: &Dlq| {
        d.replay(
            &Selection::all(),
            &any_schema,
            |_: &[u8], _: &[u8]| panic!("a dry run calls no handler"),
            ReplayMode::DryRun,
        )
        .unwrap()
    };
    let r = dry(&ro);
    assert_eq!(
        (r.already_done, r.skipped_in_progress, r.replayed),
        (vec![a], vec![b], vec![c])
    );
    assert_eq!(dry(&ro), dry(&dlq));
    // Past b's lease (5 s), then past a's retention (7 x the 60 s TTL).
    clock.advance(secs(6));
    let r = dry(&ro);
    assert_eq!((r.already_done, r.replayed), (vec![a], vec![b, c]));
    clock.advance(secs(7 * 60));
    assert_eq!(dry(&ro).replayed, vec![a, b, c]);

    let handler = |_: &[u8], _: &[u8]| -> Result<(), String> { panic!("nothing runs") };
    let refusals = [
        ro.quarantine(b"d", b"p", OUTAGE).map(drop),
        ro.review(a, "x"),
        ro.archive(a, "x"),
        ro.replay(&Selection::all(), &any_schema, handler, ReplayMode::Execute)
            .map(drop),
        ro.run_policies(&DlqPolicy::new(), &any_schema, handler)
            .map(drop),
    ];
    for r in refusals {
        assert!(
            matches!(&r, Err(Error::Store(e)) if e.detail().contains("read-only")),
            "{r:?}"
        );
    }
    assert_eq!(everything(&ro), before);
    assert_eq!(everything(&dlq), before);
    assert!(matches!(
        Dlq::open_read_only(dir.path(), "other", clock.clone()),
        Err(Error::UnknownNamespace(n)) if n == "other"
    ));
}

#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_read_only_dry_run_takes_a_damaged_claim_marker_as_no_claim() {
    let (dir, clock, engine, ns, dlq, b) = durable_with_a_letter(b"b");
    let held = acquire(&ns, b"b");
    engine.debug_keep_journal_markers(true);
    drop(held);
    drop((dlq, ns, engine));
    // The claim's journal slot (the first, after the 64-byte header) damaged: an
    // engine would report it as a corrupt orphan, holding nothing.
    let file = dir.path().join(format!(
        "idem-journal-{:016x}.bin",
        xxhash_rust::xxh3::xxh3_64(b"ns")
    ));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[64 + 16] ^= 0x10;
    std::fs::write(&file, &bytes).unwrap();
    let ro = Dlq::open_read_only(dir.path(), "ns", clock.clone()).unwrap();
    // Before, the dry run failed with the marker's CorruptRecord.
    let r = ro
        .replay(
            &Selection::all(),
            &any_schema,
            |_: &[u8], _: &[u8]| -> Result<(), String> { panic!("a dry run calls no handler") },
            ReplayMode::DryRun,
        )
        .unwrap();
    assert_eq!((r.replayed, r.skipped_in_progress), (vec![b], vec![]));
}

/// A replay never decides from the hot tier alone: in a namespace that fails open,
/// a key done on disk whose read fails (after a restart, the hot tier does not know
/// it) is not applied again; the replay returns the store's error and the message
/// stays as it was.
#[cfg(feature = "durable")]
#[test]
fn a_replay_in_a_fail_open_namespace_never_applies_a_key_done_on_disk_again() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let build = || {
        Engine::builder()
            .namespace("ns", config().on_store_error(idem::FailurePolicy::FailOpen))
            .clock(clock.clone())
            .maintenance_interval(None)
            .durable(dir.path())
            .build()
            .unwrap()
    };
    {
        let engine = build();
        let ns = engine.namespace("ns").unwrap();
        acquire(&ns, b"k").complete().unwrap(); // applied on the live path
        engine
            .dlq("ns")
            .unwrap()
            .quarantine(b"k", b"v2:k", OUTAGE)
            .unwrap();
    }
    let engine = build(); // restarted: the hot tier no longer knows k
    let dlq = engine.dlq("ns").unwrap();
    let replay = replay_counting;
    let calls = std::cell::Cell::new(0);
    engine.debug_fail_store_reads(true);
    let r = replay(&dlq, &calls);
    engine.debug_fail_store_reads(false);
    assert_eq!(
        calls.get(),
        0,
        "a key done on disk was applied again: {r:?}"
    );
    assert!(matches!(r, Err(idem::Error::Store(_))), "{r:?}");
    // Once the disk reads again, the same replay finds the key done.
    let r = replay(&dlq, &calls).unwrap();
    assert_eq!(calls.get(), 0);
    assert_eq!(r.already_done.len(), 1, "{r:?}");
}

/// A durable engine in `dir` whose namespace fails open, with room for `max_keys`.
#[cfg(feature = "durable")]
fn open_failing_open(
    dir: &TempDir,
    clock: &ManualClock,
    max_keys: usize,
) -> (Engine, Namespace, Dlq) {
    let cfg = small()
        .max_keys(max_keys)
        .on_store_error(idem::FailurePolicy::FailOpen);
    open_with(dir, clock, cfg)
}

/// A replay whose handler outlived its lease claims the key again to record the
/// completion; that claim reads failing closed too. Here the live consumer took the
/// key over meanwhile (another payload, a result), the full hot tier let the done key
/// go (it is durable) and the durable read fails: the live consumer's record stays,
/// and its redelivery answers its own result.
#[cfg(feature = "durable")]
#[test]
fn a_replays_claim_after_its_lease_ran_out_reads_failing_closed_too() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns, dlq) = open_failing_open(&dir, &clock, 1);
    let id = dlq.quarantine(b"k", b"P", OUTAGE).unwrap();
    let mut applied = 0;
    let r = dlq.replay(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| {
            applied += 1;
            clock.advance(secs(6)); // past the lease (5 s)
            match ns.claim_with_payload(b"k", b"Q").unwrap() {
                Claim::Acquired(g) => g.complete_with_result(b"live").unwrap(),
                other => panic!("{other:?}"),
            }
            // Another key: the full hot tier drops done k (durable).
            acquire(&ns, b"x").complete().unwrap();
            engine.debug_fail_store_reads(true);
            Ok(())
        },
        ReplayMode::Execute,
    );
    engine.debug_fail_store_reads(false);
    let r = r.unwrap();
    assert_eq!(applied, 1);
    assert_eq!(r.replayed, vec![id], "{r:?}");
    assert_eq!(dlq.get(id).unwrap().state(), MessageState::Replayed);
    let redelivered = ns.claim_with_payload(b"k", b"Q");
    assert!(
        matches!(&redelivered, Ok(Claim::Duplicate(d)) if d.result() == Some(&b"live"[..])),
        "the live consumer's record was written over: {redelivered:?}; note: {}",
        r.notes[&id]
    );
}

/// A dry run reads as the replay would: failing closed. In a namespace that fails
/// open, a key done on disk only (after a restart) whose read fails is not predicted
/// as replayed: the dry run stops with the store's error, as the replay does.
#[cfg(feature = "durable")]
#[test]
fn a_dry_run_in_a_fail_open_namespace_reads_failing_closed() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, ns, dlq) = open_failing_open(&dir, &clock, 100_000);
        acquire(&ns, b"k").complete().unwrap(); // applied on the live path
        dlq.quarantine(b"k", b"v2:k", OUTAGE).unwrap();
    }
    let (engine, _ns, dlq) = open_failing_open(&dir, &clock, 100_000);
    engine.debug_fail_store_reads(true);
    let dry = dlq.replay(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| Ok(()),
        ReplayMode::DryRun,
    );
    let executed = dlq.replay(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| panic!("applied again"),
        ReplayMode::Execute,
    );
    engine.debug_fail_store_reads(false);
    assert!(matches!(executed, Err(Error::Store(_))), "{executed:?}");
    assert!(matches!(&dry, Err(Error::Store(_))), "{dry:?}");
    // Once the disk reads again, both find the key done.
    let dry = replay_all(&dlq, &any_schema, ReplayMode::DryRun);
    assert_eq!(dry.already_done.len(), 1, "{dry:?}");
}

/// A damaged id counter counts as corrupt in `health` until a quarantine writes it
/// again, in the process that wrote it as after a reopen.
#[cfg(feature = "durable")]
#[test]
fn health_stops_counting_a_damaged_counter_once_a_quarantine_rewrites_it() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        dlq.quarantine(b"a", b"p", OUTAGE).unwrap();
    }
    raw_dlq(&dir, &|db, cf| db.put_cf(cf, b"next", b"xyz").unwrap());
    let in_process = {
        let (_engine, _ns, dlq) = open(&dir, &clock);
        assert_eq!(dlq.health().corrupt, 1, "the damaged counter");
        dlq.quarantine(b"b", b"p", OUTAGE).unwrap();
        dlq.health().corrupt
    };
    let (_engine, _ns, dlq) = open(&dir, &clock);
    assert_eq!((in_process, dlq.health().corrupt), (0, 0));
}

/// Replays every quarantined message of `dlq` with a handler that counts its calls
/// in `calls` and succeeds.
#[cfg(feature = "durable")]
fn replay_counting(
    dlq: &idem::Dlq,
    calls: &std::cell::Cell<usize>,
) -> idem::Result<idem::ReplayReport> {
    dlq.replay(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| {
            calls.set(calls.get() + 1);
            Ok(())
        },
        ReplayMode::Execute,
    )
}

/// The report and the error of a call that an error stopped part-way.
#[cfg(feature = "durable")]
fn interrupted<R: std::fmt::Debug>(r: Result<R, idem::Interrupted<R>>) -> (R, Error) {
    match r {
        Ok(r) => panic!("the call ran to its end: {r:?}"),
        Err(idem::Interrupted { report, error, .. }) => (report, error),
    }
}

/// Each message of `ids` as stored now, and as a fresh open of the store reads it.
#[cfg(feature = "durable")]
fn stored(dlq: &Dlq, ids: &[MessageId]) -> Vec<DeadLetter> {
    ids.iter().map(|id| dlq.get(*id).unwrap()).collect()
}

/// A store error part-way through a replay: the partial report lists exactly the
/// messages whose state the replay changed before it, each in the list of its
/// outcome, and the stored letters agree with it (also after a restart); the message
/// at hand and the ones after it are as they were and in no list.
#[cfg(feature = "durable")]
#[test]
fn a_replay_stopped_by_a_store_error_reports_the_messages_it_changed_before_it() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, ns, dlq) = open(&dir, &clock);
    let q = |k: &[u8], p: &[u8]| dlq.quarantine(k, p, OUTAGE).unwrap();
    let replayed = q(b"a", b"v2:a");
    let archived = q(b"b", b"v1:b");
    let done = q(b"c", b"v2:c");
    let failed = q(b"d", b"v2:d");
    let at_hand = q(b"e", b"v2:e");
    let after = q(b"f", b"v2:f");
    live_apply(&ns, &Ledger::default(), b"c");
    let before = stored(&dlq, &[at_hand, after]);
    let mut handled = Vec::new();
    let r = dlq.replay_partial(
        &Selection::default(),
        &schema_v2,
        |key: &[u8], _: &[u8]| {
            handled.push(key.to_vec());
            match key {
                b"d" => Err(format!("{OUTAGE} 503")),
                // The handler applies e, then the disk refuses every write: e's
                // completion (and its letter, in the same write) is not stored.
                b"e" => {
                    engine.debug_fail_store_writes(true);
                    Ok(())
                }
                _ => Ok(()),
            }
        },
        ReplayMode::Execute,
    );
    engine.debug_fail_store_writes(false);
    let (report, error) = interrupted(r);
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert_eq!(handled, [b"a".to_vec(), b"d".to_vec(), b"e".to_vec()]);
    assert_eq!(report.mode, ReplayMode::Execute);
    assert_eq!(report.replayed, [replayed], "{report:?}");
    assert_eq!(report.archived, [archived], "{report:?}");
    assert_eq!(report.already_done, [done], "{report:?}");
    assert_eq!(report.failed, [failed], "{report:?}");
    assert_eq!(report.total(), 4, "nothing else: {report:?}");
    assert_eq!(report.stopped, None);
    assert!(report.notes[&archived].starts_with("schema-incompatible"));
    assert_eq!(report.notes[&failed], format!("{OUTAGE} 503"));
    assert!(!report.notes.contains_key(&at_hand), "{report:?}");
    // The store agrees, in this process and after a restart.
    let check = |dlq: &Dlq, ns: &Namespace| {
        let a = dlq.get(replayed).unwrap();
        assert_eq!(a.replay_outcome(), Some(ReplayOutcome::Applied));
        assert_eq!(dlq.get(archived).unwrap().state(), MessageState::Archived);
        let c = dlq.get(done).unwrap();
        assert_eq!(c.replay_outcome(), Some(ReplayOutcome::AlreadyDone));
        let d = dlq.get(failed).unwrap();
        assert_eq!((d.state(), d.attempts()), (MessageState::Quarantined, 1));
        assert_eq!(stored(dlq, &[at_hand, after]), before);
        assert!(matches!(
            ns.check(b"a").unwrap(),
            Some(KeyState::Done { .. })
        ));
        assert_eq!(ns.check(b"e").unwrap(), None);
        // The messages the report lists are exactly those no longer as quarantined.
        let untouched: Vec<MessageId> = everything(dlq)
            .iter()
            .filter(|m| m.history().len() == 1)
            .map(DeadLetter::id)
            .collect();
        assert_eq!(untouched, [at_hand, after]);
    };
    check(&dlq, &ns);
    drop((dlq, ns, engine));
    let (_engine, ns, dlq) = open(&dir, &clock);
    check(&dlq, &ns);
}

/// A replay whose completion's write lands and whose fsync then fails lists that
/// message as replayed with the error (it is stored so), and none after it.
#[cfg(feature = "durable")]
#[test]
fn a_replay_whose_fsync_fails_reports_the_message_written_before_the_error() {
    let (_dir, _clock, engine, ns, dlq, first) = durable_with_a_letter(b"k");
    let second = dlq.quarantine(b"j", b"v2:j", OUTAGE).unwrap();
    let before = dlq.get(second).unwrap();
    engine.debug_fail_syncs(true);
    let r = dlq.replay_partial(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| Ok(()),
        ReplayMode::Execute,
    );
    engine.debug_fail_syncs(false);
    let (report, error) = interrupted(r);
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert_eq!(report.replayed, [first], "{report:?}");
    assert_eq!(report.total(), 1, "{report:?}");
    assert_eq!(dlq.get(first).unwrap().state(), MessageState::Replayed);
    assert!(matches!(
        ns.check(b"k").unwrap(),
        Some(KeyState::Done { .. })
    ));
    assert_eq!(dlq.get(second).unwrap(), before);
    assert_eq!(ns.check(b"j").unwrap(), None);
}

/// A letter's write refused as its sync would fail (`Periodic`, the engine dropped:
/// each write syncs itself) changes nothing, and the partial report does not list its
/// message: neither the schema check's archival nor the auto-archive's.
#[cfg(feature = "durable")]
#[test]
fn a_letter_write_refused_is_not_in_the_partial_report() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let engine = Engine::builder()
        .namespace("ns", config().sync(idem::SyncPolicy::Periodic(secs(3_600))))
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir.path())
        .build()
        .unwrap();
    let dlq = engine.dlq("ns").unwrap();
    let old = dlq.quarantine(b"o", b"v2:o", OUTAGE).unwrap();
    clock.advance(secs(7_200));
    let v1 = dlq.quarantine(b"a", b"v1:a", OUTAGE).unwrap();
    let v2 = dlq.quarantine(b"b", b"v2:b", OUTAGE).unwrap();
    engine.debug_fail_syncs(true);
    drop(engine);
    let before = stored(&dlq, &[old, v1, v2]);
    let (report, error) = interrupted(dlq.replay_partial(
        &Selection::default().ids([v1, v2]),
        &schema_v2,
        |_: &[u8], _: &[u8]| panic!("the replay stops at the first message"),
        ReplayMode::Execute,
    ));
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert_eq!(report.total(), 0, "{report:?}");
    assert!(report.notes.is_empty(), "{report:?}");
    let (report, error) = interrupted(dlq.run_policies_partial(
        &DlqPolicy::new().archive_after(secs(3_600)),
        &any_schema,
        |_: &[u8], _: &[u8]| panic!("nothing to replay"),
    ));
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert!(report.archived.is_empty(), "{report:?}");
    assert_eq!(report.replay.total(), 0, "{report:?}");
    assert_eq!(stored(&dlq, &[old, v1, v2]), before);
}

/// A store error in a policy run's auto-replay: the partial report holds the
/// retention's archivals and the replays before the error, and the store agrees.
#[cfg(feature = "durable")]
#[test]
fn a_policy_run_stopped_by_a_store_error_reports_what_it_changed_before_it() {
    let (_dir, clock, engine, ns, dlq, expired) = durable_with_a_letter(b"x");
    clock.advance(secs(7_200));
    let from = clock_now(&clock);
    let a = dlq.quarantine(b"a", b"v2:a", OUTAGE).unwrap();
    let b = dlq.quarantine(b"b", b"v2:b", OUTAGE).unwrap();
    let c = dlq.quarantine(b"c", b"v2:c", OUTAGE).unwrap();
    let before = stored(&dlq, &[b, c]);
    clock.advance(secs(60));
    let policy =
        DlqPolicy::new()
            .archive_after(secs(3_600))
            .auto_replay(OUTAGE, from, from + 3_600_000);
    let r = dlq.run_policies_partial(&policy, &any_schema, |key: &[u8], _: &[u8]| {
        if key == b"b" {
            engine.debug_fail_store_writes(true);
        }
        Ok(())
    });
    engine.debug_fail_store_writes(false);
    let (report, error) = interrupted(r);
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert_eq!(report.archived, [expired], "{report:?}");
    assert_eq!(report.replay.replayed, [a], "{report:?}");
    assert_eq!(report.replay.total(), 1, "{report:?}");
    let x = dlq.get(expired).unwrap();
    assert_eq!(x.state(), MessageState::Archived);
    assert_eq!(x.history().last().unwrap().actor, idem::ACTOR_AUTO_ARCHIVE);
    let replayed = dlq.get(a).unwrap();
    assert_eq!(replayed.replay_outcome(), Some(ReplayOutcome::Applied));
    assert_eq!(
        replayed.history().last().unwrap().actor,
        idem::ACTOR_AUTO_REPLAY
    );
    assert_eq!(stored(&dlq, &[b, c]), before);
    assert_eq!(ns.check(b"b").unwrap(), None);
    // `run_policies` gives the error alone, and `?` turns an `Interrupted` into it.
    let again = || -> idem::Result<idem::PolicyReport> {
        engine.debug_fail_store_writes(true);
        let r = dlq.run_policies_partial(&policy, &any_schema, |_: &[u8], _: &[u8]| Ok(()));
        engine.debug_fail_store_writes(false);
        Ok(r?)
    };
    assert!(matches!(again(), Err(Error::Store(_))));
}

/// A dead letter's synced write that RocksDB refused (its fsync failed) is a failed
/// fsync of the write-ahead log, as a completion's is: every later `Engine::sync`
/// reports it until the next open, since writes of the log made before it may be
/// lost with it.
#[cfg(feature = "durable")]
#[test]
fn a_dead_letters_sync_failure_is_reported_by_every_later_sync() {
    let dir = TempDir::new();
    let clock = ManualClock::new(T0);
    let (engine, _ns, dlq) = open(&dir, &clock);
    engine.sync().expect("nothing failed yet");
    engine.debug_fail_syncs(true);
    let refused = dlq.quarantine(b"k", b"v2:k", OUTAGE);
    engine.debug_fail_syncs(false);
    assert!(matches!(refused, Err(Error::Store(_))), "{refused:?}");
    for _ in 0..2 {
        let synced = engine.sync();
        assert!(matches!(synced, Err(Error::Store(_))), "{synced:?}");
    }
    // A letter after it is written and synced all the same.
    let id = dlq.quarantine(b"j", b"v2:j", OUTAGE).unwrap();
    drop((dlq, _ns, engine));
    let (engine, _ns, dlq) = open(&dir, &clock);
    engine.sync().expect("a new open starts afresh");
    assert_eq!(ids(&everything(&dlq)), [id]);
}

/// A handler that outlives its claim's lease on a store that then refuses every
/// write: neither the claim again's completion nor the letter's `Replayed` record
/// alone can be stored. The replay stops with the store's error, the message is left
/// as it was and is in no list (its handler ran, as before a crash ahead of its
/// completion), and the next replay applies it again.
#[cfg(feature = "durable")]
#[test]
fn a_handler_that_outlives_its_claim_on_a_store_refusing_writes_stops_the_replay() {
    let (_dir, clock, engine, ns, dlq, id) = durable_with_a_letter(b"k");
    let after = dlq.quarantine(b"j", b"v2:j", OUTAGE).unwrap();
    let before = stored(&dlq, &[id, after]);
    let mut applied = Vec::new();
    let r = dlq.replay_partial(
        &Selection::default(),
        &any_schema,
        |key: &[u8], _: &[u8]| {
            applied.push(key.to_vec());
            clock.advance(secs(6));
            engine.debug_fail_store_writes(true);
            Ok(())
        },
        ReplayMode::Execute,
    );
    engine.debug_fail_store_writes(false);
    let (report, error) = interrupted(r);
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert_eq!(report.total(), 0, "{report:?}");
    assert!(report.notes.is_empty(), "{report:?}");
    assert_eq!(stored(&dlq, &[id, after]), before);
    assert_eq!(ns.check(b"k").unwrap(), None);
    let again = execute(&dlq, &Selection::default(), |key: &[u8], _: &[u8]| {
        applied.push(key.to_vec());
        Ok(())
    });
    assert_eq!(again.replayed, [id, after], "{again:?}");
    assert_eq!(applied, [b"k".to_vec(), b"k".to_vec(), b"j".to_vec()]);
}

/// The partial report also lists the messages the replay passed over before the
/// error, as a report of a replay that ran to its end would (a key held by a live
/// claim, a key done with another payload): in their lists, with their notes, and
/// left as they were.
#[cfg(feature = "durable")]
#[test]
fn a_partial_report_lists_the_messages_passed_over_before_the_error() {
    let (_dir, _clock, engine, ns, dlq, held) = durable_with_a_letter(b"h");
    let other = dlq.quarantine(b"o", b"v2:o", OUTAGE).unwrap();
    let at_hand = dlq.quarantine(b"e", b"v2:e", OUTAGE).unwrap();
    let live = acquire(&ns, b"h");
    match ns.claim_with_payload(b"o", b"another message").unwrap() {
        Claim::Acquired(g) => g.complete().unwrap(),
        c => panic!("{c:?}"),
    }
    let before = stored(&dlq, &[held, other, at_hand]);
    let r = dlq.replay_partial(
        &Selection::default(),
        &any_schema,
        |_: &[u8], _: &[u8]| {
            engine.debug_fail_store_writes(true);
            Ok(())
        },
        ReplayMode::Execute,
    );
    engine.debug_fail_store_writes(false);
    let (report, error) = interrupted(r);
    assert!(matches!(error, Error::Store(_)), "{error:?}");
    assert_eq!(report.skipped_in_progress, [held], "{report:?}");
    assert_eq!(report.payload_mismatch, [other], "{report:?}");
    assert_eq!(report.total(), 2, "{report:?}");
    assert!(report.notes[&held].contains("held by a live claim"));
    assert!(report.notes[&other].starts_with("payload-mismatch"));
    assert!(!report.notes.contains_key(&at_hand), "{report:?}");
    assert_eq!(stored(&dlq, &[held, other, at_hand]), before);
    drop(live);
}
