//! A cgroup's name as the kubelet thinks of it (components such as ["kubepods", "burstable",
//! "pod<uid>"]) and its two spellings: the cgroupfs path ("/kubepods/burstable/pod<uid>") and
//! the systemd slice path ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-
//! pod<uid>.slice"), as upstream spells them.

use super::CgroupError;

const SLICE: &str = ".slice";

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// The --cgroup-root of a cgroupfs node: "/a/b" is ["a", "b"]; "" and "/" are the root.
    pub fn parse_cgroupfs(root: &str) -> Result<CgroupName, CgroupError> {
        let parts: Vec<String> = root
            .split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if parts.iter().any(|p| p == "." || p == "..") {
            return Err(CgroupError::InvalidRoot(root.to_string()));
        }
        Ok(CgroupName(parts))
    }

    /// The --cgroup-root of a systemd node, a slice ("/kubelet.slice" or
    /// "/a.slice/a-b.slice"): the last slice's dash-separated parts, unescaped.
    pub fn parse_systemd(root: &str) -> Result<CgroupName, CgroupError> {
        let base = root.rsplit('/').find(|p| !p.is_empty()).unwrap_or("");
        let base = base.strip_suffix(SLICE).unwrap_or(base);
        if base.is_empty() || base == "-" {
            return Ok(CgroupName::default());
        }
        if base.contains("..") || base.contains('.') || base.starts_with('-') || base.ends_with('-')
        {
            return Err(CgroupError::InvalidRoot(root.to_string()));
        }
        Ok(CgroupName(
            base.split('-').map(|p| p.replace('_', "-")).collect(),
        ))
    }

    pub fn child(&self, component: impl Into<String>) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(component.into());
        CgroupName(parts)
    }

    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// "/kubepods/burstable/pod<uid>"; "/" for the root.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The systemd unit of this cgroup: "kubepods-burstable-pod<uid>.slice" ("-.slice" for
    /// the root). Dashes inside a component would read as nesting, so they become
    /// underscores, as upstream escapes them.
    pub fn to_slice_unit(&self) -> String {
        if self.0.is_empty() {
            return format!("-{SLICE}");
        }
        let parts: Vec<String> = self.0.iter().map(|p| p.replace('-', "_")).collect();
        format!("{}{SLICE}", parts.join("-"))
    }

    /// The slice units from the outermost to this one's ("kubepods.slice",
    /// "kubepods-burstable.slice", ...), i.e. the directories of its cgroup path.
    pub fn slice_chain(&self) -> Vec<String> {
        (1..=self.0.len())
            .map(|n| CgroupName(self.0[..n].to_vec()).to_slice_unit())
            .collect()
    }

    /// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice"; "/" for
    /// the root. What a systemd-driven runtime takes as the cgroup parent.
    pub fn to_systemd(&self) -> String {
        format!("/{}", self.slice_chain().join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> CgroupName {
        CgroupName(parts.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn cgroupfs_spelling() {
        assert_eq!(CgroupName::parse_cgroupfs("/").unwrap(), name(&[]));
        assert_eq!(CgroupName::parse_cgroupfs("").unwrap(), name(&[]));
        assert_eq!(
            CgroupName::parse_cgroupfs("/a/b/").unwrap(),
            name(&["a", "b"])
        );
        assert!(CgroupName::parse_cgroupfs("/a/../b").is_err());
        assert_eq!(
            name(&["kubepods", "burstable", "pod1-2"]).to_cgroupfs(),
            "/kubepods/burstable/pod1-2"
        );
        assert_eq!(name(&[]).to_cgroupfs(), "/");
    }

    #[test]
    fn systemd_spelling() {
        let pod = name(&["kubepods", "burstable", "pod6b1a-22c4"]);
        assert_eq!(pod.to_slice_unit(), "kubepods-burstable-pod6b1a_22c4.slice");
        assert_eq!(
            pod.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1a_22c4.slice"
        );
        assert_eq!(name(&[]).to_systemd(), "/");
        assert_eq!(name(&[]).to_slice_unit(), "-.slice");
        assert_eq!(name(&["kubepods"]).to_systemd(), "/kubepods.slice");
    }

    #[test]
    fn systemd_roots() {
        assert_eq!(CgroupName::parse_systemd("/").unwrap(), name(&[]));
        assert_eq!(CgroupName::parse_systemd("").unwrap(), name(&[]));
        assert_eq!(CgroupName::parse_systemd("-.slice").unwrap(), name(&[]));
        assert_eq!(
            CgroupName::parse_systemd("/kubelet.slice").unwrap(),
            name(&["kubelet"])
        );
        assert_eq!(
            CgroupName::parse_systemd("/a.slice/a-b_c.slice").unwrap(),
            name(&["a", "b-c"])
        );
        assert!(CgroupName::parse_systemd("/a.slice/a-.slice").is_err());
        assert!(CgroupName::parse_systemd("/x.y.slice").is_err());
    }
}
