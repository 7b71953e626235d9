//! Reading a run's Parquet files, and what the file system says about
//! room and time.

use std::path::{Path, PathBuf};

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::error::StoreError;

/// The `*.parquet` files of a directory, sorted; none when it does not exist.
/// (Temporary `*.parquet.tmp` files of unfinished writes never count.)
pub(crate) fn parquet_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(dir, e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| StoreError::io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "parquet") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Opens a Parquet file for reading; errors name the file.
pub(crate) fn open_parquet(
    path: &Path,
) -> Result<ParquetRecordBatchReaderBuilder<std::fs::File>, StoreError> {
    let file = std::fs::File::open(path).map_err(|e| StoreError::io(path, e))?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| StoreError::parquet(path, e))
}

/// Opens a Parquet file projected onto the named columns (in the file's
/// order); a missing column is an error naming the file and the column.
pub(crate) fn open_columns(
    path: &Path,
    columns: &[&str],
) -> Result<ParquetRecordBatchReaderBuilder<std::fs::File>, StoreError> {
    let b = open_parquet(path)?;
    let schema = b.parquet_schema();
    let indices = columns
        .iter()
        .map(|c| {
            (0..schema.num_columns())
                .find(|&i| schema.column(i).name() == *c)
                .ok_or_else(|| StoreError::Corrupt(path.to_owned(), format!("no column {c}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mask = parquet::arrow::ProjectionMask::leaves(schema, indices);
    Ok(b.with_projection(mask))
}

/// Bytes an unprivileged process may still write on the file system
/// holding `path` (or its parent directory, if `path` is gone); `None` where
/// the system cannot say.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = if path.exists() { path } else { path.parent()? };
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer statvfs fills on success.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    // u64 on Linux, narrower elsewhere (macOS).
    #[allow(clippy::useless_conversion)]
    let (blocks, size) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Some(blocks.saturating_mul(size))
}

/// Seconds since the Unix epoch (timestamps in manifests and entries).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bytes_of_a_directory_and_of_a_file_not_yet_written() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).expect("statvfs of a temporary directory");
        assert!(free > 0);
        // A path that does not exist is measured at its directory.
        let later = free_bytes(&dir.path().join("not-yet.parquet")).unwrap();
        assert!(later.abs_diff(free) < 1 << 30, "{free} vs {later}");
        assert_eq!(free_bytes(Path::new("/no/such/dir/file")), None);
    }
}
