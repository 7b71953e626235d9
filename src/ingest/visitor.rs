//! The pgn-reader visitor: collects the tags chessbench keeps and the
//! mainline SANs into reused buffers, and stops early (cheaply skipping the
//! movetext) for games that will be rejected anyway.

use std::ops::ControlFlow;

use pgn_reader::{Outcome, RawComment, RawTag, SanPlus, Skip, Visitor};
use shakmaty::san::San;

use super::config::{GameFilter, Limits, Speed};

/// Most plies a game may have (keeps the ply in 16 bits of the board's
/// first-occurrence key; real games stay below 1,000).
pub(crate) const MAX_PLIES: usize = 65_000;

/// Why a game was not accepted (`rejects.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// pgn-reader could not parse the game (unterminated tag or comment).
    ParseError,
    /// The game's bytes are not valid UTF-8.
    InvalidUtf8,
    /// Longer than `--max-game-bytes`; skipped unparsed.
    GameTooLarge,
    /// A comment longer than `--max-comment-bytes`.
    CommentTooLong,
    /// More than [`MAX_PLIES`] moves.
    TooManyPlies,
    /// A Variant tag other than Standard.
    Variant,
    /// SetUp/FEN tags for a position other than the standard start.
    NonStandardStart,
    /// `--rated-only` and the game is casual or unrated.
    FilteredUnrated,
    /// Speed class not selected by `--speed`.
    FilteredSpeed,
    /// An Elo outside `--min-elo`/`--max-elo` (or unknown while one is set).
    FilteredElo,
    /// No game termination marker (`1-0`, `0-1`, `1/2-1/2`, `*`).
    MissingResult,
    /// The input ended inside the game (cut-off file, truncated .zst).
    Truncated,
    /// A game without a single move.
    NoMoves,
    /// A SAN that is illegal or ambiguous in its position.
    IllegalMove,
}

impl RejectReason {
    /// Every reason.
    #[cfg(test)]
    pub(crate) const ALL: [RejectReason; 14] = [
        RejectReason::ParseError,
        RejectReason::InvalidUtf8,
        RejectReason::GameTooLarge,
        RejectReason::CommentTooLong,
        RejectReason::TooManyPlies,
        RejectReason::Variant,
        RejectReason::NonStandardStart,
        RejectReason::FilteredUnrated,
        RejectReason::FilteredSpeed,
        RejectReason::FilteredElo,
        RejectReason::MissingResult,
        RejectReason::Truncated,
        RejectReason::NoMoves,
        RejectReason::IllegalMove,
    ];

    /// The name stored in `rejects.reason`.
    pub fn name(self) -> &'static str {
        match self {
            RejectReason::ParseError => "parse_error",
            RejectReason::InvalidUtf8 => "invalid_utf8",
            RejectReason::GameTooLarge => "game_too_large",
            RejectReason::CommentTooLong => "comment_too_long",
            RejectReason::TooManyPlies => "too_many_plies",
            RejectReason::Variant => "variant",
            RejectReason::NonStandardStart => "non_standard_start",
            RejectReason::FilteredUnrated => "filtered_unrated",
            RejectReason::FilteredSpeed => "filtered_speed",
            RejectReason::FilteredElo => "filtered_elo",
            RejectReason::MissingResult => "missing_result",
            RejectReason::Truncated => "truncated",
            RejectReason::NoMoves => "no_moves",
            RejectReason::IllegalMove => "illegal_move",
        }
    }
}

/// Tags chessbench reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Tag {
    Event,
    Site,
    Date,
    Round,
    White,
    Black,
    Result,
    UtcDate,
    UtcTime,
    WhiteElo,
    BlackElo,
    TimeControl,
    Termination,
    Eco,
    Opening,
    Variant,
    SetUp,
    Fen,
}

const NUM_TAGS: usize = 18;

