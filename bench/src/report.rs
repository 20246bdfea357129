//! What a scenario measured: named figures, printed as an aligned table or written as JSON.

use serde_json::{Map, Value};

/// The figures of one scenario run, in the order they were added.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub scenario: String,
    figures: Vec<(String, Value, String)>,
}

impl Report {
    pub fn new(scenario: &str) -> Report {
        Report { scenario: scenario.to_string(), figures: Vec::new() }
    }

    /// Adds a figure; `unit` is shown in the table only (the JSON key carries the unit).
    pub fn add(&mut self, name: &str, value: impl Into<Value>, unit: &str) -> &mut Report {
        self.figures.push((name.to_string(), value.into(), unit.to_string()));
        self
    }

    /// The figures' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.figures.iter().map(|(name, _, _)| name.as_str())
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.figures.iter().find(|(key, _, _)| key == name).map(|(_, value, _)| value)
    }

    pub fn to_json(&self) -> Value {
        let mut figures = Map::new();
        for (name, value, _) in &self.figures {
            figures.insert(name.clone(), value.clone());
        }
        let mut root = Map::new();
        root.insert("scenario".into(), Value::String(self.scenario.clone()));
        root.insert("figures".into(), Value::Object(figures));
        Value::Object(root)
    }

    pub fn table(&self) -> String {
        let width = self.figures.iter().map(|(name, _, _)| name.len()).max().unwrap_or(0);
        let mut out = format!("{}\n", self.scenario);
        for (name, value, unit) in &self.figures {
            let shown = match value {
                // Ratios and other small figures keep two decimals.
                Value::Number(n) if n.is_f64() => match n.as_f64().unwrap_or_default() {
                    small if small.abs() < 10.0 => format!("{small:.2}"),
                    large => format!("{large:.1}"),
                },
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out.push_str(&format!("  {name:<width$}  {shown:>14} {unit}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_table_and_json() {
        let mut report = Report::new("fanout");
        report.add("events_lost", 0, "").add("delivery_p99_us", 812.5, "µs");
        let table = report.table();
        assert!(table.contains("events_lost") && table.contains("812.5 µs"), "{table}");
        assert_eq!(report.to_json()["figures"]["events_lost"], 0);
        assert_eq!(report.get("delivery_p99_us").and_then(Value::as_f64), Some(812.5));
    }
}
