//! Worker: parses a block's games with pgn-reader, checks them, plays the
//! accepted ones and emits the key of every board (or, when games must be
//! selected globally first, their moves).

use std::{cell::Cell, io};

use pgn_reader::{Outcome, Reader};
use shakmaty::{CastlingMode, Chess, Move, Position, Role, Square, uci::UciMove};
use xxhash_rust::xxh3::xxh3_64;

use super::{
    chunker::{Block, BlockKind, count_newlines, game_starts, next_game_start},
    config::{GameFilter, Limits, Speed},
    dedup::Keys,
    visitor::{
        GameVisitor, Parsed, RejectReason, Tag, Tags, lichess_id, parse_clock, parse_date,
        parse_elo, parse_time, speed_of,
    },
};
use crate::chess::{BoardKey, san};

/// What workers emit for accepted games.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    /// The key of every board (plies + 1 per game).
    Keys,
    /// The moves, encoded with [`encode_move`], for replay after selection.
    Moves,
}

/// Per-ingest settings the workers share.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub filter: GameFilter,
    pub limits: Limits,
    /// Split index of each input.
    pub input_splits: Vec<u8>,
    /// `--test-fraction` and the test split's index.
    pub test: Option<(f64, u8)>,
    pub emit: Emit,
}

/// The columns of an accepted game (see `schemas/v1/games.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GameMeta {
    pub id: Option<Box<str>>,
    pub event: Option<Box<str>>,
    pub white_elo: Option<u16>,
    pub black_elo: Option<u16>,
    pub time_control: Option<Box<str>>,
    pub clock: Option<(u32, u32)>,
    pub speed: Option<Speed>,
    pub result: Option<Box<str>>,
    pub termination: Option<Box<str>>,
    pub utc_date: Option<i32>,
    pub utc_time: Option<i32>,
    pub eco: Option<Box<str>>,
    pub opening: Option<Box<str>>,
    pub plies: u32,
}

fn boxed(tags: &Tags, tag: Tag) -> Option<Box<str>> {
    tags.get(tag).map(Box::from)
}

impl GameMeta {
    fn from_tags(tags: &Tags, outcome: Option<Outcome>, plies: u32) -> GameMeta {
        let time_control = tags.get(Tag::TimeControl);
        GameMeta {
            id: tags.get(Tag::Site).and_then(lichess_id).map(Box::from),
            event: boxed(tags, Tag::Event),
            white_elo: parse_elo(tags.get(Tag::WhiteElo)),
            black_elo: parse_elo(tags.get(Tag::BlackElo)),
            time_control: time_control.map(Box::from),
            clock: parse_clock(time_control),
            speed: speed_of(time_control),
            result: boxed(tags, Tag::Result)
                .or_else(|| outcome.map(|o| o.to_string().into_boxed_str())),
            termination: boxed(tags, Tag::Termination),
            utc_date: parse_date(tags.known(Tag::UtcDate).or(tags.known(Tag::Date))),
            utc_time: parse_time(tags.known(Tag::UtcTime)),
            eco: tags.known(Tag::Eco).map(Box::from),
            opening: tags.known(Tag::Opening).map(Box::from),
            plies,
        }
    }
}

/// What became of a game.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Accepted {
        meta: Box<GameMeta>,
        split: u8,
        /// Keys (plies + 1) or moves (plies) this game added to the block.
        emitted: u32,
    },
    Rejected {
        reason: RejectReason,
        detail: Option<String>,
        ply: Option<u32>,
        id: Option<Box<str>>,
    },
}

/// One game of a block.
#[derive(Debug, Clone, PartialEq)]
pub struct GameRecord {
    /// Offset of the game's first byte within the block.
    pub offset: u64,
    /// Newlines in the block before the game.
    pub line: u64,
    pub verdict: Verdict,
}

/// A processed block.
#[derive(Debug, Default)]
pub struct BlockResult {
    pub seq: u64,
    pub input: usize,
    pub games: Vec<GameRecord>,
    /// Board keys of accepted games, concatenated in game order.
    pub keys: Keys,
    /// Encoded moves of accepted games (with [`Emit::Moves`]).
    pub moves: Vec<u16>,
    /// Bytes of input the block covers and newlines in them.
    pub span: u64,
    pub newlines: u64,
    pub last: bool,
    pub error: Option<String>,
}

