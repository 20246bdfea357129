//! Where log lines go: stderr, with the access log's lines gathered per worker turn.
//!
//! Access lines are the only lines written per request, and writing each straight to stderr
//! costs a system call per request (about an eighth of a small append's whole cost). A
//! runtime worker that opted in ([`gather_on_this_thread`]) instead appends its access
//! lines to a buffer of its own and writes the buffer in one call when it is about to go
//! idle ([`write_gathered`]), when the buffer holds [`GATHERED_BYTES_MAX`], and when the
//! thread stops. Every other line, and every line from any other thread, is written at
//! once. Lines are written whole, under stderr's lock, so they never interleave; a line is
//! lost only if the process dies abruptly (`kill -9`, abort) while it waits in a buffer.

use std::cell::RefCell;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

use crate::access_log::ACCESS_TARGET;

/// Most bytes of access lines a worker holds before it writes them.
pub(crate) const GATHERED_BYTES_MAX: usize = 32 * 1024;

thread_local! {
    /// This thread's gathered access lines; `None` while it writes them at once.
    static GATHERED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Gathers this thread's access lines until [`write_gathered`].
pub fn gather_on_this_thread() {
    GATHERED.with(|gathered| {
        gathered.borrow_mut().get_or_insert_with(|| Vec::with_capacity(GATHERED_BYTES_MAX));
    });
}

/// Writes the access lines this thread gathered (errors writing a log are ignored, as the
/// logging library does).
pub fn write_gathered() {
    GATHERED.with(|gathered| {
        if let Some(lines) = gathered.borrow_mut().as_mut() {
            if !lines.is_empty() {
                emit(lines);
                lines.clear();
            }
        }
    });
}

/// Writes gathered lines to stderr, whole (to this thread's sink in unit tests).
fn emit(lines: &[u8]) {
    #[cfg(test)]
    tests::SINK.with(|sink| sink.borrow_mut().extend_from_slice(lines));
    #[cfg(not(test))]
    let _ = io::stderr().lock().write_all(lines);
}

/// The writer the log formatter asks for, per line.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

/// Where one formatted line goes.
pub enum LineWriter {
    Stderr(io::Stderr),
    Gathered,
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter::Stderr(io::stderr())
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LineWriter {
        let gathering = GATHERED.with(|gathered| gathered.borrow().is_some());
        match gathering && meta.target() == ACCESS_TARGET {
            true => LineWriter::Gathered,
            false => LineWriter::Stderr(io::stderr()),
        }
    }
}

impl Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            LineWriter::Stderr(stderr) => stderr.write(bytes),
            LineWriter::Gathered => {
                let full = GATHERED.with(|gathered| match gathered.borrow_mut().as_mut() {
                    Some(lines) => {
                        lines.extend_from_slice(bytes);
                        lines.len() >= GATHERED_BYTES_MAX
                    }
                    None => false,
                });
                if full {
                    write_gathered();
                }
                Ok(bytes.len())
            }
        }
    }

    /// A line to stderr goes in one locked write, as `Stderr::write_all` does it.
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            LineWriter::Stderr(stderr) => stderr.write_all(bytes),
            LineWriter::Gathered => self.write(bytes).map(|_| ()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            LineWriter::Stderr(stderr) => stderr.flush(),
            LineWriter::Gathered => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::callsite::{Callsite, Identifier};
    use tracing::field::FieldSet;
    use tracing::metadata::Kind;
    use tracing::subscriber::Interest;
    use tracing::{Level, Metadata};

    struct TestCallsite;
    impl Callsite for TestCallsite {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            &ACCESS
        }
    }
    static CALLSITE: TestCallsite = TestCallsite;

    thread_local! {
        /// What `emit` wrote on this thread.
        pub(super) static SINK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    fn emitted() -> Vec<u8> {
        SINK.with(|sink| std::mem::take(&mut *sink.borrow_mut()))
    }
    static ACCESS: Metadata<'static> = line(ACCESS_TARGET, Level::INFO);
    static OTHER: Metadata<'static> = line("ds_server", Level::INFO);

    const fn line(target: &'static str, level: Level) -> Metadata<'static> {
        let fields = FieldSet::new(&[], Identifier(&CALLSITE));
        Metadata::new("line", target, level, None, None, None, fields, Kind::EVENT)
    }

    fn gathered_bytes() -> Option<usize> {
        GATHERED.with(|gathered| gathered.borrow().as_ref().map(Vec::len))
    }

    #[test]
    fn access_lines_wait_in_the_buffer_of_a_gathering_thread() {
        assert!(matches!(LogWriter.make_writer_for(&ACCESS), LineWriter::Stderr(_)), "not gathering yet");
        gather_on_this_thread();
        let mut writer = LogWriter.make_writer_for(&ACCESS);
        assert!(matches!(writer, LineWriter::Gathered));
        writer.write_all(b"one access line\n").unwrap();
        writer.write_all(b"another\n").unwrap();
        assert_eq!(gathered_bytes(), Some(24));
        assert!(emitted().is_empty(), "nothing written before the turn ends");
        write_gathered();
        assert_eq!(emitted(), b"one access line\nanother\n", "written whole, in order, once");
        assert_eq!(gathered_bytes(), Some(0));
    }

    #[test]
    fn a_full_buffer_is_written_without_waiting_for_idle() {
        gather_on_this_thread();
        let mut writer = LogWriter.make_writer_for(&ACCESS);
        let chunk = [b'x'; 1024];
        for _ in 0..GATHERED_BYTES_MAX / chunk.len() - 1 {
            writer.write_all(&chunk).unwrap();
        }
        assert_eq!(gathered_bytes(), Some(GATHERED_BYTES_MAX - chunk.len()));
        assert!(emitted().is_empty());
        writer.write_all(&chunk).unwrap();
        assert_eq!(gathered_bytes(), Some(0), "reaching the bound wrote the buffer");
        assert_eq!(emitted().len(), GATHERED_BYTES_MAX);
    }

    #[test]
    fn other_lines_are_written_at_once_even_while_gathering() {
        gather_on_this_thread();
        assert!(matches!(LogWriter.make_writer_for(&OTHER), LineWriter::Stderr(_)));
        assert_eq!(gathered_bytes(), Some(0));
    }
}
