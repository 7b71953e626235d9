//! Lichess puzzles (Ruoss et al. 2024, §3.1 and Figure 2), scored as
//! searchless_chess's `puzzles.py` does: the first move of `Moves` is the
//! opponent's; the policy must then play every later move of the solver
//! (the opponent's replies are forced); a different move that checkmates
//! at once also solves the puzzle.
//!
//! Two CSV formats, told apart by the header:
//! - Lichess's database (`PuzzleId,FEN,Moves,Rating,...`): `FEN` is the
//!   position before the opponent's first move;
//! - ChessBench's `puzzles.csv`: a `PGN` column (the game up to the
//!   puzzle) instead of `FEN`; the position is the PGN's last.

use std::path::Path;

use serde::Serialize;
use shakmaty::{Chess, Move, Position, san::San};

use super::{
    error::EvalError,
    game::{Game, PlayError, fen_of, parse_fen},
    policy::Player,
};

/// One puzzle.
#[derive(Debug, Clone)]
pub(crate) struct Puzzle {
    pub id: String,
    pub rating: Option<u32>,
    /// The position before `moves[0]`.
    pub start: Chess,
    /// The line, checked legal: the opponent's move first.
    pub moves: Vec<Move>,
}

/// The moves of a PGN's main line (headers, comments, variations, NAGs,
/// move numbers and the result are skipped) played from the standard start
/// or from a `[FEN "..."]` header; returns the final position and moves.
pub(crate) fn play_pgn(text: &str) -> Result<(Chess, Vec<Move>), PlayError> {
    let mut pos = Chess::default();
    let mut body = String::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("[FEN \"") {
            let fen = rest.trim_end_matches(']').trim_end_matches('"');
            pos = parse_fen(fen)?;
        } else if t.starts_with('[') || t.starts_with('%') {
            continue;
        } else {
            body.push_str(line);
            body.push('\n');
        }
    }
    let mut moves = Vec::new();
    let (mut brace, mut paren) = (false, 0usize);
    let mut cleaned = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if !brace => brace = true,
            '}' if brace => brace = false,
            _ if brace => {}
            ';' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '(' => paren += 1,
            ')' => paren = paren.saturating_sub(1),
            _ if paren > 0 => {}
            _ => cleaned.push(c),
        }
    }
    for token in cleaned.split_whitespace() {
        // "12." / "12..." / "12.e4" (a number glued to a move).
        let token = token.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        if token.is_empty()
            || token.starts_with('$')
            || matches!(
                token,
                "*" | "1-0" | "0-1" | "1/2-1/2" | "-0" | "-1" | "/2-1/2"
            )
        {
            continue;
        }
        let san_text = token.trim_end_matches(['!', '?', '+', '#']);
        let san: San = san_text.parse().map_err(|_| PlayError::San {
            token: token.to_owned(),
            moves: moves.len(),
        })?;
        let m = san.to_move(&pos).map_err(|_| PlayError::IllegalSan {
            mv: token.to_owned(),
            fen: fen_of(&pos),
            moves: moves.len(),
        })?;
        pos.play_unchecked(m);
        moves.push(m);
    }
    Ok((pos, moves))
}

fn puzzle_error(path: &Path, line: u64, message: impl Into<String>) -> EvalError {
    EvalError::Puzzle {
        path: path.to_owned(),
        line,
        message: message.into(),
    }
}

