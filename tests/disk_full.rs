//! A disk that refuses writes while the engine runs: a child process (this test
//! binary run again) lowers its own RLIMIT_FSIZE part-way, with SIGXFSZ ignored, so
//! that the file system refuses every write past the limit (EFBIG) as a full disk
//! would. What each call then answers, and what the next open (with the limit
//! lifted) finds.

#![cfg(all(feature = "durable", target_os = "linux", not(idem_loom)))]

mod util;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use idem::{
    Claim, ClaimMarkers, Engine, Error, FailurePolicy, KeyState, ManualClock, NamespaceConfig,
};
use util::{acquire, assert_killed, TempDir, Watchdog, CHILD_LIMIT, T0};

/// The child's scenario (the name of the test that runs it) and its directory.
const SCENARIO: &str = "IDEM_TEST_DISK_FULL_SCENARIO";
const DIR: &str = "IDEM_TEST_DISK_FULL_DIR";
/// The child's failure policy and claim markers: `closed`, `open` (journal markers)
/// or `open-immediate`.
const POLICY: &str = "IDEM_TEST_DISK_FULL_POLICY";

/// Sets this process's largest file to `bytes` (RLIMIT_FSIZE's soft limit; the
/// hard one stays, so the limit can be lifted again), SIGXFSZ ignored: a write past
/// it fails with EFBIG instead of killing the process.
fn limit_files_to(bytes: u64) {
    // SAFETY: plain system calls on this process's own limits and signal mask.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
        assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
        limit.rlim_cur = bytes.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}

/// Lifts the limit [`limit_files_to`] set.
fn lift_file_limit() {
    limit_files_to(u64::MAX);
}

fn config(policy: FailurePolicy, markers: ClaimMarkers) -> NamespaceConfig {
    NamespaceConfig::new()
        .ttl(Duration::from_secs(60))
        .lease(Duration::from_secs(600))
        .max_keys(10_000)
        .on_store_error(policy)
        .claim_markers(markers)
}

fn open(dir: &Path, policy: FailurePolicy) -> Engine {
    open_with(dir, policy, ClaimMarkers::Journal)
}

fn open_with(dir: &Path, policy: FailurePolicy, markers: ClaimMarkers) -> Engine {
    Engine::builder()
        .namespace("ns", config(policy, markers))
        .state_family("st")
        .clock(ManualClock::new(T0))
        .maintenance_interval(None)
        .durable(dir)
        .build()
        .expect("the database opens")
}

/// Runs this binary's test `scenario` as a child on `dir`, its output piped.
fn spawn(scenario: &str, dir: &Path, policy: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([scenario, "--exact", "--nocapture", "--test-threads", "1"])
        .env(SCENARIO, scenario)
        .env(DIR, dir)
        .env(POLICY, policy)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the test binary runs again")
}

/// The child's role, if this process is the child of `scenario`: its directory,
/// failure policy and claim markers.
fn child_of(scenario: &str) -> Option<(std::path::PathBuf, FailurePolicy, ClaimMarkers)> {
    if std::env::var(SCENARIO).ok()? != scenario {
        return None;
    }
    let (policy, markers) = match std::env::var(POLICY).unwrap().as_str() {
        "open" => (FailurePolicy::FailOpen, ClaimMarkers::Journal),
        "open-immediate" => (FailurePolicy::FailOpen, ClaimMarkers::Immediate),
        _ => (FailurePolicy::FailClosed, ClaimMarkers::Journal),
    };
    Some((std::env::var_os(DIR).unwrap().into(), policy, markers))
}

/// Prints a line for the parent at once.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{line}").unwrap();
    out.flush().unwrap();
}

fn is_store_error(r: &idem::Result<()>) -> bool {
    matches!(r, Err(Error::Store(_)))
}

/// The child of [`a_write_the_disk_refused_stops_the_stores_writes_until_it_is_reopened`].
fn refused_write_child(dir: &Path, policy: FailurePolicy, markers: ClaimMarkers) {
    let engine = open_with(dir, policy, markers);
    let ns = engine.namespace("ns").unwrap();
    acquire(&ns, b"before").complete().unwrap();
    let failing = acquire(&ns, b"failing");
    let held = acquire(&ns, b"held");
    limit_files_to(1);
    let first = failing.complete_with_result(b"r");
    // The disk has room again: RocksDB, which failed a write to its log, still
    // refuses every write and every fsync of this run.
    lift_file_limit();
    let after = acquire(&ns, b"after").complete_with_result(b"r");
    let mut changes = idem::StateChanges::new();
    changes.put("st", b"co", b"1");
    let co_commit = acquire(&ns, b"co").complete_with(None, changes);
    let synced = engine.sync();
    let forgot = ns.forget(b"before").map(|_| ());
    let letter = engine
        .dlq("ns")
        .unwrap()
        .quarantine(b"dead", b"p", "cls: reason")
        .map(|_| ());
    let fail_open = engine.stats().fail_open_decisions;
    match policy {
        FailurePolicy::FailClosed => {
            assert!(is_store_error(&first), "{first:?}");
            assert!(is_store_error(&after), "{after:?}");
            assert_eq!(fail_open, 0);
        }
        FailurePolicy::FailOpen => {
            // Decided from the hot tier alone, and counted (with immediate markers,
            // the claim of "after" too, and the co-commit's claim).
            assert_eq!((&first, &after), (&Ok(()), &Ok(())));
            let claims = if markers == ClaimMarkers::Immediate {
                2
            } else {
                0
            };
            assert_eq!(fail_open, 2 + claims);
            assert!(ns.claim(b"after").unwrap().is_duplicate());
        }
    }
    // A co-commit, a sync, a forget and a dead letter never fail open.
    for r in [&co_commit, &synced, &forgot, &letter] {
        assert!(is_store_error(r), "{r:?}");
    }
    // Reads still work.
    assert!(ns.claim(b"before").unwrap().is_duplicate());
    say("refused");
    // Held in flight until the kill.
    let _held = held;
    loop {
        std::thread::park();
    }
}

