//! Test helpers shared by the tests of the file source's files: a node name and a minimal
//! manifest.

pub(super) const NODE: &str = "Node-A";

pub(super) fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\n\
         spec:\n  containers:\n  - name: main\n    image: {image}\n"
    )
}
