//! Renders query results as an aligned text table, CSV, JSON or Markdown.

use std::{
    fmt::Write as _,
    io::{self, Write},
};

use arrow_array::{Array, RecordBatch, cast::AsArray, types::*};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, SchemaRef};

/// Output format of `chessbench sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Format {
    /// Aligned columns for a terminal, long results cut to `max_rows`.
    Table,
    /// RFC 4180 CSV with a header row; NULL is an empty field.
    Csv,
    /// An array of row objects (one result) or an object of them by name.
    Json,
    /// A GitHub-flavoured Markdown table.
    Markdown,
}

/// One statement's result, collected (tests).
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct ResultSet {
    /// `-- @name` of the statement, or `result_N`.
    pub name: String,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// Column names of a schema.
fn columns(schema: &SchemaRef) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

/// One display formatter per column of a batch.
fn formatters<'a>(
    batch: &'a RecordBatch,
    options: &FormatOptions<'a>,
) -> Result<Vec<ArrayFormatter<'a>>, arrow_schema::ArrowError> {
    batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), options))
        .collect()
}

/// Floats are shown with at most 6 decimals (JSON and CSV keep every digit).
fn display_cell(array: &dyn Array, row: usize) -> Option<String> {
    let x = match array.data_type() {
        DataType::Float64 => array.as_primitive::<Float64Type>().value(row),
        DataType::Float32 => f64::from(array.as_primitive::<Float32Type>().value(row)),
        _ => return None,
    };
    if x.is_finite() && x != 0.0 && x.abs() < 1e-4 {
        return Some(format!("{x:.3e}"));
    }
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    Some(if s.is_empty() || s == "-" {
        "0".to_owned()
    } else {
        s.to_owned()
    })
}

fn is_numeric(t: &DataType) -> bool {
    t.is_numeric()
}

/// Writes results in `format`. `max_rows` limits rows per result in table and
/// Markdown output (0: no limit); CSV and JSON are always complete.
#[cfg(test)]
pub(crate) fn write(
    out: &mut dyn Write,
    results: &[ResultSet],
    format: Format,
    max_rows: usize,
) -> io::Result<()> {
    let mut sink = Sink::new(out, format, max_rows, results.len());
    for r in results {
        sink.begin(&r.name, r.schema.clone())?;
        for b in &r.batches {
            sink.batch(b)?;
        }
        sink.end()?;
    }
    sink.finish()
}

/// Writes results as they stream out of DuckDB, batch by batch: CSV and
/// JSON hold one batch at a time; table and Markdown output keep the rows
/// they show (`max_rows`, 0 for all) and count the rest.
pub(crate) struct Sink<'a> {
    out: &'a mut dyn Write,
    format: Format,
    limit: usize,
    /// Results the script will write (headers and JSON's shape depend on it).
    expected: usize,
    written: usize,
    current: Option<Current>,
    /// CSV: the row being written, reused.
    line: String,
}

/// The result being written.
struct Current {
    schema: SchemaRef,
    rows: u64,
    /// Table / Markdown: the rows shown.
    shown: Vec<Vec<Option<String>>>,
}

