//! Counting the GPU kernels a process launches and compiles, from CubeCL's
//! own logs: with [`enable`] before the device starts, CubeCL writes a line
//! per kernel it launches (`Executing NAME`, its profiling logger at the
//! level that only names kernels, without timing or synchronising) and a
//! line per kernel it compiles (`[Compiling kernel] NAME`) to two files;
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
    CubeClRuntimeConfig, compilation::CompilationLogLevel, profiling::ProfilingLogLevel,
};
use serde::Serialize;

const LAUNCHED: &str = "launched.log";
const COMPILED: &str = "compiled.log";

/// The two log files of a process.
#[derive(Debug, Clone)]
pub struct KernelLog {
    dir: PathBuf,
}

/// Kernels launched (by name) and compiled, from the start of the process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub launched: BTreeMap<String, u64>,
    pub compiled: u64,
}

/// What a step launches and what a cold process compiles.
#[derive(Debug, Clone, Serialize)]
pub struct KernelCounts {
    /// Kernels launched per timed step.
    pub launched_per_step: f64,
    /// Per step, by kernel (CubeCL's name, generics shortened), most first.
    pub by_kernel: Vec<(String, f64)>,
    /// Distinct kernels launched in the timed steps.
    pub distinct: usize,
    /// Kernels compiled by the process up to the end of the timed steps
    /// (cold: nothing cached), the self-tests' included.
    pub compiled_cold: u64,
    /// Of those, compiled during the timed steps (0 once warm).
    pub compiled_in_steps: u64,
}

/// Asks CubeCL to log launches and compilations into `dir` (created),
/// editing `config` before it is installed (`gpu_cache` calls this).
#[cfg(gpu)]
pub(crate) fn enable(
    config: &mut CubeClRuntimeConfig,
    dir: &std::path::Path,
) -> std::io::Result<KernelLog> {
    std::fs::create_dir_all(dir)?;
    for name in [LAUNCHED, COMPILED] {
        std::fs::write(dir.join(name), b"")?;
    }
    config.profiling.logger.file = Some(dir.join(LAUNCHED));
    config.profiling.logger.append = true;
    config.profiling.logger.level = ProfilingLogLevel::Minimal;
    config.compilation.logger.file = Some(dir.join(COMPILED));
    config.compilation.logger.append = true;
    config.compilation.logger.level = CompilationLogLevel::Basic;
    Ok(KernelLog {
        dir: dir.to_owned(),
    })
}

/// A launch line's kernel: `Executing NAME | ARG | ... | Runtime` (CubeCL's
/// shortened type name) -> `NAME`, with the matmul's algorithm families
/// (`MatmulEntry[Simple, Unit]`) where there are; `None` for other lines.
fn kernel_name(line: &str) -> Option<String> {
    let name = line.strip_prefix("Executing ")?.trim();
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

impl KernelLog {
    /// The counts so far, once CubeCL's logger (a background task) has
    /// written everything sent to it: the files must stop growing (the
    /// device should be synchronised first).
    pub fn counts(&self) -> std::io::Result<Counts> {
        self.settle();
        let launched_text = std::fs::read_to_string(self.dir.join(LAUNCHED))?;
        let compiled_text = std::fs::read_to_string(self.dir.join(COMPILED))?;
        let mut launched = BTreeMap::new();
        for name in launched_text.lines().filter_map(kernel_name) {
            *launched.entry(name).or_insert(0) += 1;
        }
        let compiled = compiled_text
            .lines()
            .filter(|l| l.starts_with("[Compiling kernel]"))
            .count() as u64;
        Ok(Counts { launched, compiled })
    }

    /// Waits until both files keep their size for 300 ms (at most 10 s).
    fn settle(&self) {
        let size = || {
            [LAUNCHED, COMPILED].map(|f| std::fs::metadata(self.dir.join(f)).map_or(0, |m| m.len()))
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

impl KernelCounts {
    /// What `steps` steps between `before` and `after` launched, and what
    /// the process compiled up to `after`.
    pub fn between(before: &Counts, after: &Counts, steps: usize) -> KernelCounts {
        let steps = steps.max(1) as f64;
        let mut by_kernel: Vec<(String, f64)> = after
            .launched
            .iter()
            .map(|(name, n)| {
                let was = before.launched.get(name).copied().unwrap_or(0);
                (name.clone(), (n - was) as f64 / steps)
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        by_kernel.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        KernelCounts {
            launched_per_step: by_kernel.iter().map(|(_, n)| n).sum(),
            distinct: by_kernel.len(),
            by_kernel,
            compiled_cold: after.compiled,
            compiled_in_steps: after.compiled - before.compiled,
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
        let counts = |pairs: &[(&str, u64)], compiled| Counts {
            launched: pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect(),
            compiled,
        };
        let before = counts(&[("a", 10), ("b", 4)], 30);
        let after = counts(&[("a", 30), ("b", 4), ("c", 2)], 31);
        let k = KernelCounts::between(&before, &after, 2);
        assert_eq!(k.launched_per_step, 11.0);
        assert_eq!(
            k.by_kernel,
            vec![("a".to_owned(), 10.0), ("c".to_owned(), 1.0)]
        );
        assert_eq!(
            (k.distinct, k.compiled_cold, k.compiled_in_steps),
            (2, 31, 1)
        );
    }
}
