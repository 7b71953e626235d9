//! Counting the GPU kernels a process launches and compiles, from CubeCL's
//! own logs: with `enable` before the device starts, CubeCL writes a line
//! per kernel it launches (`Executing NAME [bound A+B B]`, its profiling
//! logger at the level that only names kernels, without timing or
//! synchronising; the bytes of each distinct buffer the launch binds come
//! from the vendored cubecl-runtime, vendor/README.md) and a line per kernel
//! it compiles (`[Compiling kernel] NAME`), and its autotune verdicts with
//! the candidates timed for each key, to three files;
//! [`KernelLog::counts`] reads them. Every kernel CubeCL launches counts:
//! burn's, the kernels burn's fusion generates, the project's; a vendor
//! library's calls (cuBLASLt on CUDA) do not. `bench-step --count-kernels`
//! uses it; docs/benchmarks.md has the counts on lavapipe.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

#[cfg(gpu)]
use cubecl_runtime::config::{
    CubeClRuntimeConfig, autotune::AutotuneLogLevel, compilation::CompilationLogLevel,
    profiling::ProfilingLogLevel,
};
use serde::Serialize;

const LAUNCHED: &str = "launched.log";
const COMPILED: &str = "compiled.log";
const AUTOTUNED: &str = "autotuned.log";

/// The log files of a process.
#[derive(Debug, Clone)]
pub struct KernelLog {
    dir: PathBuf,
}

/// Kernels launched (by name) and compiled, from the start of the process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub launched: BTreeMap<String, Launches>,
    pub compiled: u64,
    /// Autotune keys tuned so far, by kind of key.
    pub tuned: BTreeMap<String, Tuned>,
}

/// Keys of one kind that autotune tuned, and the candidates it compiled
/// and timed for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tuned {
    pub keys: u64,
    pub candidates: u64,
}

/// Launches of one kernel and the bytes they move in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Launches {
    pub count: u64,
    /// The bytes the launches move, each from the buffers it binds
    /// (`bound_bytes`).
    pub bytes: u64,
}

/// The kernels of one phase of a step (`bench-step --profile
/// --count-kernels`), per step.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseKernels {
    pub phase: String,
    pub launched: f64,
    pub bytes: f64,
    /// (kernel, launches, bytes) per step, most bytes first.
    pub by_kernel: Vec<(String, f64, f64)>,
}

/// What a step launches and what a cold process compiles.
#[derive(Debug, Clone, Serialize)]
pub struct KernelCounts {
    /// Kernels launched per timed step.
    pub launched_per_step: f64,
    /// Per step, by kernel (CubeCL's name, generics shortened), most first.
    pub by_kernel: Vec<(String, f64)>,
    /// Bytes the timed step's launches move (from the buffers each binds),
    /// per step.
    pub bytes_per_step: f64,
    /// Per step, by kernel, most first.
    pub bytes_by_kernel: Vec<(String, f64)>,
    /// By phase of the step, where the step was profiled by phase
    /// (`--profile`); empty otherwise.
    pub phases: Vec<PhaseKernels>,
    /// Distinct kernels launched in the timed steps.
    pub distinct: usize,
    /// Kernels compiled by the process up to the end of the timed steps
    /// (cold: nothing cached), the self-tests' included.
    pub compiled_cold: u64,
    /// Of those, compiled during the timed steps (0 once warm).
    pub compiled_in_steps: u64,
    /// Autotune keys the process tuned up to the end of the timed steps
    /// (cold), by kind of key (CubeCL's key type: `MatmulAutotuneKey`,
    /// `FusedReduceAutotuneKey`, ...), with the candidates timed for them:
    /// each candidate is a kernel compiled only to be timed.
    pub tuned_cold: BTreeMap<String, Tuned>,
}

