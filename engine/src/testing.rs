//! What tests need besides the front door (built with the `testing` feature only): the
//! simulated disk and the file-system interface it implements, what each thing is charged
//! to the byte budget, and the entry points of the fuzz targets (`fuzz`).

pub use crate::config::VfsHandle;
pub use crate::histogram::Histogram;
pub use crate::limits::{stream_charge, APPEND_CHARGE_BYTES};
pub use crate::producer::producer_charge;
pub use crate::storage::files::stream_path;
pub use crate::storage::vfs::sim::{SimRng, SimVfs};
pub use crate::storage::vfs::{read_file, Vfs};

/// The entry points of the fuzz targets (`fuzz/`) and of their regression tests.
pub mod fuzz {
    pub use crate::fuzz::{checkpoint, json_body, manifest, records, segment};
}
