//! The `idem` binary: the demo verifies exactly-once effects; bad arguments are refused.

#![cfg(not(idem_loom))]

#[cfg(feature = "durable")]
mod util;

use std::process::Command;
#[cfg(feature = "durable")]
use std::process::Stdio;
#[cfg(feature = "durable")]
use std::time::Duration;

fn idem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

/// [`idem`], but a command still running after `limit` is killed and fails the test:
/// for the commands that must end instead of waiting forever.
#[cfg(feature = "durable")]
fn idem_within(args: &[&str], limit: Duration) -> std::process::Output {
    let child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the idem binary runs");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("the idem binary runs"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("idem {args:?} still running after {limit:?}");
        }
    }
}

#[test]
fn output_into_a_pipe_nobody_reads_ends_the_command_quietly() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("help")
        .stdout(writer)
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 141: what a shell reports for a filter that SIGPIPE ended.
    assert_eq!(out.status.code(), Some(141), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}

/// Runs `idem ARGS` (with one environment variable, if given), reads the first line
/// of its output, closes the pipe and waits: that line and how the program ended.
#[cfg(feature = "durable")]
fn first_line_only(
    args: &[&str],
    env: Option<(&str, &std::path::Path)>,
) -> (String, std::process::ExitStatus) {
    use std::io::BufRead;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idem"));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::null());
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the idem binary runs");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (line, child.wait().unwrap())
}

/// `idem demo | head -1`: the demo ends at its next line of output, and takes its
/// temporary directory (a database by then) with it.
#[cfg(feature = "durable")]
#[test]
fn a_demo_whose_output_nobody_reads_leaves_no_temporary_directory() {
    // The reader is gone after the first line: the next line ends the demo.
    let (header, status) = first_line_only(&["demo", "--quick"], None);
    let dir = header
        .split("durable tier in ")
        .nth(1)
        .and_then(|rest| rest.split(" (sync").next())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("no directory in {header:?}"));
    assert!(dir.starts_with(std::env::temp_dir()), "{header}");
    assert_eq!(status.code(), Some(141), "{status:?}");
    // Before, `exit` skipped the directory's removal.
    assert!(!dir.exists(), "{} was left behind", dir.display());
}

#[cfg(feature = "durable")]
#[test]
fn a_durable_bench_whose_output_nobody_reads_leaves_no_database_behind() {
    let tmp = util::TempDir::new();
    // The reader is gone after the first line: the table's first line, written with
    // the filled database in place, ends the program.
    let (header, status) = first_line_only(
        &["bench", "durable", "--disk", "--keys", "100000"],
        Some(("IDEM_BENCH_DIR", tmp.path())),
    );
    assert!(
        header.starts_with("command: idem bench durable"),
        "{header}"
    );
    assert_eq!(status.code(), Some(141), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[cfg(feature = "durable")]
#[test]
fn a_durable_bench_whose_directory_cannot_be_written_fails_with_status_1() {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "durable", "--quick", "--w4"])
        .env("IDEM_BENCH_DIR", "/proc/idem-cannot-write-here")
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Before, the first cell's open panicked (status 101).
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IDEM_BENCH_DIR"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A storage failure under `--disk` is said, status 1. Here the database's files
/// cannot be made: the directory for the cells takes a new directory (the bench's
/// first check) but its paths are so long that RocksDB's file names in it pass the
/// system's limit on a path. Before, the engine's open panicked (status 101).
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_disk_bench_whose_database_cannot_be_made_fails_with_status_1() {
    let tmp = util::TempDir::new();
    // A directory whose path is 4,069 bytes long: `idem-bench-probe-<pid>` fits
    // under it (at most 4,094 with a 7-digit pid, the limit being 4,095), and so does
    // the database's directory `idem-bench-disk-<pid>`, but not a file in that.
    let mut base = tmp.path().to_path_buf();
    while base.as_os_str().len() < 4069 {
        let room = 4069 - base.as_os_str().len() - 1;
        base.push("d".repeat(room.min(200)));
    }
    std::fs::create_dir_all(&base).unwrap();
    assert_eq!(base.as_os_str().len(), 4069);
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "durable", "--disk", "--keys", "1000"])
        .env("IDEM_BENCH_DIR", &base)
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("idem bench durable --disk: open:"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A directory under `tmp` whose path is `len` bytes long, made.
#[cfg(all(feature = "durable", target_os = "linux"))]
fn long_dir(tmp: &std::path::Path, len: usize) -> std::path::PathBuf {
    let mut base = tmp.to_path_buf();
    while base.as_os_str().len() < len {
        let room = len - base.as_os_str().len() - 1;
        base.push("d".repeat(room.min(200)));
    }
    std::fs::create_dir_all(&base).unwrap();
    assert_eq!(base.as_os_str().len(), len);
    base
}

/// Runs `idem bench durable ARGS` with its cells' databases under `dir`: its status
/// and stderr, which must not tell of a panic.
#[cfg(all(feature = "durable", target_os = "linux"))]
fn bench_durable_in(
    dir: &std::path::Path,
    args: &[&str],
    cmd: &mut Command,
) -> (Option<i32>, String) {
    let out = cmd
        .args(["bench", "durable"])
        .args(args)
        .env("IDEM_BENCH_DIR", dir)
        .stdin(Stdio::null())
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.code(), stderr)
}

