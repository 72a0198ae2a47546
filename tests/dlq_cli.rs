//! `idem dlq`: list, show, a dry run and a replay through shell commands, archive,
//! health, refused arguments, and text from the application and from `--exec`
//! commands (reasons, notes, actors) printed on one line, escaped.

#![cfg(all(feature = "durable", not(idem_loom)))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use idem::{Claim, Engine, NamespaceConfig};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("idem-dlq-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn idem(args: &[&str]) -> (bool, Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs");
    (
        out.status.success(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Namespace `orders` with five dead letters: #1..#3 replay cleanly, #4 has an old
/// payload, #5's key went through the live path.
fn populate(db: &Path) {
    let engine = Engine::builder()
        .namespace("orders", NamespaceConfig::new())
        .durable(db)
        .maintenance_interval(None)
        .build()
        .unwrap();
    let dlq = engine.dlq("orders").unwrap();
    for (key, payload) in [
        ("ord-1", "v2:a"),
        ("ord-2", "v2:b"),
        ("ord-3", "v2:c"),
        ("ord-4", "v1:d"),
        ("ord-5", "v2:e"),
    ] {
        dlq.quarantine(
            key.as_bytes(),
            payload.as_bytes(),
            "downstream-unavailable:payments-api 503",
        )
        .unwrap();
    }
    match engine.namespace("orders").unwrap().claim(b"ord-5").unwrap() {
        Claim::Acquired(g) => g.complete().unwrap(),
        other => panic!("{other:?}"),
    }
}

/// A fresh directory named after `tag` holding `populate`'s database, and that
/// database's path.
fn populated(tag: &str) -> (TempDir, String) {
    let tmp = TempDir::new(tag);
    let db = tmp.0.join("db");
    populate(&db);
    let dbs = db.to_str().unwrap().to_owned();
    (tmp, dbs)
}

/// `idem dlq CMD DB --namespace orders ARGS...`.
fn orders(cmd: &str, db: &str, args: &[&str]) -> (bool, Option<i32>, String, String) {
    let mut all = vec!["dlq", cmd, db, "--namespace", "orders"];
    all.extend_from_slice(args);
    idem(&all)
}

/// `idem dlq list`'s table with its age column blanked: two listings a second apart
/// differ there alone.
fn without_ages(list: &str) -> String {
    // The columns before it: id (8), two spaces, state (18), a space, attempts (8),
    // a space; then the age, 9 wide. All ASCII.
    const AGE: std::ops::Range<usize> = 38..47;
    list.lines()
        .map(|l| match l.get(AGE) {
            Some(_) => format!("{}{:9}{}", &l[..AGE.start], "", &l[AGE.end..]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn row<'a>(out: &'a str, label: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no line {label:?} in:\n{out}"))
        .split_whitespace()
        .collect()
}

#[test]
fn list_dry_run_replay_show_archive_and_health() {
    let tmp = TempDir::new("flow");
    let db = tmp.0.join("db");
    populate(&db);
    let dbs = db.to_str().unwrap();
    let ledger = tmp.0.join("ledger.txt");

    let (ok, _, out, err) = idem(&["dlq", "list", dbs, "--namespace", "orders"]);
    assert!(ok, "{err}");
    assert!(out.contains("5 message(s)"), "{out}");
    assert_eq!(row(&out, "      #4")[1], "quarantined", "{out}");
    assert!(out.contains("downstream-unavailable:payments-api"), "{out}");

    let schema = r#"grep -q '^v2:'"#;
    let (ok, _, dry, err) = idem(&[
        "dlq",
        "replay",
        dbs,
        "--namespace",
        "orders",
        "--dry-run",
        "--schema-cmd",
        schema,
    ]);
    assert!(ok, "{err}");
    assert_eq!(row(&dry, "would be replayed ")[3], "3", "{dry}");
    assert_eq!(
        row(&dry, "would be replayed: already done")[5],
        "1",
        "{dry}"
    );
    assert_eq!(row(&dry, "would be archived: schema")[4], "1", "{dry}");
    assert!(!ledger.exists(), "a dry run runs nothing");

    let exec = format!("printf '%s\\n' \"$IDEM_KEY\" >> {}", ledger.display());
    let (ok, _, run, err) = idem(&[
        "dlq",
        "replay",
        dbs,
        "--namespace",
        "orders",
        "--exec",
        &exec,
        "--schema-cmd",
        schema,
        "--actor",
        "alice",
    ]);
    assert!(ok, "{err}");
    assert_eq!(row(&run, "replayed ")[1], "3", "{run}");
    assert_eq!(row(&run, "replayed: already done")[3], "1", "{run}");
    assert_eq!(row(&run, "archived: schema")[2], "1", "{run}");
    assert!(err.contains("progress: 100% of messages"), "{err}");
    let applied = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        ["ord-1", "ord-2", "ord-3"]
    );

    let (ok, _, show, err) = idem(&["dlq", "show", dbs, "--namespace", "orders", "--id", "1"]);
    assert!(ok, "{err}");
    assert!(row(&show, "state").contains(&"replayed"), "{show}");
    for step in ["under-review", "schema-check", "idempotency-check"] {
        assert!(show.contains(step), "{show}");
    }
    assert!(show.contains("alice"), "{show}");

    // Nothing is left; archiving a replayed message is refused.
    let (ok, _, out, _) = idem(&["dlq", "list", dbs, "--namespace", "orders"]);
    assert!(ok && out.contains("0 message(s)"), "{out}");
    let (ok, code, _, err) = idem(&[
        "dlq",
        "archive",
        dbs,
        "--namespace",
        "orders",
        "--id",
        "1",
        "--note",
        "no",
    ]);
    assert!(!ok && code == Some(1), "{err}");
    assert!(err.contains("cannot go from replayed to archived"), "{err}");

    let (ok, _, health, err) = idem(&["dlq", "health", dbs, "--namespace", "orders"]);
    assert!(ok, "{err}");
    assert_eq!(row(&health, "depth")[2], "0", "{health}");
    assert_eq!(row(&health, "replayed")[1], "4", "{health}");
    assert_eq!(row(&health, "archived")[1], "1", "{health}");
    assert_eq!(row(&health, "replay success rate")[3], "100.0%", "{health}");
}

#[test]
fn a_failing_command_sends_the_message_back_to_quarantine() {
    let tmp = TempDir::new("fail");
    let db = tmp.0.join("db");
    populate(&db);
    let dbs = db.to_str().unwrap();
    let (ok, code, run, err) = idem(&[
        "dlq",
        "replay",
        dbs,
        "--namespace",
        "orders",
        "--id",
        "2",
        "--exec",
        "echo 'downstream-unavailable:ledger-api timeout' >&2; exit 5",
    ]);
    // The replay ran to its end, but a message went back: exit 3, said on stderr.
    assert!(!ok && code == Some(3), "{code:?} {err}");
    assert!(
        err.contains("failed on 1 of the messages, which went back to quarantine"),
        "{err}"
    );
    assert_eq!(row(&run, "failed")[4], "1", "{run}");
    assert!(
        run.contains("downstream-unavailable:ledger-api timeout"),
        "{run}"
    );
    let (_, _, out, _) = idem(&["dlq", "list", dbs, "--namespace", "orders", "--id", "2"]);
    let cols = row(&out, "      #2");
    assert_eq!((cols[1], cols[2]), ("quarantined", "1"), "{out}");
    assert!(out.contains("downstream-unavailable:ledger-api"), "{out}");
    // An id as the tool prints it names the same message.
    let (ok, _, printed, err) = idem(&["dlq", "list", dbs, "--namespace", "orders", "--id", "#2"]);
    assert!(ok, "{err}");
    assert_eq!(printed, out);
}

#[test]
fn bad_arguments_are_refused() {
    let tmp = TempDir::new("bad");
    for args in [
        &["dlq"][..],
        &["dlq", "frobnicate", "x", "--namespace", "n"],
        &["dlq", "list", "--namespace", "n"],
        &["dlq", "list", "x"],
        &["dlq", "show", "x", "--namespace", "n"],
        &["dlq", "replay", "x", "--namespace", "n"],
        &["dlq", "archive", "x", "--namespace", "n", "--id", "1"],
        &[
            "dlq",
            "list",
            "x",
            "--namespace",
            "n",
            "--state",
            "sleeping",
        ],
        &["dlq", "list", "x", "--namespace", "n", "--id", "one"],
        // An option of one value given twice: one of them would be dropped.
        &[
            "dlq", "replay", "x", "-n", "n", "--exec", "a", "--exec", "b",
        ],
        &["dlq", "list", "x", "-n", "n", "--namespace", "m"],
        &[
            "dlq", "list", "x", "-n", "n", "--class", "a", "--class", "b",
        ],
    ] {
        let (_, code, _, err) = idem(args);
        assert_eq!(code, Some(2), "{args:?}");
        assert!(!err.is_empty());
    }
    // Options that name several are given as often as wanted.
    let (_tmp, dbs) = populated("repeated-ids");
    let (ok, _, out, err) = orders("list", &dbs, &["--id", "1", "--id", "2"]);
    assert!(ok, "{err}");
    assert!(out.contains("2 message(s)"), "{out}");
    // A directory without a database is not created, and a path that is not there,
    // a file or an empty path is said as such (before, each as "no idem database").
    let missing = tmp.0.join("nothing-here");
    let (_, code, _, err) = idem(&["dlq", "list", missing.to_str().unwrap(), "--namespace", "n"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("No such file or directory"), "{err}");
    assert!(!missing.exists());
    let file = tmp.0.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let (_, code, _, err) = idem(&["dlq", "list", file.to_str().unwrap(), "-n", "n"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not a directory"), "{err}");
    let (_, code, _, err) = idem(&["dlq", "list", "", "-n", "n"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("the database path is empty"), "{err}");
    let (_, code, _, err) = idem(&["dlq", "list", tmp.0.to_str().unwrap(), "-n", "n"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no idem database"), "{err}");
}

#[cfg(unix)]
#[test]
fn a_current_file_that_cannot_be_looked_at_is_said_as_it_is_not_as_no_database() {
    let tmp = TempDir::new("current-loop");
    // A link to itself: looking at it fails, and not as a missing file (as a
    // directory that cannot be read does, where permissions bind).
    std::os::unix::fs::symlink("CURRENT", tmp.0.join("CURRENT")).unwrap();
    let dir = tmp.0.to_str().unwrap();
    for args in [
        ["dlq", "list", dir, "--namespace", "n", "--id", "1"].as_slice(),
        &["dlq", "archive", dir, "-n", "n", "--id", "1", "--note", "x"],
    ] {
        let cmd = args[1];
        let (_, code, _, err) = idem(args);
        assert_eq!(code, Some(1), "{cmd}: {err}");
        assert!(err.contains("symbolic links"), "{cmd}: {err}");
        assert!(!err.contains("no idem database"), "{cmd}: {err}");
    }
}

/// The application's engine on the database at `db`: `builder` with namespace
/// "orders" configured as `cfg`, no maintenance thread.
fn open_orders(db: &Path, builder: idem::EngineBuilder, cfg: NamespaceConfig) -> Engine {
    builder
        .namespace("orders", cfg)
        .durable(db)
        .maintenance_interval(None)
        .build()
        .unwrap()
}

/// An application's database at `db`: namespace "orders" opened with `cfg` on an
/// engine from `builder`, two messages quarantined. Then the tools archive the first
/// and replay the other.
fn archive_and_replay(db: &Path, builder: idem::EngineBuilder, cfg: NamespaceConfig) {
    {
        let engine = open_orders(db, builder, cfg);
        let dlq = engine.dlq("orders").unwrap();
        for key in ["ord-1", "ord-2"] {
            dlq.quarantine(key.as_bytes(), b"v2:x", "downstream-unavailable:x")
                .unwrap();
        }
    }
    let dbs = db.to_str().unwrap();
    let (ok, _, out, err) = orders("archive", dbs, &["--id", "1", "--note", "x"]);
    assert!(ok, "{err}");
    assert!(out.contains("archived #1"), "{out}");
    let (ok, _, out, err) = orders("replay", dbs, &["--all", "--exec", "true"]);
    assert!(ok, "{err}");
    assert_eq!(row(&out, "replayed "), ["replayed", "1"], "{out}");
}

#[test]
fn a_namespace_whose_ttl_needs_a_coarse_tick_can_be_archived_and_replayed() {
    // The application ticks once a second for a 30-day TTL, longer than 2^30 ticks
    // of the default 1 ms tick; the tick itself is not stored.
    let tmp = TempDir::new("coarse-tick");
    archive_and_replay(
        &tmp.0.join("db"),
        Engine::builder().tick(std::time::Duration::from_secs(1)),
        NamespaceConfig::new().ttl(std::time::Duration::from_secs(30 * 86_400)),
    );
}

#[test]
fn a_namespace_with_a_long_retention_over_a_short_ttl_can_be_archived_and_replayed() {
    // Retention a year over a TTL of a minute, for 10,000 keys, no prefilter: the
    // application opens it. The tools, which do not know its sizing, used to size a
    // prefilter for the default `max_keys` and the retention's 525,600 TTLs of them
    // (hundreds of gigabytes), and refused.
    let tmp = TempDir::new("long-retention");
    let db = tmp.0.join("db");
    let cfg = NamespaceConfig::new()
        .ttl(std::time::Duration::from_secs(60))
        .retention(std::time::Duration::from_secs(365 * 86_400))
        .max_keys(10_000)
        .prefilter(false);
    archive_and_replay(&db, Engine::builder(), cfg.clone());
    // The application opens it afterwards, and finds the replayed key done.
    let engine = open_orders(&db, Engine::builder(), cfg);
    let ns = engine.namespace("orders").unwrap();
    assert!(ns.claim(b"ord-2").unwrap().is_duplicate());
}

#[test]
fn an_archive_with_one_bad_id_archives_none() {
    let (_tmp, dbs) = populated("archive");
    let archive = |ids: &[&str]| {
        let mut args = vec!["--note", "x"];
        for id in ids {
            args.extend(["--id", id]);
        }
        orders("archive", &dbs, &args)
    };
    // Before, #1 was archived (for good) and then the command failed.
    for (ids, why) in [(&["1", "999"][..], "999"), (&["2", "2"], "named twice")] {
        let (ok, code, _, err) = archive(ids);
        assert!(!ok && code == Some(1), "{ids:?}: {err}");
        assert!(
            err.contains(why) && err.contains("nothing was archived"),
            "{err}"
        );
    }
    let (ok, _, out, err) = orders("list", &dbs, &[]);
    assert!(ok, "{err}");
    assert!(out.contains("5 message(s)"), "{out}");
    let (ok, _, out, err) = archive(&["1", "2"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("archived #1") && out.contains("archived #2"),
        "{out}"
    );
}

#[test]
fn a_replay_of_every_message_passes_over_the_archived_ones() {
    let (_tmp, dbs) = populated("all");
    let (ok, _, _, err) = orders("archive", &dbs, &["--id", "4", "--note", "x"]);
    assert!(ok, "{err}");
    // Before, the archived message, named in the replay's first chunk, refused the
    // whole replay.
    let (ok, _, out, err) = orders("replay", &dbs, &["--all", "--exec", "cat >/dev/null"]);
    assert!(ok, "{err}");
    assert!(out.contains("replay (4 messages)"), "{out}");
    let (ok, _, out, err) = orders("list", &dbs, &[]);
    assert!(ok, "{err}");
    assert!(out.contains("0 message(s)"), "{out}");
}

#[test]
fn a_replays_limit_counts_the_messages_it_can_replay() {
    let (_tmp, dbs) = populated("limit");
    for id in ["1", "2"] {
        let (ok, _, _, err) = orders("archive", &dbs, &["--id", id, "--note", "x"]);
        assert!(ok, "{err}");
    }
    // Five messages, the first two archived: `--all --limit 2` replays #3 and #4
    // (before, the limit took #1 and #2 and the replay passed over both).
    let (ok, _, out, err) = orders(
        "replay",
        &dbs,
        &["--all", "--limit", "2", "--exec", "cat >/dev/null"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("replay (2 messages)"), "{out}");
    let (ok, _, out, err) = orders("list", &dbs, &["--state", "replayed"]);
    assert!(ok, "{err}");
    assert!(out.contains("2 message(s)"), "{out}");
}

#[test]
fn a_schema_command_that_gives_no_verdict_archives_nothing() {
    let (_tmp, dbs) = populated("schema");
    // Not found (the shell exits 127), ended by a signal, and a checker its shell ran
    // ended by a signal (the shell exits 137). Before, each read as "incompatible"
    // and archived every message for good.
    for check in [
        "no-such-schema-command-xyz",
        "kill -9 $$",
        "sh -c 'kill -9 $$'; exit $?",
    ] {
        for mode in ["--dry-run", "--exec"] {
            let mut args = vec!["--schema-cmd", check, mode];
            if mode == "--exec" {
                args.push("cat >/dev/null");
            }
            let (ok, code, _, err) = orders("replay", &dbs, &args);
            assert!(!ok && code == Some(1), "{check} {mode}: {err}");
            assert!(err.contains("gave no verdict"), "{err}");
        }
    }
    let (ok, _, out, err) = orders("list", &dbs, &[]);
    assert!(ok, "{err}");
    assert!(out.contains("5 message(s)"), "{out}");
    let (ok, _, health, err) = orders("health", &dbs, &[]);
    assert!(ok, "{err}");
    assert_eq!(row(&health, "archived")[1], "0", "{health}");
}

#[test]
fn an_exec_command_that_gives_no_verdict_changes_no_message() {
    let (_tmp, dbs) = populated("exec-no-verdict");
    let (ok, _, before, err) = orders("list", &dbs, &[]);
    assert!(ok, "{err}");
    // Not found (the shell exits 127), and not executable (126). Before, each
    // counted an attempt on every selected message and replaced its reason (and so
    // its class) with the shell's complaint.
    for exec in ["no-such-handler-xyz", "/dev/null"] {
        let (ok, code, out, err) = orders("replay", &dbs, &["--exec", exec]);
        assert!(!ok && code == Some(1), "{exec}: {out}{err}");
        assert!(err.contains("gave no verdict on message #1"), "{err}");
        assert_eq!(row(&out, "failed: back in quarantine")[4], "0", "{out}");
        let (ok, _, after, err) = orders("list", &dbs, &[]);
        assert!(ok, "{err}");
        assert_eq!(without_ages(&after), without_ages(&before), "{exec}");
    }
    // A command that runs and fails still sends the message back, as before; so
    // does one a signal ends (a message that crashes its handler), and the replay
    // goes on to the next.
    let (ok, code, out, err) = orders("replay", &dbs, &["--exec", "exit 3", "--limit", "1"]);
    assert!(!ok && code == Some(3), "{err}");
    assert_eq!(row(&out, "failed: back in quarantine")[4], "1", "{out}");
    let (ok, code, out, err) = orders("replay", &dbs, &["--exec", "kill -9 $$", "--limit", "2"]);
    assert!(!ok && code == Some(3), "{err}");
    assert_eq!(row(&out, "failed: back in quarantine")[4], "2", "{out}");
}

#[test]
fn a_replay_writes_the_done_record_with_the_applications_retention() {
    let tmp = TempDir::new("retention");
    let db = tmp.0.join("db");
    let month = std::time::Duration::from_secs(30 * 86_400);
    let cfg = NamespaceConfig::new()
        .ttl(std::time::Duration::from_secs(3_600))
        .retention(month);
    let open = || {
        Engine::builder()
            .namespace("orders", cfg.clone())
            .durable(&db)
            .maintenance_interval(None)
            .build()
            .unwrap()
    };
    {
        let engine = open();
        let stored = idem::stored_config(&db, "orders").unwrap().unwrap();
        assert_eq!(stored.get_retention(), month);
        assert_eq!(stored.get_ttl(), cfg.get_ttl());
        engine
            .dlq("orders")
            .unwrap()
            .quarantine(b"ord-1", b"p", "outage")
            .unwrap();
    }
    let (ok, _, _, err) = orders(
        "replay",
        db.to_str().unwrap(),
        &["--exec", "cat >/dev/null"],
    );
    assert!(ok, "{err}");
    assert!(!err.contains("no settings"), "{err}");
    let engine = open();
    match engine.namespace("orders").unwrap().check(b"ord-1").unwrap() {
        // Before, the command used the default retention: 7 days, not 30.
        Some(idem::KeyState::Done {
            completed_at_ms,
            expires_at_ms,
            ..
        }) => assert_eq!(expires_at_ms - completed_at_ms, month.as_millis() as u64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_dry_run_over_many_messages_predicts_what_the_replay_does() {
    let tmp = TempDir::new("dry");
    let db = tmp.0.join("db");
    {
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new())
            .durable(&db)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("orders").unwrap();
        // 65 keys, then the first key again: 66 messages, more than one chunk of 64.
        for i in (0..65).chain([0]) {
            dlq.quarantine(format!("k{i}").as_bytes(), b"p", "outage")
                .unwrap();
        }
    }
    let dbs = db.to_str().unwrap();
    // (A dry run's labels start with "would be ".)
    let counts = |out: &str, verb: &str| {
        let n = |label: &str| {
            let r = row(out, &format!("{verb}{label}"));
            r[r.len() - 1].to_owned()
        };
        (n("replayed "), n("replayed: already done"))
    };
    let (ok, _, dry, err) = orders("replay", dbs, &["--dry-run"]);
    assert!(ok, "{err}");
    let (ok, _, real, err) = orders("replay", dbs, &["--exec", "cat >/dev/null"]);
    assert!(ok, "{err}");
    // Before, the dry run said all 66 would be replayed: the second message of k0
    // was in a chunk of its own, which did not know the first would complete k0.
    assert_eq!(
        counts(&real, ""),
        ("65".to_owned(), "1".to_owned()),
        "{real}"
    );
    assert_eq!(counts(&dry, "would be "), counts(&real, ""), "{dry}");
}

#[test]
fn an_unknown_namespace_is_refused_and_the_database_is_left_as_it_was() {
    let tmp = TempDir::new("typo");
    let db = tmp.0.join("db");
    populate(&db);
    let files = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("idem-"))
            .collect();
        names.sort();
        names
    };
    let (cfs_before, files_before) = (idem::namespaces(&db).unwrap(), files(&db));
    assert_eq!(cfs_before, ["orders"]);
    for cmd in ["list", "health"] {
        let (_, code, _, err) = idem(&["dlq", cmd, db.to_str().unwrap(), "--namespace", "ordres"]);
        assert_eq!(code, Some(1), "{cmd}: {err}");
        assert!(err.contains("no namespace named \"ordres\""), "{err}");
        assert!(err.contains("namespaces there: orders"), "{err}");
    }
    assert_eq!(idem::namespaces(&db).unwrap(), cfs_before);
    assert_eq!(files(&db), files_before);
    // The namespace that is there still answers.
    let (ok, _, out, err) = idem(&["dlq", "list", db.to_str().unwrap(), "--namespace", "orders"]);
    assert!(ok, "{err}");
    assert!(out.contains("5 message(s)"), "{out}");
}

/// The database in `db` opened with RocksDB directly, every column family, to change
/// what idem would not.
fn raw_db(db: &Path) -> rocksdb::DB {
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, db).unwrap();
    rocksdb::DB::open_cf(&opts, db, &cfs).unwrap()
}

/// Every file of `dir` by name, with its bytes, except RocksDB's info logs (`LOG`,
/// `LOG.old.*`), which any open, read-only too, starts anew: left out whole.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("LOG"))
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// `list`, `show`, `health` and `replay --dry-run` on `dbs`, each succeeding: the
/// dry run's output.
fn read_only_commands(dbs: &str) -> String {
    for (cmd, args) in [
        ("list", &["--all"][..]),
        ("show", &["--id", "2"]),
        ("health", &[]),
    ] {
        let (ok, _, out, err) = orders(cmd, dbs, args);
        assert!(ok, "{cmd}: {err}");
        assert!(!out.is_empty(), "{cmd}");
    }
    let (ok, _, dry, err) = orders("replay", dbs, &["--dry-run"]);
    assert!(ok, "replay --dry-run: {err}");
    dry
}

#[test]
fn read_only_commands_leave_the_database_as_it_was() {
    let (tmp, dbs) = populated("untouched");
    let db = tmp.0.join("db");
    // A database last opened by an idem that stored no settings.
    {
        let raw = raw_db(&db);
        raw.delete(b"idem/ns/orders").unwrap();
    }
    assert!(idem::stored_config(&db, "orders").unwrap().is_none());
    let before = snapshot(&db);
    read_only_commands(&dbs);
    // Before, each command opened an engine: it stored the default settings (a later
    // replay then used them without a warning), moved the journal's claim markers
    // and deleted the saved prefilter.
    assert!(idem::stored_config(&db, "orders").unwrap().is_none());
    let after = snapshot(&db);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "no file appeared or vanished"
    );
    for (name, bytes) in &before {
        assert!(after[name] == *bytes, "{name} changed");
    }
}

#[test]
fn replay_and_archive_without_stored_settings_are_refused_and_store_none() {
    let (tmp, dbs) = populated("unsettled");
    let db = tmp.0.join("db");
    {
        let raw = raw_db(&db);
        raw.delete(b"idem/ns/orders").unwrap();
    }
    let dry = {
        let (ok, _, out, err) = orders("replay", &dbs, &["--dry-run"]);
        assert!(ok, "{err}");
        out
    };
    for (cmd, args) in [
        ("replay", &["--exec", "cat >/dev/null"][..]),
        ("archive", &["--id", "1", "--note", "spam"]),
    ] {
        let (ok, code, _, err) = orders(cmd, &dbs, args);
        assert!(!ok && code == Some(1), "{cmd}: {code:?} {err}");
        assert!(err.contains("no settings for namespace"), "{cmd}: {err}");
        // Before, the command went on with the default retention (7 x a 24 h TTL)
        // and stored it as the application's.
        assert!(
            idem::stored_config(&db, "orders").unwrap().is_none(),
            "{cmd}"
        );
    }
    let (ok, _, again, err) = orders("replay", &dbs, &["--dry-run"]);
    assert!(ok, "{err}");
    assert_eq!(again, dry, "nothing was replayed or archived");
}

#[test]
fn read_only_commands_work_while_an_application_holds_the_database() {
    let (tmp, dbs) = populated("held");
    let engine = Engine::builder()
        .namespace("orders", NamespaceConfig::new())
        .durable(tmp.0.join("db"))
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("orders").unwrap();
    // The application holds ord-2 and has just completed ord-3.
    let _held = match ns.claim(b"ord-2").unwrap() {
        Claim::Acquired(g) => g,
        other => panic!("{other:?}"),
    };
    match ns.claim(b"ord-3").unwrap() {
        Claim::Acquired(g) => g.complete().unwrap(),
        other => panic!("{other:?}"),
    }
    // Before, every command failed: the database is already open.
    let dry = read_only_commands(&dbs);
    // The dry run sees the application's claims: #2 held, #3 and #5 done.
    let count = |label: &str| row(&dry, label).last().copied().unwrap_or_default();
    let labels = [
        "would be replayed ",
        "would be replayed: already done",
        "skipped: key in progress",
    ];
    assert_eq!(labels.map(count), ["2", "2", "1"], "{dry}");
    assert!(dry.contains("key held by a live claim until"), "{dry}");
    // A command that changes the store still needs the database to itself.
    let (ok, code, _, err) = orders("archive", &dbs, &["--id", "1", "--note", "x"]);
    assert!(!ok && code == Some(1), "{err}");
}

#[test]
fn a_bad_actor_or_note_is_a_usage_error_before_anything_is_opened() {
    let tmp = TempDir::new("actor");
    let missing = tmp.0.join("nothing-here");
    let dbs = missing.to_str().unwrap();
    let long = "a".repeat(idem::MAX_ACTOR_LEN + 1);
    for args in [
        &["--id", "1", "--note", "x", "--actor", "two words"][..],
        &["--id", "1", "--note", "x", "--actor", ""],
        &["--id", "1", "--note", "x", "--actor", &long],
        &["--id", "1", "--note", " starts with a space"],
        &["--id", "1", "--note", ""],
    ] {
        // Before, the database was opened first: "no idem database", status 1.
        let (_, code, _, err) = orders("archive", dbs, args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("--actor") || err.contains("--note"), "{err}");
    }
    let (_, code, _, err) = orders("replay", dbs, &["--exec", "true", "--actor", "a b"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!missing.exists());
}

#[test]
fn all_and_state_together_are_a_usage_error() {
    let tmp = TempDir::new("all-state");
    let missing = tmp.0.join("nothing-here");
    let dbs = missing.to_str().unwrap();
    // Before, `--all` took every state and `--state archived` was silently ignored.
    for (cmd, args) in [
        ("list", &["--all", "--state", "archived"][..]),
        ("replay", &["--all", "--state", "archived", "--dry-run"]),
    ] {
        let (_, code, _, err) = orders(cmd, dbs, args);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(err.contains("--all and --state"), "{cmd}: {err}");
    }
    assert!(!missing.exists());
}

#[test]
fn an_option_that_does_not_apply_to_the_command_is_refused() {
    let tmp = TempDir::new("ignored");
    let dbs = tmp.0.join("nothing-here");
    let dbs = dbs.to_str().unwrap();
    for (cmd, args, named) in [
        ("list", &["--exec", "x"][..], "--exec"),
        ("list", &["--dry-run"], "--dry-run"),
        ("list", &["--note", "x"], "--note"),
        ("health", &["--dry-run"], "--dry-run"),
        ("health", &["--all"], "--all"),
        ("show", &["--id", "1", "--state", "archived"], "--state"),
        ("show", &["--id", "1", "--actor", "a"], "--actor"),
        (
            "archive",
            &["--id", "1", "--note", "x", "--dry-run"],
            "--dry-run",
        ),
        ("archive", &["--id", "1", "--note", "x", "--all"], "--all"),
        ("replay", &["--dry-run", "--note", "x"], "--note"),
    ] {
        // Before, the option was ignored: the command went on to the database.
        let (_, code, _, err) = orders(cmd, dbs, args);
        assert_eq!(code, Some(2), "{cmd} {args:?}: {err}");
        assert!(
            err.contains(&format!("option {named} does not apply")),
            "{err}"
        );
    }
}

/// A fresh directory named after `tag` holding a database whose namespace `orders`
/// has the given dead letters (key, payload), and that database's path.
fn with_letters(tag: &str, cfg: NamespaceConfig, letters: &[(&[u8], &[u8])]) -> (TempDir, String) {
    let tmp = TempDir::new(tag);
    let db = tmp.0.join("db");
    let engine = open_orders(&db, Engine::builder(), cfg);
    let dlq = engine.dlq("orders").unwrap();
    for (key, payload) in letters {
        dlq.quarantine(key, payload, "downstream-unavailable:test")
            .unwrap();
    }
    drop(engine);
    let dbs = db.to_str().unwrap().to_owned();
    (tmp, dbs)
}

#[test]
fn an_empty_exec_or_schema_command_is_a_usage_error_and_changes_nothing() {
    let (tmp, dbs) = populated("blank");
    let before = snapshot(&tmp.0.join("db"));
    for args in [
        &["--exec", ""][..],
        &["--exec", "  "],
        &["--exec", "true", "--schema-cmd", ""],
        &["--dry-run", "--schema-cmd", " "],
    ] {
        let (ok, code, _, err) = orders("replay", &dbs, args);
        assert!(!ok && code == Some(2), "{args:?}: {code:?} {err}");
        assert!(err.contains("needs a command"), "{args:?}: {err}");
    }
    assert_eq!(snapshot(&tmp.0.join("db")), before);
}

#[test]
fn a_command_that_echoes_a_large_payload_does_not_wait_on_itself() {
    // Far more than a pipe holds (64 KiB), in many lines: `cat` writes its output
    // while its input is still being written.
    let payload: Vec<u8> = (0..20_000)
        .flat_map(|i| format!("line {i:08} of a long payload\n").into_bytes())
        .collect();
    let (_tmp, dbs) = with_letters("echo", NamespaceConfig::new(), &[(b"ord-big", &payload)]);
    // `timeout` ends a run that waits on itself (exit 124) instead of the test.
    let run = |args: &[&str]| {
        let mut all = vec!["120", env!("CARGO_BIN_EXE_idem"), "dlq", "replay", &dbs];
        all.extend(["--namespace", "orders"]);
        all.extend_from_slice(args);
        let out = Command::new("timeout").args(&all).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.code(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&["--dry-run", "--schema-cmd", "cat"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(row(&out, "would be replayed")[3], "1", "{out}");
    let (code, out, err) = run(&["--exec", "cat", "--schema-cmd", "cat"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(row(&out, "replayed")[1], "1", "{out}");
}

#[test]
fn the_handler_gets_the_keys_bytes_as_they_are() {
    let keys: [&[u8]; 3] = [b"k\xff", b"k\xfe", b"a\0b"];
    let letters: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (*k, &b"p"[..])).collect();
    let (tmp, dbs) = with_letters("bytes", NamespaceConfig::new(), &letters);
    let seen = tmp.0.join("seen");
    let exec = format!(
        "printf '%s %s %s\\n' \"$IDEM_KEY_HEX\" \"${{IDEM_KEY+set}}\" \
         \"$(printf %s \"$IDEM_KEY\" | od -An -tx1 | tr -d ' \\n')\" >> {}",
        seen.display()
    );
    // Run with IDEM_KEY (and IDEM_KEY_HEX) already in idem's own environment, as
    // inside another replay's handler: the handler sees only its own key's.
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "dlq",
            "replay",
            &dbs,
            "--namespace",
            "orders",
            "--exec",
            &exec,
        ])
        .env("IDEM_KEY", "stale")
        .env("IDEM_KEY_HEX", "5354414c45")
        .output()
        .unwrap();
    let (ok, out, err) = (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(ok, "{err}");
    assert_eq!(row(&out, "replayed")[1], "3", "{out}");
    let mut lines: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    // Two keys that differ in a byte that is not UTF-8 stay two keys; a key with a
    // NUL byte has no IDEM_KEY (no variable can hold it) but its hexadecimal.
    assert_eq!(lines, ["610062  ", "6bfe set 6bfe", "6bff set 6bff"]);
}

#[test]
fn a_message_whose_key_the_namespace_now_refuses_is_left_and_the_rest_replayed() {
    let long = [b'x'; 60];
    let letters: [(&[u8], &[u8]); 3] = [(b"ord-1", b"a"), (&long, b"b"), (b"ord-3", b"c")];
    let (_tmp, dbs) = with_letters("refused", NamespaceConfig::new(), &letters);
    {
        // The application lowers its longest key (stored at its next open).
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new().max_key_len(32))
            .durable(&dbs)
            .maintenance_interval(None)
            .build()
            .unwrap();
        drop(engine);
    }
    let (ok, _, dry, err) = orders("replay", &dbs, &["--dry-run"]);
    assert!(ok, "{err}");
    assert_eq!(row(&dry, "would be replayed")[3], "2", "{dry}");
    assert_eq!(row(&dry, "skipped: key refused")[5], "1", "{dry}");
    let (ok, _, run, err) = orders("replay", &dbs, &["--exec", "true"]);
    assert!(ok, "{err}");
    assert_eq!(row(&run, "replayed")[1], "2", "{run}");
    assert_eq!(row(&run, "skipped: key refused")[5], "1", "{run}");
    assert!(run.contains("key-refused"), "{run}");
    let (_, _, list, _) = orders("list", &dbs, &["--id", "2"]);
    let cols = row(&list, "      #2");
    assert_eq!(
        (cols[1], cols[2]),
        ("quarantined", "0"),
        "left as it was: {list}"
    );
}

#[test]
fn a_replay_of_many_named_ids_with_one_it_cannot_take_does_nothing() {
    let letters: Vec<(Vec<u8>, Vec<u8>)> = (1..=70)
        .map(|i| (format!("ord-{i}").into_bytes(), b"p".to_vec()))
        .collect();
    let refs: Vec<(&[u8], &[u8])> = letters
        .iter()
        .map(|(k, p)| (k.as_slice(), p.as_slice()))
        .collect();
    let (_tmp, dbs) = with_letters("named", NamespaceConfig::new(), &refs);
    let (ok, _, _, err) = orders("replay", &dbs, &["--exec", "true", "--id", "70"]);
    assert!(ok, "{err}");
    let ids: Vec<String> = (1..=70).map(|i| i.to_string()).collect();
    let mut args = vec!["--exec", "true"];
    for id in &ids {
        args.extend(["--id", id.as_str()]);
    }
    let (ok, code, _, err) = orders("replay", &dbs, &args);
    assert!(!ok && code == Some(1), "{code:?} {err}");
    let (_, _, list, _) = orders("list", &dbs, &["--state", "replayed"]);
    let replayed = list.lines().filter(|l| l.contains("replayed")).count();
    assert_eq!(replayed, 1, "only #70, replayed before: {list}");
}

#[test]
fn a_replay_stopped_in_a_later_chunk_reports_the_chunks_it_replayed() {
    // 70 messages, more than one chunk of 64; the schema command gives no verdict on
    // the last one's payload.
    let letters: Vec<(Vec<u8>, Vec<u8>)> = (1..=70)
        .map(|i| {
            let payload = if i == 70 { "bad" } else { "p" };
            (format!("ord-{i}").into_bytes(), payload.as_bytes().to_vec())
        })
        .collect();
    let refs: Vec<(&[u8], &[u8])> = letters
        .iter()
        .map(|(k, p)| (k.as_slice(), p.as_slice()))
        .collect();
    let (_tmp, dbs) = with_letters("later-chunk", NamespaceConfig::new(), &refs);
    let schema = r#"[ "$(cat)" != bad ] || exit 127"#;
    let (ok, code, out, err) = orders(
        "replay",
        &dbs,
        &["--schema-cmd", schema, "--exec", "cat >/dev/null"],
    );
    assert!(!ok && code == Some(1), "{code:?} {out}{err}");
    // Before, the command printed nothing: the first chunk's 64 replays went
    // unreported, and the error read as if #65 to #69 had been handled.
    assert!(out.starts_with("replay (70 messages)"), "{out}");
    assert_eq!(row(&out, "replayed ")[1], "64", "{out}");
    assert_eq!(row(&out, "archived: schema")[2], "0", "{out}");
    assert!(err.contains("gave no verdict"), "{err}");
    assert!(err.contains("on message #70"), "{err}");
    assert!(
        err.contains("stopped before message #65: it and the selected messages after it"),
        "{err}"
    );
    let (ok, _, list, err) = orders("list", &dbs, &[]);
    assert!(ok, "{err}");
    assert!(list.contains("6 message(s)"), "{list}");
    let (ok, _, health, err) = orders("health", &dbs, &[]);
    assert!(ok, "{err}");
    assert_eq!(row(&health, "replayed")[1], "64", "{health}");
}

#[test]
fn a_listing_says_how_many_stored_letters_it_could_not_decode() {
    let (tmp, dbs) = populated("undecodable");
    {
        let db = tmp.0.join("db");
        let raw = raw_db(&db);
        let cf = raw.cf_handle("dlq:orders").unwrap();
        let mut key = vec![b'm'];
        key.extend_from_slice(&3u64.to_be_bytes());
        raw.put_cf(cf, key, b"garbage").unwrap();
    }
    let (ok, _, out, err) = orders("list", &dbs, &["--all"]);
    assert!(ok, "{err}");
    assert!(out.contains("4 message(s)"), "{out}");
    assert!(
        out.contains("1 more stored message(s) or damaged key(s) could not be decoded"),
        "{out}"
    );
    // Without damage, no such line.
    let (_tmp2, clean) = populated("decodable");
    let (_, _, out, _) = orders("list", &clean, &["--all"]);
    assert!(!out.contains("could not be decoded"), "{out}");
}

#[test]
fn an_archive_whose_output_cannot_be_written_still_archives_every_id() {
    let (_tmp, dbs) = populated("full");
    // Every write to /dev/full fails: the command fails on its output, after the
    // archive, not half way through it.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec >/dev/full; '{}' dlq archive '{dbs}' --namespace orders --id 1 --id 2 --note spam:test",
            env!("CARGO_BIN_EXE_idem")
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    for id in ["1", "2"] {
        let (_, _, list, _) = orders("list", &dbs, &["--all", "--id", id]);
        let cols = row(&list, &format!("      #{id}"));
        assert_eq!(cols[1], "archived", "#{id}: {list}");
    }
}

/// `archive` and `replay --exec` refused for the ids they name (one that is not
/// there, named twice, or that cannot be archived or replayed) leave the database
/// as it was: before, each opened an engine first, whose open took over the claims
/// left in flight, rewrote the journal and dropped the application's saved
/// prefilter, and only then found the ids bad.
#[test]
fn archive_and_replay_refused_for_their_ids_leave_the_database_as_it_was() {
    let (tmp, dbs) = populated("bad-ids");
    let db = tmp.0.join("db");
    let (ok, _, _, err) = orders("archive", &dbs, &["--id", "4", "--note", "old"]);
    assert!(ok, "{err}");
    // The application opens and closes it, saving its prefilter.
    drop(open_orders(&db, Engine::builder(), NamespaceConfig::new()));
    assert!(
        std::fs::read_dir(&db).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("idem-prefilter")),
        "a saved prefilter"
    );
    let before = snapshot(&db);
    for (cmd, args, says) in [
        ("archive", &["--id", "99", "--note", "x"][..], "#99"),
        (
            "archive",
            &["--id", "1", "--id", "1", "--note", "x"],
            "named twice",
        ),
        ("archive", &["--id", "4", "--note", "x"], "archived"),
        ("replay", &["--exec", "true", "--id", "99"], "#99"),
        (
            "replay",
            &["--exec", "true", "--id", "1", "--id", "4"],
            "#4",
        ),
    ] {
        let (ok, code, out, err) = orders(cmd, &dbs, args);
        assert!(
            !ok && code == Some(1),
            "{cmd} {args:?}: {code:?} {out}{err}"
        );
        assert!(err.contains(says), "{cmd} {args:?}: {err}");
        assert!(!err.contains("took over"), "{cmd} {args:?}: {err}");
        let after = snapshot(&db);
        assert_eq!(
            after.keys().collect::<Vec<_>>(),
            before.keys().collect::<Vec<_>>(),
            "{cmd} {args:?}: no file appeared or vanished"
        );
        for (name, bytes) in &before {
            assert!(after[name] == *bytes, "{cmd} {args:?}: {name} changed");
        }
    }
    let (ok, _, out, err) = orders("list", &dbs, &[]);
    assert!(ok, "{err}");
    assert!(out.contains("4 message(s)"), "{out}");
}

/// A `--class` that no stored reason can have (empty, or holding whitespace: a class
/// is a reason's first word) is a usage error: before, it selected nothing, and
/// `list` said "0 message(s)" and a replay replayed none, as if there were none.
#[test]
fn a_class_no_message_can_have_is_a_usage_error() {
    let (_tmp, dbs) = populated("bad-class");
    for class in ["", " ", "downstream-unavailable:payments-api 503"] {
        for (cmd, args) in [
            ("list", &["--class", class][..]),
            ("replay", &["--dry-run", "--class", class]),
        ] {
            let (_, code, out, err) = orders(cmd, &dbs, args);
            assert_eq!(code, Some(2), "{cmd} --class {class:?}: {out}{err}");
            assert!(err.contains("--class"), "{cmd} --class {class:?}: {err}");
        }
    }
    // A class and its sub-classes still select.
    for class in [
        "downstream-unavailable",
        "downstream-unavailable:payments-api",
    ] {
        let (ok, _, out, err) = orders("list", &dbs, &["--class", class]);
        assert!(ok, "{err}");
        assert!(out.contains("5 message(s)"), "{class}: {out}");
    }
}

/// A replay takes quarantined and under-review messages only: `--state replayed` or
/// `--state archived` on a replay is a usage error. Before, the replay passed over
/// every message it selected and reported "replay (0 messages)", status 0.
#[test]
fn a_replay_of_a_state_it_cannot_take_is_a_usage_error() {
    let (_tmp, dbs) = populated("terminal-state");
    let (ok, _, _, err) = orders("archive", &dbs, &["--id", "4", "--note", "old"]);
    assert!(ok, "{err}");
    for state in ["replayed", "archived"] {
        for mode in [&["--dry-run"][..], &["--exec", "true"]] {
            let mut args = mode.to_vec();
            args.extend(["--state", state]);
            let (_, code, out, err) = orders("replay", &dbs, &args);
            assert_eq!(code, Some(2), "{args:?}: {out}{err}");
            assert!(err.contains(state), "{args:?}: {err}");
        }
    }
    // `list` still selects them.
    let (ok, _, out, err) = orders("list", &dbs, &["--state", "archived"]);
    assert!(ok, "{err}");
    assert!(out.contains("1 message(s)"), "{out}");
    let (ok, _, out, err) = orders("replay", &dbs, &["--dry-run", "--state", "quarantined"]);
    assert!(ok, "{err}");
    assert!(out.contains("dry run (4 messages)"), "{out}");
}

/// An `--id` that is no number is quoted as given (before, `--id #` was quoted as
/// `""`, the value without the `#` the tool prints before ids).
#[test]
fn a_bad_id_is_quoted_as_given() {
    for (bad, quoted) in [("#", "\"#\""), ("#x", "\"#x\""), ("one", "\"one\"")] {
        let (_, code, _, err) = idem(&["dlq", "list", "x", "-n", "n", "--id", bad]);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains(&format!("--id: {quoted}")), "{bad}: {err}");
    }
}

/// Whether `out` holds a control character other than its line ends.
fn raw_control(out: &str) -> bool {
    out.chars().any(|c| c.is_control() && c != '\n')
}

/// A reason over two lines with an escape sequence, from an actor whose name holds
/// one, and an `--exec` command whose stderr is the same: `show` prints each
/// transition on its line and the replay each note on its line, escaped, and no
/// escape sequence reaches the terminal. (Before, both were printed raw: the reason's
/// second line fell outside the history table, and ESC went to the terminal.)
#[test]
fn show_and_replay_print_reasons_notes_and_actors_on_one_line_escaped() {
    let tmp = TempDir::new("text");
    let db = tmp.0.join("db");
    {
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new())
            .durable(&db)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("orders").unwrap();
        dlq.as_actor("ops\u{1b}]0;owned\u{7}")
            .unwrap()
            .quarantine(
                b"ord-1",
                b"v2:a",
                "poison:json line one\nline two \u{1b}[2J",
            )
            .unwrap();
    }
    let db = db.to_str().unwrap();
    let (_, code, out, err) = idem(&["dlq", "show", db, "--namespace", "orders", "--id", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!raw_control(&out), "{out:?}");
    assert!(
        out.contains("reason      poison:json line one\\nline two \\u{1b}[2J\n"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.contains("quarantined") && l.contains("ops"))
        .unwrap_or_else(|| panic!("no history row in:\n{out}"));
    assert!(row.contains("ops\\u{1b}]0;owned\\u{7}"), "{row}");
    assert!(
        row.ends_with("poison:json line one\\nline two \\u{1b}[2J"),
        "{row}"
    );
    let (_, code, out, err) = idem(&[
        "dlq",
        "replay",
        db,
        "--namespace",
        "orders",
        "--exec",
        "printf 'boom: first\\nsecond\\033[2J' >&2; exit 3",
    ]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(!raw_control(&out), "{out:?}");
    assert!(
        out.lines()
            .any(|l| l.trim_start() == "#1  boom: first\\nsecond\\u{1b}[2J"),
        "{out}"
    );
    // Stored as it came: only its printing is escaped.
    let (_, code, out, err) = idem(&["dlq", "show", db, "--namespace", "orders", "--id", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!raw_control(&out), "{out:?}");
    assert!(
        out.contains("reason      boom: first\\nsecond\\u{1b}[2J\n"),
        "{out}"
    );
}
