//! The server's own counters, read from its `/metrics` around the measured phase: how many
//! device flushes made the run's writes durable, what each covered and how long each took,
//! and how many records each shard commit carried (each commit is a write-back of its own:
//! the figure that says what a run's device work costs per record), and how often and how
//! long shards waited for zeros (acid's zero-fill ahead, a tail-latency cause); and, for a phase that
//! read, how many catch-up reads a kept answer served and how many found the copies cap
//! reached and went out as slices of the log (what explains a catch-up figure better than
//! one A/B ratio on a noisy machine).
//!
//! Only a ds server exposes them (`ds_flushes_total` in acid mode, the read counters in the
//! disk modes); against any other server, or a mode without them, the figures are simply
//! left out.

use hyper::Method;

use crate::http::Connection;
use crate::report::Report;
use crate::target::Target;

/// The flush counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlushCounters {
    pub flushes: f64,
    /// Shard commits those flushes covered (0 from a server that does not count them).
    pub commits: f64,
    pub records: f64,
    pub flush_seconds: f64,
    /// Times shards waited for zeros, and how long in all (0 from a server that does not
    /// count them).
    pub zero_waits: f64,
    pub zero_wait_seconds: f64,
}

/// The read path's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadCounters {
    pub read_bytes: f64,
    /// Catch-up reads answered with a kept answer.
    pub kept_hits: f64,
    /// Catch-up reads that found the copies cap reached (sent as slices of the log).
    pub copies_refused: f64,
}

/// Every counter of one scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerCounters {
    pub flushes: Option<FlushCounters>,
    pub reads: Option<ReadCounters>,
}

impl ServerCounters {
    /// Reads them from the server's `/metrics` (nothing when it has none).
    pub async fn fetch(target: &Target) -> ServerCounters {
        let text = scrape(target).await.unwrap_or_default();
        ServerCounters::parse(&text)
    }

    /// The counters in a Prometheus text exposition.
    pub fn parse(text: &str) -> ServerCounters {
        ServerCounters { flushes: FlushCounters::parse(text), reads: ReadCounters::parse(text) }
    }

    /// Adds what changed between `self` (the start) and `after`, over `seconds`.
    pub fn report(&self, after: &ServerCounters, seconds: f64, report: &mut Report) {
        if let (Some(before), Some(after)) = (self.flushes, after.flushes) {
            before.report(&after, seconds, report);
        }
        if let (Some(before), Some(after)) = (self.reads, after.reads) {
            before.report(&after, report);
        }
    }
}

/// The server's `/metrics` text (`None` when it has none).
async fn scrape(target: &Target) -> Option<String> {
    let mut connection = Connection::open(target).await.ok()?;
    let reply = connection.send(Method::GET, "/metrics", &[], bytes::Bytes::new()).await.ok()?;
    if reply.status != 200 {
        return None;
    }
    String::from_utf8(reply.body.to_vec()).ok()
}

/// The value of the unlabelled sample `name` in a Prometheus text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
}

impl ReadCounters {
    /// The counters in a Prometheus text exposition (`None` from a server without them).
    pub fn parse(text: &str) -> Option<ReadCounters> {
        Some(ReadCounters {
            read_bytes: sample(text, "ds_read_bytes_total")?,
            kept_hits: sample(text, "ds_kept_answer_hits_total")?,
            copies_refused: sample(text, "ds_read_copies_refused_total")?,
        })
    }

    /// Adds the reads a kept answer served and those sent as slices, between `self` (the
    /// start) and `after`, when the phase read anything (so every round of a reading
    /// scenario has both figures, zeros included, and a writing one neither).
    pub fn report(&self, after: &ReadCounters, report: &mut Report) {
        if after.read_bytes <= self.read_bytes {
            return;
        }
        report.add("server_kept_answer_hits", after.kept_hits - self.kept_hits, "").add(
            "server_reads_sliced",
            after.copies_refused - self.copies_refused,
            "",
        );
    }
}

impl FlushCounters {
    /// The counters in a Prometheus text exposition.
    pub fn parse(text: &str) -> Option<FlushCounters> {
        let value = |name: &str| sample(text, name);
        Some(FlushCounters {
            flushes: value("ds_flushes_total")?,
            commits: value("ds_flush_commits_total").unwrap_or(0.0),
            records: value("ds_flush_records_total")?,
            flush_seconds: value("ds_flush_seconds_sum")?,
            zero_waits: value("ds_wal_zero_waits_total").unwrap_or(0.0),
            zero_wait_seconds: value("ds_wal_zero_wait_seconds_sum").unwrap_or(0.0),
        })
    }

