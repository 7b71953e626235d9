//! Lichess-like games for scale tests (`chessbench generate-games`): real
//! openings continued by seeded random play, written as a Lichess dump
//! writes them (the seven-tag roster and Lichess's own tags, `[%clk]`
//! comments after every move, the result).
//!
//! Game `i` of seed `s` depends only on `(s, i)` and the openings file:
//! it replays the first `k` plies (`k` uniform in 0..=24, short of the real
//! game's end) of a real game picked at random, then plays pseudo-random
//! legal moves (captures and promotions weigh [`CAPTURE_WEIGHT`] times a
//! quiet move) until checkmate, stalemate, insufficient material, the
//! fifty-move rule or a length drawn from a triangular distribution over
//! [`MIN_PLIES`]..=[`MAX_PLIES`] plies (mean 66, as real Lichess games),
//! where the side behind by three points of material or more resigns (and
//! a balanced game is drawn by agreement one time in eight, else resigned
//! by a random side). The first random ply never repeats the real game's
//! move, and a movetext already written is played again from another random
//! stream, so the games of one call are distinct.

use std::{
    collections::HashSet,
    fmt::Write as _,
    hash::{Hash, Hasher},
    io::{self, Read, Write},
    ops::ControlFlow,
    path::{Path, PathBuf},
};

use pgn_reader::{RawTag, Reader, SanPlus, Visitor};
use shakmaty::{
    Chess, Color, Move, Position, Role,
    san::{San, Suffix},
};

/// Longest opening prefix replayed from a real game, in plies.
pub const MAX_PREFIX: usize = 24;
/// Shortest and longest game lengths drawn, in plies.
pub const MIN_PLIES: u64 = 10;
pub const MAX_PLIES: u64 = 122;
/// A capture or promotion is this many times as likely as a quiet move.
pub const CAPTURE_WEIGHT: u32 = 3;
/// Time controls drawn from (base seconds, increment), with Lichess's
/// speed names.
const TIME_CONTROLS: [(u32, u32, &str); 8] = [
    (60, 0, "Bullet"),
    (120, 1, "Bullet"),
    (180, 0, "Blitz"),
    (180, 2, "Blitz"),
    (300, 0, "Blitz"),
    (300, 3, "Blitz"),
    (600, 0, "Rapid"),
    (900, 10, "Rapid"),
];

/// Why openings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: no standard game with a legal first move to take openings from", path.display())]
    NoOpenings { path: PathBuf },
    #[error("writing the games: {0}")]
    Write(io::Error),
}

/// SplitMix64, seeded per game: fast, and enough for test data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, game: u64, attempt: u64) -> Rng {
        let mut r = Rng(seed ^ 0x243F_6A88_85A3_08D3);
        let base = r.next();
        Rng(base ^ game.wrapping_mul(0x9FB2_1C65_1E98_DF25) ^ attempt.rotate_left(32))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// The first plies of a real game.
struct Opening {
    moves: Vec<Move>,
    /// Plies that may be replayed: at most [`MAX_PREFIX`], and short of the
    /// real game's end.
    cap: usize,
}

/// Real openings and player names, read from a PGN file of real games.
pub struct Openings {
    openings: Vec<Opening>,
    names: Vec<String>,
}

#[derive(Default)]
struct Loader {
    names: HashSet<String>,
}

struct Line {
    pos: Chess,
    moves: Vec<Move>,
    ok: bool,
}

impl Visitor for Loader {
    type Tags = bool;
    type Movetext = Line;
    type Output = Option<Opening>;

    fn begin_tags(&mut self) -> ControlFlow<Self::Output, bool> {
        ControlFlow::Continue(true)
    }

