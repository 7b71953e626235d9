//! Options users of the dumps rely on: sampling, hashed test split, header
//! filters, --max-games.

use std::collections::HashSet;

use super::util::*;

fn game_ids(run: &std::path::Path, split: &str) -> HashSet<String> {
    strings(&read_table(run, "games", split), "id")
        .into_iter()
        .map(|id| id.expect("Lichess games have ids"))
        .collect()
}

#[test]
fn sample_is_uniform_deterministic_and_seeded() {
    let input = lichess_1000k();
    let input = input.to_str().unwrap();
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let sa = ingest(a.path(), &["--sample-games", "100", "--seed", "1", input]);
    ingest(b.path(), &["--sample-games", "100", "--seed", "1", input]);
    ingest(c.path(), &["--sample-games", "100", "--seed", "2", input]);
    assert_eq!(sa["splits"]["train"]["games"], 100);
    assert_eq!(sa["splits"]["train"]["not_sampled"], 333);
    assert!(
        snapshot(a.path()) == snapshot(b.path()),
        "same seed, same tables"
    );
    let (ids_a, ids_c) = (game_ids(a.path(), "train"), game_ids(c.path(), "train"));
    assert_eq!(ids_a.len(), 100);
    assert_ne!(ids_a, ids_c, "another seed draws another sample");
    // The sampled games' boards are exactly what ingesting them alone gives:
    // compare against a full ingest restricted to those games' boards.
    let full = tempfile::tempdir().unwrap();
    ingest(full.path(), &[input]);
    let all = read_table(full.path(), "games", "train");
    let sampled = read_table(a.path(), "games", "train");
    let sampled_nos: HashSet<u64> = u64s(&sampled, "game_no").into_iter().collect();
    let plies_all: u64 = all
        .iter()
        .flat_map(|b| {
            let nos = col::<arrow_array::UInt64Array>(b, "game_no");
            let plies = col::<arrow_array::UInt32Array>(b, "plies");
            (0..b.num_rows())
                .filter(|&i| sampled_nos.contains(&nos.value(i)))
                .map(|i| u64::from(plies.value(i)) + 1)
                .collect::<Vec<_>>()
        })
        .sum();
    let occurrences: u64 = u64s(&read_table(a.path(), "boards", "train"), "occurrences")
        .iter()
        .sum();
    assert_eq!(occurrences, plies_all);
}

#[test]
fn test_fraction_splits_games_by_a_stable_hash() {
    let input = lichess_1000k();
    let input = input.to_str().unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s = ingest(a.path(), &["--test-fraction", "0.1", input]);
    let train = s["splits"]["train"]["games"].as_u64().unwrap();
    let test = s["splits"]["test"]["games"].as_u64().unwrap();
    assert_eq!(train + test, 433);
    assert!((20..=70).contains(&test), "{test} of 433 for a tenth");
    // Stable: the same games go to test whatever else is in the input.
    ingest(
        b.path(),
        &["--test-fraction", "0.1", "--max-games", "200", input],
    );
    let test_a = game_ids(a.path(), "test");
    let test_b = game_ids(b.path(), "test");
    assert!(!test_b.is_empty() && test_b.is_subset(&test_a));
    assert!(game_ids(a.path(), "train").is_disjoint(&test_a));
    let stats = stats_json(a.path());
    assert!(stats["test_in_train"].as_f64().unwrap() > 0.0);
}

