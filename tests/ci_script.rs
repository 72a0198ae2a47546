//! `.ci/run` refuses a fuzz time that libFuzzer would read as "no time limit" (0, or
//! anything that is not a whole number of seconds) before it runs anything: a CI run
//! given one would otherwise fuzz forever.

#![cfg(all(unix, not(idem_loom)))]

use std::path::PathBuf;
use std::process::Command;

/// A directory of stand-ins for `cargo` and `rustc` that fail at once with status
/// 97: should the script go past its check, `./run test` stops on them instead of
/// running the test suite inside this test.
struct FakeTools(PathBuf);

impl FakeTools {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("idem-ci-script-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for tool in ["cargo", "rustc"] {
            let path = dir.join(tool);
            std::fs::write(&path, "#!/bin/sh\nexit 97\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        FakeTools(dir)
    }
}

impl Drop for FakeTools {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn ci_refuses_a_fuzz_time_libfuzzer_would_read_as_no_limit_before_running_anything() {
    let tools = FakeTools::new();
    let path = format!("{}:/usr/bin:/bin", tools.0.display());
    for seconds in ["0", "00", "abc", "-1", "1.5", "30s", " 30"] {
        let out = Command::new("/bin/bash")
            .arg(".ci/run")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("IDEM_FUZZ_SECONDS", seconds)
            .env("PATH", &path)
            // Its caches go here, not into the user's.
            .env("HOME", &tools.0)
            .output()
            .expect("bash runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "IDEM_FUZZ_SECONDS={seconds:?}: {stderr}"
        );
        assert!(
            stderr.contains("IDEM_FUZZ_SECONDS must be a whole number of seconds"),
            "IDEM_FUZZ_SECONDS={seconds:?}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "nothing ran before the refusal: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
