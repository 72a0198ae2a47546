//! A replay killed with SIGKILL: every dead letter is afterwards either replayed with
//! its key done, or still quarantined with its key not done; a second replay finishes
//! the job and no completed message is processed again.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{
    Claim, Engine, KeyState, ManualClock, MessageState, NamespaceConfig, ReplayMode, ReplayOutcome,
    SchemaVerdict, Selection,
};

const MESSAGES: u64 = 3000;
const KILL_AFTER: usize = 200;
const LEASE_MS: u64 = 30_000;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("idem-dlq-crash-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key(id: u64) -> Vec<u8> {
    format!("ord-{id:016x}").into_bytes()
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The layout `idem __dlq_replay` opens: namespace `orders`.
fn open(dir: &Path, clock: &ManualClock) -> Engine {
    Engine::builder()
        .namespace(
            "orders",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(3600))
                .lease(Duration::from_millis(LEASE_MS)),
        )
        .clock(clock.clone())
        .maintenance_interval(None)
        .durable(dir)
        .build()
        .expect("the database opens")
}

/// Runs the replaying process and SIGKILLs it after `KILL_AFTER` handler calls.
/// Returns the keys its handler applied.
fn replay_and_kill(dir: &Path) -> Vec<Vec<u8>> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["__dlq_replay", "--dir"])
        .arg(dir)
        .args(["--lease-ms", &LEASE_MS.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the replaying process starts");
    let out = child.stdout.take().unwrap();
    let watchdog = util::Watchdog::arm(child.id(), util::CHILD_LIMIT);
    let mut lines = BufReader::new(out).lines();
    let mut applied = Vec::new();
    let mut finished = false;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(k) = line.strip_prefix("applied ") {
            applied.push(k.as_bytes().to_vec());
            if applied.len() >= KILL_AFTER {
                break;
            }
        }
    }
    drop(watchdog);
    child.kill().expect("SIGKILL delivered");
    let status = child.wait().unwrap();
    util::assert_killed(status);
    // What the process printed before it died is still in the pipe.
    for line in lines {
        let line = line.unwrap();
        if let Some(k) = line.strip_prefix("applied ") {
            applied.push(k.as_bytes().to_vec());
        }
        finished |= line == "done";
    }
    assert!(
        !status.success() && !finished,
        "the replay was killed, not finished"
    );
    assert!(applied.len() >= KILL_AFTER, "the replay ended early");
    applied
}

#[test]
fn a_replay_killed_mid_run_leaves_each_message_replayed_with_its_key_done_or_quarantined() {
    let dir = TempDir::new("replay");
    let clock = ManualClock::new(wall_ms());
    {
        let engine = open(&dir.0, &clock);
        let orders = engine.namespace("orders").unwrap();
        let dlq = engine.dlq("orders").unwrap();
        for id in 0..MESSAGES {
            dlq.quarantine(
                &key(id),
                b"v2:payload",
                "downstream-unavailable:payments-api",
            )
            .unwrap();
        }
        // A few went through the live path on a delayed retry.
        for id in (0..MESSAGES).step_by(97) {
            match orders.claim(&key(id)).unwrap() {
                Claim::Acquired(g) => g.complete().unwrap(),
                other => panic!("{other:?}"),
            }
        }
    }
    let applied_by_child = replay_and_kill(&dir.0);

    clock.set(wall_ms());
    let engine = open(&dir.0, &clock);
    let orders = engine.namespace("orders").unwrap();
    let dlq = engine.dlq("orders").unwrap();
    let live_done: HashSet<Vec<u8>> = (0..MESSAGES).step_by(97).map(key).collect();
    let all = dlq.list(&Selection::all()).unwrap();
    assert_eq!(all.len() as u64, MESSAGES, "no message was lost");
    let mut replayed = 0;
    let mut held = Vec::new();
    for m in &all {
        let state = orders.check(m.key()).unwrap();
        match m.state() {
            MessageState::Replayed => {
                replayed += 1;
                assert!(
                    matches!(state, Some(KeyState::Done { .. })),
                    "{}: replayed, so its key is done",
                    m.id()
                );
            }
            MessageState::Quarantined => match state {
                None => {}
                // The claim the killed process held: an orphan until its lease runs out.
                Some(KeyState::InProgress { .. }) => held.push(m.id()),
                // Done by the live path, not reached by the replay yet.
                Some(KeyState::Done { .. }) if live_done.contains(m.key()) => {}
                Some(other) => panic!("{}: quarantined but its key is {other:?}", m.id()),
            },
            other => panic!("{}: a crash left the message in state {other}", m.id()),
        }
    }
    // Every applied message but the last one completed before the kill arrived.
    assert!(replayed >= KILL_AFTER - 1, "{replayed}");
    assert!(held.len() <= 1, "at most the message in flight: {held:?}");
    assert!(engine.orphans().len() <= 1);

    // Replaying again: the orphan's key is held until its lease runs out, the rest is
    // replayed, and nothing replayed by the killed process runs again.
    let mut applied_here: Vec<Vec<u8>> = Vec::new();
    let mut handler = |k: &[u8], _: &[u8]| -> Result<(), String> {
        applied_here.push(k.to_vec());
        Ok(())
    };
    let schema = |_: &[u8]| SchemaVerdict::Compatible;
    let r = dlq
        .replay(
            &Selection::default(),
            &schema,
            &mut handler,
            ReplayMode::Execute,
        )
        .unwrap();
    assert_eq!(r.skipped_in_progress, held);
    clock.advance(Duration::from_millis(LEASE_MS + 1));
    let r = dlq
        .replay(
            &Selection::default(),
            &schema,
            &mut handler,
            ReplayMode::Execute,
        )
        .unwrap();
    assert!(r.failed.is_empty() && r.skipped_in_progress.is_empty());
    assert!(dlq.list(&Selection::default()).unwrap().is_empty());
    let all = dlq.list(&Selection::all()).unwrap();
    for m in &all {
        assert_eq!(m.state(), MessageState::Replayed, "{}", m.id());
        assert!(matches!(
            orders.check(m.key()).unwrap(),
            Some(KeyState::Done { .. })
        ));
    }
    let already = all
        .iter()
        .filter(|m| m.replay_outcome() == Some(ReplayOutcome::AlreadyDone))
        .count();
    assert_eq!(already, live_done.len());
    // An external effect is at least once: only the message whose handler ran when
    // the kill arrived (its completion not yet written) may be applied twice. Every
    // other message took effect exactly once, by the live path or one of the replays.
    let child: HashSet<&Vec<u8>> = applied_by_child.iter().collect();
    assert_eq!(
        child.len(),
        applied_by_child.len(),
        "the killed process repeated nothing"
    );
    let twice = applied_here.iter().filter(|k| child.contains(k)).count();
    assert!(twice <= 1, "{twice} messages were applied again");
    let mut effects: Vec<&Vec<u8>> = applied_by_child
        .iter()
        .chain(applied_here.iter().filter(|k| !child.contains(k)))
        .chain(live_done.iter())
        .collect();
    effects.sort();
    let expected: Vec<Vec<u8>> = (0..MESSAGES).map(key).collect();
    assert_eq!(
        effects,
        expected.iter().collect::<Vec<_>>(),
        "every message took effect once"
    );
}