impl<'a> Sink<'a> {
    pub(crate) fn new(
        out: &'a mut dyn Write,
        format: Format,
        max_rows: usize,
        expected: usize,
    ) -> Sink<'a> {
        Sink {
            out,
            format,
            limit: if max_rows == 0 { usize::MAX } else { max_rows },
            expected,
            written: 0,
            current: None,
            line: String::new(),
        }
    }

    /// Starts the result `name`.
    pub(crate) fn begin(&mut self, name: &str, schema: SchemaRef) -> io::Result<()> {
        let first = self.written == 0;
        match self.format {
            Format::Csv => {
                if self.expected > 1 {
                    if !first {
                        writeln!(self.out)?;
                    }
                    writeln!(self.out, "# {name}")?;
                }
                let header: Vec<String> = schema
                    .fields()
                    .iter()
                    .map(|f| csv_field(f.name()))
                    .collect();
                writeln!(self.out, "{}", header.join(","))?;
            }
            Format::Json => {
                if self.expected > 1 {
                    write!(
                        self.out,
                        "{}\n  {}: [",
                        if first { "{" } else { "," },
                        serde_json::to_string(name)?
                    )?;
                } else {
                    write!(self.out, "[")?;
                }
            }
            Format::Table | Format::Markdown => {
                if !first {
                    writeln!(self.out)?;
                }
                if self.expected > 1 {
                    match self.format {
                        Format::Markdown => writeln!(self.out, "### {name}\n")?,
                        _ => writeln!(self.out, "{name}")?,
                    }
                }
            }
        }
        self.current = Some(Current {
            schema,
            rows: 0,
            shown: Vec::new(),
        });
        Ok(())
    }

    /// Adds a batch of the current result.
    pub(crate) fn batch(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        let options = FormatOptions::default().with_display_error(true);
        let formatters = formatters(batch, &options).map_err(io::Error::other)?;
        for row in 0..batch.num_rows() {
            match self.format {
                Format::Csv => {
                    // One reused line buffer: a CSV export is millions of
                    // rows (`sampling_weights`: one per board).
                    let line = &mut self.line;
                    line.clear();
                    for (i, (c, f)) in batch.columns().iter().zip(&formatters).enumerate() {
                        if i > 0 {
                            line.push(',');
                        }
                        if !c.is_null(row) {
                            let start = line.len();
                            write!(line, "{}", f.value(row)).map_err(io::Error::other)?;
                            if line[start..].contains(CSV_SPECIAL) {
                                let quoted = csv_field(&line[start..]);
                                line.truncate(start);
                                line.push_str(&quoted);
                            }
                        }
                    }
                    line.push('\n');
                    self.out.write_all(line.as_bytes())?;
                }
                Format::Json => {
                    let mut object = serde_json::Map::new();
                    for ((field, c), f) in cur
                        .schema
                        .fields()
                        .iter()
                        .zip(batch.columns())
                        .zip(&formatters)
                    {
                        object.insert(field.name().clone(), json_cell(c.as_ref(), row, f));
                    }
                    let indent = if self.expected > 1 { "    " } else { "  " };
                    let text = serde_json::to_string_pretty(&serde_json::Value::Object(object))?;
                    let text = text.replace('\n', &format!("\n{indent}"));
                    write!(
                        self.out,
                        "{}\n{indent}{text}",
                        if cur.rows == 0 { "" } else { "," }
                    )?;
                }
                Format::Table | Format::Markdown => {
                    if cur.shown.len() < self.limit {
                        cur.shown.push(
                            batch
                                .columns()
                                .iter()
                                .zip(&formatters)
                                .map(|(c, f)| {
                                    (!c.is_null(row)).then(|| {
                                        display_cell(c.as_ref(), row)
                                            .unwrap_or_else(|| f.value(row).to_string())
                                    })
                                })
                                .collect(),
                        );
                    }
                }
            }
            cur.rows += 1;
        }
        Ok(())
    }

    /// Ends the current result.
    pub(crate) fn end(&mut self) -> io::Result<()> {
        let Some(cur) = self.current.take() else {
            return Ok(());
        };
        self.written += 1;
        match self.format {
            Format::Csv => {}
            Format::Json => {
                let indent = if self.expected > 1 { "  " } else { "" };
                if cur.rows == 0 {
                    write!(self.out, "]")?;
                } else {
                    write!(self.out, "\n{indent}]")?;
                }
            }
            Format::Table | Format::Markdown => {
                if self.format == Format::Markdown {
                    write_markdown(self.out, &cur.schema, &cur.shown)?;
                } else {
                    write_table(self.out, &cur.schema, &cur.shown)?;
                }
                if (cur.shown.len() as u64) < cur.rows {
                    writeln!(
                        self.out,
                        "({} rows, {} shown; --max-rows 0 shows all, --format csv exports them)",
                        cur.rows,
                        cur.shown.len()
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Ends the output.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        if self.format == Format::Json {
            if self.expected > 1 {
                if self.written == 0 {
                    write!(self.out, "{{")?;
                }
                writeln!(self.out, "\n}}")?;
            } else {
                writeln!(self.out)?;
            }
        }
        self.out.flush()
    }
}

fn write_table(
    out: &mut dyn Write,
    schema: &SchemaRef,
    rows: &[Vec<Option<String>>],
) -> io::Result<()> {
    let columns = columns(schema);
    let numeric: Vec<bool> = schema
        .fields()
        .iter()
        .map(|f| is_numeric(f.data_type()))
        .collect();
    let cell = |c: &Option<String>| c.clone().unwrap_or_else(|| "NULL".to_owned());
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell(c).chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &[String]| -> io::Result<()> {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = w - c.chars().count();
            if numeric[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, &columns)?;
    line(
        out,
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    )?;
    for row in rows {
        line(out, &row.iter().map(cell).collect::<Vec<_>>())?;
    }
    Ok(())
}

fn write_markdown(
    out: &mut dyn Write,
    schema: &SchemaRef,
    rows: &[Vec<Option<String>>],
) -> io::Result<()> {
    let escape = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let columns = columns(schema);
    writeln!(
        out,
        "| {} |",
        columns
            .iter()
            .map(|c| escape(c))
            .collect::<Vec<_>>()
            .join(" | ")
    )?;
    let align: Vec<&str> = schema
        .fields()
        .iter()
        .map(|f| {
            if is_numeric(f.data_type()) {
                "---:"
            } else {
                "---"
            }
        })
        .collect();
    writeln!(out, "| {} |", align.join(" | "))?;
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .map(|c| c.as_deref().map_or_else(|| "NULL".to_owned(), escape))
            .collect();
        writeln!(out, "| {} |", cells.join(" | "))?;
    }
    Ok(())
}

/// Characters that make a CSV field need quotes.
const CSV_SPECIAL: [char; 4] = [',', '"', '\n', '\r'];

fn csv_field(s: &str) -> String {
    if s.contains(CSV_SPECIAL) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// A cell as a JSON value: numbers and booleans typed, everything else as
/// its display text.
fn json_cell(array: &dyn Array, row: usize, f: &ArrayFormatter) -> serde_json::Value {
    use serde_json::Value;
    if array.is_null(row) {
        return Value::Null;
    }
    macro_rules! int {
        ($t:ty) => {
            Value::from(array.as_primitive::<$t>().value(row))
        };
    }
    match array.data_type() {
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float32 => {
            serde_json::Number::from_f64(f64::from(array.as_primitive::<Float32Type>().value(row)))
                .map_or(Value::Null, Value::Number)
        }
        DataType::Float64 => {
            serde_json::Number::from_f64(array.as_primitive::<Float64Type>().value(row))
                .map_or(Value::Null, Value::Number)
        }
        DataType::Decimal128(..) => {
            let text = f.value(row).to_string();
            text.parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::String(text), Value::Number)
        }
        _ => Value::String(f.value(row).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Float64Array, StringArray, UInt64Array};
    use arrow_schema::{Field, Schema};

    use super::*;

    fn sample() -> ResultSet {
        let schema = Arc::new(Schema::new(vec![
            Field::new("split", DataType::Utf8, true),
            Field::new("n", DataType::UInt64, true),
            Field::new("p", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![Some("a,\"b\""), None])),
                Arc::new(UInt64Array::from(vec![Some(12), Some(3)])),
                Arc::new(Float64Array::from(vec![Some(0.125), None])),
            ],
        )
        .unwrap();
        ResultSet {
            name: "r".into(),
            schema,
            batches: vec![batch],
        }
    }

    fn render(format: Format, max_rows: usize) -> String {
        let mut out = Vec::new();
        write(&mut out, &[sample()], format, max_rows).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn csv_quotes_and_nulls() {
        assert_eq!(
            render(Format::Csv, 0),
            "split,n,p\n\"a,\"\"b\"\"\",12,0.125\n,3,\n"
        );
    }

    #[test]
    fn json_is_typed() {
        let v: serde_json::Value = serde_json::from_str(&render(Format::Json, 0)).unwrap();
        assert_eq!(v[0]["n"], 12);
        assert_eq!(v[0]["p"], 0.125);
        assert_eq!(v[1]["split"], serde_json::Value::Null);
    }

    #[test]
    fn table_aligns_and_truncates() {
        let t = render(Format::Table, 1);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "split   n      p");
        assert_eq!(lines[2], "a,\"b\"  12  0.125");
        assert!(lines[3].starts_with("(2 rows, 1 shown"));
    }

    #[test]
    fn markdown_table() {
        let t = render(Format::Markdown, 0);
        assert!(t.starts_with("| split | n | p |\n| --- | ---: | ---: |\n| a,\"b\" | 12 | 0.125 |\n| NULL | 3 | NULL |"));
    }
}