fn refused_write_then_kill(policy: &str) {
    let dir = TempDir::new();
    let scenario = "a_write_the_disk_refused_stops_the_stores_writes_until_it_is_reopened";
    let mut child = spawn(scenario, dir.path(), policy);
    let watchdog = Watchdog::arm(child.id(), CHILD_LIMIT);
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for line in out.lines().map_while(Result::ok) {
        let done = line == "refused";
        lines.push(line);
        if done {
            break;
        }
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    drop(watchdog);
    assert!(lines.iter().any(|l| l == "refused"), "{lines:?}");
    assert_killed(status);

    // The next open, the disk writable again.
    let engine = open(dir.path(), FailurePolicy::FailClosed);
    let ns = engine.namespace("ns").unwrap();
    assert!(matches!(
        ns.check(b"before").unwrap(),
        Some(KeyState::Done { .. })
    ));
    for key in [&b"failing"[..], b"after", b"co"] {
        match (policy, ns.check(key).unwrap()) {
            ("closed", None) => {}
            // A completion decided from the hot tier alone kept its claim's
            // marker: the claim is an orphan, held until its lease runs out.
            ("open", Some(KeyState::InProgress { .. })) if key != b"co" => {}
            ("open-immediate", Some(KeyState::InProgress { .. })) if key == b"failing" => {}
            // A claim acquired without its marker (the store refused it) is
            // forgotten by the crash.
            ("open" | "open-immediate", None) if key != b"failing" => {}
            (_, other) => panic!("{policy} {}: {other:?}", String::from_utf8_lossy(key)),
        }
    }
    assert_eq!(engine.read_state("st", b"co").unwrap(), None);
    assert!(matches!(
        ns.check(b"held").unwrap(),
        Some(KeyState::InProgress { .. })
    ));
    let expected_orphans = match policy {
        "open" => 3,
        "open-immediate" => 2,
        _ => 1,
    };
    assert_eq!(
        engine.orphans().len(),
        expected_orphans,
        "{:?}",
        engine.orphans()
    );
    let letters = engine
        .dlq("ns")
        .unwrap()
        .list_headers(&idem::Selection::default())
        .unwrap();
    assert!(letters.is_empty(), "{letters:?}");
    // And it writes.
    acquire(&ns, b"next").complete().unwrap();
    assert!(ns.claim(b"next").unwrap().is_duplicate());
    engine.sync().unwrap();
}

/// Once the file system refused a write to RocksDB's log, RocksDB refuses every
/// later write and fsync of the run, even with room again (README, "The durable
/// tier"): each call is a typed error (or, under `FailOpen`, a completion decided
/// from the hot tier alone); after a SIGKILL the next open finds what was
/// acknowledged, nothing that was refused, and the claims in flight as orphans.
#[test]
fn a_write_the_disk_refused_stops_the_stores_writes_until_it_is_reopened() {
    let scenario = "a_write_the_disk_refused_stops_the_stores_writes_until_it_is_reopened";
    if let Some((dir, policy, markers)) = child_of(scenario) {
        return refused_write_child(&dir, policy, markers);
    }
    refused_write_then_kill("closed");
    refused_write_then_kill("open");
    refused_write_then_kill("open-immediate");
}

/// The child of [`compact_store_reports_a_compaction_the_disk_refused`].
fn refused_compaction_child(dir: &Path) {
    let engine = open(dir, FailurePolicy::FailClosed);
    let ns = engine.namespace("ns").unwrap();
    let fill = |prefix: &str| {
        for i in 0..1000 {
            acquire(&ns, format!("{prefix}-{i}").as_bytes())
                .complete_with_result(&[7; 900])
                .unwrap();
        }
    };
    fill("first");
    engine.compact_store().unwrap();
    let table = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
        .map(|e| e.metadata().unwrap().len())
        .max()
        .unwrap();
    fill("second");
    // Room for the log and for a flush of either half, not for the two merged.
    limit_files_to(table * 3 / 2);
    let compacted = engine.compact_store();
    assert!(
        matches!(&compacted, Err(Error::Store(e)) if e.operation() == "compact"),
        "{compacted:?}"
    );
    say("refused");
    drop(ns);
    drop(engine);
    say("dropped");
}

/// A compaction the file system refused is `Error::Store` from
/// `Engine::compact_store`. Before, RocksDB's C interface dropped its status and the
/// call returned `Ok`. The next open, with room again, finds every record.
#[test]
fn compact_store_reports_a_compaction_the_disk_refused() {
    let scenario = "compact_store_reports_a_compaction_the_disk_refused";
    if let Some((dir, _, _)) = child_of(scenario) {
        return refused_compaction_child(&dir);
    }
    let dir = TempDir::new();
    let mut child = spawn(scenario, dir.path(), "closed");
    let watchdog = Watchdog::arm(child.id(), CHILD_LIMIT);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let status = child.wait().unwrap();
    drop(watchdog);
    assert!(status.success(), "{out}");
    assert!(
        out.contains("\nrefused\n") && out.contains("\ndropped\n"),
        "{out}"
    );
    let engine = open(dir.path(), FailurePolicy::FailClosed);
    let ns = engine.namespace("ns").unwrap();
    for prefix in ["first", "second"] {
        for i in 0..1000 {
            let key = format!("{prefix}-{i}");
            match ns.claim(key.as_bytes()).unwrap() {
                Claim::Duplicate(d) => assert_eq!(d.result(), Some(&[7u8; 900][..])),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
    engine.compact_store().unwrap();
}
