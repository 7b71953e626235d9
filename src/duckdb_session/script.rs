//! Splits a SQL script into statements, so each query's result can be shown
//! on its own and errors can name the line a statement starts on.
//!
//! A `;` ends a statement unless it sits in a string ('...'), a quoted
//! identifier ("..."), a dollar-quoted string ($$...$$ or $tag$...$tag$),
//! a line comment (-- ...) or a block comment (/* ... */). A comment line
//! `-- @name NAME` in front of a statement names its result.

/// One statement of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Statement {
    /// The statement's text without the terminating `;`, comments kept.
    pub sql: String,
    /// 1-based line of the statement's first non-blank, non-comment text.
    pub line: usize,
    /// From a `-- @name NAME` comment among the statement's leading comments.
    pub name: Option<String>,
}

impl Statement {
    /// The first keyword, upper-cased (`SELECT`, `WITH`, `SET`, ...).
    pub(crate) fn keyword(&self) -> String {
        let code = strip_leading_comments(&self.sql);
        code.trim_start_matches('(')
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("")
            .to_ascii_uppercase()
    }

    /// Whether the statement returns rows worth printing (a query, not a
    /// `SET`, `CREATE`, ...).
    pub(crate) fn returns_rows(&self) -> bool {
        matches!(
            self.keyword().as_str(),
            "SELECT"
                | "WITH"
                | "FROM"
                | "VALUES"
                | "TABLE"
                | "DESCRIBE"
                | "DESC"
                | "SHOW"
                | "SUMMARIZE"
                | "EXPLAIN"
                | "PRAGMA"
                | "CALL"
                | "PIVOT"
                | "UNPIVOT"
        )
    }
}

/// The text after leading whitespace and comments.
fn strip_leading_comments(sql: &str) -> &str {
    let mut rest = sql;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.find('\n').map_or("", |i| &r[i + 1..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            return rest;
        }
    }
}

/// Scanner state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Code,
    Single,
    Double,
    LineComment,
    BlockComment(usize),
}

/// Splits `text` into statements. Empty statements (only whitespace and
/// comments) are dropped; an unterminated last statement is kept.
pub(crate) fn split(text: &str) -> Vec<Statement> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut state = State::Code;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match state {
            State::Code => match b {
                b'\'' => state = State::Single,
                b'"' => state = State::Double,
                b'-' if next == Some(b'-') => {
                    state = State::LineComment;
                    i += 1;
                }
                b'/' if next == Some(b'*') => {
                    state = State::BlockComment(1);
                    i += 1;
                }
                b'$' => {
                    if let Some(end) = dollar_quote_end(text, i) {
                        i = end;
                        continue;
                    }
                }
                b';' => {
                    push(&mut out, text, start, i);
                    start = i + 1;
                }
                _ => {}
            },
            State::Single => {
                if b == b'\'' {
                    if next == Some(b'\'') {
                        i += 1; // '' inside a string
                    } else {
                        state = State::Code;
                    }
                }
            }
            State::Double => {
                if b == b'"' {
                    if next == Some(b'"') {
                        i += 1;
                    } else {
                        state = State::Code;
                    }
                }
            }
            State::LineComment => {
                if b == b'\n' {
                    state = State::Code;
                }
            }
            State::BlockComment(depth) => {
                if b == b'*' && next == Some(b'/') {
                    state = if depth == 1 {
                        State::Code
                    } else {
                        State::BlockComment(depth - 1)
                    };
                    i += 1;
                } else if b == b'/' && next == Some(b'*') {
                    state = State::BlockComment(depth + 1);
                    i += 1;
                }
            }
        }
        i += 1;
    }
    push(&mut out, text, start, text.len());
    out
}

/// At a `$` in code: the index just past the matching closing tag of a
/// dollar-quoted string starting here, or None when this `$` does not open
/// one (a parameter like `$1`). An unterminated one runs to the end.
fn dollar_quote_end(text: &str, at: usize) -> Option<usize> {
    let rest = &text[at + 1..];
    let tag_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let tag = &rest[..tag_len];
    if !rest[tag_len..].starts_with('$') || tag.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let delimiter = format!("${tag}$");
    let body = at + delimiter.len();
    Some(
        text[body..]
            .find(&delimiter)
            .map_or(text.len(), |j| body + j + delimiter.len()),
    )
}

