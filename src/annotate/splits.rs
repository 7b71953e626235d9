//! What every label source's annotation of a run shares: the splits in
//! scope, the settings file a split's chunks of one source are checked
//! against on every resume, `--overwrite`'s removal of one source's chunks,
//! and the lock that lets the evaluation database's writer and Stockfish's
//! readers of its labels exclude each other.

use std::{fs::File, path::Path};

use super::{
    config::AnnotateConfig,
    error::{AnnotateError, Refusal, RunBusy},
};
use crate::store::{
    Manifest, Source, StoreError,
    chunks::{self as store_chunks},
    commit::{open_lock_file, write_atomic},
};

/// The splits to annotate and their board counts, from the manifest.
pub(crate) fn scope(
    config: &AnnotateConfig,
    manifest: &Manifest,
) -> Result<Vec<(String, u64)>, AnnotateError> {
    if manifest.splits.is_empty() {
        return Err(Refusal::NoSplits(config.run.clone()).into());
    }
    // Splits imported from ChessBench .bag files already carry their
    // values: Stockfish does not search them again, while the evaluation
    // database may label them beside the imported values.
    let imported = |name: &str| {
        config.evals.is_none()
            && manifest
                .splits
                .get(name)
                .is_some_and(|s| s.import.is_some())
    };
    let names: Vec<String> = match &config.splits {
        Some(s) => s.clone(),
        None => manifest
            .splits
            .keys()
            .filter(|n| !imported(n))
            .cloned()
            .collect(),
    };
    if let Some(name) = names.iter().find(|n| imported(n)).or_else(|| {
        names
            .is_empty()
            .then(|| manifest.splits.keys().next())
            .flatten()
    }) {
        return Err(Refusal::Imported(name.clone()).into());
    }
    names
        .into_iter()
        .map(|name| {
            let split = manifest
                .splits
                .get(&name)
                .ok_or_else(|| Refusal::UnknownSplit {
                    split: name.clone(),
                    available: manifest
                        .splits
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            let n = split.counts.state_value;
            let n = config.max_boards.map_or(n, |m| m.min(n));
            Ok((name, n))
        })
        .collect()
}

pub(crate) fn boards_fingerprint(manifest: &Manifest, split: &str) -> serde_json::Value {
    manifest
        .splits
        .get(split)
        .map_or(serde_json::Value::Null, |s| {
            serde_json::json!({
                "ingest_finished_at": s.ingest.finished_at,
                "state_value": s.counts.state_value,
            })
        })
}

/// Checks (or, on a split's first run, records) what a split's chunks of
/// `source` are written with, in the source's settings file: `now` is a
/// JSON object whose `boards` is [`boards_fingerprint`]. Re-ingested boards
/// fail with [`Refusal::BoardsChanged`], other settings with
/// [`Refusal::SettingsChanged`]. `upgrade` brings a file an earlier
/// version wrote to today's form before comparing.
pub(crate) fn check_settings(
    run: &std::path::Path,
    split: &str,
    source: Source,
    now: serde_json::Value,
    upgrade: impl FnOnce(&mut serde_json::Value),
) -> Result<(), AnnotateError> {
    let path = store_chunks::entries_dir(run, split).join(source.settings_file());
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut existing: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(path.clone(), e.to_string()))?;
            upgrade(&mut existing);
            if existing["boards"] != now["boards"] {
                return Err(Refusal::BoardsChanged {
                    split: split.to_owned(),
                }
                .into());
            }
            if existing != now {
                let without_boards = |v: &serde_json::Value| {
                    let mut v = v.clone();
                    if let Some(o) = v.as_object_mut() {
                        o.remove("boards");
                    }
                    v.to_string()
                };
                return Err(Refusal::SettingsChanged {
                    split: split.to_owned(),
                    label: source,
                    existing: without_boards(&existing),
                    now: without_boards(&now),
                }
                .into());
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_settings(&path, &now),
        Err(e) => Err(StoreError::io(&path, e).into()),
    }
}

/// Deletes a split's chunks of `source` and its settings file
/// (`--overwrite`); the other sources' chunks stay.
pub(crate) fn remove_source(
    run: &std::path::Path,
    split: &str,
    source: Source,
) -> Result<(), AnnotateError> {
    store_chunks::remove_source(run, split, source)?;
    let settings = store_chunks::entries_dir(run, split).join(source.settings_file());
    if settings.exists() {
        std::fs::remove_file(&settings).map_err(|e| StoreError::io(&settings, e))?;
    }
    Ok(())
}

/// Records a split's settings at `path` (the first run of that split).
fn write_settings(
    path: &std::path::Path,
    settings: &serde_json::Value,
) -> Result<(), AnnotateError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    }
    let bytes = serde_json::to_vec_pretty(settings)
        .map_err(|e| StoreError::Corrupt(path.to_owned(), e.to_string()))?;
    write_atomic(path, &bytes)?;
    Ok(())
}

/// Opens the lock file `path` and takes it, shared or exclusive, without
/// waiting: `None` when another process holds it.
pub(super) fn try_lock(path: &Path, shared: bool) -> Result<Option<File>, AnnotateError> {
    let file = open_lock_file(path).map_err(|e| StoreError::io(path, e))?;
    let locked = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match locked {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::io(path, e).into()),
    }
}

/// Takes the evaluation database's lock `RUN/annotate/.evals.lock`:
/// exclusive to write its labels (`annotate --evals`), shared to read them
/// (every Stockfish shard with `--only-missing`, together). Held while the
/// file stays open.
pub(crate) fn evals_lock(config: &AnnotateConfig, write: bool) -> Result<File, AnnotateError> {
    let dir = config.run.join(store_chunks::ENTRIES);
    std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    let path = dir.join(".evals.lock");
    Ok(try_lock(&path, !write)?.ok_or(RunBusy::EvalsBusy {
        path,
        writing: write,
    })?)
}