#[test]
fn header_filters_reject_with_a_reason() {
    let input = lichess_1000k();
    let input = input.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = ingest(tmp.path(), &["--speed", "blitz", input]);
    let split = &s["splits"]["train"];
    let games = read_table(tmp.path(), "games", "train");
    let speeds: HashSet<Option<String>> = strings(&games, "speed").into_iter().collect();
    assert_eq!(speeds, HashSet::from([Some("blitz".to_owned())]));
    let filtered = split["rejected"]["filtered_speed"].as_u64().unwrap();
    assert!(filtered > 100);
    let rejected = rejected_total(split);
    assert_eq!(split["games"].as_u64().unwrap() + rejected, 438);

    let tmp = tempfile::tempdir().unwrap();
    let s = ingest(
        tmp.path(),
        &["--min-elo", "2000", "--max-elo", "2400", input],
    );
    let games = read_table(tmp.path(), "games", "train");
    for elo in ["white_elo", "black_elo"] {
        for b in &games {
            let c = col::<arrow_array::UInt16Array>(b, elo);
            assert!(c.values().iter().all(|&e| (2000..=2400).contains(&e)));
        }
    }
    assert!(
        s["splits"]["train"]["rejected"]["filtered_elo"]
            .as_u64()
            .unwrap()
            > 300
    );

    // --rated-only: every game of this file is rated, swiss games included
    // (their Event lacks "Rated" but is not "Casual").
    let tmp = tempfile::tempdir().unwrap();
    let s = ingest(tmp.path(), &["--rated-only", input]);
    assert_eq!(s["splits"]["train"]["games"], 433);
}

#[test]
fn max_games_counts_accepted_games() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ingest(
        tmp.path(),
        &["--max-games", "123", lichess_1000k().to_str().unwrap()],
    );
    assert_eq!(s["splits"]["train"]["games"], 123);
    let read = s["games_read"].as_u64().unwrap();
    let rejected = rejected_total(&s["splits"]["train"]);
    assert_eq!(read, 123 + rejected);
}

