//! Compare mode: one scenario run against two servers in turns (A, B, A, B, …), so drift of
//! a noisy machine hits both alike. Each figure is shown as the median of its runs on A and
//! on B, with the ratio A/B.

use serde_json::{json, Value};

use crate::report::Report;

pub struct Comparison {
    a: String,
    b: String,
    runs_a: Vec<Report>,
    runs_b: Vec<Report>,
}

impl Comparison {
    pub fn new(a: &str, b: &str) -> Comparison {
        Comparison { a: a.to_string(), b: b.to_string(), runs_a: Vec::new(), runs_b: Vec::new() }
    }

    pub fn add_a(&mut self, report: Report) {
        self.runs_a.push(report);
    }

    pub fn add_b(&mut self, report: Report) {
        self.runs_b.push(report);
    }

    /// Each numeric figure: (name, median on A, median on B), in the order A's first run
    /// has them.
    pub fn figures(&self) -> Vec<(String, f64, f64)> {
        let Some(first) = self.runs_a.first() else { return Vec::new() };
        first
            .names()
            .filter_map(|name| {
                let a = median(&self.runs_a, name)?;
                let b = median(&self.runs_b, name)?;
                Some((name.to_string(), a, b))
            })
            .collect()
    }

    pub fn table(&self) -> String {
        let scenario = self.runs_a.first().map_or("", |r| r.scenario.as_str());
        let figures = self.figures();
        let width = figures.iter().map(|(name, _, _)| name.len()).max().unwrap_or(0).max(6);
        let mut out = format!(
            "{scenario}: median of {} runs each; A = {}, B = {}\n  {:<width$}  {:>14}  {:>14}  {:>7}\n",
            self.runs_a.len(),
            self.a,
            self.b,
            "figure",
            "A",
            "B",
            "A/B"
        );
        for (name, a, b) in figures {
            let ratio = if b == 0.0 { "-".to_string() } else { format!("{:.2}", a / b) };
            out.push_str(&format!("  {name:<width$}  {a:>14.1}  {b:>14.1}  {ratio:>7}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let figures: Vec<Value> = self
            .figures()
            .into_iter()
            .map(|(name, a, b)| json!({"figure": name, "a": a, "b": b, "ratio": if b == 0.0 { Value::Null } else { json!(a / b) }}))
            .collect();
        json!({
            "a": self.a,
            "b": self.b,
            "figures": figures,
            "runs_a": self.runs_a.iter().map(Report::to_json).collect::<Vec<_>>(),
            "runs_b": self.runs_b.iter().map(Report::to_json).collect::<Vec<_>>(),
        })
    }
}

/// The median of figure `name` over `runs` (numeric figures present in every run).
fn median(runs: &[Report], name: &str) -> Option<f64> {
    let mut values: Vec<f64> = runs.iter().map(|run| run.get(name)?.as_f64()).collect::<Option<_>>()?;
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rate: f64, errors: u64) -> Report {
        let mut report = Report::new("append");
        report.add("appends_per_sec", rate, "/s").add("appends_errors", errors, "").add("note", "text", "");
        report
    }

    #[test]
    fn medians_and_ratios_per_figure() {
        let mut comparison = Comparison::new("http://a", "http://b");
        for (a, b) in [(100.0, 50.0), (120.0, 40.0), (110.0, 60.0)] {
            comparison.add_a(report(a, 0));
            comparison.add_b(report(b, 0));
        }
        let figures = comparison.figures();
        assert_eq!(figures[0], ("appends_per_sec".to_string(), 110.0, 50.0));
        assert_eq!(figures.len(), 2, "text figures are left out");
        let table = comparison.table();
        assert!(table.contains("2.20"), "{table}");
        assert!(table.lines().find(|l| l.contains("appends_errors")).unwrap().trim_end().ends_with('-'));
        assert_eq!(comparison.to_json()["figures"][0]["ratio"], 2.2);
    }
}
