//! A data directory's node id: written at the first start in cluster mode (`cluster-node-id`
//! in the data directory), checked at every start after, so a directory whose streams the
//! directory in etcd credits to one node never joins under another id.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// The file holding the id, in the data directory.
pub(super) const FILE: &str = "cluster-node-id";

/// Checks `node_id` against the one `data_dir` belongs to, recording it if there is none.
pub(super) fn claim(data_dir: &Path, node_id: &str) -> Result<(), String> {
    let path = data_dir.join(FILE);
    match fs::read_to_string(&path) {
        Ok(stored) if stored.trim() == node_id => Ok(()),
        Ok(stored) => Err(format!(
            "{} belongs to cluster node {:?}, not {node_id:?}; start it as that node or use another data directory",
            data_dir.display(),
            stored.trim()
        )),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            record(data_dir, node_id).map_err(|error| format!("cannot record the node id in {}: {error}", path.display()))
        }
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Writes the id durably: a temporary file, synced, renamed, and the directory synced.
fn record(data_dir: &Path, node_id: &str) -> io::Result<()> {
    fs::create_dir_all(data_dir)?;
    let temporary = data_dir.join(format!("{FILE}.tmp"));
    let mut file = fs::File::create(&temporary)?;
    file.write_all(format!("{node_id}\n").as_bytes())?;
    file.sync_all()?;
    fs::rename(&temporary, data_dir.join(FILE))?;
    fs::File::open(data_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_the_first_id_it_was_given() {
        let dir = std::env::temp_dir().join(format!("ds-identity-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        claim(&dir, "node-a").unwrap();
        claim(&dir, "node-a").unwrap();
        let refused = claim(&dir, "node-b").unwrap_err();
        assert!(refused.contains("node-a"), "{refused}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