/// Reads at most `limit` puzzles from a CSV file (either format).
pub(crate) fn read_puzzles(path: &Path, limit: Option<usize>) -> Result<Vec<Puzzle>, EvalError> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(|e| puzzle_error(path, 1, e.to_string()))?;
    let headers = reader
        .headers()
        .map_err(|e| puzzle_error(path, 1, e.to_string()))?
        .clone();
    let col = |name: &str| headers.iter().position(|h| h.trim() == name);
    let (fen_col, pgn_col) = (col("FEN"), col("PGN"));
    let moves_col = col("Moves").ok_or_else(|| {
        puzzle_error(path, 1, "no Moves column (expected Lichess's PuzzleId,FEN,Moves,Rating,... or ChessBench's PGN,Moves,Rating header)")
    })?;
    if fen_col.is_none() && pgn_col.is_none() {
        return Err(puzzle_error(path, 1, "neither a FEN nor a PGN column"));
    }
    let (id_col, rating_col) = (col("PuzzleId"), col("Rating"));
    let mut out = Vec::new();
    for (i, record) in reader.records().enumerate() {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let line = record
            .as_ref()
            .ok()
            .and_then(|r| r.position().map(|p| p.line()))
            .unwrap_or(i as u64 + 2);
        let record = record.map_err(|e| puzzle_error(path, line, e.to_string()))?;
        let field = |c: usize| record.get(c).unwrap_or("").trim();
        let id = id_col.map_or_else(|| format!("#{}", i + 1), |c| field(c).to_owned());
        let start = match fen_col {
            Some(c) if !field(c).is_empty() => {
                parse_fen(field(c)).map_err(|m| puzzle_error(path, line, m.to_string()))?
            }
            _ => {
                let pgn = pgn_col.map_or("", field);
                play_pgn(pgn)
                    .map_err(|m| puzzle_error(path, line, format!("puzzle {id}: PGN: {m}")))?
                    .0
            }
        };
        let rating = match rating_col.map(field) {
            None | Some("") => None,
            Some(r) => Some(r.parse::<u32>().map_err(|_| {
                puzzle_error(
                    path,
                    line,
                    format!("puzzle {id}: Rating {r:?} is not a number"),
                )
            })?),
        };
        let uci: Vec<&str> = field(moves_col).split_whitespace().collect();
        if uci.len() < 2 {
            return Err(puzzle_error(
                path,
                line,
                format!(
                    "puzzle {id}: Moves needs the opponent's move and at least one reply, got {:?}",
                    field(moves_col)
                ),
            ));
        }
        let mut game = Game::new(start.clone());
        let mut moves = Vec::with_capacity(uci.len());
        for (n, u) in uci.iter().enumerate() {
            let m = game.play_uci(u).map_err(|m| {
                puzzle_error(
                    path,
                    line,
                    format!("puzzle {id}: move {} of Moves: {m}", n + 1),
                )
            })?;
            moves.push(m);
        }
        out.push(Puzzle {
            id,
            rating,
            start,
            moves,
        });
    }
    Ok(out)
}

/// How a puzzle went.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct PuzzleResult {
    pub id: String,
    pub rating: Option<u32>,
    pub solved: bool,
    /// The solver's moves the policy had to find, and found.
    pub moves_needed: u32,
    pub moves_found: u32,
}

/// Plays `puzzle` with `player`.
#[cfg(test)]
pub(crate) fn solve(puzzle: &Puzzle, player: &mut dyn Player) -> Result<PuzzleResult, EvalError> {
    Ok(solve_many(std::slice::from_ref(puzzle), player, |_| {})?.remove(0))
}

/// Puzzles a player that keeps many games at once (a model) solves
/// together: their boards are scored in one batch per move.
pub(crate) const PUZZLES_AT_ONCE: usize = 256;

/// A puzzle being solved: its game and how far the solution got.
struct Attempt {
    index: usize,
    game: Game,
    /// The next solution move to play (even: the opponent's, odd: the
    /// solver's).
    next: usize,
    found: u32,
}

