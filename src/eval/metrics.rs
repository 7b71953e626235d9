//! Static metrics on a split's annotated boards (Ruoss et al. 2024, §3 and
//! Table 1): the predictor ranks every legal move of a board and is scored
//! against Stockfish's action values (`av_chosen`: the evaluation database's
//! values of a board, `annotate --evals`, are never the reference).
//!
//! - action accuracy: the share of boards where the predictor's move has
//!   Stockfish's highest win probability (a tie with the best counts);
//! - Kendall's tau-b between predicted and Stockfish values per board
//!   ([`kendall_tau_b`], ties handled), averaged; a board with one legal
//!   move counts as perfect agreement (1), as in searchless_chess's
//!   `metrics_evaluator.py`, and a board where tau-b is undefined (all
//!   values tied) is left out. searchless_chess passes `np.argsort` of both
//!   value arrays to `scipy.stats.kendalltau`; chessbench correlates the
//!   values themselves, as the golden vectors do;
//! - log-loss of the predicted value buckets against Stockfish's bucket
//!   (value policies) or of the action distribution against Stockfish's
//!   best move (cloning); entropy of the predicted distributions;
//! - L2: mean squared error of predicted and Stockfish win probabilities;
//! - calibration: Stockfish's mean win probability per bin of predicted.
//!
//! Stockfish itself can be the predictor (re-searching every move at a
//! given limit): at the labels' own node limit it must score accuracy 1
//! and tau 1, an end-to-end check of the labels and the metric code.

use std::collections::HashMap;

use serde::Serialize;
use shakmaty::Chess;

use super::{
    error::{EvalError, PlayerError},
    game::parse_fen,
    policy::NeuralPlayer,
    predict::{Prediction, argmax, predict_many},
};
use crate::{
    chess::{RecordSet, legal::prepare, value::ValueBuckets},
    duckdb_session::Session,
    ranking::kendall_tau_b,
    uci_client::{
        Engine,
        oracle::{SearchSettings, annotate},
    },
};

/// One board with Stockfish's value of each legal move.
#[derive(Debug, Clone)]
pub(crate) struct LabelledBoard {
    pub board_id: u64,
    pub fen: String,
    /// (action index, win probability), sorted by action.
    pub actions: Vec<(u16, f64)>,
}

/// Reads up to `limit` annotated boards with legal moves of `split`
/// (a deterministic sample: the lowest board ids, which are hashes).
pub(crate) fn read_labelled_boards(
    session: &Session,
    split: &str,
    limit: usize,
) -> Result<Vec<LabelledBoard>, EvalError> {
    let sql = "WITH picked AS (
            SELECT board_id FROM sv_chosen
            WHERE split = ? AND kind = 'search'
            ORDER BY board_id LIMIT ?)
        SELECT b.board_id, b.fen, a.action, a.win_prob
        FROM picked p
        JOIN boards b ON b.board_id = p.board_id AND b.split = ?
        JOIN av_chosen a ON a.board_id = p.board_id AND a.split = ?
        ORDER BY b.board_id, a.action";
    let conn = session.connection();
    let err = |e: duckdb::Error| session.error("(evaluation boards)", 1, e);
    let mut stmt = conn.prepare(sql).map_err(err)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt
        .query_map(duckdb::params![split, limit, split, split], |r| {
            Ok((
                r.get::<_, u64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u16>(2)?,
                r.get::<_, f64>(3)?,
            ))
        })
        .map_err(err)?;
    let mut boards: Vec<LabelledBoard> = Vec::new();
    for row in rows {
        let (id, fen, action, win) = row.map_err(err)?;
        match boards.last_mut() {
            Some(b) if b.board_id == id => b.actions.push((action, win)),
            _ => boards.push(LabelledBoard {
                board_id: id,
                fen,
                actions: vec![(action, win)],
            }),
        }
    }
    Ok(boards)
}

/// Whether the predictor's choice `pred_best` has the best Stockfish value.
pub(crate) fn is_best(stockfish: &[f64], pred_best: usize) -> bool {
    let max = stockfish.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    stockfish.get(pred_best).is_some_and(|&v| v >= max)
}

/// Bins of the calibration curve (predicted win probability).
pub(crate) const CALIBRATION_BINS: usize = 10;

/// One calibration bin.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CalibrationBin {
    pub lo: f64,
    pub hi: f64,
    pub moves: u64,
    pub mean_predicted: f64,
    pub mean_stockfish: f64,
}

