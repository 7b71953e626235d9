//! CPU time by thread, read from Linux's `/proc/self/task`: how
//! `chessbench bench-step` parts a step's host work from the work of the
//! threads that run its kernels.
//!
//! The thread that runs the step does all of burn's host work: autodiff's
//! graph and backward pass, fusion's planning, CubeCL's launch path (kernel
//! cache lookups, argument and metadata encoding, allocation) and wgpu's
//! command encoding. On a GPU the kernels run on the GPU; on Mesa's lavapipe
//! they run on the driver's own threads (llvmpipe's workers and its queue
//! thread), and on burn's CPU backend on its worker pool. So the calling
//! thread's CPU time per step is the host's cost on any device, and the
//! other threads' time is the kernels' (with whatever a runtime's own
//! threads add, listed by name). Waiting for the device (a readback, a
//! synchronisation) blocks the thread and costs no CPU time.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::Serialize;

/// Each thread's name and CPU time (nanoseconds) at one moment.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    threads: BTreeMap<u32, (String, u64)>,
}

/// The calling thread's id (Linux's `gettid`), from `/proc/thread-self`.
pub(crate) fn current_thread() -> Option<u32> {
    let link = fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

impl Snapshot {
    /// Every thread of this process now, or `None` where `/proc/self/task`
    /// cannot be read (not Linux). A thread that ends while it is read is
    /// left out.
    pub(crate) fn now() -> Option<Self> {
        let mut threads = BTreeMap::new();
        for entry in fs::read_dir("/proc/self/task").ok()? {
            let Ok(entry) = entry else { continue };
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some(t) = read_thread(&entry.path()) {
                threads.insert(tid, t);
            }
        }
        Some(Self { threads })
    }

    /// CPU seconds each thread used between `before` and `self`, by thread
    /// id (a thread started in between counts from zero).
    fn since(&self, before: &Self) -> impl Iterator<Item = (u32, &str, f64)> {
        self.threads.iter().map(|(tid, (name, ns))| {
            let was = before.threads.get(tid).map_or(0, |(_, ns)| *ns);
            (*tid, name.as_str(), ns.saturating_sub(was) as f64 * 1e-9)
        })
    }
}

/// A thread's name and CPU time: `schedstat`'s first field (nanoseconds on
/// a CPU), or `stat`'s user and system clock ticks where the kernel has no
/// `schedstat`.
fn read_thread(dir: &Path) -> Option<(String, u64)> {
    let name = fs::read_to_string(dir.join("comm"))
        .ok()?
        .trim_end()
        .to_owned();
    let ns = match fs::read_to_string(dir.join("schedstat")) {
        Ok(s) => s.split_whitespace().next()?.parse().ok()?,
        Err(_) => ticks_ns(&fs::read_to_string(dir.join("stat")).ok()?)?,
    };
    Some((name, ns))
}

/// User plus system time of a `/proc/.../stat` line in nanoseconds, at
/// Linux's fixed 100 ticks a second (`USER_HZ`). The name field may hold
/// spaces and parentheses, so the fields are counted after its last `)`.
fn ticks_ns(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) * 10_000_000)
}

/// Where a step's CPU time went, per step: the thread that ran the step
/// (the host) and the others by name.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostTime {
    /// CPU seconds per step of the thread that ran the step.
    pub host: f64,
    /// CPU seconds per step of the other threads, by name with the digits
    /// of a numbered pool left out (`DSU-#-#`), largest first. Threads that
    /// keep the process's name (lavapipe's workers, a CPU backend's pool)
    /// count under it.
    pub others: Vec<(String, f64)>,
}

impl HostTime {
    /// Per step, between two snapshots of this process taken around
    /// `steps` steps run on thread `host`.
    pub(crate) fn between(before: &Snapshot, after: &Snapshot, host: u32, steps: usize) -> Self {
        let steps = steps.max(1) as f64;
        let mut own = 0.0;
        let mut others: BTreeMap<String, f64> = BTreeMap::new();
        for (tid, name, s) in after.since(before) {
            if tid == host {
                own += s;
            } else if s > 0.0 {
                *others.entry(pool_name(name)).or_default() += s;
            }
        }
        let mut others: Vec<(String, f64)> =
            others.into_iter().map(|(n, s)| (n, s / steps)).collect();
        others.sort_by(|a, b| b.1.total_cmp(&a.1));
        Self {
            host: own / steps,
            others,
        }
    }

    /// All other threads' CPU seconds per step.
    pub fn others_total(&self) -> f64 {
        self.others.iter().map(|(_, s)| s).sum()
    }
}

/// A thread's name with its digits replaced by one `#`, so a numbered pool's
/// threads (`llvmpipe-0` ... `llvmpipe-15`) count as one.
fn pool_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_s_numbered_threads_are_one_name() {
        assert_eq!(pool_name("llvmpipe-12"), "llvmpipe-#");
        assert_eq!(pool_name("tokio-runtime-worker"), "tokio-runtime-worker");
        assert_eq!(pool_name("lp:cs10"), "lp:cs#");
    }

    #[test]
    fn stat_ticks_are_read_after_the_name() {
        // A name with a space and a parenthesis; utime 7, stime 3.
        let line = "42 (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0";
        assert_eq!(ticks_ns(line), Some(100_000_000));
    }

    /// The calling thread's own CPU time, in nanoseconds.
    fn own_ns() -> u64 {
        let tid = current_thread().unwrap();
        read_thread(Path::new(&format!("/proc/self/task/{tid}")))
            .unwrap()
            .1
    }

    /// Keeps the calling thread busy for `ms` milliseconds of its own CPU
    /// time (not of the clock: the tests share the cores).
    fn spin(ms: u64) {
        let end = own_ns() + ms * 1_000_000;
        while own_ns() < end {
            std::hint::black_box(());
        }
    }

    /// The calling thread's busy loop shows as its own time; a thread that
    /// burns CPU beside it shows under its name, not as the host's.
    #[test]
    fn the_host_thread_is_parted_from_a_worker() {
        let host = current_thread().expect("Linux's /proc/thread-self");
        let before = Snapshot::now().expect("/proc/self/task");
        let (done, spun) = std::sync::mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("worker-3".into())
            .spawn(move || {
                spin(120);
                done.send(()).unwrap();
                // Still alive when the second snapshot is taken.
                std::thread::park();
            })
            .unwrap();
        spin(60);
        spun.recv().unwrap();
        let after = Snapshot::now().unwrap();
        worker.thread().unpark();
        worker.join().unwrap();
        let t = HostTime::between(&before, &after, host, 2);
        assert!(t.host >= 0.030, "{t:?}");
        let w = t
            .others
            .iter()
            .find(|(n, _)| n == "worker-#")
            .expect("the worker");
        assert!(w.1 >= 0.060, "{t:?}");
        assert!(
            t.host < 0.060,
            "the worker's time counted as the host's: {t:?}"
        );
    }
}
