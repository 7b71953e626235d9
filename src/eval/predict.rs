//! A model's predictions for boards: one board ([`predict`]) or many in
//! shared forward passes ([`predict_many`], a pipeline that prepares the
//! next batch and reads out the last while the model runs), and the timing
//! of those passes' phases for `make bench-eval`. The policies of
//! [`super::policy`] choose their moves from these predictions.

use shakmaty::{CastlingMode, Chess, Move, Position};

use super::{
    error::PlayerError,
    game::fen_of,
    trained::{Model, PassPhases},
};
use crate::chess::{RecordSet, actions::vocabulary, push_sequence, tokens::tokenize};

/// Scores this close are a float tie (see [`Prediction::near_tie`]).
pub const FLOAT_TIE: f64 = 1e-6;

/// A model's view of one board.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// The legal moves, ordered by UCI string.
    pub moves: Vec<Move>,
    /// Their ChessBench action indices.
    pub actions: Vec<u16>,
    /// The score the policy maximises: the mover's expected win
    /// probability (value policies) or the move's probability among the
    /// legal moves (behavioural cloning).
    pub scores: Vec<f64>,
    /// Log-probabilities: per move `K` bucket log-probs of `Q(s, a)`
    /// (action-value) or of the successor's `V(s')` (state-value, the
    /// opponent's view); one row of 1968 action log-probs (cloning).
    pub log_probs: Vec<f32>,
}

impl Prediction {
    /// Index of the best score (the first on ties).
    pub fn best(&self) -> Option<usize> {
        argmax(&self.scores)
    }

    /// Whether the two best scores are within [`FLOAT_TIE`]: a float tie,
    /// where boards scored in another pass (summed in another order) may
    /// pick the other move.
    pub fn near_tie(&self) -> bool {
        let mut top = [f64::NEG_INFINITY; 2];
        for &s in self.scores.iter().filter(|s| !s.is_nan()) {
            if s > top[0] {
                top = [s, top[0]];
            } else if s > top[1] {
                top[1] = s;
            }
        }
        top[1].is_finite() && top[0] - top[1] <= FLOAT_TIE
    }
}

/// Index of the first maximum (NaN never wins), like `np.argmax`.
pub(crate) fn argmax(values: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &v) in values.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|b| v > values[b]) {
            best = Some(i);
        }
    }
    best
}

/// The legal moves of `pos` ordered by UCI string, with action indices.
pub(crate) fn ordered_legal_moves(pos: &Chess) -> Result<Vec<(String, Move, u16)>, PlayerError> {
    let vocab = vocabulary();
    let mut moves = Vec::new();
    for m in pos.legal_moves() {
        let action = vocab
            .index_of_move(&m)
            .ok_or_else(|| PlayerError::Position {
                fen: fen_of(pos),
                message: format!("move {m} has no ChessBench action index"),
            })?;
        moves.push((m.to_uci(CastlingMode::Standard).to_string(), m, action));
    }
    moves.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(moves)
}

fn tokens_of(pos: &Chess) -> Result<[u8; crate::chess::tokens::SEQUENCE_LENGTH], PlayerError> {
    let fen = fen_of(pos);
    tokenize(&fen).map_err(|e| PlayerError::Position {
        fen,
        message: e.to_string(),
    })
}

/// Runs `model` on every legal move of `pos` (one forward pass): the UCI
/// engine's path, one board at a time. Many boards go through
/// [`predict_many`].
pub fn predict(
    model: &Model,
    pos: &Chess,
    tokens: &mut Vec<i32>,
) -> Result<Prediction, PlayerError> {
    let legal = ordered_legal_moves(pos)?;
    tokens.clear();
    push_board(model.policy(), pos, &legal, tokens)?;
    let log_probs = model.log_probs(tokens)?;
    Ok(prediction(&Readout::of(model), legal, log_probs))
}

/// Appends the sequences the model scores for `pos` (whose ordered legal
/// moves are `legal`) to `tokens`: one per move for the value policies, one
/// for behavioural cloning.
fn push_board(
    policy: RecordSet,
    pos: &Chess,
    legal: &[(String, Move, u16)],
    tokens: &mut Vec<i32>,
) -> Result<(), PlayerError> {
    if legal.is_empty() {
        return Err(PlayerError::Position {
            fen: fen_of(pos),
            message: "no legal moves".into(),
        });
    }
    let board = tokens_of(pos)?;
    match policy {
        RecordSet::ActionValue => {
            for (_, _, action) in legal {
                push_sequence(policy, &board, *action, 0, tokens);
            }
        }
        RecordSet::StateValue => {
            for (_, m, _) in legal {
                let mut next = pos.clone();
                next.play_unchecked(*m);
                push_sequence(policy, &tokens_of(&next)?, 0, 0, tokens);
            }
        }
        RecordSet::BehavioralCloning => push_sequence(policy, &board, 0, 0, tokens),
    }
    Ok(())
}

