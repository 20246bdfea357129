//! A data directory's cluster identity, in two files of its own: its node id
//! (`cluster-node-id`, written at the first start in cluster mode and checked at every start
//! after, so a directory whose streams etcd credits to one node never joins under another
//! id) and its incarnation (`cluster-incarnation`, a random id that tells this directory
//! from any other that ran under the same node id; see `super::incarnation`).

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

/// The file holding the id, in the data directory.
pub(super) const FILE: &str = "cluster-node-id";
/// The file holding the directory's incarnation (see `super::incarnation`).
const INCARNATION_FILE: &str = "cluster-incarnation";

/// Checks `node_id` against the one `data_dir` belongs to: whether it has one yet.
pub(super) fn check(data_dir: &Path, node_id: &str) -> Result<bool, String> {
    let path = data_dir.join(FILE);
    match fs::read_to_string(&path) {
        Ok(stored) if stored.trim() == node_id => Ok(true),
        Ok(stored) => Err(format!(
            "{} belongs to cluster node {:?}, not {node_id:?}; start it as that node or use another data directory",
            data_dir.display(),
            stored.trim()
        )),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Records `node_id` as the one `data_dir` belongs to.
pub(super) fn record(data_dir: &Path, node_id: &str) -> Result<(), String> {
    write_durably(data_dir, FILE, node_id)
        .map_err(|error| format!("cannot record the node id in {}: {error}", data_dir.display()))
}

/// The incarnation `data_dir` was given, if any.
pub(super) fn incarnation(data_dir: &Path) -> Result<Option<String>, String> {
    let path = data_dir.join(INCARNATION_FILE);
    match fs::read_to_string(&path) {
        Ok(stored) => Ok(Some(stored.trim().to_string())),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Gives `data_dir` a new random incarnation (128 bits, hex) and records it.
pub(super) fn new_incarnation(data_dir: &Path) -> Result<String, String> {
    let failed =
        |error: io::Error| format!("cannot record an incarnation in {}: {error}", data_dir.display());
    let mut random = [0u8; 16];
    fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut random)).map_err(failed)?;
    let incarnation: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    write_durably(data_dir, INCARNATION_FILE, &incarnation).map_err(failed)?;
    Ok(incarnation)
}

/// Writes `text` to `name` durably: a temporary file, synced, renamed, and the directory
/// synced.
fn write_durably(data_dir: &Path, name: &str, text: &str) -> io::Result<()> {
    fs::create_dir_all(data_dir)?;
    let temporary = data_dir.join(format!("{name}.tmp"));
    let mut file = fs::File::create(&temporary)?;
    file.write_all(format!("{text}\n").as_bytes())?;
    file.sync_all()?;
    fs::rename(&temporary, data_dir.join(name))?;
    fs::File::open(data_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_the_first_id_it_was_given() {
        let dir = std::env::temp_dir().join(format!("ds-identity-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert!(!check(&dir, "node-a").unwrap());
        record(&dir, "node-a").unwrap();
        assert!(check(&dir, "node-a").unwrap());
        let refused = check(&dir, "node-b").unwrap_err();
        assert!(refused.contains("node-a"), "{refused}");
        assert_eq!(incarnation(&dir).unwrap(), None);
        let made = new_incarnation(&dir).unwrap();
        assert_eq!((made.len(), incarnation(&dir).unwrap()), (32, Some(made.clone())));
        fs::remove_dir_all(&dir).unwrap();
    }
}
