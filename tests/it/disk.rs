//! A disk that fills up is an error naming the file being written, and
//! leaves no half-written table: stages write into the run's staging
//! directory and move tables into place only when all of them are complete.
//!
//! Two ways to run out of room: a per-file size limit (`RLIMIT_FSIZE`, with
//! `SIGXFSZ` ignored so writes fail with EFBIG), which works everywhere; and
//! a real 1 MiB tmpfs in a private mount namespace (`unshare --user
//! --mount`), where the kernel allows it (ENOSPC).

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use crate::util::{self, BIN, data_file};

/// `chessbench ARGS` with every file it writes limited to `bytes`.
pub(crate) fn run_with_file_limit(bytes: u64, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).arg("--no-progress");
    // SAFETY: between fork and exec only async-signal-safe calls (signal,
    // setrlimit) run; ignored signals stay ignored across exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("run chessbench")
}

/// Every path under `dir`, relative to it, sorted.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if p.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A failed stage left nothing but the run's lock and empty staging area.
fn assert_nothing_half_written(run: &Path) {
    let left: Vec<String> = listing(run)
        .into_iter()
        .filter(|p| p != ".lock" && p != ".staging")
        .collect();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        run.display()
    );
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn ingest_into_a_full_disk_names_the_file_and_writes_no_table() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let input = data_file("lichess_2022-06_head2500.pgn.zst");
    let o = run_with_file_limit(
        256 << 10,
        &["ingest", run.to_str().unwrap(), input.to_str().unwrap()],
    );
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(run.to_str().unwrap())
            && err.contains(".parquet")
            && err.contains("too large"),
        "{err}"
    );
    // Each cause is said once.
    assert_eq!(err.matches("os error").count(), 1, "{err}");
    assert_nothing_half_written(&run);
    // The same run directory works once there is room.
    let summary = util::ingest(&run, &[input.to_str().unwrap()]);
    assert!(summary["games_read"].as_u64().unwrap() > 2000);
}

#[test]
fn ingest_into_a_full_tmpfs_names_the_file_and_writes_no_table() {
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        // Not a missing dependency: the kernel or container forbids user
        // namespaces. The RLIMIT_FSIZE test above covers the same code.
        eprintln!("skipping: unshare --user --mount is not permitted here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let input = data_file("lichess_2022-06_head2500.pgn.zst");
    // The tmpfs lives only in the namespace: list it from inside.
    let script = r#"mount -t tmpfs -o size=1m tmpfs "$1" || exit 99
"$2" ingest "$1/run" "$3" --no-progress
echo "exit=$?"
cd "$1/run" && find . | sort"#;
    let o = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&mnt)
        .arg(BIN)
        .arg(&input)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "the namespace's script failed: {err}");
    assert!(out.contains("exit=1"), "{out}\n{err}");
    let run = mnt.join("run");
    assert!(
        err.contains(run.to_str().unwrap()) && err.contains("No space left on device"),
        "{err}"
    );
    let left: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("exit="))
        .skip(1)
        .filter(|l| !matches!(*l, "." | "./.lock" | "./.staging"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An import that runs out of room leaves the run as it was.
#[test]
fn bag_import_into_a_full_disk_names_the_file_and_writes_no_table() {
    let dir = tempfile::tempdir().unwrap();
    let bags = dir.path().join("bags");
    std::fs::create_dir(&bags).unwrap();
    // Real boards: the ingested sample's, written as a state-value bag.
    let source = dir.path().join("source");
    util::ingest(
        &source,
        &[data_file("lichess_2022-06_head2500.pgn.zst")
            .to_str()
            .unwrap()],
    );
    let fens = util::strings(&util::read_table(&source, "boards", "train"), "fen");
    let mut w = chessbench::bag::BagWriter::create(&bags.join("state_value_data.bag")).unwrap();
    let mut rec = Vec::new();
    for (i, fen) in fens.iter().flatten().enumerate() {
        rec.clear();
        // Synthetic values: this test is about bytes, not chess.
        chessbench::bag::coder::encode_state_value(&mut rec, fen, (i % 100) as f64 / 100.0);
        w.write(&rec).unwrap();
    }
    w.finish().unwrap();
    let run: PathBuf = dir.path().join("run");
    let o = run_with_file_limit(
        256 << 10,
        &[
            "bag",
            "import",
            run.to_str().unwrap(),
            "--split",
            "train",
            bags.to_str().unwrap(),
        ],
    );
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(run.to_str().unwrap()) && err.contains("too large"),
        "{err}"
    );
    assert_nothing_half_written(&run);
}

/// An export that runs out of room removes the files it wrote.
#[test]
fn bag_export_into_a_full_disk_names_the_file_and_leaves_no_bag() {
    if !util::have_stockfish() {
        return;
    }
    let run = crate::sql::annotated();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bags");
    // The state-value bag fits in 16 KiB; the action values do not.
    let o = run_with_file_limit(16 << 10, &util::bag_export_args(run, &out));
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(out.to_str().unwrap()) && err.contains("too large"),
        "{err}"
    );
    assert!(listing(&out).is_empty(), "{:?}", listing(&out));
}