/// Sequences one board contributes: a move's each, or one (cloning).
fn board_rows(policy: RecordSet, legal: &[(String, Move, u16)]) -> usize {
    match policy {
        RecordSet::BehavioralCloning => 1,
        _ => legal.len(),
    }
}

/// What turns a board's rows of log-probabilities into its scores: the
/// model's policy, its outputs per row and, for the value policies, its
/// buckets' centres (a plain value, so the finishing thread of
/// [`predict_many`] can hold it while the model runs).
#[derive(Clone, Copy)]
struct Readout<'a> {
    policy: RecordSet,
    outputs: usize,
    buckets: Option<&'a crate::chess::value::ValueBuckets>,
}

impl<'a> Readout<'a> {
    fn of(model: &'a Model) -> Readout<'a> {
        Readout {
            policy: model.policy(),
            outputs: model.outputs(),
            buckets: model.buckets.as_ref(),
        }
    }

    /// The expected win probability of one row of bucket log-probabilities
    /// (`sum_k p_k * centre_k`, the paper's value read-out); NaN without
    /// buckets.
    fn expected_value(&self, row: &[f32]) -> f64 {
        self.buckets.map_or(f64::NAN, |b| {
            super::trained::expected_value(row, b.values())
        })
    }
}

/// The prediction of a board from its rows of log-probabilities.
fn prediction(
    readout: &Readout,
    legal: Vec<(String, Move, u16)>,
    log_probs: Vec<f32>,
) -> Prediction {
    let k = readout.outputs;
    let scores = match readout.policy {
        RecordSet::ActionValue => log_probs
            .chunks(k)
            .map(|row| readout.expected_value(row))
            .collect(),
        RecordSet::StateValue => log_probs
            .chunks(k)
            .map(|row| 1.0 - readout.expected_value(row))
            .collect(),
        RecordSet::BehavioralCloning => {
            let picked: Vec<f64> = legal
                .iter()
                .map(|(_, _, a)| f64::from(log_probs[usize::from(*a)]))
                .collect();
            softmax(&picked)
        }
    };
    let (moves, actions) = legal.into_iter().map(|(_, m, a)| (m, a)).unzip();
    Prediction {
        moves,
        actions,
        scores,
        log_probs,
    }
}

pub use super::trained::BATCH_SEQUENCES;

/// A batch of boards, tokenised: their legal moves and their sequences.
struct Batch {
    legal: Vec<LegalMoves>,
    tokens: Vec<i32>,
}

/// Where the time of one [`predict_many_timed`] call went, in seconds.
///
/// Three stages run at once: a preparing thread lists each board's legal
/// moves and tokenises its sequences, the calling thread runs the model's
/// forward passes, and a finishing thread turns the log-probabilities into
/// [`Prediction`]s. The model is never idle for the host when
/// `waited_for_prepare_s` and `waited_for_finish_s` stay near zero after
/// the first batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PipelineTimes {
    /// Wall time of the whole call.
    pub wall_s: f64,
    /// Batches the boards went through the model in.
    pub batches: usize,
    /// The preparing thread's busy time: legal moves and tokens.
    pub prepare_s: f64,
    /// The model's forward passes (host-to-device copy, the passes and the
    /// copy back, as [`Model::log_probs`] does them).
    pub forward_s: f64,
    /// The finishing thread's busy time: scores from log-probabilities.
    pub finish_s: f64,
    /// The model thread's wait for the next prepared batch (the first
    /// batch's preparation is always in it).
    pub waited_for_prepare_s: f64,
    /// The model thread's wait for the finishing thread to take a batch.
    pub waited_for_finish_s: f64,
}

/// The predictions of many boards, in order, [`predict`]'s for each: the
/// boards' sequences go through the model together, up to
/// [`BATCH_SEQUENCES`] at a time; the next batch is tokenised on another
/// thread while the model runs the current one, and the one before it is
/// turned into predictions on a third.
pub fn predict_many(model: &Model, positions: &[&Chess]) -> Result<Vec<Prediction>, PlayerError> {
    if let [pos] = positions {
        // One board (the UCI engine): no thread to overlap with.
        return Ok(vec![predict(model, pos, &mut Vec::new())?]);
    }
    predict_many_timed(model, positions).map(|(predictions, _)| predictions)
}