/// Asks CubeCL to log launches and compilations into `dir` (created),
/// editing `config` before it is installed (`gpu::cache` calls this).
#[cfg(gpu)]
pub(crate) fn enable(
    config: &mut CubeClRuntimeConfig,
    dir: &std::path::Path,
) -> std::io::Result<KernelLog> {
    std::fs::create_dir_all(dir)?;
    for name in [LAUNCHED, COMPILED, AUTOTUNED] {
        std::fs::write(dir.join(name), b"")?;
    }
    config.profiling.logger.file = Some(dir.join(LAUNCHED));
    config.profiling.logger.append = true;
    config.profiling.logger.level = ProfilingLogLevel::Minimal;
    config.compilation.logger.file = Some(dir.join(COMPILED));
    config.compilation.logger.append = true;
    config.compilation.logger.level = CompilationLogLevel::Basic;
    // Full: a line per candidate after each key's verdict.
    config.autotune.logger.file = Some(dir.join(AUTOTUNED));
    config.autotune.logger.append = true;
    config.autotune.logger.level = AutotuneLogLevel::Full;
    Ok(KernelLog {
        dir: dir.to_owned(),
    })
}

/// A launch line's bytes moved, from the buffers it binds (`... [bound
/// A+B+C B]`; 0 without): their sum, each buffer read or written once;
/// for a kernel that writes into part of a buffer it binds whole (burn's
/// `SliceAssign`, `SelectAssign`: the largest buffer is the destination),
/// the other buffers' bytes twice (read them, write as many).
fn bound_bytes(name: &str, line: &str) -> u64 {
    let Some(sizes) = line
        .rsplit_once(" [bound ")
        .and_then(|(_, tail)| tail.split(' ').next())
    else {
        return 0;
    };
    let sizes: Vec<u64> = sizes.split('+').filter_map(|n| n.parse().ok()).collect();
    let total: u64 = sizes.iter().sum();
    if name.contains("Assign") {
        2 * (total - sizes.iter().max().copied().unwrap_or(0))
    } else {
        total
    }
}

/// A launch line's kernel: `Executing NAME | ARG | ... | Runtime` (CubeCL's
/// shortened type name) -> `NAME`, with the matmul's algorithm families
/// (`MatmulEntry[Simple, Unit]`) where there are; `None` for other lines.
fn kernel_name(line: &str) -> Option<String> {
    let name = line.strip_prefix("Executing ")?.trim();
    let name = name.rsplit_once(" [bound ").map_or(name, |(n, _)| n);
    let mut parts = name.split(" | ");
    let first = parts.next().unwrap_or(name);
    let base = first.split('<').next().unwrap_or(first);
    let base = base.rsplit("::").next().unwrap_or(base);
    let families: Vec<&str> = parts
        .filter_map(|p| p.strip_suffix("MatmulFamily"))
        .collect();
    Some(if families.is_empty() {
        base.to_owned()
    } else {
        format!("{base}[{}]", families.join(", "))
    })
}

/// Keys tuned and candidates timed, by kind of key, from CubeCL's
/// autotune log at its full level: a verdict per key (`Fastest result
/// NAME-KEY. Context: ...`, the key's kind the first word ending in
/// `AutotuneKey`), then a line per candidate (`Autotune[I] name N => ...`
/// for one timed, the error for one skipped or failed).
fn tuned(text: &str) -> BTreeMap<String, Tuned> {
    let mut tuned = BTreeMap::<String, Tuned>::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(verdict) = line.strip_prefix("Fastest result ") {
            let kind = verdict
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .find(|w| w.ends_with("AutotuneKey"))
                .unwrap_or("unknown")
                .to_owned();
            tuned.entry(kind.clone()).or_default().keys += 1;
            current = Some(kind);
        } else if line.trim_start().starts_with("Autotune[")
            && let Some(kind) = &current
        {
            tuned.entry(kind.clone()).or_default().candidates += 1;
        }
    }
    tuned
}