/// The metrics of one predictor on one split.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StaticMetrics {
    pub predictor: String,
    pub split: String,
    pub boards: u64,
    /// Boards skipped because a legal move has no label (partial
    /// annotation).
    pub boards_skipped: u64,
    pub moves: u64,
    pub action_accuracy: f64,
    pub kendall_tau: Option<f64>,
    /// Boards in the tau average (one legal move: 1; otherwise where tau-b is
    /// defined).
    pub kendall_tau_boards: u64,
    pub log_loss: Option<f64>,
    pub l2_win_prob: Option<f64>,
    pub entropy: Option<f64>,
    pub calibration: Vec<CalibrationBin>,
    pub seconds: f64,
    pub boards_per_s: f64,
}

/// Sums the metrics board by board.
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    boards: u64,
    skipped: u64,
    moves: u64,
    correct: u64,
    tau_sum: f64,
    tau_n: u64,
    nll: (f64, u64),
    sq: (f64, u64),
    entropy: (f64, u64),
    bins: Vec<(u64, f64, f64)>,
}

impl Accumulator {
    pub(crate) fn new() -> Accumulator {
        Accumulator {
            bins: vec![(0, 0.0, 0.0); CALIBRATION_BINS],
            ..Accumulator::default()
        }
    }

    /// Adds a board: predicted scores and Stockfish values, aligned, and
    /// whether the scores are win probabilities (for L2 and calibration).
    pub(crate) fn add_board(&mut self, predicted: &[f64], stockfish: &[f64], win_probs: bool) {
        self.boards += 1;
        self.moves += predicted.len() as u64;
        if argmax(predicted).is_some_and(|i| is_best(stockfish, i)) {
            self.correct += 1;
        }
        let tau = if predicted.len() == 1 {
            Some(1.0)
        } else {
            kendall_tau_b(predicted, stockfish)
        };
        if let Some(t) = tau {
            self.tau_sum += t;
            self.tau_n += 1;
        }
        if win_probs {
            for (&p, &s) in predicted.iter().zip(stockfish) {
                self.sq.0 += (p - s) * (p - s);
                self.sq.1 += 1;
                let bin = ((p * CALIBRATION_BINS as f64) as usize).min(CALIBRATION_BINS - 1);
                let b = &mut self.bins[bin];
                b.0 += 1;
                b.1 += p;
                b.2 += s;
            }
        }
    }

    pub(crate) fn add_nll(&mut self, nll: f64) {
        self.nll.0 += nll;
        self.nll.1 += 1;
    }

    pub(crate) fn add_entropy(&mut self, h: f64) {
        self.entropy.0 += h;
        self.entropy.1 += 1;
    }

    pub(crate) fn skip(&mut self) {
        self.skipped += 1;
    }

    pub(crate) fn finish(&self, predictor: String, split: String, seconds: f64) -> StaticMetrics {
        let mean = |(s, n): (f64, u64)| (n > 0).then(|| s / n as f64);
        StaticMetrics {
            predictor,
            split,
            boards: self.boards,
            boards_skipped: self.skipped,
            moves: self.moves,
            action_accuracy: if self.boards == 0 {
                f64::NAN
            } else {
                self.correct as f64 / self.boards as f64
            },
            kendall_tau: (self.tau_n > 0).then(|| self.tau_sum / self.tau_n as f64),
            kendall_tau_boards: self.tau_n,
            log_loss: mean(self.nll),
            l2_win_prob: mean(self.sq),
            entropy: mean(self.entropy),
            calibration: self
                .bins
                .iter()
                .enumerate()
                .filter(|(_, b)| b.0 > 0)
                .map(|(i, b)| CalibrationBin {
                    lo: i as f64 / CALIBRATION_BINS as f64,
                    hi: (i + 1) as f64 / CALIBRATION_BINS as f64,
                    moves: b.0,
                    mean_predicted: b.1 / b.0 as f64,
                    mean_stockfish: b.2 / b.0 as f64,
                })
                .collect(),
            seconds,
            boards_per_s: if seconds > 0.0 {
                self.boards as f64 / seconds
            } else {
                0.0
            },
        }
    }
}

/// Entropy (nats) of a distribution given by log-probabilities.
pub(crate) fn entropy_of_log_probs(log_probs: &[f32]) -> f64 {
    log_probs
        .iter()
        .map(|&lp| {
            let lp = f64::from(lp);
            if lp.is_finite() { -lp.exp() * lp } else { 0.0 }
        })
        .sum()
}

/// Entropy (nats) of a distribution given by probabilities.
pub(crate) fn entropy_of_probs(p: &[f64]) -> f64 {
    p.iter().filter(|&&x| x > 0.0).map(|&x| -x * x.ln()).sum()
}