fn tag_of(name: &[u8]) -> Option<Tag> {
    // Dispatch on length and first byte before comparing: tag lines are
    // ~17 per game, most of them (Round, WhiteRatingDiff, ...) unwanted.
    let tag = match (name.len(), name.first()?) {
        (5, b'E') => Tag::Event,
        (4, b'S') => Tag::Site,
        (4, b'D') => Tag::Date,
        (5, b'R') => Tag::Round,
        (5, b'W') => Tag::White,
        (5, b'B') => Tag::Black,
        (6, b'R') => Tag::Result,
        (7, b'U') => Tag::UtcDate,
        (8, b'W') => Tag::WhiteElo,
        (8, b'B') => Tag::BlackElo,
        (11, b'T') => Tag::TimeControl,
        (3, b'E') => Tag::Eco,
        (7, b'O') => Tag::Opening,
        (7, b'V') => Tag::Variant,
        (5, b'S') => Tag::SetUp,
        (3, b'F') => Tag::Fen,
        _ => return None,
    };
    let want: &[u8] = match tag {
        Tag::Event => b"Event",
        Tag::Site => b"Site",
        Tag::Date => b"Date",
        Tag::Round => b"Round",
        Tag::White => b"White",
        Tag::Black => b"Black",
        Tag::Result => b"Result",
        Tag::UtcDate => b"UTCDate",
        Tag::UtcTime => b"UTCTime",
        Tag::WhiteElo => b"WhiteElo",
        Tag::BlackElo => b"BlackElo",
        Tag::TimeControl => b"TimeControl",
        Tag::Termination => b"Termination",
        Tag::Eco => b"ECO",
        Tag::Opening => b"Opening",
        Tag::Variant => b"Variant",
        Tag::SetUp => b"SetUp",
        Tag::Fen => b"FEN",
    };
    if name == want {
        return Some(tag);
    }
    // Same length and initial as a wanted tag but another name (UTCTime vs
    // UTCDate, Termination vs TimeControl, ...): compare against the rest.
    [
        (b"UTCTime".as_slice(), Tag::UtcTime),
        (b"Termination".as_slice(), Tag::Termination),
    ]
    .into_iter()
    .find(|(n, _)| *n == name)
    .map(|(_, t)| t)
}

/// The tag values of the current game (buffers reused across games).
#[derive(Debug, Default)]
pub struct Tags {
    values: [String; NUM_TAGS],
    present: u32,
}

impl Tags {
    fn clear(&mut self) {
        for (i, v) in self.values.iter_mut().enumerate() {
            if self.present & (1 << i) != 0 {
                v.clear();
            }
        }
        self.present = 0;
    }

    fn set(&mut self, tag: Tag, value: &[u8]) {
        let slot = &mut self.values[tag as usize];
        slot.clear();
        match std::str::from_utf8(value) {
            Ok(text) => slot.push_str(text),
            // Invalid UTF-8 is caught on the game's raw bytes; keep a lossy copy.
            Err(_) => slot.push_str(&String::from_utf8_lossy(value)),
        }
        self.present |= 1 << tag as usize;
    }

    /// The value of a tag, if present.
    pub(crate) fn get(&self, tag: Tag) -> Option<&str> {
        (self.present & (1 << tag as usize) != 0).then(|| self.values[tag as usize].as_str())
    }

    /// The value unless absent or a PGN "unknown" placeholder (`?`, `-`, empty).
    pub(crate) fn known(&self, tag: Tag) -> Option<&str> {
        self.get(tag)
            .filter(|v| !v.is_empty() && *v != "?" && *v != "-" && *v != "*")
    }
}