#[test]
fn bad_options_are_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().to_str().unwrap();
    let input = lichess_1000k();
    let input = input.to_str().unwrap();
    for (args, needle) in [
        (vec!["--test-fraction", "2"], "--test-fraction"),
        (vec!["--speed", "hyperbullet"], "hyperbullet"),
        (vec!["--split", "Train!"], "split name"),
        (vec!["--memory-limit", "lots"], "--memory-limit"),
        (vec!["--min-elo", "2500", "--max-elo", "2000"], "--min-elo"),
    ] {
        let mut full = vec!["ingest", out, input];
        full.extend(args.iter().copied());
        let o = run(&full);
        assert!(!o.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let o = run(&["ingest", out]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no input"));
}

#[test]
fn help_explains_the_stage() {
    let o = std::process::Command::new(BIN)
        .args(["ingest", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "--sample-games",
        "--test-fraction",
        "--memory-limit",
        "rejects",
        "curl",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}");
    }
}

/// Every stage that takes `--memory-limit` lists under it the shares its
/// run divides the limit by (the stage's `options::Memory`), each share
/// once, in the declared order.
#[test]
fn memory_limit_help_lists_the_stage_s_shares() {
    use chessbench::{annotate, bag, eval, ingest, sql, stats, train};
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    for (stage, shares) in [
        (vec!["ingest"], ingest::MEMORY.to_string()),
        (vec!["annotate"], annotate::memory_help()),
        (vec!["stats"], stats::MEMORY.to_string()),
        (vec!["sql"], sql::MEMORY.to_string()),
        (vec!["bag", "export"], sql::MEMORY.to_string()),
        (vec!["bag", "import"], bag::import::MEMORY.to_string()),
        (vec!["train"], train::MEMORY.to_string()),
        (vec!["eval"], eval::MEMORY.to_string()),
    ] {
        let o = std::process::Command::new(BIN)
            .args(&stage)
            .arg("--help")
            .output()
            .unwrap();
        assert!(o.status.success(), "{stage:?} --help");
        let help = words(&String::from_utf8_lossy(&o.stdout));
        let (_, after) = help
            .split_once("--memory-limit <SIZE>")
            .unwrap_or_else(|| panic!("{stage:?} --help has no --memory-limit"));
        let (flag, _) = after.split_once("[default: 2GiB]").unwrap();
        assert!(
            flag.contains(&words(&shares)),
            "{stage:?} --help's --memory-limit lacks its shares:\n{shares}\nit reads: {flag}"
        );
        assert!(!shares.trim().is_empty());
    }
    // The shares of a stage add up to the limit, a floor aside.
    let limit = 1u64 << 30;
    assert_eq!(train::MEMORY.share(limit, 1).iter().sum::<u64>(), limit);
    assert_eq!(sql::MEMORY.share(limit, 1).iter().sum::<u64>(), limit);
    assert_eq!(ingest::MEMORY.share(limit, 1).iter().sum::<u64>(), limit);
    assert_eq!(
        bag::import::MEMORY.share(limit, 8).iter().sum::<u64>(),
        limit
    );
    assert_eq!(stats::MEMORY.share(limit, 4).iter().sum::<u64>(), limit);
    let [session, batches, weights] = eval::MEMORY.share(limit, 1);
    assert_eq!((session, batches + weights), (limit, limit));
}

/// Runs the binary in `cwd` (the path rules depend on it).
fn run_in(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .current_dir(cwd)
        .args(args)
        .arg("--no-progress")
        .output()
        .expect("run chessbench")
}

/// A pipeline file in `dir/pipeline/` and a PGN beside it.
fn pipeline(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let pdir = dir.join("pipeline");
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::copy(lichess_1000k(), pdir.join("games.pgn")).unwrap();
    let file = pdir.join("p.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Paths in a pipeline file are relative to the file, from any working
/// directory.
#[test]
fn pipeline_paths_are_relative_to_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = pipeline(
        tmp.path(),
        "[ingest]\nrun = \"../runs/a\"\nmax_games = 5\n[[ingest.inputs]]\npath = \"games.pgn\"\n",
    );
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let o = run_in(&elsewhere, &["ingest", "--config", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(tmp.path().join("runs/a/manifest.json").is_file());
    assert!(!elsewhere.join("runs").exists());
}

/// Paths on the command line are relative to the working directory, also
/// with --config; options it does not give keep the file's rule (an `out`
/// from the file stays relative to the file when the inputs come from the
/// command line).
#[test]
fn command_line_paths_are_relative_to_the_working_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = pipeline(
        tmp.path(),
        "[ingest]\nrun = \"../runs/b\"\nmax_games = 5\n[[ingest.inputs]]\npath = \"games.pgn\"\n",
    );
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::copy(lichess_1000k(), cwd.join("mine.pgn")).unwrap();
    let config = file.to_str().unwrap();
    // Inputs on the command line follow RUN_DIR, here the file's.
    let o = run_in(
        &cwd,
        &["ingest", "--config", config, "../runs/b", "mine.pgn"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(tmp.path().join("runs/b/manifest.json").is_file());
    let o = run_in(&cwd, &["ingest", "--config", config, "here"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(cwd.join("here/manifest.json").is_file());
}

/// A program in a pipeline file: a relative path with a `/` is relative to
/// the file; a bare name is looked up on PATH.
#[test]
fn engine_paths_follow_the_same_rule() {
    let Some(engine) = chessbench::testing::stockfish() else {
        return;
    };
    let stockfish = std::fs::canonicalize(&engine.path)
        .ok()
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join(&engine.path))
                .find(|p| p.is_file())
        })
        .expect("the stockfish executable");
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    ingest(
        &run_dir,
        &["--max-games", "2", lichess_1000k().to_str().unwrap()],
    );
    // A wrapper script next to the pipeline file, named by a relative path.
    let file = pipeline(
        tmp.path(),
        "[annotate]\nrun = \"../run\"\nengine = \"bin/sf\"\nnodes = 50\nmax_boards = 2\n",
    );
    let bin = file.parent().unwrap().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("sf");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec {} \"$@\"\n", stockfish.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run_in(
        tmp.path(),
        &["annotate", "--config", file.to_str().unwrap(), "--json"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(s["engine"].as_str().unwrap().contains("Stockfish"), "{s}");
    // The same name given on the command line is relative to the working
    // directory, where there is no bin/sf.
    let o = run_in(
        tmp.path(),
        &[
            "annotate",
            "--config",
            file.to_str().unwrap(),
            "--engine",
            "bin/sf",
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("bin/sf"));
}

/// Errors in a pipeline file name the file, the table and the key; a limit
/// given on the command line replaces the file's.
#[test]
fn pipeline_errors_name_the_key_and_groups_layer_as_one() {
    let tmp = tempfile::tempdir().unwrap();
    let file = pipeline(tmp.path(), "[ingest]\nmax_game = 5\n");
    let o = run_in(tmp.path(), &["ingest", "--config", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("p.toml") && err.contains("[ingest]") && err.contains("`max_game`"),
        "{err}"
    );
    std::fs::write(&file, "[ingest]\nmax_games = \"five\"\n").unwrap();
    let o = run_in(tmp.path(), &["ingest", "--config", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[ingest] max_games"), "{err}");
    // Enum values: one spelling in files and on the command line.
    std::fs::write(
        &file,
        "[train]\nrun = \"r\"\npolicy = \"behavioral-cloning\"\n",
    )
    .unwrap();
    let o = run_in(tmp.path(), &["train", "--config", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("behavioral_cloning"), "{err}");
    let o = run_in(tmp.path(), &["train", "--policy", "behavioral-cloning"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
}

/// docs/cli.md is the binary's `help-markdown` output: the flag reference
/// the docs link to is the code's, never a hand copy.
#[test]
fn the_command_line_reference_is_current() {
    let o = run(&["help-markdown"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let generated = String::from_utf8(o.stdout).unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if generated != committed {
        let fresh = std::env::temp_dir().join("chessbench-cli.md");
        std::fs::write(&fresh, &generated).unwrap();
        panic!(
            "docs/cli.md is not the current `chessbench help-markdown` output ({}): run `make docs`",
            fresh.display()
        );
    }
    for stage in [
        "ingest",
        "annotate",
        "train",
        "eval",
        "sql",
        "bag export",
        "uci",
    ] {
        let heading = format!("\n## chessbench {stage}\n");
        assert!(generated.contains(&heading), "no section {heading:?}");
    }
}

/// docs/benchmarks.md's current figures are rendered from
/// bench/results/*/figures.jsonl, and every figure README.md and docs/
/// state is recorded under bench/results/ (`bench/figures.py --check`).
#[test]
fn every_figure_in_the_docs_is_recorded_in_bench_results() {
    if !python_has("tomllib") {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = std::process::Command::new("python3")
        .arg(root.join("bench/figures.py"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bench/figures.py --check:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The options every stage shares are one definition each: the same flag,
/// the same help text, wherever they appear.
#[test]
fn shared_options_read_the_same_everywhere() {
    let help = |args: &[&str]| {
        let o = run(args);
        assert!(o.status.success(), "{args:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let memory = "Memory the stage may hold (tables, buffers, batches, the model)";
    for stage in ["ingest", "train", "eval", "sql", "stats"] {
        let h = help(&[stage, "--help"]);
        let flat = h.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(memory), "{stage} --help: {flat}");
        assert!(
            h.contains("[RUN_DIR]") || h.contains("<RUN_DIR>"),
            "{stage}: RUN_DIR"
        );
    }
    for stage in ["ingest", "annotate", "train"] {
        assert!(
            help(&[stage, "--help"]).contains("-j, --jobs <N>"),
            "{stage}: --jobs"
        );
    }
    for stage in ["train", "bench-step", "eval", "uci"] {
        let h = help(&[stage, "--help"]);
        assert!(h.contains("--device <DEVICE>") && h.contains("--precision <PRECISION>"));
    }
    // bench-step times train's recipe: the same options, the same defaults.
    let section = |h: &str| -> Vec<String> {
        h.lines()
            .skip_while(|l| !l.starts_with("Recipe:"))
            .skip(1)
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let (train, bench) = (help(&["train", "--help"]), help(&["bench-step", "--help"]));
    let bench = section(&bench);
    assert!(
        bench.iter().any(|l| l.starts_with("--batch-size")),
        "{bench:?}"
    );
    let train = section(&train);
    for line in &bench {
        assert!(train.contains(line), "train's recipe lacks {line:?}");
    }
}

/// `--require-fused` asks for the GPUs' fused kernels: on the CPU it is
/// refused before anything runs, saying what would take it.
#[test]
fn require_fused_is_refused_on_the_cpu() {
    for args in [
        &[
            "bench-step",
            "--require-fused",
            "--steps",
            "1",
            "--warmup",
            "0",
        ][..],
        &["uci", "--require-fused", "--checkpoint", "nosuch"][..],
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            err.contains(
                "--require-fused: the fused kernels are GPU kernels: use --device cuda or wgpu"
            ),
            "{args:?}: {err}"
        );
    }
}
