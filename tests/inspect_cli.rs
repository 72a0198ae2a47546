//! `idem inspect`: a key that cannot exist (empty, or longer than the namespace
//! takes) is reported as invalid, not as unknown; a
//! path that is not there is said to be missing, not to hold no database.

#![cfg(all(feature = "durable", not(idem_loom)))]

use std::process::Command;

use idem::{Engine, NamespaceConfig};

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes a database in `dir` whose namespace "orders" holds `key`, completed.
fn orders_with_done(dir: &std::path::Path, key: &[u8]) {
    let engine = Engine::builder()
        .namespace("orders", NamespaceConfig::new())
        .durable(dir)
        .maintenance_interval(None)
        .build()
        .unwrap();
    let ns = engine.namespace("orders").unwrap();
    let idem::Claim::Acquired(g) = ns.claim(key).unwrap() else {
        panic!("a new key")
    };
    g.complete().unwrap();
}

#[test]
fn an_empty_key_is_refused_as_invalid() {
    let tmp =
        TempDir(std::env::temp_dir().join(format!("idem-inspect-cli-{}", std::process::id())));
    let dir = tmp.0.join("db");
    Engine::builder()
        .namespace("orders", NamespaceConfig::new())
        .durable(&dir)
        .maintenance_interval(None)
        .build()
        .unwrap();
    let inspect = |key: &str| {
        Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["inspect", dir.to_str().unwrap(), "-n", "orders", "-k", key])
            .output()
            .expect("the idem binary runs")
    };
    // Before, the empty key was looked up and answered "unknown".
    let out = inspect("");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("the key is empty"), "{stderr}");
    assert!(!stdout.contains("unknown"), "{stdout}");
    // A key that is not there is still unknown.
    let out = inspect("ord-1");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("key \"ord-1\" in \"orders\": unknown"),
        "{stdout}"
    );
    // One longer than the namespace takes (4096 bytes by default) is refused as
    // the engine refuses it; before, it was "unknown".
    let long = "k".repeat(4097);
    let out = inspect(&long);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("4097"), "{stderr}");
    assert!(!stdout.contains("unknown"), "{stdout}");
    // The library says the same.
    let seen = idem::inspect(&dir, 0).unwrap();
    assert_eq!(
        seen.key("orders", long.as_bytes()),
        Err(idem::Error::InvalidKey(idem::KeyError::TooLong {
            len: 4097,
            max: 4096
        }))
    );
    assert_eq!(seen.key("orders", &long.as_bytes()[..4096]), Ok(None));
}

/// The key view judges a record at the same time as the namespace row: a record
/// past its retention is expired, not done.
#[test]
fn a_key_past_its_retention_is_shown_expired() {
    let tmp = TempDir(
        std::env::temp_dir().join(format!("idem-inspect-cli-expired-{}", std::process::id())),
    );
    let dir = tmp.0.join("db");
    {
        // Completed in 2023, retention 60 s: long gone by the wall clock.
        let clock = idem::ManualClock::new(1_700_000_000_000);
        let engine = Engine::builder()
            .namespace(
                "orders",
                NamespaceConfig::new()
                    .ttl(std::time::Duration::from_secs(60))
                    .retention(std::time::Duration::from_secs(60)),
            )
            .durable(&dir)
            .clock(clock)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let ns = engine.namespace("orders").unwrap();
        let idem::Claim::Acquired(g) = ns.claim(b"old").unwrap() else {
            panic!("a new key")
        };
        g.complete().unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "inspect",
            dir.to_str().unwrap(),
            "-n",
            "orders",
            "-k",
            "old",
        ])
        .output()
        .expect("the idem binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // Before, the namespace row counted it expired and the key view said "done".
    assert!(
        stdout.contains("key \"old\" in \"orders\": expired"),
        "{stdout}"
    );
}

#[test]
fn a_missing_directory_is_said_to_be_missing() {
    let tmp = TempDir(
        std::env::temp_dir().join(format!("idem-inspect-cli-missing-{}", std::process::id())),
    );
    let dir = tmp.0.join("not-there");
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["inspect", dir.to_str().unwrap()])
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No such file or directory"), "{stderr}");
    assert!(!stderr.contains("no idem database"), "{stderr}");
    assert!(!dir.exists(), "nothing was created");
}

/// `idem inspect` reads: the database directory holds the same files, of the same
/// contents, after it as before (RocksDB's own info log included).
#[test]
fn inspect_changes_nothing_in_the_directory() {
    let tmp = TempDir(
        std::env::temp_dir().join(format!("idem-inspect-cli-unchanged-{}", std::process::id())),
    );
    let dir = tmp.0.join("db");
    orders_with_done(&dir, b"k");
    let listing = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let bytes = std::fs::read(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), bytes)
            })
            .collect();
        files.sort();
        files
    };
    let before = listing();
    for args in [vec![], vec!["-n", "orders", "-k", "k"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .arg("inspect")
            .arg(&dir)
            .args(args)
            .output()
            .expect("the idem binary runs");
        assert!(out.status.success(), "{out:?}");
    }
    let after = listing();
    let names = |l: &[(String, Vec<u8>)]| l.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&after), names(&before));
    assert!(after == before, "a file's contents changed");
}