/// Encodes a move as from (6 bits) | to (6 bits) | promotion role (3 bits),
/// castling as the king's two-square move.
pub(crate) fn encode_move(m: &Move) -> u16 {
    match m.to_uci(CastlingMode::Standard) {
        UciMove::Normal {
            from,
            to,
            promotion,
        } => u16::from(from) | (u16::from(to) << 6) | ((promotion.map_or(0, |r| r as u16)) << 12),
        // Standard chess has neither drops nor null moves.
        UciMove::Put { .. } | UciMove::Null => 0,
    }
}

/// Inverse of [`encode_move`].
pub(crate) fn decode_move(code: u16) -> UciMove {
    let promotion = match code >> 12 {
        2 => Some(Role::Knight),
        3 => Some(Role::Bishop),
        4 => Some(Role::Rook),
        5 => Some(Role::Queen),
        _ => None,
    };
    UciMove::Normal {
        from: Square::new(u32::from(code & 63)),
        to: Square::new(u32::from((code >> 6) & 63)),
        promotion,
    }
}

/// `Read` over a block from a position the worker can move (restarts), which
/// also tells how far pgn-reader has read.
struct Window<'a> {
    data: &'a [u8],
    pos: &'a Cell<usize>,
    end: usize,
}

impl io::Read for Window<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (pos, end) = (self.pos.get(), self.end);
        let n = buf.len().min(end.saturating_sub(pos));
        buf[..n].copy_from_slice(&self.data[pos..pos + n]);
        self.pos.set(pos + n);
        Ok(n)
    }
}

