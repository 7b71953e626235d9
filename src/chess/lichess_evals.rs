//! The Lichess evaluation database: positions that Lichess's cloud analysis
//! searched with Stockfish, published (CC0) at database.lichess.org as
//! `lichess_db_eval.jsonl.zst`, one position a line:
//!
//! ```text
//! {"fen": "<placement> <side> <castling> <en passant>",
//!  "evals": [{"pvs": [{"cp": 311, "line": "g1f3 g8f6 ..."}, {"mate": -4, "line": "..."}],
//!             "knodes": 206765, "depth": 36}, ...]}
//! ```
//!
//! and flattened, one row per principal variation
//! (`fen,line,depth,knodes,cp,mate`), as the same data is also published.
//! Two conventions the download page leaves implicit, which the tests
//! check on real rows (`data/lichess_evals_sample10.csv`):
//!
//! - scores are **White's**, not the side to move's: black to move with a
//!   queen against a knight and three pawns scores cp -251, and a rook
//!   against a lone pawn with black to move scores mate +10 (White mates);
//! - castling in the lines is the king taking its own rook (`e1h1`), as in
//!   Chess960, not the king's two-square move (`e1g1`) that ChessBench's
//!   actions use.
//!
//! A position may hold several searches; [`choose`] takes one by a fixed
//! rule. Its state value is the first principal variation's score, and each
//! variation's first move gets that variation's score as its action value:
//! Stockfish's MultiPV ranks the moves it searched, the same quantity the
//! paper's `searchmoves` oracle computes per move, for the moves Lichess
//! kept (Ruoss et al. 2024, §2.1).

use shakmaty::{CastlingMode, Chess, Color, EnPassantMode, Move, Position, fen::Fen, uci::UciMove};
use thiserror::Error;

use super::actions::vocabulary;

/// A score from the side to move's point of view, as the value tables
/// hold it: (centipawns, mate in N moves, N > 0 when the side to move
/// mates), exactly one of them set.
pub type SideScore = (Option<i32>, Option<i32>);

/// A score from White's point of view, as the database writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhiteScore {
    /// Centipawns, White's view.
    Cp(i32),
    /// Mate in N moves: N > 0, White mates; N < 0, Black mates.
    Mate(i32),
}

impl WhiteScore {
    /// The same score from `turn`'s point of view, as (centipawns, mate in
    /// N): the UCI convention the value tables use.
    pub fn for_side(self, turn: Color) -> SideScore {
        let sign = turn.fold_wb(1, -1);
        match self {
            WhiteScore::Cp(cp) => (Some(sign * cp), None),
            WhiteScore::Mate(n) => (None, Some(sign * n)),
        }
    }
}

/// One principal variation of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalsPv {
    pub score: WhiteScore,
    /// The moves in UCI, castling as king-takes-rook, as written.
    pub line: String,
}

/// One search of a position.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalsSearch {
    pub depth: u16,
    pub knodes: u64,
    /// Best first.
    pub pvs: Vec<EvalsPv>,
}

/// One position of the database.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalsPosition {
    /// The four FEN fields as written (no move counters).
    pub fen: String,
    pub searches: Vec<EvalsSearch>,
}

/// Why a line or row of the database is not used: each a reject with its
/// reason, never a crash.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalsReject {
    #[error("not the evaluation database's JSON: {0}")]
    Json(String),
    #[error("not a flattened evaluation row (fen,line,depth,knodes,cp,mate): {0}")]
    Row(String),
    #[error("FEN {fen:?}: {reason}")]
    Fen { fen: String, reason: String },
    #[error("no search with a principal variation")]
    NoSearch,
    #[error("a principal variation with neither cp nor mate, or both")]
    Score,
    #[error("move {index} of the variation {line:?} ({uci}) is not legal there")]
    Move {
        line: String,
        index: usize,
        uci: String,
    },
}

impl EvalsReject {
    /// A short code for the reason, as the rejects' `reason` column holds.
    pub fn code(&self) -> &'static str {
        match self {
            EvalsReject::Json(_) => "bad_json",
            EvalsReject::Row(_) => "bad_row",
            EvalsReject::Fen { .. } => "illegal_fen",
            EvalsReject::NoSearch => "no_search",
            EvalsReject::Score => "bad_score",
            EvalsReject::Move { .. } => "illegal_move",
        }
    }
}

#[derive(serde::Deserialize)]
struct JsonLine {
    fen: String,
    #[serde(default)]
    evals: Vec<JsonSearch>,
}

