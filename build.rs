//! Links the prebuilt DuckDB shared library that `make duckdb`
//! (scripts/fetch-libduckdb) puts in `.duckdb/1.5.6`, and records its
//! directory as the binary's run path, so `chessbench sql` finds it without
//! `LD_LIBRARY_PATH`.

use std::{env, path::Path};

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
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
