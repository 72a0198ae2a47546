//! The oldest Rust that Cargo.toml's `rust-version` states, and that `./run` checks,
//! builds every locked package of this platform: the library's, the tests' and
//! benches' (dev-dependencies), and the loom models' (`--cfg idem_loom`). Cargo
//! refuses to build a package whose own `rust-version` is newer than the toolchain,
//! and a lockfile resolved on a newer toolchain can pin one.

#![cfg(not(idem_loom))]

use std::process::Command;

/// A version as three numbers ("1.87" is 1.87.0).
fn version(v: &str) -> [u64; 3] {
    let mut parts = v.split('.').map(|p| p.parse().expect("a version number"));
    [(); 3].map(|()| parts.next().unwrap_or(0))
}

#[test]
fn every_locked_package_builds_with_the_stated_minimum_rust() {
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let info = String::from_utf8(rustc.stdout).unwrap();
    let host = info
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc names its host");
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
            host,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        // The loom models' dependencies too: their table is `cfg(idem_loom)`.
        .env("RUSTFLAGS", "--cfg idem_loom")
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours = packages
        .iter()
        .find(|p| p["name"] == "idem")
        .and_then(|p| p["rust_version"].as_str())
        .expect("idem states its rust-version");
    assert!(
        packages.iter().any(|p| p["name"] == "loom"),
        "the loom models' dependencies are listed"
    );
    let newer: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let rv = p["rust_version"].as_str()?;
            (version(rv) > version(ours))
                .then(|| format!("{} {} needs {rv}", p["name"], p["version"]))
        })
        .collect();
    assert!(newer.is_empty(), "idem says {ours}, but {newer:?}");
    assert_eq!(version("1.87"), version("1.87.0"));
    // `./run` checks the same minimum before it builds anything.
    let run = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/run")).unwrap();
    assert!(
        run.contains(&format!("{ours}.0")),
        "./run checks another minimum than {ours}"
    );
}