#[derive(serde::Deserialize)]
struct JsonSearch {
    #[serde(default)]
    pvs: Vec<JsonPv>,
    #[serde(default)]
    knodes: u64,
    #[serde(default)]
    depth: u16,
}

#[derive(serde::Deserialize)]
struct JsonPv {
    cp: Option<i32>,
    mate: Option<i32>,
    #[serde(default)]
    line: String,
}

fn score(cp: Option<i32>, mate: Option<i32>) -> Result<WhiteScore, EvalsReject> {
    match (cp, mate) {
        (Some(cp), None) => Ok(WhiteScore::Cp(cp)),
        (None, Some(n)) if n != 0 => Ok(WhiteScore::Mate(n)),
        _ => Err(EvalsReject::Score),
    }
}

/// Parses one line of `lichess_db_eval.jsonl`.
pub fn parse_json_line(line: &str) -> Result<EvalsPosition, EvalsReject> {
    let raw: JsonLine = serde_json::from_str(line).map_err(|e| EvalsReject::Json(e.to_string()))?;
    let searches = raw
        .evals
        .into_iter()
        .map(|s| {
            Ok(EvalsSearch {
                depth: s.depth,
                knodes: s.knodes,
                pvs: s
                    .pvs
                    .into_iter()
                    .map(|p| {
                        Ok(EvalsPv {
                            score: score(p.cp, p.mate)?,
                            line: p.line,
                        })
                    })
                    .collect::<Result<_, EvalsReject>>()?,
            })
        })
        .collect::<Result<_, EvalsReject>>()?;
    Ok(EvalsPosition {
        fen: raw.fen,
        searches,
    })
}

/// One flattened row: a position's FEN and one search's one variation.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatRow {
    pub fen: String,
    pub depth: u16,
    pub knodes: u64,
    pub pv: EvalsPv,
}

/// Parses one flattened row's fields, `fen,line,depth,knodes,cp,mate` (cp
/// and mate written as integers or as floats such as `-251.0`, the empty
/// one absent).
pub fn parse_flat_row(fields: &[&str]) -> Result<FlatRow, EvalsReject> {
    let [fen, line, depth, knodes, cp, mate] = fields else {
        return Err(EvalsReject::Row(format!(
            "{} fields, expected 6",
            fields.len()
        )));
    };
    let number = |name: &str, text: &str| -> Result<Option<f64>, EvalsReject> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|_| EvalsReject::Row(format!("{name} {text:?} is not a number")))
    };
    flat_row(
        fen,
        line,
        [
            number("depth", depth)?,
            number("knodes", knodes)?,
            number("cp", cp)?,
            number("mate", mate)?,
        ],
    )
}

/// A flattened row from its values, however its form typed them: depth,
/// knodes, cp and mate as numbers (integers, or floats with no fraction),
/// cp or mate absent.
pub fn flat_row(fen: &str, line: &str, numbers: [Option<f64>; 4]) -> Result<FlatRow, EvalsReject> {
    let [depth, knodes, cp, mate] = numbers;
    let integer = |name: &str, v: Option<f64>, max: f64| -> Result<Option<i64>, EvalsReject> {
        match v {
            None => Ok(None),
            Some(v) if v.fract() == 0.0 && v.abs() <= max => Ok(Some(v as i64)),
            Some(v) => Err(EvalsReject::Row(format!(
                "{name} {v} is not an integer in range"
            ))),
        }
    };
    let depth = integer("depth", depth, f64::from(u16::MAX))?
        .filter(|d| *d >= 0)
        .ok_or_else(|| EvalsReject::Row("no depth".into()))?;
    let knodes = integer("knodes", knodes, 2f64.powi(53))?
        .filter(|k| *k >= 0)
        .ok_or_else(|| EvalsReject::Row("no knodes".into()))?;
    let cp = integer("cp", cp, f64::from(i32::MAX))?.map(|v| v as i32);
    let mate = integer("mate", mate, f64::from(i32::MAX))?.map(|v| v as i32);
    Ok(FlatRow {
        fen: fen.to_owned(),
        depth: depth as u16,
        knodes: knodes as u64,
        pv: EvalsPv {
            score: score(cp, mate)?,
            line: line.to_owned(),
        },
    })
}