/// Stockfish values of `moves` (action indices) from a board's labels, or
/// None when one is missing.
fn aligned(labels: &[(u16, f64)], actions: &[u16]) -> Option<Vec<f64>> {
    let map: HashMap<u16, f64> = labels.iter().copied().collect();
    actions.iter().map(|a| map.get(a).copied()).collect()
}

/// Scores a trained model on `boards`.
pub(crate) fn score_model(
    player: &mut NeuralPlayer,
    boards: &[LabelledBoard],
    split: &str,
    progress: impl FnMut(u64),
) -> Result<StaticMetrics, EvalError> {
    score_in_batches(player, boards, split, progress, BOARDS_PER_BATCH)
}

/// [`score_model`] with `per_batch` boards a batch.
fn score_in_batches(
    player: &mut NeuralPlayer,
    boards: &[LabelledBoard],
    split: &str,
    mut progress: impl FnMut(u64),
    per_batch: usize,
) -> Result<StaticMetrics, EvalError> {
    let start = std::time::Instant::now();
    let policy = player.model.policy();
    let k = player.model.outputs();
    let buckets: Option<ValueBuckets> = player.model.buckets.clone();
    let mut acc = Accumulator::new();
    // Boards go through the model many at a time (their legal moves in
    // shared forward passes); the metrics are summed board by board in
    // order, as one at a time would.
    let mut done = 0u64;
    for group in boards.chunks(per_batch) {
        let positions = group
            .iter()
            .map(|b| parse_fen(&b.fen))
            .collect::<Result<Vec<Chess>, _>>()?;
        let refs: Vec<&Chess> = positions.iter().collect();
        let predictions = predict_many(&player.model, &refs)?;
        for (board, p) in group.iter().zip(predictions) {
            score_board(&mut acc, policy, k, buckets.as_ref(), board, &p);
        }
        done += group.len() as u64;
        progress(done);
    }
    Ok(acc.finish(
        player.model.label(),
        split.to_owned(),
        start.elapsed().as_secs_f64(),
    ))
}

/// Boards per batch of [`score_model`] (about 30 legal moves each: near
/// [`crate::eval::trained::BATCH_SEQUENCES`]).
const BOARDS_PER_BATCH: usize = 1024;

/// Adds one board's prediction `p` against its Stockfish labels.
fn score_board(
    acc: &mut Accumulator,
    policy: RecordSet,
    k: usize,
    buckets: Option<&ValueBuckets>,
    board: &LabelledBoard,
    p: &Prediction,
) {
    let Some(sf) = aligned(&board.actions, &p.actions) else {
        acc.skip();
        return;
    };
    match policy {
        RecordSet::ActionValue | RecordSet::StateValue => {
            let b = buckets.expect("value policies have buckets");
            for (row, &q) in p.log_probs.chunks(k).zip(&sf) {
                // Q(s, a) for action values; the successor's value for
                // its side to move (1 - Q) for state values.
                let y = if policy == RecordSet::ActionValue {
                    q
                } else {
                    1.0 - q
                };
                acc.add_nll(-f64::from(row[b.bucket(y)]));
                acc.add_entropy(entropy_of_log_probs(row));
            }
            acc.add_board(&p.scores, &sf, true);
        }
        RecordSet::BehavioralCloning => {
            if let Some(best) = argmax(&sf) {
                acc.add_nll(-f64::from(p.log_probs[usize::from(p.actions[best])]));
            }
            acc.add_entropy(entropy_of_probs(&p.scores));
            acc.add_board(&p.scores, &sf, false);
        }
    }
}