    fn tag(
        &mut self,
        standard: &mut bool,
        name: &[u8],
        value: RawTag<'_>,
    ) -> ControlFlow<Self::Output> {
        match name {
            b"FEN" | b"SetUp" => *standard = false,
            b"Variant" if !value.as_bytes().eq_ignore_ascii_case(b"standard") => *standard = false,
            b"White" | b"Black" => {
                let name = value.decode_utf8_lossy();
                if !name.is_empty() && name != "?" && name.len() <= 30 && !name.contains('"') {
                    self.names.insert(name.into_owned());
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, standard: bool) -> ControlFlow<Self::Output, Line> {
        if !standard {
            return ControlFlow::Break(None);
        }
        ControlFlow::Continue(Line {
            pos: Chess::default(),
            moves: Vec::new(),
            ok: true,
        })
    }

    fn san(&mut self, line: &mut Line, san: SanPlus) -> ControlFlow<Self::Output> {
        if line.moves.len() > MAX_PREFIX {
            return ControlFlow::Continue(());
        }
        match san.san.to_move(&line.pos) {
            Ok(m) => {
                line.pos.play_unchecked(m);
                line.moves.push(m);
                ControlFlow::Continue(())
            }
            Err(_) => {
                line.ok = false;
                ControlFlow::Break(None)
            }
        }
    }

    fn end_game(&mut self, line: Line) -> Self::Output {
        if !line.ok || line.moves.is_empty() {
            return None;
        }
        let mut cap = line.moves.len().min(MAX_PREFIX);
        if line.moves.len() <= MAX_PREFIX && line.pos.legal_moves().is_empty() {
            // The real game ended within the window: never replay its end.
            cap -= 1;
        }
        Some(Opening {
            moves: line.moves,
            cap,
        })
    }
}

/// The openings used without `--openings`: the first 2,500 games of the
/// Lichess dump of June 2022 (`data/lichess_2022-06_head2500.pgn.zst`,
/// built into the binary so that it generates games anywhere).
const BUILTIN: &[u8] = include_bytes!("../../data/lichess_2022-06_head2500.pgn.zst");
const BUILTIN_NAME: &str = "data/lichess_2022-06_head2500.pgn.zst (built in)";

impl Openings {
    /// The openings of a PGN file (`.pgn`, or `.pgn.zst`) of real games.
    pub fn read(path: &Path) -> Result<Openings, GenerateError> {
        let err = |source| GenerateError::Io {
            path: path.to_owned(),
            source,
        };
        let file = io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).map_err(err)?);
        let input: Box<dyn Read> = if path.extension().is_some_and(|e| e == "zst") {
            Box::new(zstd::stream::read::Decoder::with_buffer(file).map_err(err)?)
        } else {
            Box::new(file)
        };
        Openings::from_reader(input, path)
    }

    /// The built-in openings: 2,500 real Lichess games of June 2022.
    pub fn builtin() -> Openings {
        let path = Path::new(BUILTIN_NAME);
        zstd::stream::read::Decoder::new(BUILTIN)
            .map_err(|source| GenerateError::Io {
                path: path.to_owned(),
                source,
            })
            .and_then(|input| Openings::from_reader(Box::new(input), path))
            .expect("the built-in openings read")
    }

    fn from_reader(input: Box<dyn Read + '_>, path: &Path) -> Result<Openings, GenerateError> {
        let err = |source| GenerateError::Io {
            path: path.to_owned(),
            source,
        };
        let mut reader = Reader::new(input);
        let mut loader = Loader::default();
        let mut openings = Vec::new();
        while let Some(game) = reader.read_game(&mut loader).map_err(err)? {
            openings.extend(game);
        }
        if openings.is_empty() {
            return Err(GenerateError::NoOpenings {
                path: path.to_owned(),
            });
        }
        let mut names: Vec<String> = loader.names.into_iter().collect();
        names.sort();
        if names.len() < 2 {
            names = vec!["white_player".into(), "black_player".into()];
        }
        Ok(Openings { openings, names })
    }

    /// How many real games the openings come from.
    pub fn len(&self) -> usize {
        self.openings.len()
    }

    /// Whether there are none (never, once read).
    pub fn is_empty(&self) -> bool {
        self.openings.is_empty()
    }
}

/// How a generated game ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Checkmate,
    Stalemate,
    InsufficientMaterial,
    FiftyMoves,
    /// The drawn length was reached: a resignation or an agreed draw.
    Length,
}

/// Totals of one [`write_games`] call.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenerateSummary {
    pub games: u64,
    pub plies: u64,
    pub bytes: u64,
    pub white_wins: u64,
    pub black_wins: u64,
    pub draws: u64,
    pub checkmates: u64,
    /// Games played again from another random stream because their
    /// movetext had been written already.
    pub replayed: u64,
}