/// Groups consecutive flattened rows of one FEN into a position: rows of
/// the same depth and knodes are one search's variations, in row order.
pub fn group_rows(rows: Vec<FlatRow>) -> Vec<EvalsPosition> {
    let mut out: Vec<EvalsPosition> = Vec::new();
    for r in rows {
        if out.last().is_none_or(|e| e.fen != r.fen) {
            out.push(EvalsPosition {
                fen: r.fen.clone(),
                searches: Vec::new(),
            });
        }
        let eval = out.last_mut().expect("pushed above");
        match eval
            .searches
            .iter_mut()
            .find(|s| s.depth == r.depth && s.knodes == r.knodes)
        {
            Some(s) => s.pvs.push(r.pv),
            None => eval.searches.push(EvalsSearch {
                depth: r.depth,
                knodes: r.knodes,
                pvs: vec![r.pv],
            }),
        }
    }
    out
}

/// The search a position's labels come from: the deepest; among equally
/// deep ones the one that visited the most nodes; then the one with the
/// most variations (more moves labelled); then the first listed. Searches
/// without a variation are never chosen.
pub fn choose(searches: &[EvalsSearch]) -> Option<&EvalsSearch> {
    searches
        .iter()
        .filter(|s| !s.pvs.is_empty())
        .rev()
        .max_by_key(|s| (s.depth, s.knodes, s.pvs.len()))
}

/// The position of a database FEN (four fields; move counters, if any,
/// are ignored) and its key: the four fields as chessbench writes them,
/// the en passant square only when a legal en passant capture exists. A
/// board of a run matches when its FEN's first four fields are this key.
pub fn position(fen: &str) -> Result<(Chess, String), EvalsReject> {
    let bad = |reason: String| EvalsReject::Fen {
        fen: fen.to_owned(),
        reason,
    };
    let fields: Vec<&str> = fen.split_ascii_whitespace().collect();
    if fields.len() < 4 {
        return Err(bad(format!("{} fields, expected 4", fields.len())));
    }
    let full = format!("{} 0 1", fields[..4].join(" "));
    let pos: Chess = Fen::from_ascii(full.as_bytes())
        .map_err(|e| bad(e.to_string()))?
        .into_position(CastlingMode::Standard)
        .map_err(|e| bad(e.to_string()))?;
    let key = four_fields(&pos);
    Ok((pos, key))
}

/// A position's first four FEN fields, en passant only when legal.
pub fn four_fields(pos: &Chess) -> String {
    let fen = Fen::from_position(pos, EnPassantMode::Legal).to_string();
    let mut fields = fen.split(' ');
    let mut key = String::with_capacity(fen.len());
    for i in 0..4 {
        if i > 0 {
            key.push(' ');
        }
        key.push_str(fields.next().unwrap_or("-"));
    }
    key
}

/// A variation's moves played from `pos`, each checked legal there;
/// castling may be written either way (`e1h1` or `e1g1`). Returns the
/// moves.
pub fn replay(pos: &Chess, line: &str) -> Result<Vec<Move>, EvalsReject> {
    let mut pos = pos.clone();
    let mut moves = Vec::new();
    for (index, uci) in line.split_ascii_whitespace().enumerate() {
        let bad = || EvalsReject::Move {
            line: line.to_owned(),
            index,
            uci: uci.to_owned(),
        };
        let m = uci
            .parse::<UciMove>()
            .map_err(|_| bad())?
            .to_move(&pos)
            .map_err(|_| bad())?;
        pos.play_unchecked(m);
        moves.push(m);
    }
    Ok(moves)
}

/// What a chosen search says about one position, from the side to move's
/// point of view: the state value's score and, per action (ChessBench's
/// vocabulary), the score of the first variation that starts with it.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalsLabels {
    pub depth: u16,
    pub knodes: u64,
    /// (centipawns, mate in N) of the best variation.
    pub state: SideScore,
    /// Sorted by action.
    pub actions: Vec<(u16, SideScore)>,
}

