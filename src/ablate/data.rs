//! The data phase: the base run's annotation and each data-level
//! variant's train split annotated again into a run directory of its own
//! that shares the base's tables.

use std::path::{Path, PathBuf};

use super::{error::AblateError, grid::Grid};
use crate::{
    annotate,
    options::Shard,
    store::{StoreError, chunks::ENTRIES, schema::Table},
    ui::describe,
};

/// What the data phase annotated, and the data-level variants it could not
/// annotate with the error.
type Annotated = (Vec<String>, Vec<(String, String)>);

/// Annotates the base run (its `[annotate]` table: a no-op when done) and
/// every data-level variant's train split into its own run directory. A
/// data-level variant that cannot be annotated is returned with its error
/// (its variants are recorded as failed, the others go on); a base that
/// cannot be annotated is an error.
pub(super) fn prepare_data(
    grid: &Grid,
    shard: Option<Shard>,
    progress: bool,
) -> Result<Annotated, AblateError> {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let annotate = |mut config: annotate::config::AnnotateConfig| -> Result<(), AblateError> {
        if let Some(s) = shard {
            config.shard = s;
            config.shard_source = "--shard";
        }
        config.progress = progress;
        let dir = config.run.clone();
        annotate::run(&config).map_err(|source| AblateError::Annotate { dir, source })?;
        Ok(())
    };
    if let Some(base) = &grid.base_annotate {
        annotate(base.clone())?;
        done.push("base".to_owned());
    }
    // The splits a variant's training scores itself on, other than the one
    // it is annotated again for (evaluation reads RUN itself).
    let base = grid.variants.first().map(|v| &v.train);
    let eval_splits: Vec<String> = base
        .iter()
        .flat_map(|t| t.eval_split.clone().filter(|s| *s != t.split))
        .collect();
    for d in &grid.data {
        let outcome = link_run(&grid.run, &d.dir, &eval_splits)
            .map_err(AblateError::from)
            .and_then(|()| annotate(d.annotate.clone()));
        match outcome {
            Ok(()) => done.push(d.id.clone()),
            Err(e) => {
                if progress {
                    eprintln!("{}: {}", d.id, describe(&e));
                }
                failed.push((d.id.clone(), describe(&e)));
            }
        }
    }
    Ok((done, failed))
}

/// Makes `dir` (inside `base`) a run directory with `base`'s ingest tables
/// (linked), its manifest (copied: annotate records itself there) and its
/// annotations of `eval_splits` (linked), so a variant learns from its own
/// annotation of the train split and is scored on the base's test labels.
/// Links are relative (the run directory may move), and shards preparing
/// the same directory at once all succeed.
fn link_run(base: &Path, dir: &Path, eval_splits: &[String]) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    let up = dir
        .strip_prefix(base)
        .map(|rel| rel.components().count())
        .unwrap_or(0);
    let manifest = dir.join(crate::store::commit::MANIFEST);
    if !manifest.exists() {
        let from = base.join(crate::store::commit::MANIFEST);
        let bytes = std::fs::read(&from).map_err(|e| StoreError::io(&from, e))?;
        // Written beside, then linked into place only if absent: a shard
        // that got there first (and may have recorded its annotation in it)
        // keeps its copy.
        let tmp = dir.join(format!(".manifest.json.{}.tmp", std::process::id()));
        std::fs::write(&tmp, &bytes).map_err(|e| StoreError::io(&tmp, e))?;
        let linked = std::fs::hard_link(&tmp, &manifest);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(&manifest, e)),
        }
    }
    // `to` -> `target` (relative to `to`'s directory), unless `to` already
    // resolves; a dangling link is replaced.
    let link = |target: PathBuf, to: PathBuf| -> Result<(), StoreError> {
        if to.exists() {
            return Ok(());
        }
        if std::fs::symlink_metadata(&to).is_ok() {
            let _ = std::fs::remove_file(&to);
        }
        match std::os::unix::fs::symlink(&target, &to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(StoreError::io(&to, e)),
        }
    };
    let parents = |n: usize| -> PathBuf { (0..n).map(|_| "..").collect() };
    for table in Table::INGEST {
        if base.join(table.name()).exists() {
            link(parents(up).join(table.name()), dir.join(table.name()))?;
        }
    }
    for table in [
        Table::StateValues.name(),
        Table::ActionValues.name(),
        Table::Failures.name(),
        ENTRIES,
    ] {
        for split in eval_splits {
            let name = format!("split={split}");
            if base.join(table).join(&name).exists() {
                let parent = dir.join(table);
                std::fs::create_dir_all(&parent).map_err(|e| StoreError::io(&parent, e))?;
                link(parents(up + 1).join(table).join(&name), parent.join(&name))?;
            }
        }
    }
    Ok(())
}
