//! The memory this process may use ([`MemoryLimit`]): the machine's, or its
//! cgroup's limit where that is lower.

/// This machine's memory in bytes, from `/proc/meminfo` (`None` where unreadable).
fn machine_memory() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| {
            let kb: u64 = l
                .strip_prefix("MemTotal:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()?;
            Some(kb * 1024)
        })
}

/// The memory this process may use: the machine's, or less where its cgroup sets a
/// lower limit (a container's). `idem plan` holds its figures against it, and
/// [`EngineBuilder::build`](crate::EngineBuilder::build) refuses memory made at build
/// ([`NamespaceConfig::preallocate`](crate::NamespaceConfig::preallocate)) past it.
///
/// ```
/// if let Some(m) = idem::MemoryLimit::of_this_process() {
///     assert!(m.available() <= m.machine);
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimit {
    /// The machine's memory, bytes.
    pub machine: u64,
    /// The cgroup's limit, bytes, where it is below the machine's memory.
    pub limit: Option<u64>,
}

impl MemoryLimit {
    /// What the process may use, bytes: the cgroup's limit, else the machine's
    /// memory.
    pub fn available(&self) -> u64 {
        self.limit.unwrap_or(self.machine)
    }

    /// This process's, from `/proc/meminfo` and its cgroup's limit (`None` where
    /// the machine's memory is unreadable: not Linux, or no `/proc`).
    pub fn of_this_process() -> Option<MemoryLimit> {
        let machine = machine_memory()?;
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let limit = read("/proc/self/cgroup")
            .and_then(|own| cgroup_limit(&own, read))
            .filter(|&l| l < machine);
        Some(MemoryLimit { machine, limit })
    }
}

/// The memory limit of the cgroup that `/proc/self/cgroup` (`own`) names, read with
/// `read`; `None`: no limit, or nothing readable.
///
/// * cgroup v2: the lowest `memory.max` of the process's group and every group above
///   it up to the mount's root (a limit on an enclosing slice binds too; "max" is
///   none). Inside a container the mount's root is the container's own group.
/// * cgroup v1: `hierarchical_memory_limit` of the group's `memory.stat` (the lowest
///   limit on the way up), else its `memory.limit_in_bytes`; at the mount's root where
///   the group's own directory is not mounted.
///
/// A limit of 0 is not one a process could run under, and is ignored.
fn cgroup_limit(own: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let number = |v: &str| v.trim().parse::<u64>().ok().filter(|&n| n > 0);
    let mut limits = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let mut path = path.trim_end_matches('/');
        if controllers.is_empty() {
            loop {
                if let Some(v) = read(&format!("/sys/fs/cgroup{path}/memory.max")) {
                    limits.extend(number(&v));
                }
                match path.rfind('/') {
                    Some(i) => path = &path[..i],
                    None => break,
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let v1 = [path, ""].into_iter().find_map(|dir| {
                let base = format!("/sys/fs/cgroup/memory{dir}");
                let stat = read(&format!("{base}/memory.stat")).and_then(|st| {
                    st.lines()
                        .find_map(|l| number(l.strip_prefix("hierarchical_memory_limit ")?))
                });
                stat.or_else(|| {
                    read(&format!("{base}/memory.limit_in_bytes")).and_then(|v| number(&v))
                })
            });
            limits.extend(v1);
        }
    }
    limits.into_iter().min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroups_memory_limit_is_read_where_the_process_belongs() {
        fn files(list: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
            move |path: &str| {
                list.iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, v)| v.to_string())
            }
        }
        // v2: the lowest limit from the process's own group up to the mount's root;
        // "max" is no limit, and neither is 0.
        let v2 = "0::/system.slice/app.service\n";
        let own = &[(
            "/sys/fs/cgroup/system.slice/app.service/memory.max",
            "2147483648\n",
        )];
        assert_eq!(cgroup_limit(v2, files(own)), Some(1 << 31));
        let above = &[
            (
                "/sys/fs/cgroup/system.slice/app.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "1073741824\n"),
        ];
        assert_eq!(cgroup_limit(v2, files(above)), Some(1 << 30));
        let root = &[("/sys/fs/cgroup/memory.max", "1073741824\n")];
        assert_eq!(cgroup_limit(v2, files(root)), Some(1 << 30));
        let none = &[
            (
                "/sys/fs/cgroup/system.slice/app.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "0\n"),
        ];
        assert_eq!(cgroup_limit(v2, files(none)), None);
        // v1: the memory controller's line, whatever its place among the others; the
        // hierarchical limit of its statistics first.
        let v1 = "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n";
        let own = &[(
            "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
            "536870912",
        )];
        assert_eq!(cgroup_limit(v1, files(own)), Some(1 << 29));
        let stat = &[
            (
                "/sys/fs/cgroup/memory/docker/abc/memory.stat",
                "cache 0\nhierarchical_memory_limit 268435456\nrss 0\n",
            ),
            (
                "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                "536870912",
            ),
        ];
        assert_eq!(cgroup_limit(v1, files(stat)), Some(1 << 28));
        let root = &[("/sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912")];
        assert_eq!(cgroup_limit(v1, files(root)), Some(1 << 29));
        assert_eq!(cgroup_limit(v1, files(&[])), None);
    }
}
