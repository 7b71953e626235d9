//! Where burn's GPU backends keep the kernels they compile and the
//! autotune results they measure: one per-user directory that any working
//! directory finds.
//!
//! burn-cuda compiles every GPU kernel at run time (NVRTC), burn-wgpu
//! through wgpu and the driver, and both autotune some of them on first
//! use, which is most of a fresh process's first step (docs/gpu.md,
//! "Kernel compiling"). CubeCL caches compiled CUDA kernels and the
//! autotune results of both (WGSL kernels are compiled again by every
//! process: wgpu keeps no cache of them), by default
//! in `target/` of the Cargo project around the working directory, or
//! nowhere useful outside one. chessbench instead sets CubeCL's
//! configuration before the first GPU call: both caches go to
//! [`kernel_cache_dir`], whatever the working directory. Everything else a
//! `cubecl.toml` in the working directory or a parent says (loggers,
//! autotune level) still applies, as do CubeCL's own environment variables.
//!
//! CubeCL keys a compiled kernel by its name and arguments, not its body:
//! kernels cached by another build of chessbench could load silently after
//! their code changed. Each source therefore has its own subdirectory for
//! compiled kernels (autotune results, which CubeCL versions itself, are
//! shared),
//! named after a hash of the sources the binary was built from (`build.rs`:
//! `src/`, `vendor/`, the manifest and the lock file; the same on every
//! machine, so a binary carried to a GPU machine finds the cache it left
//! there), and only the [`KEPT_BUILDS`] most recently used are kept.

use std::{
    path::{Path, PathBuf},
    sync::Once,
    time::UNIX_EPOCH,
};

use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};

/// The environment variable that moves the kernel cache (a directory).
pub const KERNEL_CACHE_VAR: &str = "CHESSBENCH_KERNEL_CACHE";

/// Builds whose compiled kernels are kept, the running one's included.
pub(crate) const KEPT_BUILDS: usize = 4;