fn new_reader(window: Window<'_>) -> Reader<Window<'_>> {
    // Tag lines up to 1 KiB (long Opening names, annotator blurbs); longer
    // buffers make pgn-reader shift its buffer more often. Comments of any
    // length arrive in pieces.
    Reader::build(window)
        .set_supported_tag_line_length(1024)
        .finish()
}

fn skip_whitespace(data: &[u8], mut i: usize, end: usize) -> usize {
    if data[i..end].starts_with(b"\xef\xbb\xbf") {
        i += 3;
    }
    while i < end && data[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Where the next game starts after position `from` of a game that was left
/// early: the next blank-line start, or in PGN without blank lines the next
/// `[` line after a movetext line (the end of the block if none).
fn resume_after(data: &[u8], from: usize, bound: usize, tight: bool) -> usize {
    if tight {
        next_game_start(data, from, data.len()).unwrap_or(data.len())
    } else {
        bound
    }
}

/// Where to find the Site tag of an unparsed game (oversized games).
fn site_id(head: &[u8]) -> Option<Box<str>> {
    let text = String::from_utf8_lossy(head);
    let start = text.find("[Site \"")? + 7;
    let end = text[start..].find('"')? + start;
    lichess_id(&text[start..end]).map(Box::from)
}

fn identity_hash(tags: &Tags) -> u64 {
    let site = tags.get(Tag::Site);
    if let Some(id) = site.and_then(lichess_id) {
        return xxh3_64(id.as_bytes());
    }
    let mut s = String::with_capacity(128);
    for tag in [
        Tag::Event,
        Tag::Site,
        Tag::Date,
        Tag::Round,
        Tag::White,
        Tag::Black,
    ] {
        s.push_str(tags.get(tag).unwrap_or(""));
        s.push('\u{1f}');
    }
    xxh3_64(s.as_bytes())
}

/// Whether a game goes to the test split: a stable hash of its Lichess id
/// (or, elsewhere, of Event/Site/Date/Round/White/Black) below the fraction.
pub(crate) fn in_test_fraction(tags: &Tags, fraction: f64) -> bool {
    let u = (identity_hash(tags) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    u < fraction
}

fn move_label(ply: usize, san: &shakmaty::san::San) -> String {
    let number = ply / 2 + 1;
    if ply.is_multiple_of(2) {
        format!("{number}. {san}")
    } else {
        format!("{number}... {san}")
    }
}

/// Processes one block. `visitor` is the worker's reused visitor; `keys`
/// a recycled buffer for the block's board keys (cleared here).
pub fn process_block(
    block: &Block,
    settings: &WorkerSettings,
    visitor: &mut GameVisitor,
    mut keys: Keys,
) -> BlockResult {
    keys.clear();
    let mut out = BlockResult {
        seq: block.seq,
        input: block.input,
        span: block.span(),
        last: block.last,
        error: block.error.clone(),
        keys,
        ..BlockResult::default()
    };
    if let BlockKind::Oversized { skipped } = block.kind {
        out.newlines = block.newlines;
        out.games.push(GameRecord {
            offset: 0,
            line: 0,
            verdict: Verdict::Rejected {
                reason: RejectReason::GameTooLarge,
                detail: Some(format!(
                    "{skipped} bytes exceed --max-game-bytes {}",
                    settings.limits.max_game_bytes
                )),
                ply: None,
                id: site_id(&block.data),
            },
        });
        return out;
    }

    let data = &block.data[..];
    // About one board per 24 bytes of Lichess PGN (with clock comments).
    if settings.emit == Emit::Keys {
        out.keys.reserve(data.len() / 24);
    }
    // Game starts by the blank-line rule. The reader runs over the whole
    // block (refilling its buffer once per 16 KiB, like a stream); the starts
    // bound each game for --max-game-bytes and are where the reader restarts
    // after a game it left early. Without any (PGN without blank lines
    // between games) the after-movetext rule finds restart points.
    let starts: Vec<usize> = game_starts(data).collect();
    let tight = starts.is_empty();
    let max_game = settings.limits.max_game_bytes;
    let next_start = |after: usize| -> usize {
        starts
            .get(starts.partition_point(|&s| s <= after))
            .copied()
            .unwrap_or(data.len())
    };

    let pos = Cell::new(0);
    let window = || Window {
        data,
        pos: &pos,
        end: data.len(),
    };
    let mut reader = new_reader(window());
    let mut newline_cursor = 0usize;
    let mut newlines_before = 0u64;
    loop {
        let consumed = pos.get() - reader.buffer().len();
        let start = skip_whitespace(data, consumed, data.len());
        if start >= data.len() {
            break;
        }
        newlines_before += count_newlines(&data[newline_cursor..start]);
        newline_cursor = start;
        let (offset, line) = (start as u64, newlines_before);
        let bound = next_start(start);
        // Where to restart with a fresh reader, when the current one cannot
        // go on (it left a game early, or failed).
        let restart: Option<usize>;
        let verdict = if !tight && bound - start > max_game {
            // One game longer than --max-game-bytes: reject it unparsed.
            restart = Some(bound);
            Verdict::Rejected {
                reason: RejectReason::GameTooLarge,
                detail: Some(format!(
                    "{} bytes exceed --max-game-bytes {max_game}",
                    bound - start
                )),
                ply: None,
                id: site_id(&data[start..bound.min(start + 4096)]),
            }
        } else {
            match reader.read_game(visitor) {
                Ok(None) => break,
                Ok(Some(parsed)) => {
                    let game_end = pos.get() - reader.buffer().len();
                    let stopped = parsed != Parsed::Complete;
                    let verdict = judge(
                        parsed,
                        &data[start..game_end.max(start)],
                        visitor,
                        block.input,
                        settings,
                        &mut out,
                    );
                    // pgn-reader would skip the rest of a game it left early
                    // on its next call; restart at the next game instead.
                    restart = stopped.then(|| resume_after(data, game_end, bound, tight));
                    verdict
                }
                Err(e) => {
                    let here = (pos.get() - reader.buffer().len()).max(start);
                    restart = Some(resume_after(data, here, bound, tight));
                    Verdict::Rejected {
                        reason: RejectReason::ParseError,
                        detail: Some(e.to_string()),
                        ply: None,
                        id: visitor
                            .tags
                            .get(Tag::Site)
                            .and_then(lichess_id)
                            .map(Box::from),
                    }
                }
            }
        };
        out.games.push(GameRecord {
            offset,
            line,
            verdict,
        });
        if let Some(at) = restart {
            if at >= data.len() {
                break;
            }
            pos.set(at);
            reader = new_reader(window());
        }
    }
    out.newlines = newlines_before + count_newlines(&data[newline_cursor..]);

    if block.last
        && let Some(last) = out.games.last_mut()
        && let Verdict::Rejected { reason, detail, .. } = &mut last.verdict
        && matches!(
            reason,
            RejectReason::MissingResult | RejectReason::ParseError
        )
    {
        let why = match (&block.error, detail.as_deref()) {
            (Some(e), _) => format!("the input ends inside this game: read error: {e}"),
            (None, Some(parser)) if *reason == RejectReason::ParseError => {
                format!("the input ends inside this game ({parser})")
            }
            _ => "the input ends inside this game".to_owned(),
        };
        *reason = RejectReason::Truncated;
        *detail = Some(why);
    }
    out
}

fn rejected(reason: RejectReason, detail: Option<String>, tags: &Tags) -> Verdict {
    Verdict::Rejected {
        reason,
        detail,
        ply: None,
        id: tags.get(Tag::Site).and_then(lichess_id).map(Box::from),
    }
}

/// Decides a parsed game's fate and emits its boards or moves.
fn judge(
    parsed: Parsed,
    raw: &[u8],
    visitor: &GameVisitor,
    input: usize,
    settings: &WorkerSettings,
    out: &mut BlockResult,
) -> Verdict {
    let tags = &visitor.tags;
    if let Err(e) = std::str::from_utf8(raw) {
        let at = e.valid_up_to();
        let line = count_newlines(&raw[..at]) + 1;
        return rejected(
            RejectReason::InvalidUtf8,
            Some(format!(
                "byte 0x{:02x} at byte {at} (line {line}) of the game is not UTF-8",
                raw[at]
            )),
            tags,
        );
    }
    if let Parsed::Rejected(reason, detail) = parsed {
        return rejected(reason, detail, tags);
    }
    if visitor.outcome.is_none() {
        return rejected(
            RejectReason::MissingResult,
            Some("no game termination marker (1-0, 0-1, 1/2-1/2 or *)".into()),
            tags,
        );
    }
    if visitor.sans.is_empty() {
        return rejected(RejectReason::NoMoves, None, tags);
    }

    let split = match settings.test {
        Some((fraction, test_split)) if in_test_fraction(tags, fraction) => test_split,
        _ => settings.input_splits[input],
    };
    let (keys_start, moves_start) = (out.keys.len(), out.moves.len());
    let mut pos = Chess::default();
    if settings.emit == Emit::Keys {
        out.keys.push(key_of(&pos));
    }
    for (ply, san) in visitor.sans.iter().enumerate() {
        match san::to_move(*san, &pos) {
            Ok(m) => {
                if settings.emit == Emit::Moves {
                    out.moves.push(encode_move(&m));
                }
                pos.play_unchecked(m);
                if settings.emit == Emit::Keys {
                    out.keys.push(key_of(&pos));
                }
            }
            Err(e) => {
                out.keys.truncate(keys_start);
                out.moves.truncate(moves_start);
                let fen = shakmaty::fen::Fen::from_position(&pos, shakmaty::EnPassantMode::Legal);
                return Verdict::Rejected {
                    reason: RejectReason::IllegalMove,
                    detail: Some(format!("{}: {e} in {fen}", move_label(ply, san))),
                    ply: Some(ply as u32),
                    id: tags.get(Tag::Site).and_then(lichess_id).map(Box::from),
                };
            }
        }
    }
    let plies = visitor.sans.len() as u32;
    let emitted = match settings.emit {
        Emit::Keys => out.keys.len() - keys_start,
        Emit::Moves => out.moves.len() - moves_start,
    } as u32;
    Verdict::Accepted {
        meta: Box::new(GameMeta::from_tags(tags, visitor.outcome, plies)),
        split,
        emitted,
    }
}

#[inline]
fn key_of(pos: &Chess) -> BoardKey {
    // The halfmove clock cannot overflow: games stop at MAX_PLIES.
    BoardKey::from_position(pos).unwrap_or_default()
}

/// Replays encoded moves from the start position, pushing every board key.
/// Fails only if the moves are not a legal game (a corrupt spool).
pub(crate) fn replay(moves: &[u16], keys: &mut Keys) -> Result<(), String> {
    let mut pos = Chess::default();
    keys.push(key_of(&pos));
    for (ply, &code) in moves.iter().enumerate() {
        let m = decode_move(code)
            .to_move(&pos)
            .map_err(|e| format!("ply {ply}: {e}"))?;
        pos.play_unchecked(m);
        keys.push(key_of(&pos));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::config::Limits;

    fn settings(emit: Emit) -> WorkerSettings {
        WorkerSettings {
            filter: GameFilter::default(),
            limits: Limits::default(),
            input_splits: vec![0],
            test: None,
            emit,
        }
    }

    fn block(pgn: &[u8], last: bool, error: Option<&str>) -> Block {
        Block {
            seq: 0,
            input: 0,
            data: pgn.to_vec(),
            kind: BlockKind::Games,
            newlines: 0,
            last,
            error: error.map(str::to_owned),
        }
    }

    fn run_with(s: &WorkerSettings, pgn: &[u8], last: bool, error: Option<&str>) -> BlockResult {
        let mut v = GameVisitor::new(s.filter.clone(), s.limits);
        process_block(&block(pgn, last, error), s, &mut v, Keys::default())
    }

    fn run(pgn: &[u8], last: bool, error: Option<&str>) -> BlockResult {
        run_with(&settings(Emit::Keys), pgn, last, error)
    }

    fn reasons(r: &BlockResult) -> Vec<&'static str> {
        r.games
            .iter()
            .map(|g| match &g.verdict {
                Verdict::Accepted { .. } => "accepted",
                Verdict::Rejected { reason, .. } => reason.name(),
            })
            .collect()
    }

    #[test]
    fn accepts_and_rejects_with_positions() {
        let pgn =
            b"[Event \"a\"]\n[Site \"https://lichess.org/abcdefgh\"]\n\n1. e4 e5 2. Nf3 1-0\n\n\
[Event \"b\"]\n[Variant \"Atomic\"]\n\n1. e4 *\n\n\
[Event \"c\"]\n\n1. e4 e5 2. Ke3 *\n\n\
[Event \"d\"]\n\n0-1\n\n\
[Event \"e\"]\n[SetUp \"1\"]\n[FEN \"8/8/8/8/8/8/8/K6k w - - 0 1\"]\n\n1. Kb1 *\n\n\
[Event \"f\"]\n\n1. e4 e5\n\n\
[Event \"g\"]\n\n1. d4";
        let r = run(pgn, true, None);
        assert_eq!(
            reasons(&r),
            [
                "accepted",
                "variant",
                "illegal_move",
                "no_moves",
                "non_standard_start",
                "missing_result",
                "truncated"
            ]
        );
        assert_eq!(r.keys.len(), 4);
        assert_eq!(r.games[1].line, 5);
        assert_eq!(&pgn[r.games[2].offset as usize..][..12], b"[Event \"c\"]\n");
        let Verdict::Rejected { ply, detail, .. } = &r.games[2].verdict else {
            panic!()
        };
        assert_eq!(*ply, Some(2));
        assert!(
            detail
                .as_deref()
                .unwrap()
                .starts_with("2. Ke3: illegal san"),
            "{detail:?}"
        );
        assert_eq!(r.newlines, count_newlines(pgn));
        let Verdict::Accepted { meta, .. } = &r.games[0].verdict else {
            panic!()
        };
        assert_eq!(meta.id.as_deref(), Some("abcdefgh"));
        assert_eq!(meta.plies, 3);
    }

    #[test]
    fn non_utf8_and_long_comments_are_rejected() {
        let mut pgn = b"[Event \"caf\xe9\"]\n\n1. e4 *\n\n".to_vec();
        pgn.extend_from_slice(b"[Event \"x\"]\n\n1. e4 { ");
        pgn.extend(std::iter::repeat_n(b'z', (1 << 20) + 10));
        pgn.extend_from_slice(b" } e5 *\n\n[Event \"ok\"]\n\n1. d4 d5 *\n");
        let r = run(&pgn, true, None);
        assert_eq!(
            reasons(&r),
            ["invalid_utf8", "comment_too_long", "accepted"]
        );
    }

    #[test]
    fn read_error_marks_the_cut_game_truncated() {
        let r = run(
            b"[Event \"a\"]\n\n1. e4 e5 *\n\n[Event \"b\"]\n\n1. e4 e",
            true,
            Some("incomplete frame"),
        );
        assert_eq!(reasons(&r), ["accepted", "truncated"]);
        let Verdict::Rejected { detail, .. } = &r.games[1].verdict else {
            panic!()
        };
        assert!(detail.as_deref().unwrap().contains("incomplete frame"));
    }

    #[test]
    fn unterminated_comment_resynchronises_at_the_next_game() {
        let r = run(
            b"[Event \"a\"]\n\n1. e4 { never closed e5 *\n\n[Event \"c\"]\n\n1. d4 *\n",
            false,
            None,
        );
        assert_eq!(reasons(&r), ["parse_error", "accepted"]);
        let Verdict::Rejected { detail, .. } = &r.games[0].verdict else {
            panic!()
        };
        assert_eq!(detail.as_deref(), Some("unterminated comment"));
    }

    /// Review finding: a parse error in PGN without blank lines between
    /// games must not drop the games after it.
    #[test]
    fn parse_error_in_tight_pgn_keeps_the_following_games() {
        let mut pgn = b"[Event \"a\"]\n1. e4 e5 *\n[Event \"b\"]\n[Annotator \"".to_vec();
        pgn.extend(std::iter::repeat_n(b'z', 20_000));
        pgn.extend_from_slice(b"\"]\n1. d4 *\n[Event \"c\"]\n1. c4 *\n[Event \"d\"]\n1. Nf3 *\n");
        let r = run(&pgn, false, None);
        let reasons = reasons(&r);
        assert_eq!(reasons.first(), Some(&"accepted"));
        assert!(reasons.contains(&"parse_error"), "{reasons:?}");
        assert_eq!(
            reasons.iter().filter(|r| **r == "accepted").count(),
            3,
            "{reasons:?}"
        );
        assert!(pgn[r.games.last().unwrap().offset as usize..].starts_with(b"[Event \"d\"]"));
    }

    /// Review finding: a game rejected at its header must not eat the first
    /// tag of the next game (pgn-reader defers skipping its movetext).
    #[test]
    fn header_rejection_does_not_touch_the_next_game() {
        let s = WorkerSettings {
            filter: GameFilter {
                rated_only: true,
                ..GameFilter::default()
            },
            ..settings(Emit::Keys)
        };
        let next = b"[Event \"Casual Blitz game\"]\n[WhiteElo \"1500\"]\n[BlackElo \"1500\"]\n\n1. e4 *\n\n";
        let mut pgn = b"[Event \"x\"]\n[Variant \"Atomic\"]\n\n1. e4 e5 *\n\n".to_vec();
        pgn.extend_from_slice(next);
        let r = run_with(&s, &pgn, true, None);
        assert_eq!(reasons(&r), ["variant", "filtered_unrated"]);
        let Verdict::Rejected { detail, .. } = &r.games[1].verdict else {
            panic!()
        };
        assert_eq!(detail.as_deref(), Some("Casual Blitz game"));
        // Without any movetext, the blank line does not end the tag section
        // (pgn-reader and python-chess read on): one game, with both tags.
        let mut merged = b"[Event \"x\"]\n[Variant \"Atomic\"]\n\n".to_vec();
        merged.extend_from_slice(next);
        let r = run_with(&s, &merged, true, None);
        assert_eq!(reasons(&r), ["variant"]);
    }

    /// Review finding: --max-game-bytes holds whatever the block size.
    #[test]
    fn games_over_the_limit_are_rejected_in_any_block() {
        let mut pgn = b"[Event \"big\"]\n\n1. e4 { ".to_vec();
        pgn.extend(std::iter::repeat_n(b'z', 9000));
        pgn.extend_from_slice(b" } e5 *\n\n[Event \"small\"]\n\n1. d4 *\n");
        let s = WorkerSettings {
            limits: Limits {
                max_game_bytes: 4096,
                ..Limits::default()
            },
            ..settings(Emit::Keys)
        };
        let r = run_with(&s, &pgn, true, None);
        assert_eq!(reasons(&r), ["game_too_large", "accepted"]);
    }

    #[test]
    fn moves_round_trip_through_the_encoding() {
        let pos: Chess = "r3k2r/1P6/8/8/8/8/8/R3K2R w KQkq - 0 1"
            .parse::<shakmaty::fen::Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        for m in pos.legal_moves() {
            let back = decode_move(encode_move(&m)).to_move(&pos).unwrap();
            assert_eq!(back, m);
        }
    }
}