fn push(out: &mut Vec<Statement>, text: &str, start: usize, end: usize) {
    let sql = &text[start..end];
    let code = strip_leading_comments(sql);
    if code.trim().is_empty() {
        return;
    }
    let lead = &sql[..sql.len() - code.len()];
    let name = lead.lines().find_map(|l| {
        l.trim()
            .strip_prefix("--")
            .map(str::trim)
            .and_then(|c| c.strip_prefix("@name"))
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
    });
    let offset = start + (sql.len() - code.len());
    let line = 1 + text[..offset].matches('\n').count();
    out.push(Statement {
        sql: sql.trim().to_owned(),
        line,
        name,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sqls(text: &str) -> Vec<String> {
        split(text).into_iter().map(|s| s.sql).collect()
    }

    #[test]
    fn splits_on_semicolons_in_code_only() {
        let text = "SELECT 1; SELECT 'a;b' AS \"x;y\"; -- c;d\nSELECT 2 /* e;f */;\nSELECT $$g;h$$; SELECT $t$i;$t$";
        assert_eq!(
            sqls(text),
            [
                "SELECT 1",
                "SELECT 'a;b' AS \"x;y\"",
                "-- c;d\nSELECT 2 /* e;f */",
                "SELECT $$g;h$$",
                "SELECT $t$i;$t$"
            ]
        );
    }

    #[test]
    fn escaped_quotes_and_nested_comments() {
        assert_eq!(
            sqls("SELECT 'it''s;'; /* a /* b; */ c; */ SELECT 1"),
            ["SELECT 'it''s;'", "/* a /* b; */ c; */ SELECT 1"]
        );
    }

    #[test]
    fn parameters_are_not_dollar_quotes() {
        assert_eq!(sqls("SELECT $1; SELECT 2"), ["SELECT $1", "SELECT 2"]);
    }

    #[test]
    fn names_lines_and_kinds() {
        let text = "-- header;\nSET VARIABLE x = 1;\n\n-- @name first\n-- more\nSELECT 1;\n-- trailing comment only\n";
        let s = split(text);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].line, s[0].name.as_deref(), s[0].returns_rows()),
            (2, None, false)
        );
        assert_eq!(
            (s[1].line, s[1].name.as_deref(), s[1].returns_rows()),
            (6, Some("first"), true)
        );
        assert_eq!(s[1].keyword(), "SELECT");
    }

    #[test]
    fn shipped_sql_files_split_into_named_queries() {
        let s = split(include_str!("../../sql/dataset_stats.sql"));
        assert!(s.len() >= 10);
        assert!(s.iter().all(|q| q.returns_rows() && q.name.is_some()));
        let v = split(include_str!("../../sql/views.sql"));
        assert!(v.iter().all(|q| !q.returns_rows()));
    }

    proptest! {
        /// Statements without special characters survive any joining with
        /// `;`, comments and blank lines, in order.
        #[test]
        fn round_trip(parts in proptest::collection::vec("[A-Za-z0-9 ,()=+*]{1,20}", 1..8),
                      comment in "[A-Za-z ;']{0,10}") {
            let parts: Vec<String> = parts.into_iter().map(|p| format!("SELECT {}", p.trim())).collect();
            let text = parts.join(&format!(";\n-- {comment}\n"));
            let got: Vec<String> = split(&text).into_iter()
                .map(|s| strip_leading_comments(&s.sql).trim().to_owned()).collect();
            let want: Vec<String> = parts.iter().map(|p| p.trim().to_owned()).collect();
            prop_assert_eq!(got, want);
        }

        /// Never panics, and never yields empty statements.
        #[test]
        fn any_text(text in "\\PC{0,200}") {
            for s in split(&text) {
                prop_assert!(!strip_leading_comments(&s.sql).trim().is_empty());
            }
        }
    }
}