/// The kernel cache's root: `$CHESSBENCH_KERNEL_CACHE` when set and not
/// empty, else `chessbench/kernels` in the user's cache directory
/// (`$XDG_CACHE_HOME`, else `~/.cache`), else in the system's temporary
/// directory.
pub fn kernel_cache_dir() -> PathBuf {
    root_from(
        std::env::var_os(KERNEL_CACHE_VAR),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn root_from(
    explicit: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> PathBuf {
    let set = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(explicit) {
        return dir;
    }
    let user = set(xdg)
        .filter(|p| p.is_absolute())
        .or_else(|| set(home).map(|h| h.join(".cache")));
    user.unwrap_or_else(std::env::temp_dir)
        .join("chessbench")
        .join("kernels")
}

/// The running build's name among the caches.
fn build_name() -> String {
    format!("build-{}", env!("CHESSBENCH_SOURCE_ID"))
}

/// Whether `name` is a build's directory as [`build_name`] makes them.
fn is_build(name: &str) -> bool {
    name.strip_prefix("build-")
        .is_some_and(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Removes all but the `keep` most recently used build directories of
/// `root`, `current` always among those kept; nothing else in `root` is
/// touched. Errors are ignored: another process may be removing the same
/// directories.
fn prune(root: &Path, current: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| is_build(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .filter(|p| p != current)
        .filter_map(|p| Some((last_used(&p)?, p)))
        .collect();
    builds.sort_by_key(|b| std::cmp::Reverse(b.0));
    for (_, old) in builds.into_iter().skip(keep.saturating_sub(1)) {
        let _ = std::fs::remove_dir_all(old);
    }
}

/// When a build's cache was last used: its `.last-used` file's time, else
/// the directory's.
fn last_used(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir.join(LAST_USED))
        .or_else(|_| std::fs::metadata(dir))
        .ok()?
        .modified()
        .ok()
}

/// The file whose time says when a build's cache was last used.
const LAST_USED: &str = ".last-used";

/// This build's cache directory under `root`, created and marked as just
/// used, older builds' pruned; `None` if it cannot be written.
fn build_dir(root: &Path) -> Option<PathBuf> {
    let dir = root.join(build_name());
    std::fs::create_dir_all(&dir).ok()?;
    // Rewritten at every start: its time orders the builds for pruning.
    let now = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::fs::write(dir.join(LAST_USED), now.to_string()).ok()?;
    prune(root, &dir, KEPT_BUILDS);
    Some(dir)
}

/// Points CubeCL's compiled-kernel cache at this build's directory under
/// [`kernel_cache_dir`] and its autotune cache at that root, once per
/// process, before the first GPU call reads CubeCL's configuration. Where
/// the root cannot be written (CubeCL would panic on it), the system's
/// temporary directory serves, with a warning; where neither can, kernels
/// are not cached. If something has read CubeCL's configuration already
/// (a caller that touched the GPU first), it stays as it is.
pub fn configure_kernel_cache() {
    configure(None);
}

/// [`configure_kernel_cache`], and CubeCL's logs of the kernels launched
/// and compiled into `dir` ([`crate::model::gpu::kernel_log`]): `None` if CubeCL's
/// configuration was set before (the logs would not be written).
pub fn configure_with_kernel_log(dir: &Path) -> Option<crate::model::gpu::kernel_log::KernelLog> {
    configure(Some(dir))
}

fn configure(log_dir: Option<&Path>) -> Option<crate::model::gpu::kernel_log::KernelLog> {
    static ONCE: Once = Once::new();
    let mut log = None;
    ONCE.call_once(|| {
        if CubeClRuntimeConfig::storage().lock().is_some() {
            return;
        }
        let wanted = kernel_cache_dir();
        let fallback = std::env::temp_dir().join("chessbench-kernels");
        let chosen = [wanted.clone(), fallback]
            .into_iter()
            .find_map(|root| Some((build_dir(&root)?, root)));
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        match chosen {
            Some((dir, root)) => {
                if root != wanted {
                    eprintln!(
                        "warning: cannot write the kernel cache in {}; using {} ({KERNEL_CACHE_VAR} moves it)",
                        wanted.display(),
                        root.display()
                    );
                }
                config.compilation.cache = Some(CacheConfig::File(dir));
                config.autotune.cache = CacheConfig::File(root);
            }
            None => {
                eprintln!(
                    "warning: cannot write the kernel cache in {} nor in the temporary directory; every process compiles its kernels ({KERNEL_CACHE_VAR} moves the cache)",
                    wanted.display()
                );
                config.compilation.cache = None;
            }
        }
        if let Some(dir) = log_dir {
            match crate::model::gpu::kernel_log::enable(&mut config, dir) {
                Ok(l) => log = Some(l),
                Err(e) => eprintln!("warning: cannot write kernel logs in {}: {e}", dir.display()),
            }
        }
        // One lock from the check to the set: CubeCL's `set` panics if
        // anything set or read the configuration in between.
        let mut stored = CubeClRuntimeConfig::storage().lock();
        if stored.is_none() {
            *stored = Some(std::sync::Arc::new(config));
        } else {
            log = None;
        }
    });
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_root_follows_the_variable_then_the_user_cache() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(
            root_from(os("/x/k"), os("/c"), os("/h")),
            PathBuf::from("/x/k")
        );
        assert_eq!(
            root_from(os(""), os("/c"), os("/h")),
            PathBuf::from("/c/chessbench/kernels")
        );
        assert_eq!(
            root_from(None, os("relative"), os("/h")),
            PathBuf::from("/h/.cache/chessbench/kernels"),
            "XDG_CACHE_HOME must be absolute"
        );
        assert_eq!(
            root_from(None, None, None),
            std::env::temp_dir().join("chessbench/kernels")
        );
    }

    #[test]
    fn each_source_has_its_own_directory_and_old_ones_go() {
        let root = tempfile::tempdir().unwrap();
        let name = build_name();
        assert!(name.len() == "build-".len() + 16 && name.starts_with("build-"));
        assert!(is_build(&name));
        let build = |n: usize| format!("build-{n:016x}");
        for n in 0..6 {
            std::fs::create_dir_all(root.path().join(build(n))).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Not a build's directory: never pruned.
        std::fs::create_dir_all(root.path().join("build-notes")).unwrap();
        let current = root.path().join(build(0));
        prune(root.path(), &current, 3);
        let mut left: Vec<String> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // The current build, the two most recent others, and the rest.
        assert_eq!(
            left,
            [build(0), build(4), build(5), "build-notes".to_owned()]
        );
        assert!(build_dir(Path::new("/proc/no-such-place")).is_none());
    }
}
