//! What a crash left on the simulated disk, record by record (`DS_SIM_DUMP`): for reading
//! a failing seed's log as recovery will, including past records that fail their checks.

use std::path::Path;
use std::sync::Arc;

use ds_engine::inspect::{next_header, RecordScan, ScanEnd, Segment};
use ds_engine::testing::SimVfs;

/// Prints every record of every acid shard's segments on `disk`, and each place where one
/// fails its checks (then goes on at the next header that passes).
pub(crate) fn acid_records(disk: &SimVfs) {
    let store = ds_engine::inspect::open(Arc::new(disk.clone()), Path::new("/data"), true).expect("a store");
    for shard in 0..store.shard_count() {
        let log = store.shard(shard).expect("the shard's log");
        for segment in &log.analysis.segments {
            let path = segment.path.display();
            let bytes = segment.map.slice(0, segment.readable_len() as usize);
            let mut at = Segment::records_start();
            loop {
                let mut scan = RecordScan::new(bytes.clone(), at);
                for record in scan.by_ref() {
                    let h = &record.header;
                    eprintln!(
                        "DUMP {path} {}: record {} {:?} of stream {} at {}, time {}, flags {:#x}, {} bytes",
                        record.position,
                        h.lsn,
                        h.kind,
                        h.stream,
                        h.offset,
                        h.time_ms,
                        h.flags,
                        h.record_len()
                    );
                }
                if let Some(ScanEnd::Damaged(error)) = scan.end() {
                    eprintln!("DUMP {path} {}: fails its checks: {error}", scan.position());
                }
                match next_header(&bytes, scan.position() as usize + 1) {
                    Some((next, _)) => at = next as u64,
                    None => break,
                }
            }
        }
    }
}
