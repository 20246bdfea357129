//! Output: aligned text tables, or JSON streamed as it is produced.
//!
//! A [`Table`] prints its header first, then each row as it comes, so commands never hold
//! their rows. Text columns have fixed widths (a wider value pushes the rest of its line
//! right, it is never cut) and the last column is not padded; in JSON a table is an array of
//! objects, one per row, written element by element.

use std::io::{self, Write};

use serde_json::{Map, Value};

/// Text or JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// A column: its name (the JSON key too) and its text width.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub name: &'static str,
    pub width: usize,
}

pub const fn column(name: &'static str, width: usize) -> Column {
    Column { name, width }
}

/// Rows written as they come.
pub struct Table<'a> {
    out: &'a mut dyn Write,
    format: Format,
    columns: &'static [Column],
    rows: u64,
}

impl<'a> Table<'a> {
    /// Starts a table: the header line in text, `[` in JSON.
    pub fn start(
        out: &'a mut dyn Write,
        format: Format,
        columns: &'static [Column],
    ) -> io::Result<Table<'a>> {
        match format {
            Format::Text => {
                let names: Vec<Value> = columns.iter().map(|c| Value::from(c.name)).collect();
                write_text_line(out, columns, &names)?;
            }
            Format::Json => out.write_all(b"[")?,
        }
        Ok(Table { out, format, columns, rows: 0 })
    }

    /// One row: a value per column, in order.
    pub fn row(&mut self, values: Vec<Value>) -> io::Result<()> {
        debug_assert_eq!(values.len(), self.columns.len(), "one value per column");
        match self.format {
            Format::Text => write_text_line(self.out, self.columns, &values)?,
            Format::Json => {
                let object: Map<String, Value> =
                    self.columns.iter().map(|c| c.name.to_string()).zip(values).collect();
                let separator = if self.rows == 0 { "\n" } else { ",\n" };
                self.out.write_all(separator.as_bytes())?;
                serde_json::to_writer(&mut *self.out, &object)?;
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// Ends the table (`]` in JSON).
    pub fn finish(self) -> io::Result<u64> {
        if self.format == Format::Json {
            self.out.write_all(if self.rows == 0 { b"]\n" } else { b"\n]\n" })?;
        }
        Ok(self.rows)
    }
}

fn write_text_line(out: &mut dyn Write, columns: &[Column], values: &[Value]) -> io::Result<()> {
    let mut line = String::new();
    for (index, (column, value)) in columns.iter().zip(values).enumerate() {
        let text = text_of(value);
        if index + 1 == columns.len() {
            line.push_str(&text);
        } else {
            line.push_str(&format!("{text:<width$}  ", width = column.width));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

/// How a value reads in text: strings as they are, nothing as `-`, lists and objects as
/// compact JSON.
pub fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(text) => text.clone(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        other => other.to_string(),
    }
}

/// Key-value lines in text, one JSON object in JSON (for summaries like `info`).
pub fn write_summary(out: &mut dyn Write, format: Format, fields: Vec<(&str, Value)>) -> io::Result<()> {
    match format {
        Format::Text => {
            let width = fields.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
            for (key, value) in &fields {
                writeln!(out, "{key:<width$}  {}", text_of(value))?;
            }
            Ok(())
        }
        Format::Json => {
            let object: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            serde_json::to_writer_pretty(&mut *out, &object)?;
            writeln!(out)
        }
    }
}

/// `null` for nothing, the value otherwise.
pub fn optional<T: Into<Value>>(value: Option<T>) -> Value {
    value.map_or(Value::Null, Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[Column] = &[column("n", 4), column("name", 0)];

    #[test]
    fn text_tables_align_and_json_tables_are_arrays() {
        let mut text = Vec::new();
        let mut table = Table::start(&mut text, Format::Text, COLUMNS).unwrap();
        table.row(vec![Value::from(7), Value::from("a b")]).unwrap();
        table.row(vec![Value::Null, Value::from(true)]).unwrap();
        assert_eq!(table.finish().unwrap(), 2);
        assert_eq!(String::from_utf8(text).unwrap(), "n     name\n7     a b\n-     yes\n");

        let mut json = Vec::new();
        let mut table = Table::start(&mut json, Format::Json, COLUMNS).unwrap();
        table.row(vec![Value::from(7), Value::from("x")]).unwrap();
        table.finish().unwrap();
        let parsed: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(parsed, serde_json::json!([{"n": 7, "name": "x"}]));

        let mut empty = Vec::new();
        Table::start(&mut empty, Format::Json, COLUMNS).unwrap().finish().unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&empty).unwrap(), serde_json::json!([]));
    }
}