/// A key that is not UTF-8 text is looked up from its hexadecimal digits
/// (`--key-hex`, either case); digits that do not make whole bytes, or both
/// `--key` and `--key-hex`, are refused before the database is read.
#[test]
fn a_key_of_any_bytes_is_looked_up_in_hexadecimal() {
    let tmp =
        TempDir(std::env::temp_dir().join(format!("idem-inspect-cli-hex-{}", std::process::id())));
    let dir = tmp.0.join("db");
    orders_with_done(&dir, &[0xff, 0x00, 0x41]);
    let inspect = |args: &[&str]| {
        let mut all = vec!["inspect", dir.to_str().unwrap(), "-n", "orders"];
        all.extend_from_slice(args);
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(&all)
            .output()
            .expect("the idem binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for digits in ["ff0041", "FF0041"] {
        let (code, stdout, stderr) = inspect(&["--key-hex", digits]);
        assert_eq!(code, Some(0), "{stdout}{stderr}");
        assert!(
            stdout.contains("key 0xff0041 in \"orders\": done"),
            "{stdout}"
        );
    }
    // Another key of those bytes' neighbours is unknown.
    let (code, stdout, _) = inspect(&["--key-hex", "ff0042"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("key 0xff0042 in \"orders\": unknown"),
        "{stdout}"
    );
    for bad in [
        &["--key-hex", "ff004"][..],
        &["--key-hex", "ff00zz"][..],
        &["--key", "a", "--key-hex", "61"][..],
    ] {
        let (code, stdout, stderr) = inspect(bad);
        assert_ne!(code, Some(0), "{bad:?}: {stdout}");
        assert!(
            !stdout.contains("database:"),
            "{bad:?} read the database: {stdout}"
        );
        assert!(
            stderr.contains("hexadecimal") || stderr.contains("one of --key and --key-hex"),
            "{bad:?}: {stderr}"
        );
    }
}

/// A directory whose name starts with `-` is inspected after `--` (before, it could
/// only be named by another path to it: as an argument it was an unknown option).
#[test]
fn a_directory_named_like_an_option_is_inspected_after_a_double_dash() {
    let tmp =
        TempDir(std::env::temp_dir().join(format!("idem-inspect-cli-dash-{}", std::process::id())));
    orders_with_done(&tmp.0.join("-db"), b"order-1");
    let inspect = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .current_dir(&tmp.0)
            .args(args)
            .output()
            .expect("the idem binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) =
        inspect(&["inspect", "-n", "orders", "-k", "order-1", "--", "-db"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("in \"orders\": done"), "{stdout}");
    // Without `--` the name is an option, refused as unknown; after `--` one
    // directory only.
    let (code, _, stderr) = inspect(&["inspect", "-db"]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("unknown option \"-db\""), "{stderr}");
    let (code, _, stderr) = inspect(&["inspect", "--", "-db", "other"]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("unexpected argument \"other\""), "{stderr}");
}

/// A path that is a file is said not to be a directory (before, "the directory ...
/// holds no idem database"), and the file is left as it was.
#[test]
fn a_file_is_said_not_to_be_a_directory() {
    let tmp =
        TempDir(std::env::temp_dir().join(format!("idem-inspect-cli-file-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let file = tmp.0.join("notes.txt");
    std::fs::write(&file, b"not a database").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("inspect")
        .arg(&file)
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not a directory"), "{stderr}");
    assert!(!stderr.contains("the directory"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a database");
    assert!(matches!(
        idem::inspect(&file, 0),
        Err(idem::Error::Store(_))
    ));
}

/// A stored result is shown on its line, whatever its bytes: text quoted with its
/// control characters escaped, other bytes in hexadecimal. Before, its bytes went to
/// the terminal as they were: a newline made a line that read as another field, an
/// escape sequence reached the terminal, and bytes that are not UTF-8 were lost.
#[test]
fn a_result_of_any_bytes_is_shown_on_its_line() {
    let tmp = TempDir(
        std::env::temp_dir().join(format!("idem-inspect-cli-result-{}", std::process::id())),
    );
    let dir = tmp.0.join("db");
    {
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new())
            .durable(&dir)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let ns = engine.namespace("orders").unwrap();
        for (key, result) in [
            (&b"text"[..], &b"ok\n  payload checked  yes\x1b[2J"[..]),
            (b"binary", &[0xff, 0x00, 0x41]),
        ] {
            let idem::Claim::Acquired(g) = ns.claim(key).unwrap() else {
                panic!("a new key")
            };
            g.complete_with_result(result).unwrap();
        }
    }
    let inspect = |key: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["inspect", dir.to_str().unwrap(), "-n", "orders", "-k", key])
            .output()
            .expect("the idem binary runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("the output is text")
    };
    let out = inspect("text");
    assert_eq!(out.matches("payload checked").count(), 2, "{out}");
    assert!(!out.contains('\x1b'), "{out}");
    assert!(
        out.contains(r#"result           29 bytes: "ok\n  payload checked  yes\u{1b}[2J""#),
        "{out}"
    );
    let out = inspect("binary");
    assert!(out.contains("result           3 bytes: 0xff0041"), "{out}");
}