/// Appends the predictions of `batch`'s boards, whose rows of
/// log-probabilities are `log_probs`, to `out`.
fn finish(readout: &Readout, batch: Batch, log_probs: &[f32], out: &mut Vec<Prediction>) {
    let mut at = 0;
    for legal in batch.legal {
        let n = board_rows(readout.policy, &legal) * readout.outputs;
        out.push(prediction(readout, legal, log_probs[at..at + n].to_vec()));
        at += n;
    }
}

/// [`predict_many`] (always through its three threads) and where its time
/// went.
pub fn predict_many_timed(
    model: &Model,
    positions: &[&Chess],
) -> Result<(Vec<Prediction>, PipelineTimes), PlayerError> {
    let readout = Readout::of(model);
    let (mut out, times) = pipeline(
        batches(
            readout.policy,
            model.seq_len(),
            model.batch_sequences(),
            positions,
        ),
        |batch: &Batch| model.log_probs(&batch.tokens),
        |batch: Batch, log_probs: Vec<f32>, out: &mut Vec<Prediction>| {
            finish(&readout, batch, &log_probs, out)
        },
    )?;
    out.shrink_to_fit();
    Ok((out, times))
}

/// Where one forward pass over `positions`' sequences (their first pass's
/// worth) spends its time: copying tokens in, the network, copying
/// log-probabilities back ([`Model`]'s device synchronised after each).
pub fn pass_phases(model: &Model, positions: &[&Chess]) -> Result<PassPhases, PlayerError> {
    let first = batches(
        model.policy(),
        model.seq_len(),
        model.batch_sequences(),
        positions,
    )
    .next();
    match first {
        Some(batch) => model.pass_phases(&batch?.tokens),
        None => Ok(PassPhases::default()),
    }
}

/// The host's share of [`predict_many`] alone, on the calling thread, in
/// seconds: preparing `positions` (legal moves, tokens) in the model's
/// batches, and finishing them (scores from log-probabilities, here
/// uniform ones: the work does not depend on the values). The model does
/// not run. For benchmarks: how many boards a second one host thread
/// prepares or finishes, against what the device scores.
pub fn host_times(model: &Model, positions: &[&Chess]) -> Result<(f64, f64), PlayerError> {
    use std::time::Instant;
    let readout = Readout::of(model);
    let (mut prepare_s, mut finish_s) = (0.0, 0.0);
    let mut batches = batches(
        model.policy(),
        model.seq_len(),
        model.batch_sequences(),
        positions,
    );
    let uniform = -(readout.outputs as f32).ln();
    let mut out = Vec::new();
    loop {
        let t = Instant::now();
        let Some(batch) = batches.next() else { break };
        let batch = batch?;
        prepare_s += t.elapsed().as_secs_f64();
        let rows = batch.tokens.len() / model.seq_len();
        let log_probs = vec![uniform; rows * readout.outputs];
        let t = Instant::now();
        finish(&readout, batch, &log_probs, &mut out);
        finish_s += t.elapsed().as_secs_f64();
        out.clear();
    }
    Ok((prepare_s, finish_s))
}

/// A board's legal moves as [`ordered_legal_moves`] lists them.
type LegalMoves = Vec<(String, Move, u16)>;

/// `positions` in batches of at most `batch_sequences` sequences (a board
/// is never split; a board alone may exceed it), tokenised as the iterator
/// is advanced. The first error ends the batches.
fn batches<'a>(
    policy: RecordSet,
    seq_len: usize,
    batch_sequences: usize,
    positions: &'a [&'a Chess],
) -> impl Iterator<Item = Result<Batch, PlayerError>> + Send + 'a {
    let mut boards = positions.iter();
    let mut failed = false;
    let mut carried: Option<(&Chess, LegalMoves)> = None;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let mut batch = Batch {
            legal: Vec::new(),
            tokens: Vec::new(),
        };
        let mut rows = 0;
        loop {
            let (pos, legal) = match carried.take() {
                Some(board) => board,
                None => match boards.next() {
                    Some(pos) => match ordered_legal_moves(pos) {
                        Ok(legal) => (*pos, legal),
                        Err(e) => {
                            failed = true;
                            return Some(Err(e));
                        }
                    },
                    None => break,
                },
            };
            let n = board_rows(policy, &legal);
            if !batch.legal.is_empty() && rows + n > batch_sequences {
                carried = Some((pos, legal));
                break;
            }
            if batch.tokens.capacity() == 0 {
                batch
                    .tokens
                    .reserve(batch_sequences.min(positions.len() * 64) * seq_len);
            }
            if let Err(e) = push_board(policy, pos, &legal, &mut batch.tokens) {
                failed = true;
                return Some(Err(e));
            }
            rows += n;
            batch.legal.push(legal);
        }
        (!batch.legal.is_empty()).then_some(Ok(batch))
    })
}

