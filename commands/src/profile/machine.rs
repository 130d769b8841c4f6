//! What this machine has: usable cores and memory.

/// What this machine has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalMachine {
    /// Cores usable by this process.
    pub cores: usize,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// Available memory, GiB.
    pub available_gib: f64,
}

impl LocalMachine {
    /// Reads `available_parallelism` and `/proc/meminfo`.
    pub fn this() -> LocalMachine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let gib = |k: f64| k / (1024.0 * 1024.0);
        LocalMachine { cores, memory_gib: gib(kib("MemTotal:")), available_gib: gib(kib("MemAvailable:")) }
    }
}
