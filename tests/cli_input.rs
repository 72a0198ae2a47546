//! The `idem` binary on bad input: a clear message and a non-zero status, nothing
//! changed, no panic and no hang. `idem plan` says a duration of zero, or of more
//! seconds than it can count, as what it is; `idem inspect` (and the read-only `idem
//! dlq` commands, which open a database the same way) says an empty path is empty and
//! a database with a damaged seed is none it can read, and writes nothing, whatever
//! the directory holds.

#![cfg(not(idem_loom))]

use std::process::{Command, Output};

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Before, both were "is not a duration: write a whole number with a unit", about
/// values that are a whole number with a unit.
#[test]
fn plan_says_a_duration_of_zero_or_of_too_many_seconds_is_that() {
    for (args, says) in [
        (
            ["--rate", "5/s", "--ttl", "0s"].as_slice(),
            "--ttl \"0s\" is no time at all",
        ),
        (
            &["--rate", "5/s", "--ttl", "1h", "--retention", "0d"],
            "--retention \"0d\" is no time at all",
        ),
        (
            &["--rate", "5/s", "--ttl", "99999999999999999999d"],
            "--ttl \"99999999999999999999d\" is longer than a namespace takes",
        ),
        (
            &[
                "--rate",
                "5/s",
                "--ttl",
                "1h",
                "--retention",
                "213503982334602d",
            ],
            "a retention is at most 2^50 ms",
        ),
    ] {
        let out = idem(&[&["plan"], args].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("is not a duration"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // What is no duration is still said to be none.
    for bad in ["1e309", "0", "1.5h", "3w", ""] {
        let out = idem(&["plan", "--rate", "5/s", "--ttl", bad]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("is not a duration"), "{bad}: {err}");
    }
}

#[cfg(feature = "durable")]
mod durable {
    use super::*;
    use idem::{Engine, NamespaceConfig, SyncPolicy};
    use std::path::{Path, PathBuf};

    /// A directory removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let d = std::env::temp_dir().join(format!(
                "idem-cli-input-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            TempDir(d)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Every entry of `dir` (and `dir` itself): name, kind, length, modification
    /// time and contents, so that a write, a new file, a removed one or a touched
    /// time shows.
    type Snapshot = Vec<(String, bool, u64, std::time::SystemTime, Vec<u8>)>;

    fn snapshot(dir: &Path) -> Snapshot {
        let meta = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        let m = meta(dir);
        let mut all = vec![(
            ".".to_owned(),
            m.is_dir(),
            0,
            m.modified().unwrap(),
            Vec::new(),
        )];
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let m = meta(&e.path());
            let bytes = if m.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            all.push((
                e.file_name().to_string_lossy().into_owned(),
                m.is_dir(),
                m.len(),
                m.modified().unwrap(),
                bytes,
            ));
        }
        all.sort();
        all
    }

    /// Names of the entries that differ between two snapshots.
    fn changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
        let mut names: Vec<String> = before
            .iter()
            .filter(|b| !after.contains(b))
            .chain(after.iter().filter(|a| !before.contains(a)))
            .map(|e| e.0.clone())
            .collect();
        names.dedup();
        names
    }

    /// Makes a database in `dir` with namespace "orders" holding key "done",
    /// completed.
    fn orders(dir: &Path) {
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new())
            .durable(dir)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let ns = engine.namespace("orders").unwrap();
        let idem::Claim::Acquired(g) = ns.claim(b"done").unwrap() else {
            panic!("a new key")
        };
        g.complete().unwrap();
    }

    /// Writes `value` under `key` in the default column family of the RocksDB
    /// database in `dir`, as a tool other than idem could.
    fn put_raw(dir: &Path, key: &[u8], value: &[u8]) {
        let cfs = rocksdb::DB::list_cf(&rocksdb::Options::default(), dir).unwrap();
        let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), dir, &cfs).unwrap();
        db.put(key, value).unwrap();
    }

    /// Before, "durable store failed during open read-only: : No such file or
    /// directory (os error 2)": an empty path is said to be empty, and nothing in the
    /// working directory (here a database) is read as if it were the database.
    #[test]
    fn an_empty_path_is_said_to_be_empty() {
        let tmp = TempDir::new("empty-path");
        orders(&tmp.0);
        let before = snapshot(&tmp.0);
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["inspect", ""])
            .current_dir(&tmp.0)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("the database path is empty"), "{err}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(changed(&before, &snapshot(&tmp.0)), Vec::<String>::new());
    }

    /// Before, "the database at DIR has format version 1; this build reads version
    /// 1": a refusal whose reason contradicts itself. A seed of the wrong length is
    /// no database this build can read, as a missing one is, and the directory is
    /// left as it was.
    #[test]
    fn a_database_whose_seed_is_damaged_is_refused_without_contradiction() {
        let tmp = TempDir::new("seed");
        let dir = tmp.0.join("db");
        orders(&dir);
        put_raw(&dir, b"idem/seed", b"abc");
        let dir_s = dir.to_str().unwrap();
        let before = snapshot(&dir);
        for args in [
            vec!["inspect", dir_s],
            vec!["inspect", dir_s, "-n", "orders", "-k", "done"],
            vec!["dlq", "list", dir_s, "-n", "orders"],
        ] {
            let out = idem(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(
                err.contains("holds no idem database this build can read"),
                "{args:?}: {err}"
            );
            assert!(!err.contains("has format version"), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?}");
        }
        // (`dlq list` starts RocksDB's info log afresh, as README says; inspect
        // writes nothing at all.)
        let after = snapshot(&dir);
        let touched: Vec<String> = changed(&before, &after)
            .into_iter()
            .filter(|n| n != "." && n != "LOG" && !n.starts_with("LOG.old."))
            .collect();
        assert_eq!(touched, Vec::<String>::new());
        // The engine's own open says it as they do (before: "has format version 1;
        // this build reads version 1").
        let refused = Engine::builder()
            .namespace("orders", NamespaceConfig::new())
            .durable(&dir)
            .maintenance_interval(None)
            .build()
            .unwrap_err();
        assert!(
            matches!(refused, idem::Error::IncompatibleFormat { found: None, .. }),
            "{refused:?}"
        );
        assert!(
            refused
                .to_string()
                .contains("holds no idem database this build can read"),
            "{refused}"
        );
    }

    /// `idem inspect` writes nothing and ends with a message, whatever the directory
    /// holds: another program's RocksDB, a database of another format version, a
    /// damaged or foreign journal, a journal far longer than its header says, or a
    /// database an engine of this process holds open with claims in flight.
    #[test]
    fn inspect_changes_nothing_whatever_the_directory_holds() {
        let tmp = TempDir::new("unchanged");
        let base = &tmp.0;
        let mut cases: Vec<(PathBuf, i32, &str)> = Vec::new();

        let other = base.join("other");
        {
            let mut o = rocksdb::Options::default();
            o.create_if_missing(true);
            o.create_missing_column_families(true);
            let db = rocksdb::DB::open_cf(&o, &other, ["done:orders", "claims:orders"]).unwrap();
            db.put(b"hello", b"world").unwrap();
            let done = db.cf_handle("done:orders").unwrap();
            db.put_cf(done, b"k", b"not a record").unwrap();
        }
        cases.push((other, 1, "holds no idem database this build can read"));

        let v2 = base.join("v2");
        orders(&v2);
        put_raw(&v2, b"idem/format", &2u32.to_le_bytes());
        cases.push((v2, 1, "has format version 2; this build reads version 1"));

        let journal = |dir: &Path| -> PathBuf {
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("idem-journal-")
                })
                .expect("a journal file")
        };
        let damaged = |name: &str, edit: &dyn Fn(&mut Vec<u8>)| -> PathBuf {
            let dir = base.join(name);
            orders(&dir);
            let j = journal(&dir);
            let mut bytes = std::fs::read(&j).unwrap();
            edit(&mut bytes);
            std::fs::write(&j, bytes).unwrap();
            dir
        };
        // A slot's check fails: one corrupt marker, counted.
        cases.push((damaged("slot", &|b| b[64 + 16] ^= 0xff), 0, "orders"));
        // The header's version: another build's journal.
        cases.push((
            damaged("journal-version", &|b| b[8] = 9),
            1,
            "has format version 9",
        ));
        // Longer than its header says: read as far as it goes.
        cases.push((
            damaged("long", &|b| b.extend_from_slice(&[0; 4096])),
            0,
            "orders",
        ));

        let held = base.join("held");
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new().sync(SyncPolicy::Never))
            .durable(&held)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let ns = engine.namespace("orders").unwrap();
        let mut in_flight = Vec::new();
        for i in 0..10 {
            match ns.claim(format!("k{i}").as_bytes()).unwrap() {
                idem::Claim::Acquired(g) if i % 2 == 0 => g.complete().unwrap(),
                idem::Claim::Acquired(g) => in_flight.push(g),
                other => panic!("a new key: {other:?}"),
            }
        }
        cases.push((held, 0, "orders"));

        for (dir, code, says) in &cases {
            let d = dir.to_str().unwrap();
            let before = snapshot(dir);
            for args in [
                vec!["inspect", d],
                vec!["inspect", d, "-n", "orders", "-k", "k1"],
            ] {
                let out = idem(&args);
                let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
                assert_eq!(out.status.code(), Some(*code), "{args:?}: {all}");
                assert!(all.contains(says), "{args:?}: {all}");
            }
            assert_eq!(
                changed(&before, &snapshot(dir)),
                Vec::<String>::new(),
                "{}",
                dir.display()
            );
        }
        // What the held database shows: 5 done, 5 in flight, key k1 in flight.
        let out = idem(&[
            "inspect",
            cases[5].0.to_str().unwrap(),
            "-n",
            "orders",
            "-k",
            "k1",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("key \"k1\" in \"orders\": in flight"),
            "{text}"
        );
        drop(in_flight);
        drop(engine);
    }

    /// A namespace's or a state family's name may hold any character but `:` and
    /// NUL, a newline or a terminal's escape among them; `idem inspect` prints keys
    /// and results quoted, their control characters escaped, but these names as they
    /// are: a newline breaks the table's row in two, an escape sequence reaches the
    /// terminal. (Reported: the table and the `state:` line in src/cli/inspect.rs.)
    #[test]
    fn inspect_shows_each_name_on_its_own_line_with_control_characters_escaped() {
        let tmp = TempDir::new("names");
        let dir = tmp.0.join("db");
        let name = "a\u{1b}[31mred\nfake 1 2 3";
        Engine::builder()
            .namespace(name, NamespaceConfig::new())
            .state_family("ledger\u{1b}[2J")
            .durable(&dir)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let out = idem(&["inspect", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("fake")), "{text}");
    }
}
