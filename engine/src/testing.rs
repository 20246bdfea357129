//! What tests need besides the front door (built with the `testing` feature only): the
//! simulated disk and the file-system interface it implements, and what each thing is
//! charged to the byte budget.

pub use crate::config::VfsHandle;
pub use crate::histogram::Histogram;
pub use crate::limits::{stream_charge, APPEND_CHARGE_BYTES};
pub use crate::producer::producer_charge;
pub use crate::storage::files::stream_path;
pub use crate::storage::vfs::sim::{SimRng, SimVfs};
pub use crate::storage::vfs::{read_file, Vfs};
