//! Links the prebuilt DuckDB shared library that `make duckdb`
//! (scripts/fetch-libduckdb) puts in `.duckdb/1.5.6`, and records its
//! directory as the binary's run path, so `chessbench sql` finds it without
//! `LD_LIBRARY_PATH`. Also names the source the binary is built from
//! (`CHESSBENCH_SOURCE_ID`): the GPU kernel cache keeps one directory per
//! source (src/model/gpu/cache.rs).

use std::{
    env, fs,
    path::{Path, PathBuf},
};

/// FNV-1a over every file under `src/` and `vendor/`, `Cargo.toml` and
/// `Cargo.lock`, paths included, in sorted order: what CubeCL generates
/// kernels from.
fn source_id() -> String {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let mut files = vec![PathBuf::from("Cargo.toml"), PathBuf::from("Cargo.lock")];
    walk(Path::new("src"), &mut files);
    walk(Path::new("vendor"), &mut files);
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let bytes = fs::read(&file).unwrap_or_default();
        for &b in file.to_string_lossy().as_bytes().iter().chain(&bytes) {
            hash = (hash ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

fn main() {
    // `cfg(gpu)`: a GPU backend is built (CUDA or wgpu), and with it the
    // project's CubeCL kernels (src/model/gpu/*.rs).
    println!("cargo::rustc-check-cfg=cfg(gpu)");
    if env::var_os("CARGO_FEATURE_CUDA").is_some() || env::var_os("CARGO_FEATURE_WGPU").is_some() {
        println!("cargo::rustc-cfg=gpu");
    }
    for watched in ["src", "vendor", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={watched}");
    }
    println!("cargo:rustc-env=CHESSBENCH_SOURCE_ID={}", source_id());
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if env::var_os("CARGO_FEATURE_SQL").is_none() {
        // No DuckDB to link (the Python package's build).
        return;
    }
    println!("cargo:rerun-if-changed=build.rs");
    let Ok(dir) = env::var("DUCKDB_LIB_DIR") else {
        panic!(
            "DUCKDB_LIB_DIR is not set: build through `make` or cargo from the repository \
             (.cargo/config.toml sets it), or point it at a directory holding libduckdb 1.5.6"
        );
    };
    let lib = ["libduckdb.so", "libduckdb.dylib"]
        .iter()
        .map(|name| Path::new(&dir).join(name))
        .find(|path| path.exists());
    if lib.is_none() {
        panic!(
            "no libduckdb.so in DUCKDB_LIB_DIR={dir}: run `make duckdb` (scripts/fetch-libduckdb \
             fetches DuckDB 1.5.6's prebuilt library from the npm registry)"
        );
    }
    println!("cargo:rerun-if-changed={dir}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
}
