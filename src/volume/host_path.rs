//! hostPath volumes: the node's own path, checked or created per the volume's `type` like
//! upstream's hostPath type checker.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("hostPath {path} {problem}")]
pub struct HostPathError {
    pub path: String,
    pub problem: String,
}

pub fn prepare(path: &str, kind: &str) -> Result<(), HostPathError> {
    let p = Path::new(path);
    let bad = |problem: &str| HostPathError {
        path: path.to_string(),
        problem: problem.to_string(),
    };
    let meta = std::fs::metadata(p);
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(bad("is not a directory")),
            Err(_) => {
                std::fs::create_dir_all(p).map_err(|e| bad(&format!("cannot be created: {e}")))
            }
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(bad("is not a file")),
            Err(_) => {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| bad(&format!("cannot be created: {e}")))?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map(|_| ())
                    .map_err(|e| bad(&format!("cannot be created: {e}")))
            }
        },
        _ => {
            let m = meta.map_err(|_| bad("does not exist"))?;
            let ft = m.file_type();
            let ok = match kind {
                "Directory" => ft.is_dir(),
                "File" => ft.is_file(),
                "Socket" => ft.is_socket(),
                "CharDevice" => ft.is_char_device(),
                "BlockDevice" => ft.is_block_device(),
                _ => return Err(bad(&format!("has unknown type {kind:?}"))),
            };
            if ok {
                Ok(())
            } else {
                Err(bad(&format!("is not a {kind}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_checked() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("nope");
        let err = prepare(&missing.to_string_lossy(), "Directory").unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let file = root.path().join("f");
        prepare(&file.to_string_lossy(), "FileOrCreate").unwrap();
        assert!(file.is_file());
        assert!(prepare(&file.to_string_lossy(), "Directory").is_err());
        let dir = root.path().join("a/b");
        prepare(&dir.to_string_lossy(), "DirectoryOrCreate").unwrap();
        assert!(dir.is_dir());
    }
}