impl KernelLog {
    /// The counts so far, once CubeCL's logger (a background task) has
    /// written everything sent to it: the files must stop growing (the
    /// device should be synchronised first).
    pub fn counts(&self) -> std::io::Result<Counts> {
        self.settle();
        let launched_text = std::fs::read_to_string(self.dir.join(LAUNCHED))?;
        let compiled_text = std::fs::read_to_string(self.dir.join(COMPILED))?;
        let mut launched = BTreeMap::<String, Launches>::new();
        for line in launched_text.lines() {
            if let Some(name) = kernel_name(line) {
                let bytes = bound_bytes(&name, line);
                let entry = launched.entry(name).or_default();
                entry.count += 1;
                entry.bytes += bytes;
            }
        }
        let compiled = compiled_text
            .lines()
            .filter(|l| l.starts_with("[Compiling kernel]"))
            .count() as u64;
        let tuned = tuned(&std::fs::read_to_string(self.dir.join(AUTOTUNED))?);
        Ok(Counts {
            launched,
            compiled,
            tuned,
        })
    }

    /// Waits until the log files keep their size for 300 ms (at most 10 s).
    fn settle(&self) {
        let size = || {
            [LAUNCHED, COMPILED, AUTOTUNED]
                .map(|f| std::fs::metadata(self.dir.join(f)).map_or(0, |m| m.len()))
        };
        let start = Instant::now();
        let mut last = size();
        while start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(300));
            let now = size();
            if now == last {
                return;
            }
            last = now;
        }
    }
}

impl Counts {
    /// What was launched between `before` and `self`, per kernel.
    fn since(&self, before: &Counts) -> BTreeMap<String, Launches> {
        self.launched
            .iter()
            .map(|(name, now)| {
                let was = before.launched.get(name).copied().unwrap_or_default();
                let diff = Launches {
                    count: now.count - was.count,
                    bytes: now.bytes - was.bytes,
                };
                (name.clone(), diff)
            })
            .filter(|(_, d)| d.count > 0)
            .collect()
    }
}

/// Adds `more` into `into`, kernel by kernel.
pub(crate) fn accumulate(into: &mut BTreeMap<String, Launches>, more: &BTreeMap<String, Launches>) {
    for (name, l) in more {
        let e = into.entry(name.clone()).or_default();
        e.count += l.count;
        e.bytes += l.bytes;
    }
}

/// The launches between two snapshots, for accumulating by phase.
pub(crate) fn between_counts(before: &Counts, after: &Counts) -> BTreeMap<String, Launches> {
    after.since(before)
}

