//! The `idem` binary: the demo verifies exactly-once effects; bad arguments are refused.

#![cfg(not(idem_loom))]

use std::process::Command;

fn idem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
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
    // Failed workers and concurrent duplicates really happened in the run.
    let answers = stdout
        .lines()
        .find(|l| l.starts_with("answers:"))
        .expect("answers line");
    assert!(!answers.contains("(0 by workers"), "{answers}");
}

#[cfg(feature = "durable")]
#[test]
fn durable_demo_survives_sigkill_and_verifies_the_ledger() {
    let dir = std::env::temp_dir().join(format!("idem-cli-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = idem(&[
        "demo",
        "--dir",
        dir.to_str().unwrap(),
        "--messages",
        "4000",
        "--sync",
        "never",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let inspected = idem(&[
        "inspect",
        dir.to_str().unwrap(),
        "--namespace",
        "orders",
        "--key",
        "ord-0000000000000007",
    ]);
    let unknown = idem(&[
        "inspect",
        dir.to_str().unwrap(),
        "--namespace",
        "orders",
        "--key",
        "never-seen",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "demo failed:\n{stdout}");
    assert!(stdout.contains("was killed with SIGKILL"), "{stdout}");
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
    assert!(stdout.contains("orphan claims found at open"), "{stdout}");
    assert!(
        stdout.contains("verified:   every one of 4,000 messages took effect exactly once"),
        "{stdout}"
    );
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