/// A game played: its moves, the same in SAN as the game's text writes
/// them (worked out while playing, so that the text needs no replay), the
/// final position, how it ended, and the random stream that goes on to its
/// tags and clocks.
struct Played {
    moves: Vec<Move>,
    sans: Vec<SanPlus>,
    pos: Chess,
    ending: Ending,
    rng: Rng,
}

/// Plays game `game` of `seed` (another `attempt` gives another game).
fn play(openings: &Openings, seed: u64, game: u64, attempt: u64) -> Played {
    let mut rng = Rng::new(seed, game, attempt);
    let opening = &openings.openings[rng.below(openings.openings.len() as u64) as usize];
    let prefix = (rng.below(MAX_PREFIX as u64 + 1) as usize).min(opening.cap);
    let span = MAX_PLIES - MIN_PLIES;
    let length = (MIN_PLIES + (rng.below(span + 1) + rng.below(span + 1)) / 2) as usize;
    let mut pos = Chess::default();
    let mut moves = Vec::with_capacity(length.max(prefix) + 1);
    let mut sans: Vec<SanPlus> = Vec::with_capacity(length.max(prefix) + 1);
    // SAN of `m` in `pos`; its check suffix is added once the next
    // position is known.
    let san = |pos: &Chess, m: Move| SanPlus {
        san: San::from_move(pos, m),
        suffix: None,
    };
    for &m in &opening.moves[..prefix] {
        sans.push(san(&pos, m));
        pos.play_unchecked(m);
        moves.push(m);
        if moves.len() < prefix && pos.is_check() {
            // Prefixes end before a real game's last move: no checkmate.
            sans.last_mut().expect("just pushed").suffix = Some(Suffix::Check);
        }
    }
    let real_next = opening.moves.get(prefix).copied();
    loop {
        let legal = pos.legal_moves();
        let check = pos.is_check();
        if check && let Some(last) = sans.last_mut() {
            last.suffix = Some(if legal.is_empty() {
                Suffix::Checkmate
            } else {
                Suffix::Check
            });
        }
        let ending = if legal.is_empty() {
            Some(match check {
                true => Ending::Checkmate,
                false => Ending::Stalemate,
            })
        } else if pos.is_insufficient_material() {
            Some(Ending::InsufficientMaterial)
        } else if pos.halfmoves() >= 100 {
            Some(Ending::FiftyMoves)
        } else if moves.len() >= length.max(prefix + 1) {
            Some(Ending::Length)
        } else {
            None
        };
        if let Some(ending) = ending {
            return Played {
                moves,
                sans,
                pos,
                ending,
                rng,
            };
        }
        // The first free move never repeats the real game's next move.
        let avoid = if moves.len() == prefix {
            real_next
        } else {
            None
        };
        let weight = |m: &Move| -> u64 {
            if Some(*m) == avoid {
                0
            } else if m.is_capture() || m.is_promotion() {
                u64::from(CAPTURE_WEIGHT)
            } else {
                1
            }
        };
        let total: u64 = legal.iter().map(weight).sum();
        let m = if total == 0 {
            legal[0] // the real move was the only one
        } else {
            let mut at = rng.below(total);
            let mut chosen = legal[legal.len() - 1];
            for m in &legal {
                let w = weight(m);
                if at < w {
                    chosen = *m;
                    break;
                }
                at -= w;
            }
            chosen
        };
        // SAN's disambiguation from the legal moves already listed (the
        // same as `San::from_move`, which lists the candidates again).
        sans.push(SanPlus {
            san: San::disambiguate(m, &legal),
            suffix: None,
        });
        pos.play_unchecked(m);
        moves.push(m);
    }
}

/// Material in pawns (queen 9, rook 5, bishop and knight 3).
fn material(pos: &Chess, color: Color) -> i32 {
    let board = pos.board();
    let by = board.by_color(color);
    [
        (Role::Pawn, 1),
        (Role::Knight, 3),
        (Role::Bishop, 3),
        (Role::Rook, 5),
        (Role::Queen, 9),
    ]
    .iter()
    .map(|&(role, value)| value * (board.by_role(role) & by).count() as i32)
    .sum()
}

