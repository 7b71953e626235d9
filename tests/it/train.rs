//! The training data loader on a run annotated by the real Stockfish:
//! sequences match the tables, the uniform sampler serves every record once
//! per epoch, the weighted one once per occurrence of its board, and a
//! loader resumed from a batch's position continues the same stream.

use std::collections::HashMap;

use chessbench::train::{
    data::{Batch, DataConfig, Loader, Policy},
    sampler::{Position, Sampling},
};

use crate::{sql::annotated, util::have_stockfish};

fn config(policy: Policy, sampling: Sampling, batch_size: usize) -> DataConfig {
    DataConfig {
        run: annotated().to_owned(),
        split: "train".into(),
        policy,
        buckets: 32,
        batch_size,
        sampling,
        seed: 7,
        window: 2,
        workers: 2,
    }
}

/// The records of `n` batches, as sequences.
fn draw(loader: &mut Loader, n: usize) -> Vec<Batch> {
    (0..n).map(|_| loader.next_batch().unwrap()).collect()
}

fn sequences(batches: &[Batch]) -> Vec<Vec<i32>> {
    batches
        .iter()
        .flat_map(|b| {
            b.tokens
                .chunks(b.seq_len)
                .map(<[i32]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn count_of(sql: &str) -> usize {
    let o = std::process::Command::new(crate::util::BIN)
        .arg("sql")
        .arg(annotated())
        .args(["-e", sql, "--format", "csv", "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn uniform_epoch_serves_every_record_once() {
    if !have_stockfish() {
        return;
    }
    let n = count_of("SELECT count(*) FROM action_values WHERE split = 'train'");
    let mut loader = Loader::new(
        config(Policy::ActionValue, Sampling::Uniform, 64),
        Position::default(),
    )
    .unwrap();
    // Exactly one epoch: n records in batches of 64 (the last one crossing
    // into epoch 1 is cut).
    let batches = draw(&mut loader, n.div_ceil(64));
    let mut seqs = sequences(&batches);
    seqs.truncate(n);
    assert!(
        seqs.iter()
            .all(|s| s.len() == 79 && s.iter().all(|&t| (0..1968).contains(&t)))
    );
    // Every (board, action) once: the 78 leading tokens identify it.
    let mut seen = HashMap::new();
    for s in &seqs {
        *seen.entry(s[..78].to_vec()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), n, "every action-value record once per epoch");
    assert!(seen.values().all(|&c| c == 1));
    // Targets are buckets of K = 32, win probabilities in [0, 1].
    assert!(
        batches
            .iter()
            .all(|b| b.targets.iter().all(|&t| (0..32).contains(&t)))
    );
    assert!(
        batches
            .iter()
            .all(|b| b.win_prob.iter().all(|p| (0.0..=1.0).contains(p)))
    );
}

#[test]
fn weighted_sampler_draws_boards_by_occurrence() {
    if !have_stockfish() {
        return;
    }
    // State values: one record per board; the weighted epoch serves each
    // board `occurrences` times.
    let boards = count_of("SELECT count(*) FROM state_values WHERE split = 'train'");
    let total = count_of(
        "SELECT sum(b.occurrences) FROM state_values s JOIN boards b USING (split, board_id) WHERE split = 'train'",
    );
    let start_board = count_of(
        "SELECT b.occurrences FROM state_values s JOIN boards b USING (split, board_id) WHERE split = 'train' AND board_id = 0",
    );
    assert!(total > boards, "the demo's opening boards repeat");
    let mut loader = Loader::new(
        config(Policy::StateValue, Sampling::Weighted, 50),
        Position::default(),
    )
    .unwrap();
    let mut seqs = sequences(&draw(&mut loader, total.div_ceil(50)));
    seqs.truncate(total);
    let mut counts: HashMap<Vec<i32>, usize> = HashMap::new();
    for s in &seqs {
        *counts.entry(s[..77].to_vec()).or_insert(0) += 1;
    }
    assert_eq!(counts.len(), boards);
    let start = chessbench::chess::tokens::tokenize(
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    )
    .unwrap()
    .iter()
    .map(|&t| i32::from(t))
    .collect::<Vec<_>>();
    assert_eq!(
        counts[&start], start_board,
        "the start position, once per game"
    );
    // Uniform draws it once.
    let mut loader = Loader::new(
        config(Policy::StateValue, Sampling::Uniform, 50),
        Position::default(),
    )
    .unwrap();
    let seqs = sequences(&draw(&mut loader, boards.div_ceil(50)));
    assert_eq!(
        seqs[..boards]
            .iter()
            .filter(|s| s[..77] == start[..])
            .count(),
        1
    );
}

#[test]
fn resume_continues_the_same_stream() {
    if !have_stockfish() {
        return;
    }
    for policy in [Policy::ActionValue, Policy::BehavioralCloning] {
        let cfg = config(policy, Sampling::Uniform, 100);
        let mut a = Loader::new(cfg.clone(), Position::default()).unwrap();
        let first = draw(&mut a, 37);
        let rest = draw(&mut a, 20);
        let mut b = Loader::new(cfg, first.last().unwrap().position).unwrap();
        let resumed = draw(&mut b, 20);
        assert_eq!(sequences(&resumed), sequences(&rest), "{policy:?}");
        assert_eq!(
            resumed.last().unwrap().position,
            rest.last().unwrap().position
        );
    }
}