    /// Adds flushes per second, records per flush, the mean flush time, (where the server
    /// counts commits) records per shard commit, and the shards' waits for zeros (how many,
    /// and their time in all), between `self` (the start) and `after`, over `seconds`.
    pub fn report(&self, after: &FlushCounters, seconds: f64, report: &mut Report) {
        let flushes = after.flushes - self.flushes;
        if flushes <= 0.0 {
            return;
        }
        report
            .add("flushes_per_s", flushes / seconds, "/s")
            .add("records_per_flush", (after.records - self.records) / flushes, "")
            .add("flush_mean_ms", (after.flush_seconds - self.flush_seconds) / flushes * 1e3, "ms");
        let commits = after.commits - self.commits;
        if commits > 0.0 {
            report.add("records_per_commit", (after.records - self.records) / commits, "");
        }
        report.add("zero_waits", after.zero_waits - self.zero_waits, "").add(
            "zero_wait_total_ms",
            (after.zero_wait_seconds - self.zero_wait_seconds) * 1e3,
            "ms",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_come_from_the_exposition_and_make_rates() {
        let text = "# HELP ds_flushes_total x\nds_flushes_total 10\nds_flush_commits_total 40\n\
                    ds_flush_records_total 160\nds_flush_seconds_bucket{le=\"+Inf\"} 10\n\
                    ds_flush_seconds_sum 0.002\n";
        let before = FlushCounters::parse(text).unwrap();
        assert_eq!(
            before,
            FlushCounters {
                flushes: 10.0,
                commits: 40.0,
                records: 160.0,
                flush_seconds: 0.002,
                zero_waits: 0.0,
                zero_wait_seconds: 0.0
            }
        );
        let after = FlushCounters {
            flushes: 110.0,
            commits: 440.0,
            records: 1760.0,
            flush_seconds: 0.102,
            zero_waits: 3.0,
            zero_wait_seconds: 0.012,
        };
        let mut report = Report::new("append");
        before.report(&after, 2.0, &mut report);
        assert_eq!(report.get("flushes_per_s").and_then(|v| v.as_f64()), Some(50.0));
        assert_eq!(report.get("records_per_flush").and_then(|v| v.as_f64()), Some(16.0));
        assert!((report.get("flush_mean_ms").and_then(|v| v.as_f64()).unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(report.get("records_per_commit").and_then(|v| v.as_f64()), Some(4.0));
        assert_eq!(report.get("zero_waits").and_then(|v| v.as_f64()), Some(3.0));
        assert!((report.get("zero_wait_total_ms").and_then(|v| v.as_f64()).unwrap() - 12.0).abs() < 1e-9);
        assert_eq!(FlushCounters::parse("ds_streams 3\n"), None, "no flushes, no figures");
        let uncounted =
            FlushCounters::parse("ds_flushes_total 1\nds_flush_records_total 2\nds_flush_seconds_sum 0\n");
        let mut report = Report::new("append");
        uncounted.unwrap().report(&FlushCounters { commits: 0.0, ..after }, 2.0, &mut report);
        assert_eq!(report.get("records_per_commit"), None, "no commits counted, no figure");
    }

    #[test]
    fn read_counters_are_reported_for_a_phase_that_read() {
        let text = "ds_read_bytes_total 100\nds_kept_answer_hits_total 3\nds_read_copies_refused_total 1\n";
        let before = ServerCounters::parse(text);
        assert_eq!(before.flushes, None, "memory or file modes: no flushes");
        let reads = before.reads.unwrap();
        let mut report = Report::new("read");
        reads.report(&ReadCounters { read_bytes: 900.0, kept_hits: 10.0, copies_refused: 1.0 }, &mut report);
        assert_eq!(report.get("server_kept_answer_hits").and_then(|v| v.as_f64()), Some(7.0));
        assert_eq!(report.get("server_reads_sliced").and_then(|v| v.as_f64()), Some(0.0), "zeros too");
        let mut report = Report::new("append");
        reads.report(&reads, &mut report);
        assert_eq!(report.get("server_kept_answer_hits"), None, "a phase that read nothing");
        assert_eq!(ServerCounters::parse("x 1\n"), ServerCounters::default(), "another server");
    }
}