/// Scores Stockfish, re-searching each legal move with `settings`.
pub(crate) fn score_stockfish(
    engine: &mut Engine,
    settings: &SearchSettings,
    name: String,
    boards: &[LabelledBoard],
    split: &str,
    mut progress: impl FnMut(u64),
) -> Result<StaticMetrics, EvalError> {
    let start = std::time::Instant::now();
    let mut acc = Accumulator::new();
    let mut work = Default::default();
    for (i, board) in boards.iter().enumerate() {
        let prepared = prepare(&board.fen, None).map_err(|e| PlayerError::Position {
            fen: board.fen.clone(),
            message: e.to_string(),
        })?;
        let annotated = annotate(engine, &prepared, settings, &mut work)
            .map_err(|e| PlayerError::engine(&format!("annotating {}", board.fen), e))?;
        // Both sorted by action index.
        let actions: Vec<u16> = annotated.actions.iter().map(|a| a.0).collect();
        let predicted: Vec<f64> = annotated.actions.iter().map(|a| a.1.win_prob).collect();
        let Some(sf) = aligned(&board.actions, &actions) else {
            acc.skip();
            continue;
        };
        acc.add_board(&predicted, &sf, true);
        progress(i as u64 + 1);
    }
    Ok(acc.finish(name, split.to_owned(), start.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perfect_predictor_scores_one_and_a_reversed_one_minus_one() {
        let sf = [0.2, 0.9, 0.5, 0.7];
        let mut perfect = Accumulator::new();
        perfect.add_board(&sf, &sf, true);
        let m = perfect.finish("p".into(), "test".into(), 1.0);
        assert_eq!(m.action_accuracy, 1.0);
        assert_eq!(m.kendall_tau, Some(1.0));
        assert_eq!(m.l2_win_prob, Some(0.0));
        let reversed: Vec<f64> = sf.iter().map(|v| 1.0 - v).collect();
        let mut acc = Accumulator::new();
        acc.add_board(&reversed, &sf, true);
        let m = acc.finish("r".into(), "test".into(), 1.0);
        assert_eq!(m.action_accuracy, 0.0);
        assert_eq!(m.kendall_tau, Some(-1.0));
    }

    #[test]
    fn ties_with_the_best_move_count_as_correct() {
        assert!(is_best(&[0.9, 0.9, 0.1], 1));
        assert!(!is_best(&[0.9, 0.8, 0.1], 1));
        // A board with one legal move agrees perfectly (searchless_chess).
        let mut acc = Accumulator::new();
        acc.add_board(&[0.3], &[0.6], true);
        let m = acc.finish("x".into(), "test".into(), 0.0);
        assert_eq!(
            (m.action_accuracy, m.kendall_tau, m.kendall_tau_boards),
            (1.0, Some(1.0), 1)
        );
        assert_eq!(m.calibration.len(), 1);
        assert!((m.calibration[0].mean_stockfish - 0.6).abs() < 1e-12);
        // All Stockfish values tied: tau-b is undefined, the board left out.
        let mut acc = Accumulator::new();
        acc.add_board(&[0.3, 0.1], &[0.5, 0.5], false);
        acc.add_board(&[0.3, 0.1], &[0.5, 0.2], false);
        let m = acc.finish("x".into(), "test".into(), 0.0);
        assert_eq!((m.kendall_tau, m.kendall_tau_boards), (Some(1.0), 1));
    }

    #[test]
    fn entropies() {
        let uniform = [(0.25f32).ln(); 4];
        assert!((entropy_of_log_probs(&uniform) - 4f64.ln()).abs() < 1e-6);
        assert_eq!(entropy_of_probs(&[1.0, 0.0]), 0.0);
    }

    #[test]
    fn labels_align_by_action() {
        let labels = [(3, 0.1), (7, 0.9)];
        assert_eq!(aligned(&labels, &[7, 3]), Some(vec![0.9, 0.1]));
        assert_eq!(aligned(&labels, &[7, 4]), None);
    }

    /// Boards scored many at a time give the metrics of boards scored one
    /// at a time (every policy; 150 boards in batches of 64). The labels
    /// are synthetic win probabilities: what is checked is the batching.
    ///
    /// A board's scores in a bigger pass may differ in the last bits (its
    /// products summed in another order), which can swap two scores within
    /// that distance or move one across a calibration bin's edge: a board
    /// ranked differently must have scores that close, and is counted and
    /// left out of the comparison (the batched metrics must also equal
    /// those of the same predictions summed here, exactly).
    #[test]
    fn metrics_of_boards_scored_together_equal_boards_scored_alone() {
        use crate::{
            eval::{
                policy::PolicyOptions,
                predict::{predict, predict_many},
                trained::Model,
            },
            model::{DeviceKind, Preset},
        };
        use shakmaty::Position;
        let boards: Vec<LabelledBoard> = crate::testing::walk(150)
            .iter()
            .enumerate()
            .map(|(i, pos)| {
                let mut actions: Vec<(u16, f64)> = crate::eval::predict::ordered_legal_moves(pos)
                    .unwrap()
                    .into_iter()
                    .map(|(_, _, a)| (a, f64::from((u32::from(a) * 7919 + i as u32) % 101) / 100.0))
                    .collect();
                actions.sort_unstable_by_key(|&(a, _)| a);
                LabelledBoard {
                    board_id: i as u64,
                    fen: crate::eval::game::fen_of(pos),
                    actions,
                }
            })
            .collect();
        for policy in [
            RecordSet::ActionValue,
            RecordSet::StateValue,
            RecordSet::BehavioralCloning,
        ] {
            let model = Model::random(Preset::Tiny, policy, 32, DeviceKind::Cpu).unwrap();
            let mut player = NeuralPlayer::new(model, PolicyOptions::default(), None);
            let mut reported = 0;
            let together =
                score_in_batches(&mut player, &boards, "test", |n| reported = n, 64).unwrap();
            assert_eq!(reported, boards.len() as u64);
            let k = player.model.outputs();
            let buckets = player.model.buckets.clone();
            // The predictions score_in_batches made, batch by batch.
            let mut batched = Vec::new();
            for group in boards.chunks(64) {
                let positions: Vec<Chess> =
                    group.iter().map(|b| parse_fen(&b.fen).unwrap()).collect();
                let refs: Vec<&Chess> = positions.iter().collect();
                batched.extend(predict_many(&player.model, &refs).unwrap());
            }
            let mut all = Accumulator::new();
            for (board, p) in boards.iter().zip(&batched) {
                score_board(&mut all, policy, k, buckets.as_ref(), board, p);
            }
            let same = all.finish(together.predictor.clone(), "test".into(), together.seconds);
            assert_eq!(
                StaticMetrics {
                    boards_per_s: together.boards_per_s,
                    ..same
                },
                together
            );
            // A board whose scores rank differently, tie where the others
            // do not (Kendall's tau-b counts a tie apart), or fall in
            // another calibration bin, must owe it to near-equal scores (a
            // float tie); it is counted and left out.
            let bins = CALIBRATION_BINS as f64;
            let ranks = |scores: &[f64]| {
                let mut order: Vec<usize> = (0..scores.len()).collect();
                order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
                let tied: Vec<bool> = order
                    .windows(2)
                    .map(|w| scores[w[0]] == scores[w[1]])
                    .collect();
                let bin: Vec<i64> = scores.iter().map(|x| (x * bins).floor() as i64).collect();
                (order, tied, bin)
            };
            let close_call = |scores: &[f64]| {
                let mut s = scores.to_vec();
                s.sort_by(f64::total_cmp);
                s.windows(2).any(|w| w[1] - w[0] <= 1e-6)
                    || s.iter()
                        .any(|x| ((x * bins).round() - x * bins).abs() <= 1e-6 * bins)
            };
            let (mut acc_t, mut acc) = (Accumulator::new(), Accumulator::new());
            let mut tokens = Vec::new();
            let mut ties = 0;
            for (board, t) in boards.iter().zip(&batched) {
                let pos: Chess = parse_fen(&board.fen).unwrap();
                assert!(pos.legal_moves().len() == board.actions.len());
                let p = predict(&player.model, &pos, &mut tokens).unwrap();
                assert_eq!(p.actions, t.actions);
                if ranks(&p.scores) != ranks(&t.scores) {
                    assert!(
                        close_call(&p.scores),
                        "{policy:?}: {} ranks differently",
                        board.fen
                    );
                    ties += 1;
                    continue;
                }
                score_board(&mut acc_t, policy, k, buckets.as_ref(), board, t);
                score_board(&mut acc, policy, k, buckets.as_ref(), board, &p);
            }
            println!(
                "{policy:?}: {ties} of {} boards ranked differently by a float tie",
                boards.len()
            );
            assert!(ties * 10 < boards.len(), "{policy:?}: {ties} float ties");
            let together = acc_t.finish(together.predictor.clone(), "test".into(), 0.0);
            let alone = acc.finish(together.predictor.clone(), "test".into(), 0.0);
            assert_eq!(together.boards, alone.boards);
            assert_eq!(together.boards_skipped, 0);
            assert_eq!(together.moves, alone.moves);
            assert_eq!(together.kendall_tau_boards, alone.kendall_tau_boards);
            let close = |what: &str, a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => {
                    assert!((a - b).abs() <= 1e-6, "{policy:?} {what}: {a} vs {b}")
                }
                (a, b) => assert_eq!(a, b, "{policy:?} {what}"),
            };
            close(
                "accuracy",
                Some(together.action_accuracy),
                Some(alone.action_accuracy),
            );
            close("tau", together.kendall_tau, alone.kendall_tau);
            close("log-loss", together.log_loss, alone.log_loss);
            close("L2", together.l2_win_prob, alone.l2_win_prob);
            close("entropy", together.entropy, alone.entropy);
            assert_eq!(together.calibration.len(), alone.calibration.len());
            for (a, b) in together.calibration.iter().zip(&alone.calibration) {
                assert_eq!(a.moves, b.moves, "{policy:?} calibration");
                close(
                    "calibration",
                    Some(a.mean_predicted),
                    Some(b.mean_predicted),
                );
            }
        }
    }
}