/// Each workload's databases cannot be made (the directory for the cells takes a
/// new directory, but a file in a cell's database passes the system's limit on a
/// path, as in the test above): the first cell that opens one stops the run, named,
/// with status 1. Before, W3's durable open, W4's RocksDB open and W5's parent (its
/// fill child said the failure, status 1, and the parent asserted) panicked (status
/// 101).
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_durable_bench_whose_cell_databases_cannot_be_made_stops_there_with_status_1() {
    let tmp = util::TempDir::new();
    let base = long_dir(tmp.path(), 4069);
    for (args, says) in [
        (
            &["--w3", "--keys", "10", "--w3-rounds", "1"][..],
            &["idem bench durable: W3, durable + prefilter (journal markers, the default), round 1 of 1: open:"][..],
        ),
        (
            &["--quick", "--w4"],
            &["idem bench durable: W4 (Always, 1 thread), RocksDB put, before: open:"],
        ),
        (
            &["--w5", "--keys", "10"],
            // The fill child says its own failure first.
            &[
                "idem bench durable --child-fill: open:",
                "idem bench durable: W5, the fill: the fill child ended before it filled (exit status: 1)",
            ],
        ),
    ] {
        let (code, stderr) = bench_durable_in(
            &base,
            args,
            &mut Command::new(env!("CARGO_BIN_EXE_idem")),
        );
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        for s in says {
            assert!(stderr.contains(s), "{args:?}: {stderr}");
        }
    }
}

/// W4's RocksDB cells can make their databases but idem's cannot: a path 22 bytes
/// shorter than above leaves room under `idem-bench-w4raw-<pid>` for RocksDB's file
/// names (`OPTIONS-000007.dbtmp`, 20 bytes, the longest at a first open) whatever
/// the pid's digits, but not under `idem-bench-w4-<pid>` for the claim-marker
/// journal's (`idem-journal-<16 hex>.bin`, 34 bytes). Before, idem's open panicked.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_durable_bench_whose_idem_cell_cannot_open_stops_there_with_status_1() {
    let tmp = util::TempDir::new();
    let base = long_dir(tmp.path(), 4047);
    let (code, stderr) = bench_durable_in(
        &base,
        &["--quick", "--w4"],
        &mut Command::new(env!("CARGO_BIN_EXE_idem")),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("idem bench durable: W4 (Always, 1 thread), idem, journal markers: open:"),
        "{stderr}"
    );
}

