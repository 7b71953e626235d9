//! How ingest uses the machine: threads for deduplication and merging
//! from `-j`, named threads, the process's peak memory, and handing freed
//! memory back between phases.

/// Threads deduplicating boards while games stream in, for `threads`
/// parsing threads: one for each pair, up to 4. One thread inserting every
/// board (a hash, a probe, an insert; and a spill of its table every few
/// hundred thousand boards) would cap ingest at a few million boards a
/// second whatever the cores; shards split that work by hash. Each shard
/// still reads every batch (every key's hash, computed once by the parsers,
/// to find its own), hence the cap, and one shard keeps up with two
/// parsers: on 2 cores a second shard only added its reading of every
/// batch (bench/results/amd2-2026-11-29, "Ingest on 2 cores").
pub(super) fn dedup_shards(threads: usize) -> usize {
    (threads / 2).clamp(1, 4)
}

/// Threads merging a split's spilled runs while its boards are written, for
/// `threads` threads writing them: one merge (the reading thread's own) up
/// to 3 threads, then one a pair of threads, up to 4. The reading thread
/// feeds every writer; alone, its merge would cap the boards phase at a
/// rate many writing threads exceed (bench/results/amd2-2026-11-29/README.md,
/// "Figures once kept in the source").
pub(super) fn merge_threads(threads: usize) -> usize {
    (threads / 2).clamp(1, 4)
}

/// Peak resident set size of this process (VmHWM), where /proc tells it.
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Spawns a named scoped thread (names show in `top -H`, perf, panics).
pub(crate) fn spawn_named<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn_scoped(scope, f)
        .unwrap_or_else(|e| panic!("cannot start thread {name}: {e}"))
}

/// Hands the memory freed by the phase just ended back to the kernel
/// (glibc keeps it in per-thread arenas otherwise: the parsing threads' key
/// batches and blocks, the deduplication tables), so that the next phase's
/// buffers come on top of what is live rather than of what was.
pub(super) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