/// Runs `run` on the calling thread over `batches`, each advanced on a
/// preparing thread one batch ahead, and hands every batch with its result
/// to `finish` on a finishing thread, which collects the outputs in order.
/// The first error (of a batch or of `run`) stops all three and is
/// returned.
fn pipeline<T: Send, U: Send, O: Send>(
    batches: impl Iterator<Item = Result<T, PlayerError>> + Send,
    mut run: impl FnMut(&T) -> Result<U, PlayerError>,
    mut finish: impl FnMut(T, U, &mut Vec<O>) + Send,
) -> Result<(Vec<O>, PipelineTimes), PlayerError> {
    use std::{sync::mpsc::sync_channel, time::Instant};
    let start = Instant::now();
    let mut times = PipelineTimes::default();
    std::thread::scope(|scope| {
        let (send_batch, prepared) = sync_channel::<Result<T, PlayerError>>(1);
        let preparing = scope.spawn(move || {
            let mut busy = 0.0;
            let mut batches = batches;
            loop {
                let t = Instant::now();
                let next = batches.next();
                busy += t.elapsed().as_secs_f64();
                let Some(next) = next else { break };
                let failed = next.is_err();
                if send_batch.send(next).is_err() || failed {
                    break;
                }
            }
            busy
        });
        let (send_result, results) = sync_channel::<(T, U)>(1);
        let finishing = scope.spawn(move || {
            let (mut busy, mut out) = (0.0, Vec::new());
            for (batch, result) in results {
                let t = Instant::now();
                finish(batch, result, &mut out);
                busy += t.elapsed().as_secs_f64();
            }
            (out, busy)
        });
        let ran = (|| -> Result<(), PlayerError> {
            loop {
                let t = Instant::now();
                let Ok(batch) = prepared.recv() else {
                    return Ok(());
                };
                times.waited_for_prepare_s += t.elapsed().as_secs_f64();
                let batch = batch?;
                let t = Instant::now();
                let result = run(&batch)?;
                times.forward_s += t.elapsed().as_secs_f64();
                times.batches += 1;
                let t = Instant::now();
                if send_result.send((batch, result)).is_err() {
                    return Ok(());
                }
                times.waited_for_finish_s += t.elapsed().as_secs_f64();
            }
        })();
        // Ends both threads: the preparing one at its next send, the
        // finishing one once it has taken every batch.
        drop(prepared);
        drop(send_result);
        times.prepare_s = preparing.join().expect("the preparing thread panicked");
        let (out, finish_s) = finishing.join().expect("the finishing thread panicked");
        times.finish_s = finish_s;
        ran?;
        times.wall_s = start.elapsed().as_secs_f64();
        Ok((out, times))
    })
}