/// The Lichess game id in a Site tag (`https://lichess.org/abcdEFGH`).
pub(crate) fn lichess_id(site: &str) -> Option<&str> {
    let rest = site
        .strip_prefix("https://lichess.org/")
        .or_else(|| site.strip_prefix("http://lichess.org/"))?;
    let id = rest.split(['/', '?', '#']).next()?;
    (id.len() >= 8 && id.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(id)
}

/// A numeric Elo tag.
pub(crate) fn parse_elo(value: Option<&str>) -> Option<u16> {
    value.and_then(|v| v.trim().parse().ok())
}

/// TimeControl `base+increment` (seconds) or `base`; None for `-`, `?`,
/// multi-stage controls and garbage.
pub(crate) fn parse_clock(value: Option<&str>) -> Option<(u32, u32)> {
    let v = value?.trim();
    let (base, inc) = v.split_once('+').unwrap_or((v, "0"));
    Some((base.parse().ok()?, inc.parse().ok()?))
}

/// The speed class of a TimeControl tag: a clock, `-` (correspondence /
/// unlimited), or None when absent or unparsable.
pub(crate) fn speed_of(time_control: Option<&str>) -> Option<Speed> {
    match time_control.map(str::trim) {
        Some("-") => Some(Speed::Correspondence),
        tc => parse_clock(tc).map(|(b, i)| Speed::from_clock(b, i)),
    }
}

/// Days since 1970-01-01 of a `YYYY.MM.DD` tag with every part known.
pub(crate) fn parse_date(value: Option<&str>) -> Option<i32> {
    let mut parts = value?.trim().splitn(3, '.');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(1000..=9999).contains(&y) {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    i32::try_from(era * 146_097 + doe - 719_468).ok()
}

/// Seconds since midnight of an `HH:MM:SS` tag.
pub(crate) fn parse_time(value: Option<&str>) -> Option<i32> {
    let mut parts = value?.trim().splitn(3, ':');
    let h: i32 = parts.next()?.parse().ok()?;
    let m: i32 = parts.next()?.parse().ok()?;
    let s: i32 = parts.next()?.parse().ok()?;
    ((0..24).contains(&h) && (0..60).contains(&m) && (0..61).contains(&s))
        .then_some(h * 3600 + m * 60 + s)
}

const STANDARD_VARIANTS: [&str; 5] = ["standard", "chess", "normal", "classical", "from position"];
const START_FEN: &str = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";

/// How the visitor left a game.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Parsed to the end; moves and outcome are in the visitor.
    Complete,
    /// Stopped early; the game is rejected for this reason.
    Rejected(RejectReason, Option<String>),
}

/// The visitor; one per worker, buffers reused across games.
pub struct GameVisitor {
    pub tags: Tags,
    pub sans: Vec<San>,
    pub outcome: Option<Outcome>,
    filter: GameFilter,
    limits: Limits,
    comment_len: usize,
}

impl GameVisitor {
    pub fn new(filter: GameFilter, limits: Limits) -> GameVisitor {
        GameVisitor {
            tags: Tags::default(),
            sans: Vec::with_capacity(256),
            outcome: None,
            filter,
            limits,
            comment_len: 0,
        }
    }

    /// Header checks, in order: variant, start position, then filters.
    fn check_header(&self) -> Option<(RejectReason, Option<String>)> {
        let tags = &self.tags;
        if let Some(variant) = tags.get(Tag::Variant)
            && !STANDARD_VARIANTS.contains(&variant.trim().to_ascii_lowercase().as_str())
        {
            return Some((RejectReason::Variant, Some(variant.to_owned())));
        }
        match tags.get(Tag::Fen) {
            Some(fen) if fen.trim() != START_FEN => {
                return Some((RejectReason::NonStandardStart, Some(format!("FEN {fen}"))));
            }
            None if tags.get(Tag::SetUp).map(str::trim) == Some("1") => {
                return Some((
                    RejectReason::NonStandardStart,
                    Some("SetUp \"1\" without a FEN tag".into()),
                ));
            }
            _ => {}
        }
        let f = &self.filter;
        if f.is_empty() {
            return None;
        }
        let white_elo = parse_elo(tags.get(Tag::WhiteElo));
        let black_elo = parse_elo(tags.get(Tag::BlackElo));
        if f.rated_only {
            let casual = tags
                .get(Tag::Event)
                .is_some_and(|e| e.trim_start().to_ascii_lowercase().starts_with("casual"));
            if casual || white_elo.is_none() || black_elo.is_none() {
                return Some((
                    RejectReason::FilteredUnrated,
                    tags.get(Tag::Event).map(str::to_owned),
                ));
            }
        }
        if let Some(speeds) = &f.speeds {
            let speed = speed_of(tags.get(Tag::TimeControl));
            if !speed.is_some_and(|s| speeds.contains(&s)) {
                return Some((
                    RejectReason::FilteredSpeed,
                    Some(format!(
                        "TimeControl {:?} ({})",
                        tags.get(Tag::TimeControl).unwrap_or(""),
                        speed.map_or("unknown speed", Speed::name)
                    )),
                ));
            }
        }
        if f.min_elo.is_some() || f.max_elo.is_some() {
            let ok = |elo: Option<u16>| {
                elo.is_some_and(|e| {
                    f.min_elo.is_none_or(|m| e >= m) && f.max_elo.is_none_or(|m| e <= m)
                })
            };
            if !ok(white_elo) || !ok(black_elo) {
                return Some((
                    RejectReason::FilteredElo,
                    Some(format!(
                        "WhiteElo {:?}, BlackElo {:?}",
                        tags.get(Tag::WhiteElo).unwrap_or(""),
                        tags.get(Tag::BlackElo).unwrap_or("")
                    )),
                ));
            }
        }
        None
    }

    fn add_comment_bytes(&mut self, n: usize) -> ControlFlow<Parsed> {
        self.comment_len += n;
        if self.comment_len > self.limits.max_comment_bytes {
            return ControlFlow::Break(Parsed::Rejected(
                RejectReason::CommentTooLong,
                Some(format!(
                    "a comment exceeds --max-comment-bytes {} after {} bytes",
                    self.limits.max_comment_bytes, self.comment_len
                )),
            ));
        }
        ControlFlow::Continue(())
    }
}

impl Visitor for GameVisitor {
    type Tags = ();
    type Movetext = ();
    type Output = Parsed;

    fn begin_tags(&mut self) -> ControlFlow<Parsed, ()> {
        self.tags.clear();
        self.sans.clear();
        self.outcome = None;
        self.comment_len = 0;
        ControlFlow::Continue(())
    }

    fn tag(&mut self, _: &mut (), name: &[u8], value: RawTag<'_>) -> ControlFlow<Parsed> {
        if let Some(tag) = tag_of(name) {
            self.tags.set(tag, &value.decode());
        }
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, _: ()) -> ControlFlow<Parsed, ()> {
        match self.check_header() {
            Some((reason, detail)) => ControlFlow::Break(Parsed::Rejected(reason, detail)),
            None => ControlFlow::Continue(()),
        }
    }

    fn san(&mut self, _: &mut (), san_plus: SanPlus) -> ControlFlow<Parsed> {
        if self.sans.len() >= MAX_PLIES {
            return ControlFlow::Break(Parsed::Rejected(
                RejectReason::TooManyPlies,
                Some(format!("more than {MAX_PLIES} plies")),
            ));
        }
        self.sans.push(san_plus.san);
        ControlFlow::Continue(())
    }

    fn partial_comment(&mut self, _: &mut (), comment: RawComment<'_>) -> ControlFlow<Parsed> {
        self.add_comment_bytes(comment.as_bytes().len())
    }

    fn comment(&mut self, _: &mut (), comment: RawComment<'_>) -> ControlFlow<Parsed> {
        let flow = self.add_comment_bytes(comment.as_bytes().len());
        self.comment_len = 0;
        flow
    }

    fn begin_variation(&mut self, _: &mut ()) -> ControlFlow<Parsed, Skip> {
        ControlFlow::Continue(Skip(true))
    }

    fn outcome(&mut self, _: &mut (), outcome: Outcome) -> ControlFlow<Parsed> {
        self.outcome = Some(outcome);
        ControlFlow::Continue(())
    }

    fn end_game(&mut self, _: ()) -> Parsed {
        Parsed::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_parsers() {
        assert_eq!(lichess_id("https://lichess.org/ENPo6ReH"), Some("ENPo6ReH"));
        assert_eq!(
            lichess_id("https://lichess.org/ENPo6ReH/black"),
            Some("ENPo6ReH")
        );
        assert_eq!(lichess_id("Tashkent UZB"), None);
        assert_eq!(parse_elo(Some("1500")), Some(1500));
        assert_eq!(parse_elo(Some("?")), None);
        assert_eq!(parse_clock(Some("300+3")), Some((300, 3)));
        assert_eq!(parse_clock(Some("60")), Some((60, 0)));
        assert_eq!(parse_clock(Some("40/7200:3600")), None);
        assert_eq!(speed_of(Some("-")), Some(Speed::Correspondence));
        assert_eq!(speed_of(Some("180+0")), Some(Speed::Blitz));
        assert_eq!(speed_of(None), None);
        assert_eq!(parse_date(Some("1970.01.01")), Some(0));
        assert_eq!(parse_date(Some("2025.05.01")), Some(20209));
        assert_eq!(parse_date(Some("2025.??.??")), None);
        assert_eq!(parse_time(Some("00:00:06")), Some(6));
        assert_eq!(parse_time(Some("25:00:00")), None);
    }

    #[test]
    fn tags_are_recognised_exactly() {
        for (name, tag) in [
            ("Event", Tag::Event),
            ("Site", Tag::Site),
            ("Date", Tag::Date),
            ("Round", Tag::Round),
            ("White", Tag::White),
            ("Black", Tag::Black),
            ("Result", Tag::Result),
            ("UTCDate", Tag::UtcDate),
            ("UTCTime", Tag::UtcTime),
            ("WhiteElo", Tag::WhiteElo),
            ("BlackElo", Tag::BlackElo),
            ("TimeControl", Tag::TimeControl),
            ("Termination", Tag::Termination),
            ("ECO", Tag::Eco),
            ("Opening", Tag::Opening),
            ("Variant", Tag::Variant),
            ("SetUp", Tag::SetUp),
            ("FEN", Tag::Fen),
        ] {
            assert_eq!(tag_of(name.as_bytes()), Some(tag), "{name}");
        }
        for other in [
            "Eventx",
            "Elo",
            "Rounds",
            "WhiteTitle",
            "EventDate",
            "BlackFideId",
            "Sit",
            "",
            "E",
        ] {
            assert_eq!(tag_of(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn reason_names_are_unique() {
        let names: std::collections::BTreeSet<_> =
            RejectReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), RejectReason::ALL.len());
    }
}