/// An 8-character Lichess-like game id, distinct for every `(seed, game)`
/// of one seed.
fn game_id(seed: u64, game: u64) -> String {
    const ALPHABET: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    // A bijection of the game index (odd multiplier, xor-shift), so ids of
    // one seed never collide below 62^8 games.
    let mut x = (game ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    x ^= x >> 32;
    let mut id = String::with_capacity(8);
    for _ in 0..8 {
        id.push(ALPHABET[(x % 62) as usize] as char);
        x /= 62;
    }
    id
}

/// Writes `games` games of `seed` to `out` as PGN, in order.
pub fn write_games(
    out: &mut dyn Write,
    openings: &Openings,
    seed: u64,
    games: u64,
) -> Result<GenerateSummary, GenerateError> {
    let mut summary = GenerateSummary::default();
    let mut seen: HashSet<u64> = HashSet::with_capacity(games.min(1 << 24) as usize);
    let mut text = String::with_capacity(4096);
    for game in 0..games {
        let mut attempt = 0;
        let mut played = loop {
            let played = play(openings, seed, game, attempt);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            played.moves.hash(&mut h);
            if seen.insert(h.finish()) {
                break played;
            }
            attempt += 1;
            summary.replayed += 1;
        };
        text.clear();
        let result = pgn(&mut text, openings, seed, game, &mut played);
        let (moves, ending) = (&played.moves, played.ending);
        out.write_all(text.as_bytes())
            .map_err(GenerateError::Write)?;
        summary.games += 1;
        summary.plies += moves.len() as u64;
        summary.bytes += text.len() as u64;
        match result {
            "1-0" => summary.white_wins += 1,
            "0-1" => summary.black_wins += 1,
            _ => summary.draws += 1,
        }
        summary.checkmates += u64::from(ending == Ending::Checkmate);
    }
    out.flush().map_err(GenerateError::Write)?;
    Ok(summary)
}

/// One game as a Lichess dump writes it, appended to `text`; returns its
/// result.
fn pgn(
    text: &mut String,
    openings: &Openings,
    seed: u64,
    game: u64,
    played: &mut Played,
) -> &'static str {
    let Played {
        sans,
        pos,
        ending,
        rng,
        ..
    } = played;
    let ending = *ending;
    // The final position decides the result.
    let mover = pos.turn();
    let result = match ending {
        Ending::Checkmate => match mover {
            Color::White => "0-1",
            Color::Black => "1-0",
        },
        Ending::Stalemate | Ending::InsufficientMaterial | Ending::FiftyMoves => "1/2-1/2",
        Ending::Length => {
            let lead = material(pos, Color::White) - material(pos, Color::Black);
            if lead >= 3 {
                "1-0"
            } else if lead <= -3 {
                "0-1"
            } else if rng.below(8) == 0 {
                "1/2-1/2"
            } else if rng.below(2) == 0 {
                "1-0"
            } else {
                "0-1"
            }
        }
    };
    let (base, increment, speed) = TIME_CONTROLS[rng.below(TIME_CONTROLS.len() as u64) as usize];
    let names = &openings.names;
    let white = &names[rng.below(names.len() as u64) as usize];
    let mut black = &names[rng.below(names.len() as u64) as usize];
    if black == white {
        black = &names[(names.iter().position(|n| n == white).unwrap_or(0) + 1) % names.len()];
    }
    let (white_elo, black_elo) = (800 + rng.below(2000), 800 + rng.below(2000));
    let diff = 1 + rng.below(12) as i64;
    let (white_diff, black_diff) = match result {
        "1-0" => (diff, -diff),
        "0-1" => (-diff, diff),
        _ => (0, 0),
    };
    let second = game % 86_400;
    let _ = write!(
        text,
        "[Event \"Rated {speed} game\"]\n\
         [Site \"https://lichess.org/{id}\"]\n\
         [Date \"2022.06.01\"]\n\
         [Round \"-\"]\n\
         [White \"{white}\"]\n\
         [Black \"{black}\"]\n\
         [Result \"{result}\"]\n\
         [UTCDate \"2022.06.01\"]\n\
         [UTCTime \"{:02}:{:02}:{:02}\"]\n\
         [WhiteElo \"{white_elo}\"]\n\
         [BlackElo \"{black_elo}\"]\n\
         [WhiteRatingDiff \"{white_diff:+}\"]\n\
         [BlackRatingDiff \"{black_diff:+}\"]\n\
         [TimeControl \"{base}+{increment}\"]\n\
         [Termination \"Normal\"]\n\n",
        second / 3600,
        second / 60 % 60,
        second % 60,
        id = game_id(seed, game),
    );
    // Clocks: each side spends a random share of what it has left, then
    // gains the increment.
    let mut clocks = [base; 2];
    for (ply, &san) in sans.iter().enumerate() {
        let side = ply % 2;
        let number = ply / 2 + 1;
        // Written digit by digit: `write!` took a tenth of the time.
        push_number(text, number as u32);
        text.push_str(if side == 0 { ". " } else { "... " });
        if ply >= 2 {
            let left = clocks[side];
            let spent = rng.below(u64::from(left / 20 + 2)) as u32;
            clocks[side] = (left.saturating_sub(spent) + increment).max(1);
        }
        let c = clocks[side];
        san.append_to_string(text);
        text.push_str(" { [%clk ");
        push_number(text, c / 3600);
        text.push(':');
        push_two_digits(text, c / 60 % 60);
        text.push(':');
        push_two_digits(text, c % 60);
        text.push_str("] } ");
    }
    text.push_str(result);
    text.push_str("\n\n");
    result
}