/// A numerically stable softmax of log-scores.
pub(crate) fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceKind, Preset};

    /// Many boards in shared forward passes predict what each board alone
    /// predicts (every policy): the same moves and actions, and the same
    /// log-probabilities and scores to within float rounding (a row's
    /// products may be summed in another order in a bigger pass), in one
    /// batch or, under a small memory limit, in many.
    #[test]
    fn boards_predicted_together_equal_boards_predicted_alone() {
        let boards = crate::testing::walk(150);
        let refs: Vec<&Chess> = boards.iter().collect();
        for policy in [
            RecordSet::ActionValue,
            RecordSet::StateValue,
            RecordSet::BehavioralCloning,
        ] {
            let model = Model::random(Preset::Tiny, policy, 32, DeviceKind::Cpu).unwrap();
            let together = predict_many(&model, &refs).unwrap();
            // A memory limit of 64 KiB leaves room for a few dozen
            // sequences a batch: the same predictions, in many batches.
            let model = model.with_batch_memory(32 << 10);
            assert!(model.batch_sequences() < 100, "{}", model.batch_sequences());
            let (small, times) = predict_many_timed(&model, &refs).unwrap();
            assert!(times.batches > 10, "{times:?}");
            assert_eq!(together.len(), boards.len());
            assert_eq!(small.len(), boards.len());
            let mut tokens = Vec::new();
            let (mut worst_lp, mut worst_score) = (0.0f64, 0.0f64);
            for ((pos, t), s) in boards.iter().zip(&together).zip(&small) {
                let alone = predict(&model, pos, &mut tokens).unwrap();
                for t in [t, s] {
                    assert_eq!(t.moves, alone.moves);
                    assert_eq!(t.actions, alone.actions);
                    assert_eq!(t.log_probs.len(), alone.log_probs.len());
                    for (a, b) in t.log_probs.iter().zip(&alone.log_probs) {
                        worst_lp =
                            worst_lp.max(f64::from((a - b).abs()) / f64::from(b.abs()).max(1.0));
                    }
                    for (a, b) in t.scores.iter().zip(&alone.scores) {
                        worst_score = worst_score.max((a - b).abs());
                    }
                }
            }
            // A few ulps of f32: log-probabilities of order 1-10.
            assert!(
                worst_lp < 2e-6,
                "{policy:?}: log-probabilities differ by {worst_lp}"
            );
            assert!(
                worst_score < 1e-6,
                "{policy:?}: scores differ by {worst_score}"
            );
            println!("{policy:?}: log-probs {worst_lp:.1e} (relative), scores {worst_score:.1e}");
        }
    }

    /// The three stages of [`pipeline`] overlap: the next batch is ready
    /// before the model has run the current one, and a batch is finished
    /// while the model runs the next; outputs keep their order. (Ordering,
    /// not speed: each model pass sleeps 40 ms, preparing takes
    /// microseconds and finishing 10 ms.)
    #[test]
    fn the_pipeline_prepares_and_finishes_while_the_model_runs() {
        use std::{
            sync::Mutex,
            time::{Duration, Instant},
        };
        let log = Mutex::new(Vec::<(&str, usize, Instant)>::new());
        let note =
            |what: &'static str, i: usize| log.lock().unwrap().push((what, i, Instant::now()));
        let n = 5;
        let (out, times) = pipeline(
            (0..n).map(|i| {
                note("prepared", i);
                Ok(i)
            }),
            |&i| {
                std::thread::sleep(Duration::from_millis(40));
                note("ran", i);
                Ok(10 * i)
            },
            |i, r, out: &mut Vec<usize>| {
                note("finishing", i);
                std::thread::sleep(Duration::from_millis(10));
                out.push(r);
            },
        )
        .unwrap();
        assert_eq!(out, [0, 10, 20, 30, 40]);
        assert_eq!(times.batches, n);
        assert!(
            times.forward_s >= 0.2 && times.finish_s >= 0.05,
            "{times:?}"
        );
        let log = log.into_inner().unwrap();
        let at = |what: &str, i: usize| log.iter().find(|e| e.0 == what && e.1 == i).unwrap().2;
        for i in 0..n - 1 {
            assert!(at("prepared", i + 1) < at("ran", i), "batch {i}: {log:?}");
            assert!(at("finishing", i) < at("ran", i + 1), "batch {i}: {log:?}");
        }
    }

    /// An error of a batch or of the model ends the pipeline with it, and
    /// nothing hangs.
    #[test]
    fn a_pipeline_error_stops_every_stage() {
        let failing = |at: usize| {
            (0..1000).map(move |i| {
                if i == at {
                    Err(PlayerError::Tensor(format!("batch {i}")))
                } else {
                    Ok(i)
                }
            })
        };
        let keep = |_: usize, r: usize, out: &mut Vec<usize>| out.push(r);
        let err = pipeline(failing(3), |&i| Ok(i), keep).unwrap_err();
        assert_eq!(
            err.to_string(),
            PlayerError::Tensor("batch 3".into()).to_string()
        );
        let err = pipeline(
            failing(usize::MAX),
            |&i| {
                if i == 7 {
                    Err(PlayerError::Tensor("pass 7".into()))
                } else {
                    Ok(i)
                }
            },
            keep,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            PlayerError::Tensor("pass 7".into()).to_string()
        );
        let (out, _) = pipeline(failing(usize::MAX), |&i| Ok(i), keep).unwrap();
        assert_eq!(out, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn argmax_takes_the_first_maximum_and_skips_nan() {
        assert_eq!(argmax(&[0.1, 0.7, 0.7, 0.2]), Some(1));
        assert_eq!(argmax(&[f64::NAN, 0.3]), Some(1));
        assert_eq!(argmax(&[]), None);
    }

    #[test]
    fn legal_moves_are_ordered_by_uci() {
        let moves = ordered_legal_moves(&Chess::default()).unwrap();
        assert_eq!(moves.len(), 20);
        assert_eq!(moves[0].0, "a2a3");
        assert_eq!(moves[19].0, "h2h4");
        assert!(moves.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn softmax_sums_to_one() {
        let p = softmax(&[-1.0, 0.0, 2.0]);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(p[2] > p[1] && p[1] > p[0]);
    }
}
