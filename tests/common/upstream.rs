//! The upstream v1.20.2 binaries a test runs (kubectl 1.20 for `kubectl debug`, say), found as
//! hack/upstream/lib.sh finds them: listed in hack/upstream/targets with the use `tests`, in the
//! cache hack/upstream/build.sh fills. A missing one fails the test with the command that builds
//! it, never with a bare "No such file or directory" from whatever runs it.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::repo_root;

/// The use hack/upstream/targets gives the cargo tests' binaries.
const USE: &str = "tests";

/// The build.sh target of binary `name` that the list gives use `use_`, if any.
fn target_for(list: &str, name: &str, use_: &str) -> Option<String> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .find_map(|l| {
            let mut fields = l.split_whitespace();
            let target = fields.next()?;
            let listed = target.rsplit('/').next() == Some(name);
            (listed && fields.any(|u| u == use_)).then(|| target.to_string())
        })
}

fn cache_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("KRS_UPSTREAM_CACHE") {
        return dir.into();
    }
    let base = std::env::var("KRS_CACHE_DIR").unwrap_or_else(|_| "/var/cache/kubelet-rs".into());
    PathBuf::from(base).join("upstream")
}

/// The path of upstream binary `name`; panics, saying how to build it, when it is not there or
/// not listed for the tests (hack/test.sh builds the list up front and says what it built in
/// KRS_UPSTREAM_PREBUILT).
pub fn bin(name: &str) -> PathBuf {
    let list_path = repo_root().join("hack/upstream/targets");
    let list = std::fs::read_to_string(&list_path)
        .unwrap_or_else(|e| panic!("read {}: {e}", list_path.display()));
    let Some(target) = target_for(&list, name, USE) else {
        panic!(
            "{name} is not listed with the use '{USE}' in {}: add it there, so that hack/test.sh \
             builds it before the tests run",
            list_path.display()
        );
    };
    if let Ok(prebuilt) = std::env::var("KRS_UPSTREAM_PREBUILT") {
        assert!(
            prebuilt.split_whitespace().any(|b| b == name),
            "{name} is not among the upstream binaries hack/test.sh built up front ({prebuilt})"
        );
    }
    let path = cache_dir().join("bin").join(name);
    let executable = std::fs::metadata(&path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    assert!(
        executable,
        "{name} v1.20.2 is missing: no executable {}; build it with: hack/upstream/build.sh {target}",
        path.display()
    );
    path
}