/// `idem` with the largest file it may write `bytes` long (RLIMIT_FSIZE), and
/// SIGXFSZ ignored: a write past the limit fails (EFBIG) instead of killing it.
#[cfg(all(feature = "durable", target_os = "linux"))]
fn idem_with_file_size_limit(bytes: u64) -> Command {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idem"));
    // SAFETY: between fork and exec the closure calls only setrlimit and signal,
    // both async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
                || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// RocksDB's own open fails in a directory the open made (no file may hold a byte):
/// what RocksDB made there (its LOCK and LOG) goes, and so do the directories the
/// open made. Before, only a refusal after RocksDB's open succeeded was undone.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_demo_whose_rocksdb_open_fails_leaves_nothing_behind() {
    let tmp = util::TempDir::new();
    let dir = tmp.path().join("new").join("db");
    let out = idem_with_file_size_limit(0)
        .args(["demo", "--quick", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("durable store failed during open") && stderr.contains("File too large"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A put of W4's RocksDB cell fails mid-cell: its files may be at most 10,000 bytes,
/// which its OPTIONS file (7-8 KB) takes but its write-ahead log does not for the
/// 200 synced puts of the first quick cell (12-14 KB). Before, the put's unwrap
/// panicked in a cell's thread.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_durable_bench_whose_rocksdb_put_fails_stops_there_with_status_1() {
    let tmp = util::TempDir::new();
    let (code, stderr) = bench_durable_in(
        tmp.path(),
        &["--quick", "--w4"],
        &mut idem_with_file_size_limit(10_000),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("idem bench durable: W4 (Always, 1 thread), RocksDB put, before: put:")
            && stderr.contains("File too large"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A completion of W3's durable run fails mid-stream: its files may be at most
/// 2,200,000 bytes, which the claim-marker journal (2,097,216) takes but the
/// write-ahead log of 60,000 claims (about 54,000 completions, over 3 MB) does not.
/// Before, the completion's unwrap panicked.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_durable_bench_whose_w3_completion_fails_stops_there_with_status_1() {
    let tmp = util::TempDir::new();
    let (code, stderr) = bench_durable_in(
        tmp.path(),
        &["--w3", "--keys", "60000", "--w3-rounds", "1"],
        &mut idem_with_file_size_limit(2_200_000),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "idem bench durable: W3, durable + prefilter (journal markers, the default), round 1 of 1: complete:"
        ) && stderr.contains("File too large"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// W5's first open after the fill's SIGKILL fails: with 60,000 keys the fill's
/// write-ahead log holds 2.64 MB and the open's recovery flushes it to a table of
/// 3.10 MB, and files may be at most 2,870,000 bytes (past the 2,097,216 of the
/// journal). The open child says so, status 1, and so does the bench. Before, the
/// bench asserted the child's success and panicked.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_durable_bench_whose_w5_open_fails_stops_there_with_status_1() {
    let tmp = util::TempDir::new();
    let (code, stderr) = bench_durable_in(
        tmp.path(),
        &["--w5", "--keys", "60000"],
        &mut idem_with_file_size_limit(2_870_000),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "idem bench durable: W5, the open after the fill's SIGKILL (--child-open): the child failed (exit status: 1): idem bench durable --child-open: open:"
        ) && stderr.contains("File too large"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Runs `idem bench durable ARGS` with no input (a fill child waits for its input
/// to end): its status and stderr.
#[cfg(feature = "durable")]
fn bench_child(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "durable"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the idem binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// W5's child modes (`idem bench durable --child-fill|--child-open|--child-restart N
/// DIR`, which the bench runs on its own executable) check their directory before
/// anything is opened or made: a fill takes a new or empty directory in one that
/// exists, an open or restart a database holding W5's namespace. Before, a missing
/// directory was made (with its parents, and a database in it), and the open and
/// restart then panicked (status 101).
#[cfg(feature = "durable")]
#[test]
fn a_bench_child_mode_refuses_a_bad_directory_and_makes_nothing() {
    use idem::{Engine, NamespaceConfig};
    let tmp = util::TempDir::new();
    let missing = tmp.path().join("missing");
    let under_missing = missing.join("db");
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("data"), "kept").unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let other = tmp.path().join("other");
    Engine::builder()
        .namespace("other", NamespaceConfig::new())
        .durable(&other)
        .build()
        .unwrap();
    for (flag, dir) in [
        ("--child-fill", &under_missing),
        ("--child-fill", &full),
        ("--child-open", &missing),
        ("--child-open", &empty),
        ("--child-open", &other),
        ("--child-restart", &missing),
        ("--child-restart", &empty),
        ("--child-restart", &other),
    ] {
        let shown = dir.to_str().unwrap();
        let (code, stderr) = bench_child(&[flag, "10", shown]);
        assert_eq!(code, Some(2), "{flag} {shown}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(shown),
            "{flag} {shown}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{flag} {shown}: {stderr}");
    }
    assert!(!missing.exists(), "{} was made", missing.display());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    let kept: Vec<_> = std::fs::read_dir(&full)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(kept, ["data"]);
    assert_eq!(idem::namespaces(&other).unwrap(), ["other"]);
}

/// The child modes are taken only where the bench passes them: first, with a key
/// count and a directory and nothing else. Before, one anywhere in the arguments
/// ran the child (here on a missing directory, which it made).
#[cfg(feature = "durable")]
#[test]
fn a_bench_child_mode_is_taken_only_as_the_bench_passes_it() {
    let tmp = util::TempDir::new();
    let missing = tmp.path().join("missing");
    let dir = missing.to_str().unwrap();
    for (args, says) in [
        (
            &["--quick", "--child-open", "10", dir][..],
            "unknown option",
        ),
        (&["--w5", "--child-restart", "10", dir], "unknown option"),
        (&["--child-fill", "--w5", "10", dir], "needs a key count"),
        (&["--child-open", "10", dir, "--quick"], "needs a key count"),
    ] {
        let (code, stderr) = bench_child(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(!missing.exists(), "{} was made", missing.display());
}

/// The child modes in the order W5 runs them, on the directory it gives them (its
/// cell's, removed beforehand), with ten keys: the fill (which exits when its input
/// ends, as when the bench goes away), then an open and a restart that find every
/// key a duplicate.
#[cfg(feature = "durable")]
#[test]
fn the_bench_child_modes_run_on_the_directory_w5_gives_them() {
    let tmp = util::TempDir::new();
    let db = tmp.path().join("w5");
    let dir = db.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "durable", "--child-fill", "10", dir])
        .stdin(Stdio::null())
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "FILLED\n");
    let out = idem(&["bench", "durable", "--child-open", "10", dir]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.starts_with("OPEN "), "{stdout}");
    let out = idem(&["bench", "durable", "--child-restart", "10", dir]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // RESULT ready rss duplicates ...: all ten keys answered Duplicate.
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!((fields[0], fields[3]), ("RESULT", "10"), "{stdout}");
}

/// A database with W5's namespace but not the keys the child was told of: the open
/// finds key 0 new, and says so with status 1. Before, it panicked.
#[cfg(feature = "durable")]
#[test]
fn a_bench_child_on_a_database_without_its_keys_fails_with_status_1() {
    use idem::{Engine, NamespaceConfig};
    let tmp = util::TempDir::new();
    let db = tmp.path().join("w5");
    Engine::builder()
        .namespace("w5", NamespaceConfig::new().ttl(Duration::from_secs(3600)))
        .durable(&db)
        .build()
        .unwrap();
    for flag in ["--child-open", "--child-restart"] {
        let (code, stderr) = bench_child(&[flag, "10", db.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{flag}: {stderr}");
        assert!(stderr.contains("not a duplicate"), "{flag}: {stderr}");
        assert!(!stderr.contains("panicked"), "{flag}: {stderr}");
    }
}

#[test]
fn quick_and_messages_together_are_a_usage_error_in_either_demo_and_order() {
    for args in [
        &["demo", "--quick", "--messages", "500"][..],
        &["demo", "--messages", "500", "--quick"],
        &["demo", "--memory", "--quick", "-n", "500"],
        &["demo", "--messages", "500", "--memory", "--quick"],
    ] {
        let out = idem(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Before, the later of the two won and the demo ran.
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--quick and --messages"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_bench_that_cannot_run_cargo_fails_with_status_1_not_a_usage_error() {
    let src = std::env::temp_dir().join(format!("idem-bench-src-{}", std::process::id()));
    std::fs::create_dir_all(src.join("benches")).unwrap();
    std::fs::write(src.join("benches/workloads.rs"), "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "--quick", "--no-durable", "--source"])
        .arg(&src)
        .env("CARGO", "/nonexistent/cargo")
        .output()
        .expect("the idem binary runs");
    let _ = std::fs::remove_dir_all(&src);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot run cargo"), "{stderr}");
    assert!(!stderr.contains("usage"), "{stderr}");
}

#[test]
fn a_bench_with_an_unknown_peer_is_a_usage_error_before_cargo_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "--quick", "--peers", "idem,bogus"])
        .env("CARGO", "/nonexistent/cargo")
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Before, cargo ran (here: failed to), and only the harness it built refused
    // the name.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown peer \"bogus\""), "{stderr}");
    assert!(!stderr.contains("cargo"), "{stderr}");
}

/// A harness that fails (here a "cargo" that exits 1) ends `idem bench` there, with
/// status 1: W3-W5 do not run. Before, they ran (here they would have stopped at
/// once on a bench directory that cannot be written).
#[cfg(all(unix, feature = "durable"))]
#[test]
fn a_bench_whose_harness_fails_stops_before_w3_to_w5() {
    let src = util::TempDir::new();
    std::fs::create_dir_all(src.path().join("benches")).unwrap();
    std::fs::write(src.path().join("benches/workloads.rs"), "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "--quick", "--source"])
        .arg(src.path())
        .env("CARGO", "false")
        .env("IDEM_BENCH_DIR", "/proc/idem-cannot-write-here")
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the workloads harness failed") && stderr.contains("W3-W5 not run"),
        "{stderr}"
    );
    assert!(!stderr.contains("bench durable"), "{stderr}");
    assert!(!stderr.contains("IDEM_BENCH_DIR"), "{stderr}");
}

#[cfg(unix)]
#[test]
fn an_argument_that_is_not_utf8_is_refused_with_a_message() {
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("inspect")
        .arg(std::ffi::OsStr::from_bytes(b"/data/caf\xe9"))
        .output()
        .expect("the idem binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

// (The demo's consumer process is built with the durable tier only.)
#[cfg(feature = "durable")]
#[test]
fn the_consumer_refuses_a_stream_longer_than_the_demo_runs() {
    let out = idem(&[
        "__consumer",
        "--dir",
        "/nonexistent/idem-consumer",
        "--messages",
        "18446744073709551615",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--messages is at most"), "{stderr}");
}

#[test]
fn progress_into_a_stderr_nobody_reads_does_not_stop_the_demo() {
    // `idem demo --memory 2>&1 | head -1`: once the reader is gone, the progress
    // lines meet a broken pipe. They are lost; before, the first of them panicked.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["demo", "--memory", "--messages", "20000"])
        .stderr(writer)
        .output()
        .expect("the idem binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}\n{stdout}", out.status);
    assert!(stdout.contains("verified:"), "{stdout}");
}

#[test]
fn demo_verifies_every_message_took_effect_once() {
    let out = idem(&[
        "demo",
        "--memory",
        "--messages",
        "20000",
        "--workers",
        "4",
        "--redeliver",
        "30",
        "--fail",
        "5",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}");
    assert!(
        stdout.contains("verified:   every one of 20,000 messages took effect exactly once"),
        "{stdout}"
    );
    assert!(stdout.contains("p99.9"), "{stdout}");
    assert!(stdout.contains("bytes per key"), "{stdout}");
    // Failed workers really happened in the run.
    let answers = stdout
        .lines()
        .find(|l| l.starts_with("answers:"))
        .expect("answers line");
    assert!(!answers.contains("(0 by workers"), "{answers}");
}

#[cfg(feature = "durable")]
#[test]
fn durable_demo_survives_sigkill_and_verifies_the_ledger() {
    // An empty directory is accepted; the demo makes its database in it.
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    let out = idem(&[
        "demo",
        "--dir",
        dir,
        "--messages",
        "4000",
        "--sync",
        "never",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let inspected = idem(&[
        "inspect",
        dir,
        "--namespace",
        "orders",
        "--key",
        "ord-0000000000000007",
    ]);
    let unknown = idem(&[
        "inspect",
        dir,
        "--namespace",
        "orders",
        "--key",
        "never-seen",
    ]);
    assert!(out.status.success(), "demo failed:\n{stdout}");
    assert!(stdout.contains("was killed with SIGKILL"), "{stdout}");
    // The restarted consumer's figures, and the progress on stderr.
    assert!(stdout.contains("latency:    run 2, claim p50"), "{stdout}");
    // Each run's own pace, and where the wall time went.
    assert!(stdout.contains("throughput: run 1 "), "{stdout}");
    assert!(stdout.contains("the orphans' leases"), "{stdout}");
    assert!(stdout.contains("never fsynced"), "sync never: {stdout}");
    assert!(stdout.contains("p99.9"), "{stdout}");
    assert!(stdout.contains("hot-tier bytes per key"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("progress: 25% of messages acknowledged"),
        "{stderr}"
    );
    let report = String::from_utf8_lossy(&inspected.stdout);
    assert!(inspected.status.success(), "{report}");
    let orders = report
        .lines()
        .find(|l| l.starts_with("orders "))
        .expect("a line for the namespace");
    let cols: Vec<&str> = orders.split_whitespace().collect();
    assert_eq!(cols[1], "4,000", "every message done: {orders}");
    assert_eq!(
        cols[3], "0",
        "nothing in flight after a clean finish: {orders}"
    );
    assert!(report.contains("state:      ledger"), "{report}");
    assert!(
        report.contains("key \"ord-0000000000000007\" in \"orders\": done"),
        "{report}"
    );
    assert!(String::from_utf8_lossy(&unknown.stdout).contains(": unknown"));
    assert!(
        stdout.contains(" found at open (in flight at the kill)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("one per application"),
        "the check counts applications: {stdout}"
    );
    assert!(
        stdout.contains("verified:   every one of 4,000 messages took effect exactly once"),
        "{stdout}"
    );
}

#[cfg(feature = "durable")]
#[test]
fn a_durable_demo_too_short_to_be_killed_mid_stream_says_no_crash_was_shown() {
    // One message: the consumer acknowledges it and runs out of messages before any
    // claim is in flight, so there is nothing to kill mid-stream.
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    let out = idem_within(
        &["demo", "--dir", dir, "--messages", "1", "--sync", "never"],
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("no crash was tested"), "{stdout}");
    assert!(stdout.contains("not shown:"), "{stdout}");
    assert!(!stdout.contains("verified"), "{stdout}");
}

#[cfg(feature = "durable")]
#[test]
fn a_short_durable_demo_is_still_killed_with_a_claim_in_flight() {
    // Ten messages, killed at 40%: four acknowledged, then a claim held until the
    // kill, found orphaned by the restart.
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    let out = idem_within(
        &["demo", "--dir", dir, "--messages", "10", "--sync", "never"],
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("then was killed with SIGKILL"), "{stdout}");
    assert!(
        !stdout.contains("run 2:      restarted; 0 orphan"),
        "{stdout}"
    );
    assert!(
        stdout.contains("verified:   every one of 10 messages took effect exactly once"),
        "{stdout}"
    );
}

#[cfg(feature = "durable")]
#[test]
fn durable_demo_refuses_a_directory_that_holds_a_database_and_keeps_it() {
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    let args = ["demo", "--dir", dir, "--messages", "500", "--sync", "never"];
    let first = idem(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    let again = idem(&args);
    let stderr = String::from_utf8_lossy(&again.stderr);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert!(!stdout.contains("FAILED"), "{stdout}");
    // The database of the first run is still there, untouched.
    let report = idem(&["inspect", dir]);
    let report = String::from_utf8_lossy(&report.stdout);
    let orders = report
        .lines()
        .find(|l| l.starts_with("orders "))
        .expect("a line for the namespace");
    assert_eq!(orders.split_whitespace().nth(1), Some("500"), "{orders}");
}

#[cfg(feature = "durable")]
#[test]
fn durable_demo_reports_a_consumer_that_fails_with_status_1_and_no_usage_hint() {
    // A directory under a regular file: the consumer cannot make its database.
    let tmp = util::TempDir::new();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let dir = file.join("db");
    let out = idem_within(
        &["demo", "--dir", dir.to_str().unwrap(), "--messages", "100"],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("the consumer failed"), "{stderr}");
    assert!(!stderr.contains("idem help"), "not a usage error: {stderr}");
    assert!(!stdout.contains("verified"), "{stdout}");
}

#[cfg(feature = "durable")]
#[test]
fn a_failing_consumer_worker_stops_the_others_and_the_process_fails() {
    let tmp = util::TempDir::new();
    let out = idem_within(
        &[
            "__consumer",
            "--dir",
            tmp.path().to_str().unwrap(),
            "--messages",
            "20000",
            "--workers",
            "4",
            "--sync",
            "never",
            "--fail-worker-after",
            "50",
        ],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("fails on purpose"), "{stderr}");
    assert!(!stderr.contains("idem help"), "not a usage error: {stderr}");
    assert!(!stdout.lines().any(|l| l == "done"), "{stdout}");
}

/// `--freeze-after n`: once n messages are acknowledged, a worker holds its next
/// claim until it is killed, so the stream cannot end first while messages remain
/// (the durable demo kills it after n acknowledgements and a `frozen` line, and the
/// crash is always mid-stream).
#[cfg(feature = "durable")]
#[test]
fn a_frozen_consumer_holds_its_claim_until_it_is_killed() {
    use std::io::{BufRead, BufReader};
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "__consumer",
            "--dir",
            dir,
            "--messages",
            "100",
            "--workers",
            "1",
        ])
        .args([
            "--sync",
            "never",
            "--freeze-after",
            "5",
            "--lease-ms",
            "600000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the consumer starts");
    let out = child.stdout.take().unwrap();
    let watchdog = util::Watchdog::arm(child.id(), util::CHILD_LIMIT);
    let mut acks = 0;
    let mut frozen = None;
    for line in BufReader::new(out).lines().map_while(Result::ok) {
        if line.starts_with("ack ") {
            acks += 1;
        }
        if let Some(id) = line.strip_prefix("frozen ") {
            frozen = Some(format!("ord-{:016x}", id.parse::<u64>().unwrap()));
            break;
        }
        assert_ne!(line, "done", "the stream ended before the kill");
    }
    drop(watchdog);
    child.kill().expect("SIGKILL delivered");
    let status = child.wait().unwrap();
    assert!(!status.success(), "the consumer was killed, not finished");
    util::assert_killed(status);
    assert_eq!(
        acks, 5,
        "one worker froze at its first claim after 5 acknowledgements"
    );
    let key = frozen.expect("the worker froze");
    let out = idem(&["inspect", dir, "--namespace", "orders", "--key", &key]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("key \"{key}\" in \"orders\": in flight")),
        "its claim was held at the kill: {report}"
    );
}

/// Runs the consumer on a new database in `dir` until it holds two claims
/// (`held-0`, `held-1`, leases of 10 minutes, markers in the journal), and kills it
/// with SIGKILL.
#[cfg(all(feature = "durable", target_os = "linux"))]
fn kill_holding_two_claims(dir: &str) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["__consumer", "--dir", dir, "--messages", "1000000"])
        .args(["--sync", "never", "--hold", "2", "--lease-ms", "600000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the consumer starts");
    let out = child.stdout.take().unwrap();
    let watchdog = util::Watchdog::arm(child.id(), util::CHILD_LIMIT);
    let held = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l == "held 2");
    drop(watchdog);
    child.kill().expect("SIGKILL delivered");
    let status = child.wait().unwrap();
    util::assert_killed(status);
    assert!(held, "the consumer holds its two claims");
    assert!(!status.success(), "the consumer was killed, not finished");
}

/// An open takes over the claims an earlier process left in flight, and reports them
/// once (`Engine::orphans`; those whose lease ran out are settled there and not
/// reported again): a tool that opens the database must say which it took over, or
/// the report is lost to the application. Here orphans of a SIGKILL.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn a_dlq_command_that_takes_over_claims_left_in_flight_reports_them() {
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    kill_holding_two_claims(dir);
    let out = idem(&[
        "dlq",
        "replay",
        dir,
        "--namespace",
        "orders",
        "--all",
        "--exec",
        "true",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("took over 2 claim(s)"), "{stderr}");
    let lines = stderr
        .lines()
        .filter(|l| l.contains("namespace \"orders\" fingerprint ") && l.contains("held until"));
    assert_eq!(lines.count(), 2, "{stderr}");
    // A read-only command takes nothing over, and says nothing of them.
    let out = idem(&["dlq", "list", dir, "--namespace", "orders"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("took over"), "{stderr}");
}

/// Claims whose markers are in the journal (the default marker mode, Linux only)
/// read as in flight in `idem inspect --key`: here orphans of a SIGKILL.
#[cfg(all(feature = "durable", target_os = "linux"))]
#[test]
fn inspect_finds_a_claim_whose_marker_is_in_the_journal() {
    let tmp = util::TempDir::new();
    let dir = tmp.path().to_str().unwrap();
    kill_holding_two_claims(dir);

    let out = idem(&["inspect", dir, "--namespace", "orders", "--key", "held-0"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("key \"held-0\" in \"orders\": in flight"),
        "{report}"
    );
    assert!(report.contains("lease until"), "{report}");
    let orders = report
        .lines()
        .find(|l| l.starts_with("orders "))
        .expect("a line for the namespace");
    let cols: Vec<&str> = orders.split_whitespace().collect();
    let in_flight: u64 = cols[3].replace(',', "").parse().unwrap();
    assert!(in_flight >= 2, "{orders}");
    assert_eq!(cols[4], "0", "no slot is damaged: {orders}");
}

#[test]
fn bad_arguments_exit_with_usage_error() {
    for args in [
        &["demo", "--messages", "zero"][..],
        &["demo", "--messages", "0"],
        &["demo", "--bogus"],
        &["frobnicate"],
        &["demo", "--workers"],
        #[cfg(feature = "durable")]
        &["bench", "durable", "--help"],
        #[cfg(feature = "durable")]
        &["bench", "durable", "--keys", "many"],
    ] {
        let out = idem(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
}

/// An option of one value given twice is a usage error in every command: before,
/// the later value won without a word (`--dir /data/a --dir /tmp/b` ran in the
/// second, `--sync always --sync never` without fsyncs).
/// A bad value is quoted as given, not as the parser's `Option` of it.
#[cfg(feature = "durable")]
#[test]
fn a_bad_sync_or_markers_value_is_quoted_as_given() {
    for (args, says) in [
        (&["demo", "--sync", "bogus"][..], "not \"bogus\""),
        (&["__consumer", "--markers", "bogus"], "not \"bogus\""),
        (&["__consumer", "--sync"], "--sync needs a value"),
        (&["__consumer", "--markers"], "--markers needs a value"),
    ] {
        let out = idem(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("Some("), "{args:?}: {stderr}");
    }
}

#[test]
fn an_option_given_twice_is_a_usage_error() {
    for args in [
        &["demo", "--memory", "--workers", "2", "-w", "8"][..],
        &["demo", "--memory", "--memory", "--quick"],
        &["demo", "--memory", "-n", "10", "--messages", "20"],
        &["demo", "--memory", "--quick", "--quick"],
        #[cfg(feature = "durable")]
        &["demo", "--dir", "/nonexistent/a", "--dir", "/nonexistent/b"],
        #[cfg(feature = "durable")]
        &["demo", "--sync", "always", "--sync", "never", "--quick"],
        #[cfg(feature = "durable")]
        &["demo", "--kill-at", "10", "--kill-at", "20", "--quick"],
        &["plan", "--rate", "1/s", "--ttl", "1h", "--ttl", "2h"],
        &[
            "bench",
            "--source",
            "/nonexistent",
            "--source",
            "/nonexistent",
        ],
        #[cfg(feature = "durable")]
        &["bench", "durable", "--keys", "100", "--keys", "200"],
        #[cfg(feature = "durable")]
        &["inspect", "/nonexistent", "-n", "a", "--namespace", "b"],
        #[cfg(feature = "durable")]
        &[
            "__consumer",
            "--dir",
            "/nonexistent/a",
            "--dir",
            "/nonexistent/b",
        ],
    ] {
        let out = idem(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("given twice"), "{args:?}: {stderr}");
    }
    // The consumer's workers are threads: past the demo's bound, a usage error, not
    // a panic when the system refuses one.
    #[cfg(feature = "durable")]
    {
        let out = idem(&[
            "__consumer",
            "--dir",
            "/nonexistent/a",
            "--workers",
            "10000000",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--workers is at most 64"), "{stderr}");
    }
}

/// Every option of `idem bench` and `idem bench durable` given twice is said to be
/// given twice, whatever its first value: before, a first value out of range was
/// reported instead (`--keys 5 --keys 6` said "--keys is at least 10").
#[test]
fn every_bench_option_given_twice_is_said_so_whatever_its_first_value() {
    let mut cases: Vec<Vec<&str>> = Vec::new();
    for flag in ["--quick", "--w2-shuffled", "--w2-one-order", "--no-durable"] {
        cases.push(vec!["bench", flag, flag]);
    }
    cases.push(vec!["bench", "--durable-only", "--durable-only"]);
    cases.push(vec!["bench", "--source", "/nonexistent", "--source", "/x"]);
    for flag in [
        "--n",
        "--threads",
        "--runs",
        "--moka-max-n",
        "--redis-max-n",
        "--redis-sample",
        "--jetstream-max-n",
        "--jetstream-sample",
        "--w2-passes",
        "--w2-shuffled-max-n",
    ] {
        cases.push(vec!["bench", flag, "0", flag, "5"]);
        cases.push(vec!["bench", flag, "x", flag, "5"]);
    }
    cases.push(vec!["bench", "--peers", ",", "--peers", "moka"]);
    #[cfg(feature = "durable")]
    {
        for flag in ["--quick", "--disk", "--w3", "--w4", "--w5"] {
            cases.push(vec!["bench", "durable", flag, flag]);
        }
        for (flag, bad, good) in [
            ("--keys", "5", "6"),
            ("--keys", "x", "100"),
            ("--result-bytes", "70000", "64"),
            ("--w3-rounds", "0", "2"),
            ("--prefilter-fpr", "1", "0.1"),
        ] {
            cases.push(vec!["bench", "durable", flag, bad, flag, good]);
        }
    }
    for args in cases {
        let out = idem(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("given twice"), "{args:?}: {stderr}");
    }
}

#[test]
fn help_and_version() {
    let out = idem(&["help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("idem demo"));
    let out = idem(&["version"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("idem {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_and_version_refuse_arguments() {
    for args in [
        &["help", "demo"][..],
        &["version", "x"],
        &["--help", "plan"],
    ] {
        let out = idem(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("takes no arguments"), "{stderr}");
    }
}

#[test]
fn no_command_is_a_usage_error() {
    let out = idem(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("idem demo"));
}

#[test]
fn plan_prints_the_sizing_and_refuses_bad_input() {
    let out = idem(&["plan", "--rate", "500/s", "--ttl", "24h"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // 500/s x 24 h resident, x 7 d retained.
    assert!(stdout.contains("43,200,000"), "{stdout}");
    assert!(stdout.contains("302,400,000"), "{stdout}");
    assert!(stdout.contains("Redis"), "{stdout}");

    for bad in [
        &["plan", "--rate", "500", "--ttl", "24h"][..],
        &["plan", "--rate", "500/s", "--ttl", "0h"],
        &["plan", "--rate", "500/s"],
        &["plan", "--rate", "500/s", "--ttl", "24h", "--fpr", "2"],
    ] {
        let out = idem(bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains("plan:"), "{bad:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{bad:?}: {stderr}");
    }
}
