//! Latency histograms and their summaries.

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Microsecond latencies, from 1 µs to 100 s at three significant digits.
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies { histogram: Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid bounds") }
    }
}

/// The figures of one histogram, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latencies {
    pub fn record_us(&mut self, micros: u64) {
        self.histogram.saturating_record(micros.max(1));
    }

    pub fn merge(&mut self, other: &Latencies) {
        self.histogram.add(&other.histogram).expect("same bounds");
    }

    pub fn summary(&self) -> Summary {
        let h = &self.histogram;
        Summary {
            count: h.len(),
            mean_us: if h.is_empty() { 0.0 } else { h.mean() },
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

impl Summary {
    pub fn to_json(&self) -> Value {
        json!({
            "count": self.count, "mean_us": self.mean_us, "p50_us": self.p50_us, "p90_us": self.p90_us,
            "p99_us": self.p99_us, "p999_us": self.p999_us, "max_us": self.max_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut latencies = Latencies::default();
        for micros in 1..=1000 {
            latencies.record_us(micros);
        }
        let summary = latencies.summary();
        assert_eq!(summary.count, 1000);
        assert!((summary.mean_us - 500.5).abs() < 1.0);
        assert!((499..=501).contains(&summary.p50_us), "{}", summary.p50_us);
        assert!((989..=991).contains(&summary.p99_us), "{}", summary.p99_us);
        assert_eq!(summary.max_us, 1000);
    }

    #[test]
    fn merging_adds_counts_and_empty_is_zero() {
        let mut a = Latencies::default();
        let mut b = Latencies::default();
        a.record_us(10);
        b.record_us(20);
        a.merge(&b);
        assert_eq!(a.summary().count, 2);
        assert_eq!(a.summary().max_us, 20);
        assert_eq!(Latencies::default().summary(), Summary { p50_us: 0, ..Summary::default() });
    }
}