/// Plays `puzzles` with `player`, in order, up to [`PUZZLES_AT_ONCE`] at a
/// time when the player can keep that many games ([`Player::slots`]):
/// each is played exactly as alone (the opponent's moves are the
/// solution's; the solver must find every one of its own, or mate).
/// `progress` gets the number of puzzles finished.
pub(crate) fn solve_many(
    puzzles: &[Puzzle],
    player: &mut dyn Player,
    mut progress: impl FnMut(u64),
) -> Result<Vec<PuzzleResult>, EvalError> {
    let slots = player.slots().clamp(1, PUZZLES_AT_ONCE);
    let mut results: Vec<Option<PuzzleResult>> = vec![None; puzzles.len()];
    let mut table: Vec<Option<Attempt>> = (0..slots).map(|_| None).collect();
    let mut queued = 0;
    let mut finished = 0u64;
    loop {
        // Fill free slots and play the opponent's moves up to the solver's
        // turn; a puzzle whose solution runs out is solved.
        for (slot, seat) in table.iter_mut().enumerate() {
            loop {
                if seat.is_none() {
                    if queued == puzzles.len() {
                        break;
                    }
                    player.new_game_in(slot)?;
                    *seat = Some(Attempt {
                        index: queued,
                        game: Game::new(puzzles[queued].start.clone()),
                        next: 0,
                        found: 0,
                    });
                    queued += 1;
                }
                let a = seat.as_mut().expect("filled above");
                let puzzle = &puzzles[a.index];
                while a.next < puzzle.moves.len() && a.next % 2 == 0 {
                    a.game.play(&puzzle.moves[a.next]);
                    a.next += 1;
                }
                if a.next < puzzle.moves.len() {
                    break;
                }
                results[a.index] = Some(result(puzzle, true, a.found));
                *seat = None;
                finished += 1;
                progress(finished);
            }
        }
        let turns: Vec<(usize, &Game)> = table
            .iter()
            .enumerate()
            .filter_map(|(slot, seat)| seat.as_ref().map(|a| (slot, &a.game)))
            .collect();
        if turns.is_empty() {
            break;
        }
        let chosen = player.choose_many(&turns)?;
        let slots_moved: Vec<usize> = turns.iter().map(|(slot, _)| *slot).collect();
        for (slot, m) in slots_moved.into_iter().zip(chosen) {
            let a = table[slot].as_mut().expect("a puzzle in every turn's slot");
            let puzzle = &puzzles[a.index];
            let expected = &puzzle.moves[a.next];
            if m == *expected {
                a.found += 1;
                a.game.play(expected);
                a.next += 1;
                continue;
            }
            // A different move solves the puzzle only if it mates.
            a.game.play(&m);
            let mates = a.game.position().is_checkmate();
            results[a.index] = Some(result(puzzle, mates, a.found + u32::from(mates)));
            table[slot] = None;
            finished += 1;
            progress(finished);
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every puzzle finished"))
        .collect())
}

fn result(puzzle: &Puzzle, solved: bool, found: u32) -> PuzzleResult {
    let needed = (puzzle.moves.len() / 2) as u32;
    PuzzleResult {
        id: puzzle.id.clone(),
        rating: puzzle.rating,
        solved,
        moves_needed: needed,
        moves_found: found.min(needed),
    }
}

/// Width of the rating buckets of Figure 2.
pub(crate) const RATING_BUCKET: u32 = 200;

/// Accuracy in one rating bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RatingBucket {
    pub lo: u32,
    pub hi: u32,
    pub puzzles: u64,
    pub solved: u64,
    pub accuracy: f64,
}

/// Puzzle results summarised.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PuzzleSummary {
    pub player: String,
    pub puzzles: u64,
    pub solved: u64,
    pub accuracy: f64,
    pub mean_rating: Option<f64>,
    pub by_rating: Vec<RatingBucket>,
    /// Positions the player chose a move in: each puzzle's solver moves up
    /// to its first wrong one (a weak player stops early, so it scores
    /// fewer boards in the same puzzles than a strong one).
    pub boards: u64,
    /// Positions a player that solves every puzzle chooses a move in.
    pub boards_if_all_solved: u64,
    pub seconds: f64,
}

