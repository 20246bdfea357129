//! Compare mode: one scenario run against two servers in turns (A, B, A, B, …), so drift of
//! a noisy machine hits both alike. Each figure is shown as the median of its runs on A and
//! on B, with the ratio A/B, and the lowest and highest ratio of one round's two runs (A's
//! i-th run against B's i-th): where those disagree (0.93 and 1.13, say), the machine's noise
//! is as large as the difference, and the median ratio alone would hide it.

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

    /// The ratio A/B of figure `name` in each round (A's i-th run against B's i-th), for the
    /// rounds where both runs have it and B's is not zero.
    pub fn round_ratios(&self, name: &str) -> Vec<f64> {
        self.runs_a
            .iter()
            .zip(&self.runs_b)
            .filter_map(|(a, b)| {
                let (a, b) = (a.get(name)?.as_f64()?, b.get(name)?.as_f64()?);
                (b != 0.0).then(|| a / b)
            })
            .collect()
    }

    pub fn table(&self) -> String {
        let scenario = self.runs_a.first().map_or("", |r| r.scenario.as_str());
        let figures = self.figures();
        let width = figures.iter().map(|(name, _, _)| name.len()).max().unwrap_or(0).max(6);
        let mut out = format!(
            "{scenario}: median of {} runs each; A = {}, B = {}\n  {:<width$}  {:>14}  {:>14}  {:>7}  {:>11}\n",
            self.runs_a.len(),
            self.a,
            self.b,
            "figure",
            "A",
            "B",
            "A/B",
            "rounds"
        );
        for (name, a, b) in figures {
            let ratio = if b == 0.0 { "-".to_string() } else { format!("{:.2}", a / b) };
            let rounds = spread(&self.round_ratios(&name));
            out.push_str(&format!("  {name:<width$}  {a:>14.1}  {b:>14.1}  {ratio:>7}  {rounds:>11}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let figures: Vec<Value> = self
            .figures()
            .into_iter()
            .map(|(name, a, b)| {
                let ratio = if b == 0.0 { Value::Null } else { json!(a / b) };
                json!({"figure": name, "a": a, "b": b, "ratio": ratio, "round_ratios": self.round_ratios(&name)})
            })
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

/// The lowest and highest of `ratios` (`0.93-1.13`; one value alone; `-` for none).
fn spread(ratios: &[f64]) -> String {
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match ratios.len() {
        0 => "-".to_string(),
        1 => format!("{low:.2}"),
        _ => format!("{low:.2}-{high:.2}"),
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

    /// A comparison of one round per pair: (appends/s on A, on B), no errors.
    fn rounds(pairs: &[(f64, f64)]) -> Comparison {
        let mut comparison = Comparison::new("http://a", "http://b");
        for &(a, b) in pairs {
            comparison.add_a(report(a, 0));
            comparison.add_b(report(b, 0));
        }
        comparison
    }

    #[test]
    fn medians_and_ratios_per_figure() {
        let comparison = rounds(&[(100.0, 50.0), (120.0, 40.0), (110.0, 60.0)]);
        let figures = comparison.figures();
        assert_eq!(figures[0], ("appends_per_sec".to_string(), 110.0, 50.0));
        assert_eq!(figures.len(), 2, "text figures are left out");
        let table = comparison.table();
        assert!(table.contains("2.20"), "{table}");
        assert!(table.lines().find(|l| l.contains("appends_errors")).unwrap().trim_end().ends_with('-'));
        assert_eq!(comparison.to_json()["figures"][0]["ratio"], 2.2);
    }

    #[test]
    fn each_round_s_ratio_shows_the_noise_behind_the_median() {
        let comparison = rounds(&[(93.0, 100.0), (113.0, 100.0), (100.0, 100.0)]);
        assert_eq!(comparison.round_ratios("appends_per_sec"), vec![0.93, 1.13, 1.0]);
        let table = comparison.table();
        let line = table.lines().find(|l| l.contains("appends_per_sec")).unwrap();
        assert!(line.contains("1.00") && line.trim_end().ends_with("0.93-1.13"), "{line}");
        let errors = table.lines().find(|l| l.contains("appends_errors")).unwrap();
        let last_two: Vec<&str> = errors.split_whitespace().rev().take(2).collect();
        assert_eq!(last_two, ["-", "-"], "no ratio where B is zero: {errors}");
        assert_eq!(comparison.to_json()["figures"][0]["round_ratios"][1], 1.13);
    }

    #[test]
    fn a_spread_of_one_round_or_none() {
        assert_eq!(spread(&[]), "-");
        assert_eq!(spread(&[1.234]), "1.23");
        assert_eq!(spread(&[1.1, 0.9]), "0.90-1.10");
    }
}