impl KernelCounts {
    /// What `steps` steps between `before` and `after` launched, and what
    /// the process compiled up to `after`; `phases`, the same launches
    /// split by phase of the step (or empty).
    pub fn between(
        before: &Counts,
        after: &Counts,
        steps: usize,
        phases: &[(String, BTreeMap<String, Launches>)],
    ) -> KernelCounts {
        let steps = steps.max(1) as f64;
        let launched = after.since(before);
        let per_step = |f: fn(&Launches) -> u64| {
            let mut rows: Vec<(String, f64)> = launched
                .iter()
                .map(|(name, l)| (name.clone(), f(l) as f64 / steps))
                .collect();
            rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            rows
        };
        let by_kernel = per_step(|l| l.count);
        let bytes_by_kernel = per_step(|l| l.bytes);
        let phases = phases
            .iter()
            .map(|(phase, kernels)| {
                let mut by_kernel: Vec<(String, f64, f64)> = kernels
                    .iter()
                    .map(|(n, l)| (n.clone(), l.count as f64 / steps, l.bytes as f64 / steps))
                    .collect();
                by_kernel.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
                PhaseKernels {
                    phase: phase.clone(),
                    launched: by_kernel.iter().map(|k| k.1).sum(),
                    bytes: by_kernel.iter().map(|k| k.2).sum(),
                    by_kernel,
                }
            })
            .collect();
        KernelCounts {
            launched_per_step: by_kernel.iter().map(|(_, n)| n).sum(),
            distinct: by_kernel.len(),
            by_kernel,
            bytes_per_step: bytes_by_kernel.iter().map(|(_, n)| n).sum(),
            bytes_by_kernel,
            phases,
            compiled_cold: after.compiled,
            compiled_in_steps: after.compiled - before.compiled,
            tuned_cold: after.tuned.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_shortened_and_steps_counted_apart() {
        assert_eq!(
            kernel_name("Executing ElemwiseFuse | WgpuRuntime").as_deref(),
            Some("ElemwiseFuse")
        );
        assert_eq!(
            kernel_name("Executing a::b::Copy<f32> | R").as_deref(),
            Some("Copy")
        );
        assert_eq!(
            kernel_name("Executing MatmulEntry | TensorArgs | SimpleMatmulFamily | UnitMatmulFamily | X | WgpuRuntime").as_deref(),
            Some("MatmulEntry[Simple, Unit]")
        );
        assert_eq!(kernel_name("[Compiling kernel] x"), None);
        let line = "Executing ElemwiseFuse | WgpuRuntime [bound 4096+1024 B]";
        assert_eq!(kernel_name(line).as_deref(), Some("ElemwiseFuse"));
        assert_eq!(bound_bytes("ElemwiseFuse", line), 5120);
        assert_eq!(bound_bytes("SliceAssignKernel", line), 2048);
        assert_eq!(bound_bytes("ElemwiseFuse", "Executing ElemwiseFuse | R"), 0);
        let counts = |pairs: &[(&str, u64)], compiled| Counts {
            launched: pairs
                .iter()
                .map(|(n, c)| {
                    let l = Launches {
                        count: *c,
                        bytes: 100 * c,
                    };
                    ((*n).to_owned(), l)
                })
                .collect(),
            compiled,
            tuned: BTreeMap::new(),
        };
        let before = counts(&[("a", 10), ("b", 4)], 30);
        let after = counts(&[("a", 30), ("b", 4), ("c", 2)], 31);
        let phases = vec![("forward".to_owned(), between_counts(&before, &after))];
        let k = KernelCounts::between(&before, &after, 2, &phases);
        assert_eq!(k.launched_per_step, 11.0);
        assert_eq!(
            k.by_kernel,
            vec![("a".to_owned(), 10.0), ("c".to_owned(), 1.0)]
        );
        assert_eq!(k.bytes_per_step, 1100.0);
        assert_eq!(k.phases[0].bytes, 1100.0);
        assert_eq!(k.phases[0].by_kernel[1], ("c".to_owned(), 1.0, 100.0));
        assert_eq!(
            (k.distinct, k.compiled_cold, k.compiled_in_steps),
            (2, 31, 1)
        );
    }

    #[test]
    fn tuned_keys_and_their_timed_candidates_are_counted_by_kind() {
        let log = "Fastest result fused_plane-FusedReduceAutotuneKey - ReduceKey: ReduceAutotuneKey { elem_input: Float(F32) }, FuseNumReads: 3. Context: plan
 - group fused_reduce
Autotune[2] name fused_plane => BenchmarkComputations { median: 1 }
Autotune[0] name fused_reduce_fallback => BenchmarkComputations { median: 2 }
Skip { name: \"fused_cube\" }
Fastest result plane-ReduceAutotuneKey - ElemInput: Float(F32). Context: 
Autotune[4] name plane => BenchmarkComputations { median: 1 }
Fastest result fused_unit-FusedReduceAutotuneKey - ReduceKey: x. Context: 
Autotune[1] name fused_unit => BenchmarkComputations { median: 1 }
";
        let t = tuned(log);
        assert_eq!(
            t["FusedReduceAutotuneKey"],
            Tuned {
                keys: 2,
                candidates: 3
            }
        );
        assert_eq!(
            t["ReduceAutotuneKey"],
            Tuned {
                keys: 1,
                candidates: 1
            }
        );
        assert_eq!(t.len(), 2);
    }
}