/// Accuracy overall and per [`RATING_BUCKET`]-wide rating bucket.
pub(crate) fn summarise(player: &str, results: &[PuzzleResult], seconds: f64) -> PuzzleSummary {
    let mut buckets: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    for r in results {
        if let Some(rating) = r.rating {
            let b = buckets.entry(rating / RATING_BUCKET).or_default();
            b.0 += 1;
            b.1 += u64::from(r.solved);
        }
    }
    let solved = results.iter().filter(|r| r.solved).count() as u64;
    let rated: Vec<f64> = results
        .iter()
        .filter_map(|r| r.rating.map(f64::from))
        .collect();
    let boards = results
        .iter()
        .map(|r| u64::from(r.moves_found + u32::from(r.moves_found < r.moves_needed)))
        .sum();
    PuzzleSummary {
        boards,
        boards_if_all_solved: results.iter().map(|r| u64::from(r.moves_needed)).sum(),
        player: player.to_owned(),
        puzzles: results.len() as u64,
        solved,
        accuracy: if results.is_empty() {
            f64::NAN
        } else {
            solved as f64 / results.len() as f64
        },
        mean_rating: (!rated.is_empty()).then(|| rated.iter().sum::<f64>() / rated.len() as f64),
        by_rating: buckets
            .into_iter()
            .map(|(b, (n, s))| RatingBucket {
                lo: b * RATING_BUCKET,
                hi: (b + 1) * RATING_BUCKET,
                puzzles: n,
                solved: s,
                accuracy: s as f64 / n as f64,
            })
            .collect(),
        seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{error::PlayerError, game::parse_uci_move};
    use std::io::Write;

    /// Plays a fixed list of UCI moves (a "policy" that knows the answer,
    /// or a wrong one), to test the scoring itself.
    struct Scripted(Vec<&'static str>, usize);
    impl Player for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn new_game(&mut self) -> Result<(), PlayerError> {
            self.1 = 0;
            Ok(())
        }
        fn choose(&mut self, game: &Game) -> Result<Move, PlayerError> {
            let m = self.0[self.1];
            self.1 += 1;
            Ok(parse_uci_move(game.position(), m).unwrap())
        }
    }

    fn csv(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    // Lichess puzzle 0000D (the database's second row): Moves "d3d6 f8d8
    // d6d8 f6d8": the opponent plays d3d6, the solver f8d8, the opponent
    // d6d8, the solver f6d8.
    const LICHESS: &str = "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags\n\
        0000D,5rk1/1p3ppp/pq3b2/8/8/1P1Q1N2/P4PPP/3R2K1 w - - 2 27,d3d6 f8d8 d6d8 f6d8,1492,74,96,33381,advantage endgame short,https://lichess.org/F8M8OS71#53,\n";

    #[test]
    fn the_known_solution_solves_and_a_wrong_move_fails() {
        let f = csv(LICHESS);
        let puzzles = read_puzzles(f.path(), None).unwrap();
        assert_eq!(puzzles.len(), 1);
        assert_eq!(puzzles[0].rating, Some(1492));
        let r = solve(&puzzles[0], &mut Scripted(vec!["f8d8", "f6d8"], 0)).unwrap();
        assert!(r.solved);
        assert_eq!((r.moves_needed, r.moves_found), (2, 2));
        let r = solve(&puzzles[0], &mut Scripted(vec!["b6b3"], 0)).unwrap();
        assert!(!r.solved);
        assert_eq!(r.moves_found, 0);
    }

    #[test]
    fn an_alternative_mate_in_one_counts() {
        // White to mate on the back rank: the listed solution is Ra8#, but
        // Qd8# mates too. The opponent's first move is b7b6.
        let text = "PuzzleId,FEN,Moves,Rating\n\
            alt,6k1/1p3ppp/8/8/8/8/5PPP/R2Q2K1 b - - 0 1,b7b6 a1a8,1000\n";
        let f = csv(text);
        let puzzles = read_puzzles(f.path(), None).unwrap();
        let p = &puzzles[0];
        let mut g = Game::new(p.start.clone());
        g.play(&p.moves[0]);
        for m in ["a1a8", "d1d8"] {
            let mut h = g.clone();
            h.play_uci(m).unwrap();
            assert!(h.position().is_checkmate(), "{m}");
        }
        let r = solve(p, &mut Scripted(vec!["d1d8"], 0)).unwrap();
        assert!(r.solved, "another mate in one solves the puzzle");
        let r = solve(p, &mut Scripted(vec!["d1d7"], 0)).unwrap();
        assert!(!r.solved);
    }

    #[test]
    fn chessbench_pgn_format() {
        let text = "PuzzleId,Rating,PGN,Moves\n\
            p1,900,\"[Event \"\"x\"\"]\n\n1. e4 e5 2. Bc4 Nc6 3. Qh5 {threat} Nf6?? *\",h5f7 e8f7,900\n";
        // Moves[0] is the opponent's: here a nonsense line is rejected.
        let f = csv(text);
        let err = read_puzzles(f.path(), None).unwrap_err().to_string();
        assert!(err.contains("line 2") || err.contains(":2"), "{err}");
        let text = "PuzzleId,Rating,PGN,Moves\n\
            p1,900,\"1. e4 e5 2. Bc4 Nc6 3. Qh5\",g8f6 h5f7,900\n";
        let f = csv(text);
        let puzzles = read_puzzles(f.path(), None).unwrap();
        let r = solve(&puzzles[0], &mut Scripted(vec!["h5f7"], 0)).unwrap();
        assert!(r.solved);
    }

    #[test]
    fn malformed_rows_are_errors_naming_the_line() {
        for (row, what) in [
            ("x,not a fen,e2e4 e7e5,1000", "invalid FEN"),
            (
                "x,8/8/8/8/8/8/8/K6k w - - 0 1,a1a2,1000",
                "at least one reply",
            ),
            ("x,8/8/8/8/8/8/8/K6k w - - 0 1,a1a3 h1h2,1000", "not legal"),
            ("x,8/8/8/8/8/8/8/K6k w - - 0 1,a1a2 h1h2,high", "Rating"),
        ] {
            let f = csv(&format!(
                "PuzzleId,FEN,Moves,Rating\nok,8/8/8/8/8/8/8/K6k w - - 0 1,a1a2 h1h2,1000\n{row}\n"
            ));
            let err = read_puzzles(f.path(), None).unwrap_err().to_string();
            assert!(err.contains(what), "{err}");
            assert!(err.contains(":3"), "names the line: {err}");
        }
        let f = csv("a,b\n1,2\n");
        assert!(
            read_puzzles(f.path(), None)
                .unwrap_err()
                .to_string()
                .contains("Moves")
        );
    }

    #[test]
    fn pgn_movetext_parsing() {
        let (pos, moves) =
            play_pgn("[Event \"?\"]\n\n1. e4 (1. d4 d5) e5 $1 2.Nf3 {c} Nc6 3. Bb5 a6 1/2-1/2")
                .unwrap();
        assert_eq!(moves.len(), 6);
        assert_eq!(
            fen_of(&pos),
            "r1bqkbnr/1ppp1ppp/p1n5/1B2p3/4P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 0 4"
        );
        assert!(play_pgn("1. e5").is_err());
    }

    /// A puzzle's boards: every solver move found, plus the one missed.
    #[test]
    fn boards_scored_stop_at_the_first_wrong_move() {
        let r = |needed, found| PuzzleResult {
            id: String::new(),
            rating: None,
            solved: found == needed,
            moves_needed: needed,
            moves_found: found,
        };
        let s = summarise("x", &[r(3, 0), r(3, 1), r(3, 3), r(1, 1)], 1.0);
        assert_eq!((s.boards, s.boards_if_all_solved), (1 + 2 + 3 + 1, 10));
    }

    #[test]
    fn summary_by_rating_bucket() {
        let r = |rating, solved| PuzzleResult {
            id: String::new(),
            rating: Some(rating),
            solved,
            moves_needed: 1,
            moves_found: u32::from(solved),
        };
        let s = summarise("x", &[r(1010, true), r(1190, false), r(1500, true)], 1.0);
        assert_eq!(s.solved, 2);
        assert_eq!(s.by_rating.len(), 2);
        assert_eq!(
            (
                s.by_rating[0].lo,
                s.by_rating[0].puzzles,
                s.by_rating[0].solved
            ),
            (1000, 2, 1)
        );
    }

    /// A player kept to one game at a time (what a batching player does
    /// with the games taken one by one).
    pub(crate) struct Alone<'a>(pub &'a mut dyn Player);
    impl Player for Alone<'_> {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn new_game(&mut self) -> Result<(), PlayerError> {
            self.0.new_game()
        }
        fn choose(&mut self, game: &Game) -> Result<Move, PlayerError> {
            self.0.choose(game)
        }
    }

    /// A model solving puzzles many at a time (their boards in shared
    /// forward passes) gets each puzzle's result it gets alone.
    #[test]
    fn puzzles_solved_together_equal_puzzles_solved_alone() {
        use crate::{
            chess::RecordSet,
            eval::{
                policy::{NeuralPlayer, PolicyOptions},
                trained::Model,
            },
            model::{DeviceKind, Preset},
        };
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("data/lichess_db_puzzle_head1000.csv");
        let puzzles = read_puzzles(&path, Some(120)).unwrap();
        let model =
            Model::random(Preset::Tiny, RecordSet::ActionValue, 32, DeviceKind::Cpu).unwrap();
        let mut player = NeuralPlayer::new(model, PolicyOptions::default(), None);
        assert!(player.slots() > 1);
        let mut finished = Vec::new();
        let together = solve_many(&puzzles, &mut player, |n| finished.push(n)).unwrap();
        assert_eq!(finished, (1..=puzzles.len() as u64).collect::<Vec<_>>());
        let alone = solve_many(&puzzles, &mut Alone(&mut player), |_| {}).unwrap();
        assert_eq!(together, alone);
        // Not trivially equal: a random model solves some and fails most.
        let solved = together.iter().filter(|r| r.solved).count();
        assert!(solved < puzzles.len(), "{solved}");
        assert!(together.iter().any(|r| r.moves_found > 0));
    }
}