/// Appends `n` in decimal.
fn push_number(text: &mut String, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        text.push(char::from(d));
    }
}

/// Appends `n` (below 100) as two digits.
fn push_two_digits(text: &mut String, n: u32) {
    text.push(char::from(b'0' + (n / 10 % 10) as u8));
    text.push(char::from(b'0' + (n % 10) as u8));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_format_writes_them() {
        for n in [0, 7, 10, 59, 60, 99, 100, 3599, 86_399, u32::MAX] {
            let mut text = String::new();
            push_number(&mut text, n);
            assert_eq!(text, n.to_string());
        }
        for n in [0, 5, 10, 59] {
            let mut text = String::new();
            push_two_digits(&mut text, n);
            assert_eq!(text, format!("{n:02}"));
        }
    }

    fn openings() -> Openings {
        let file = Openings::read(&crate::testing::data_file(
            "lichess_2022-06_head2500.pgn.zst",
        ));
        let builtin = Openings::builtin();
        assert_eq!(file.unwrap().len(), builtin.len());
        builtin
    }

    fn generate(openings: &Openings, seed: u64, games: u64) -> (Vec<u8>, GenerateSummary) {
        let mut out = Vec::new();
        let s = write_games(&mut out, openings, seed, games).unwrap();
        (out, s)
    }

    /// The SAN the generator writes from a position's whole legal list is
    /// the SAN `San::from_move` writes from the candidates it lists itself,
    /// for every legal move of every position of 300 games, disambiguated
    /// ones included.
    #[test]
    fn san_from_the_legal_list_is_shakmaty_san() {
        let openings = openings();
        let (mut checked, mut disambiguated) = (0, 0);
        for game in 0..300 {
            let played = play(&openings, 3, game, 0);
            let mut pos = Chess::default();
            for &m in &played.moves {
                let legal = pos.legal_moves();
                for &c in &legal {
                    let san = San::disambiguate(c, &legal);
                    assert_eq!(san, San::from_move(&pos, c), "{c:?} in game {game}");
                    checked += 1;
                    let is_piece = !matches!(c.role(), shakmaty::Role::Pawn);
                    disambiguated += usize::from(
                        is_piece
                            && matches!(
                                san,
                                San::Normal { file: Some(_), .. }
                                    | San::Normal { rank: Some(_), .. }
                            ),
                    );
                }
                pos.play_unchecked(m);
            }
        }
        assert!(checked > 100_000, "{checked} moves");
        assert!(disambiguated > 100, "{disambiguated} disambiguated");
    }

    /// Every game reads back with pgn-reader as a legal game of standard
    /// chess whose last move ends where the result says; the same seed
    /// gives the same bytes, another seed other games; no two movetexts of
    /// a call are the same.
    #[test]
    fn games_are_legal_distinct_and_reproducible() {
        let openings = openings();
        assert!(openings.len() > 2000, "{}", openings.len());
        let (a, summary) = generate(&openings, 1, 2000);
        assert_eq!(generate(&openings, 1, 2000).0, a);
        assert_ne!(
            generate(&openings, 2, 50).0,
            a[..generate(&openings, 2, 50).0.len()]
        );
        assert_eq!(summary.games, 2000);
        assert_eq!(summary.bytes, a.len() as u64);
        let per_game = summary.plies as f64 / 2000.0;
        assert!((50.0..80.0).contains(&per_game), "{per_game} plies a game");
        assert!(summary.checkmates > 0 && summary.draws > 0, "{summary:?}");

        struct Check {
            pos: Chess,
            movetext: String,
            bad: Option<String>,
        }
        struct Collect {
            movetexts: HashSet<String>,
            results: Vec<(String, bool)>,
            clocks: usize,
        }
        impl Visitor for Collect {
            type Tags = Option<String>;
            type Movetext = (Check, Option<String>);
            type Output = Result<(), String>;
            fn begin_tags(&mut self) -> ControlFlow<Self::Output, Self::Tags> {
                ControlFlow::Continue(None)
            }
            fn tag(
                &mut self,
                r: &mut Option<String>,
                name: &[u8],
                value: RawTag<'_>,
            ) -> ControlFlow<Self::Output> {
                if name == b"Result" {
                    *r = Some(value.decode_utf8_lossy().into_owned());
                }
                ControlFlow::Continue(())
            }
            fn begin_movetext(
                &mut self,
                r: Option<String>,
            ) -> ControlFlow<Self::Output, Self::Movetext> {
                ControlFlow::Continue((
                    Check {
                        pos: Chess::default(),
                        movetext: String::new(),
                        bad: None,
                    },
                    r,
                ))
            }
            fn san(
                &mut self,
                (c, _): &mut Self::Movetext,
                san: SanPlus,
            ) -> ControlFlow<Self::Output> {
                match san.san.to_move(&c.pos) {
                    Ok(m) => {
                        c.pos.play_unchecked(m);
                        c.movetext.push_str(&san.to_string());
                        c.movetext.push(' ');
                    }
                    Err(e) => c.bad = Some(format!("{san}: {e}")),
                }
                ControlFlow::Continue(())
            }
            fn comment(
                &mut self,
                _: &mut Self::Movetext,
                comment: pgn_reader::RawComment<'_>,
            ) -> ControlFlow<Self::Output> {
                self.clocks += usize::from(comment.as_bytes().starts_with(b" [%clk "));
                ControlFlow::Continue(())
            }
            fn end_game(&mut self, (c, result): Self::Movetext) -> Self::Output {
                if let Some(bad) = c.bad {
                    return Err(bad);
                }
                let result = result.ok_or("no Result tag")?;
                let mated = c.pos.is_checkmate();
                if mated
                    && result
                        != if c.pos.turn() == Color::White {
                            "0-1"
                        } else {
                            "1-0"
                        }
                {
                    return Err(format!("checkmate scored {result}"));
                }
                if !self.movetexts.insert(c.movetext) {
                    return Err("a movetext repeats".into());
                }
                self.results.push((result, mated));
                Ok(())
            }
        }
        let mut collect = Collect {
            movetexts: HashSet::new(),
            results: Vec::new(),
            clocks: 0,
        };
        let mut reader = Reader::new(&a[..]);
        while let Some(game) = reader.read_game(&mut collect).unwrap() {
            game.unwrap();
        }
        assert_eq!(collect.results.len(), 2000);
        assert_eq!(
            collect.clocks as u64, summary.plies,
            "a clock after every move"
        );
        assert_eq!(
            collect.results.iter().filter(|(_, mated)| *mated).count() as u64,
            summary.checkmates
        );
    }

    #[test]
    fn game_ids_are_distinct() {
        let ids: HashSet<String> = (0..100_000).map(|g| game_id(3, g)).collect();
        assert_eq!(ids.len(), 100_000);
    }

    #[test]
    fn a_file_without_games_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.pgn");
        std::fs::write(&path, "").unwrap();
        let err = Openings::read(&path).err().unwrap().to_string();
        assert!(
            err.contains("empty.pgn") && err.contains("no standard game"),
            "{err}"
        );
        assert!(Openings::read(&dir.path().join("missing.pgn")).is_err());
    }
}