/// The labels of `search` for the position `pos`. A variation whose moves
/// are not legal rejects the position: the data is then not what it claims.
pub fn labels(pos: &Chess, search: &EvalsSearch) -> Result<EvalsLabels, EvalsReject> {
    let turn = pos.turn();
    let first = search.pvs.first().ok_or(EvalsReject::NoSearch)?;
    let mut actions: Vec<(u16, SideScore)> = Vec::new();
    for pv in &search.pvs {
        let moves = replay(pos, &pv.line)?;
        let Some(m) = moves.first() else {
            continue;
        };
        let action = vocabulary()
            .index_of_move(m)
            .expect("every legal move of standard chess is an action");
        if !actions.iter().any(|(a, _)| *a == action) {
            actions.push((action, pv.score.for_side(turn)));
        }
    }
    actions.sort_by_key(|(a, _)| *a);
    Ok(EvalsLabels {
        depth: search.depth,
        knodes: search.knodes,
        state: first.score.for_side(turn),
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ten real rows of `data/lichess_evals_sample10.csv`.
    fn sample() -> Vec<FlatRow> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/data/lichess_evals_sample10.csv"
        );
        let mut reader = csv::Reader::from_path(path).unwrap();
        reader
            .records()
            .map(|r| {
                let r = r.unwrap();
                parse_flat_row(&r.iter().collect::<Vec<_>>()).unwrap()
            })
            .collect()
    }

    fn row_with(fen_start: &str) -> FlatRow {
        sample()
            .into_iter()
            .find(|r| r.fen.starts_with(fen_start))
            .unwrap()
    }

    #[test]
    fn the_ten_real_rows_parse_and_their_positions_are_legal() {
        let rows = sample();
        assert_eq!(rows.len(), 10);
        for r in &rows {
            let (pos, key) = position(&r.fen).unwrap();
            assert_eq!(key, r.fen, "the sample's FENs are already canonical");
            replay(&pos, &r.pv.line).unwrap();
        }
        assert_eq!(group_rows(rows).len(), 10);
    }

    /// Scores are White's: on real rows the side that is clearly winning
    /// gets the better value only when the sign follows the side to move.
    #[test]
    fn scores_are_whites_on_real_rows() {
        // Black to move, a queen and two rooks against a knight, three
        // pawns and two rooks: cp -251, good for Black.
        let r = row_with("r4r1k/6bp/1qbP1np1/N3B1N1");
        assert_eq!(r.pv.score, WhiteScore::Cp(-251));
        let (pos, _) = position(&r.fen).unwrap();
        assert_eq!(pos.turn(), Color::Black);
        assert_eq!(r.pv.score.for_side(pos.turn()), (Some(251), None));
        // Black to move with a lone pawn against a rook: mate 10 means
        // White mates; for the side to move it is mated (-10).
        let r = row_with("8/8/6K1/8/7p/8/R7/6k1 b");
        assert_eq!(r.pv.score, WhiteScore::Mate(10));
        let (pos, _) = position(&r.fen).unwrap();
        let labels = labels(&pos, &group_rows(vec![r])[0].searches[0]).unwrap();
        assert_eq!(labels.state, (None, Some(-10)));
        // White to move with four bishops against a bare king: mate 8 is
        // White's mate, and White's to move.
        let r = row_with("8/4K3/6BB/8/8/6B1/4k3/4B3 w");
        assert_eq!(r.pv.score.for_side(Color::White), (None, Some(8)));
    }

    /// Castling in real lines is written king-takes-rook: `e1h1` is White
    /// castling short, which the two-square notation would call illegal.
    #[test]
    fn castling_in_real_lines_is_king_takes_rook() {
        let r = row_with("r3kbnr/pp1qpppp/2p5/5b2/3P4");
        let (pos, _) = position(&r.fen).unwrap();
        let moves = replay(&pos, &r.pv.line).unwrap();
        let words: Vec<&str> = r.pv.line.split(' ').collect();
        assert_eq!(words[4], "e1h1");
        assert!(matches!(moves[4], Move::Castle { .. }), "{:?}", moves[4]);
        assert_eq!(moves[4].to_uci(CastlingMode::Standard).to_string(), "e1g1");
        // The other real line with castling: Black to move, White's tenth
        // move castles.
        let r = row_with("r1bqkb1r/pp1p1ppp/2n2n2/1B2p3/Q3P3");
        let moves = replay(&position(&r.fen).unwrap().0, &r.pv.line).unwrap();
        assert_eq!(r.pv.line.split(' ').nth(9), Some("e1h1"));
        assert!(matches!(moves[9], Move::Castle { .. }));
    }

    #[test]
    fn a_castling_first_move_is_chessbenchs_two_square_action() {
        // The castling position of the sample, after its first four moves:
        // White castles as its first move.
        let r = row_with("r3kbnr/pp1qpppp/2p5/5b2/3P4");
        let (mut pos, _) = position(&r.fen).unwrap();
        for m in replay(&pos, "d4d5 g8f6 d5c6 b7c6").unwrap() {
            pos.play_unchecked(m);
        }
        let search = EvalsSearch {
            depth: 20,
            knodes: 100,
            pvs: vec![
                EvalsPv {
                    score: WhiteScore::Cp(40),
                    line: "e1h1 e7e6".into(),
                },
                EvalsPv {
                    score: WhiteScore::Cp(35),
                    line: "e1g1 e7e5".into(),
                },
            ],
        };
        let l = labels(&pos, &search).unwrap();
        let castle = vocabulary().parse("e1g1").unwrap();
        // Both spellings are the same move: one action, the first's score.
        assert_eq!(l.actions, vec![(castle, (Some(40), None))]);
    }

    #[test]
    fn the_json_lines_form_parses() {
        let line = r#"{"fen":"r1bqkb1r/pp1p1ppp/2n2n2/1B2p3/Q3P3/2N5/PPP2PPP/R1B1K1NR b KQkq -","evals":[{"pvs":[{"cp":-69,"line":"a7a6 b5c6"},{"mate":-4,"line":"d7d6"}],"knodes":61823,"depth":33},{"pvs":[{"cp":-50,"line":"a7a6"}],"knodes":900,"depth":20}]}"#;
        let e = parse_json_line(line).unwrap();
        assert_eq!(e.searches.len(), 2);
        assert_eq!(e.searches[0].pvs[1].score, WhiteScore::Mate(-4));
        let chosen = choose(&e.searches).unwrap();
        assert_eq!(chosen.depth, 33);
        let (pos, _) = position(&e.fen).unwrap();
        let l = labels(&pos, chosen).unwrap();
        // Black to move: White's -69 is +69 for Black, White's mate -4 is
        // Black mating in 4.
        assert_eq!(l.state, (Some(69), None));
        let d7d6 = vocabulary().parse("d7d6").unwrap();
        let a7a6 = vocabulary().parse("a7a6").unwrap();
        let mut expected = vec![(a7a6, (Some(69), None)), (d7d6, (None, Some(4)))];
        expected.sort();
        assert_eq!(l.actions, expected);
    }

    #[test]
    fn the_deepest_search_is_chosen_then_the_most_nodes_then_the_first() {
        let s = |depth, knodes, pvs: usize| EvalsSearch {
            depth,
            knodes,
            pvs: (0..pvs)
                .map(|i| EvalsPv {
                    score: WhiteScore::Cp(i as i32),
                    line: String::new(),
                })
                .collect(),
        };
        let searches = [s(30, 10, 1), s(36, 5, 1), s(36, 9, 1), s(40, 99, 0)];
        assert_eq!(choose(&searches), Some(&searches[2]));
        let tied = [s(36, 9, 2), s(36, 9, 2)];
        assert!(std::ptr::eq(choose(&tied).unwrap(), &tied[0]));
        let more_pvs = [s(36, 9, 1), s(36, 9, 3)];
        assert!(std::ptr::eq(choose(&more_pvs).unwrap(), &more_pvs[1]));
        assert_eq!(choose(&[s(40, 1, 0)]), None);
    }

    #[test]
    fn malformed_input_is_a_reject_with_a_reason() {
        let codes = [
            ("{not json", "bad_json"),
            (r#"{"evals":[]}"#, "bad_json"),
            (
                r#"{"fen":"8/8/8/8/8/8/8/8 w - -","evals":[{"pvs":[{"line":"a1a2"}],"knodes":1,"depth":1}]}"#,
                "bad_score",
            ),
        ];
        for (line, code) in codes {
            assert_eq!(parse_json_line(line).unwrap_err().code(), code, "{line}");
        }
        // No kings: not a legal position.
        let e = position("8/8/8/8/8/8/8/8 w - -").unwrap_err();
        assert_eq!(e.code(), "illegal_fen");
        assert_eq!(position("8/8 w").unwrap_err().code(), "illegal_fen");
        // A variation that plays an illegal move.
        let (pos, _) = position("4k3/8/8/8/8/8/8/4K3 w - -").unwrap();
        let e = replay(&pos, "e1e2 e8e7 e2e4").unwrap_err();
        assert_eq!(e.code(), "illegal_move");
        assert!(e.to_string().contains("move 2"), "{e}");
        assert_eq!(
            parse_flat_row(&["a", "b", "c"]).unwrap_err().code(),
            "bad_row"
        );
        assert_eq!(
            parse_flat_row(&["8/8/8/8/8/8/8/8 w - -", "a1a2", "x", "1", "5", ""])
                .unwrap_err()
                .code(),
            "bad_row"
        );
    }

    #[test]
    fn an_en_passant_square_without_a_capture_is_dropped_from_the_key() {
        // After 1. e4 the FEN standard writes e3; no black pawn can take.
        let (_, key) = position("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3").unwrap();
        assert_eq!(
            key,
            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -"
        );
        // With a black pawn on d4 the capture exists and the square stays.
        let (_, key) =
            position("rnbqkbnr/ppp1pppp/8/8/3pP3/8/PPPP1PPP/RNBQKBNR b KQkq e3").unwrap();
        assert!(key.ends_with(" e3"), "{key}");
    }
}
