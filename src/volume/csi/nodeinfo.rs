//! What registered drivers say about the node, published where the scheduler and the CSI
//! controllers read it, as upstream's node info manager does: the node's `CSINode` object
//! (one entry per driver: its node ID, topology keys and volume limit), the Node's
//! `csi.volume.kubernetes.io/nodeid` annotation (driver → node ID, JSON) and the drivers'
//! topology segments as Node labels. Labels stay when a driver goes, as upstream leaves them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::CsiError;
use super::client::NodeInfo;

pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// The in-tree plugins whose volumes CSI drivers serve in this kubelet's version (all of
/// them are migrated for good), sorted and joined as upstream writes them.
const MIGRATED_PLUGINS: &str = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,\
kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,\
kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume";
/// Bounds each try (its reads and its write) of one update.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pauses between the tries of one update that lost a race (upstream: 4 tries, factor 5).
const RETRY_PAUSES: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(250),
];

/// Publishes drivers for one node. Cheap to clone.
#[derive(Clone)]
pub struct NodeInfoPublisher {
    client: kube::Client,
    node_name: String,
}

impl NodeInfoPublisher {
    pub fn new(client: kube::Client, node_name: &str) -> Self {
        Self {
            client,
            node_name: node_name.to_string(),
        }
    }

    /// Makes sure the node's CSINode exists with the migration annotation.
    pub async fn initialize(&self) -> Result<(), CsiError> {
        retrying("initializing CSINode", || async {
            match self
                .csinodes()
                .get_opt(&self.node_name)
                .await
                .map_err(api)?
            {
                None => self.create_csinode().await.map(drop),
                Some(mut csinode) => {
                    if set_migration_annotation(&mut csinode) {
                        self.replace_csinode(&csinode).await?;
                    }
                    Ok(())
                }
            }
        })
        .await
    }

    /// Records `driver` with what NodeGetInfo said: the Node first, then CSINode.
    pub async fn install(&self, driver: &str, info: &NodeInfo) -> Result<(), CsiError> {
        if info.node_id.is_empty() {
            return Err(CsiError::Invalid(
                "error adding CSI driver node info: driverNodeID must not be empty".to_string(),
            ));
        }
        retrying("updating Node object with CSI driver node info", || async {
            let node = self.nodes().get(&self.node_name).await.map_err(api)?;
            match node_patch_installing(&node, driver, info).map_err(CsiError::Invalid)? {
                Some(patch) => self.patch_node(&patch).await,
                None => Ok(()),
            }
        })
        .await?;
        retrying(
            "updating CSINode object with CSI driver node info",
            || async {
                let mut csinode = match self
                    .csinodes()
                    .get_opt(&self.node_name)
                    .await
                    .map_err(api)?
                {
                    Some(c) => c,
                    None => self.create_csinode().await?,
                };
                let changed = install_in_csinode(&mut csinode, driver, info);
                let annotated = set_migration_annotation(&mut csinode);
                if changed || annotated {
                    self.replace_csinode(&csinode).await?;
                }
                Ok(())
            },
        )
        .await
    }

    /// Removes `driver` from CSINode, then its node ID from the Node's annotation.
    pub async fn uninstall(&self, driver: &str) -> Result<(), CsiError> {
        retrying("uninstalling CSI driver from CSINode object", || async {
            let Some(mut csinode) = self
                .csinodes()
                .get_opt(&self.node_name)
                .await
                .map_err(api)?
            else {
                return Ok(());
            };
            if uninstall_from_csinode(&mut csinode, driver) {
                self.replace_csinode(&csinode).await?;
            }
            Ok(())
        })
        .await?;
        retrying("removing CSI driver node info from Node object", || async {
            let Some(node) = self.nodes().get_opt(&self.node_name).await.map_err(api)? else {
                return Ok(());
            };
            match node_patch_uninstalling(&node, driver).map_err(CsiError::Invalid)? {
                Some(patch) => self.patch_node(&patch).await,
                None => Ok(()),
            }
        })
        .await
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn csinodes(&self) -> Api<CSINode> {
        Api::all(self.client.clone())
    }

    async fn patch_node(&self, patch: &Value) -> Result<(), CsiError> {
        self.nodes()
            .patch(
                &self.node_name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(drop)
            .map_err(api)
    }

    async fn replace_csinode(&self, csinode: &CSINode) -> Result<(), CsiError> {
        self.csinodes()
            .replace(&self.node_name, &PostParams::default(), csinode)
            .await
            .map(drop)
            .map_err(api)
    }

    /// A new, empty CSINode owned by the Node (so it goes with it).
    async fn create_csinode(&self) -> Result<CSINode, CsiError> {
        let node = self.nodes().get(&self.node_name).await.map_err(api)?;
        let mut csinode = CSINode {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".to_string(),
                    kind: "Node".to_string(),
                    name: self.node_name.clone(),
                    uid: node.metadata.uid.unwrap_or_default(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: CSINodeSpec { drivers: vec![] },
        };
        set_migration_annotation(&mut csinode);
        self.csinodes()
            .create(&PostParams::default(), &csinode)
            .await
            .map_err(api)
    }
}

fn api(e: kube::Error) -> CsiError {
    CsiError::Api(e.to_string())
}

/// Runs `attempt` until it succeeds, at most four times: a conflict with another writer of
/// the Node or CSINode is settled by reading again.
async fn retrying<F, Fut>(what: &str, mut attempt: F) -> Result<(), CsiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), CsiError>>,
{
    let mut errors = Vec::new();
    for pause in RETRY_PAUSES.iter().map(Some).chain([None]) {
        let tried = tokio::time::timeout(ATTEMPT_TIMEOUT, attempt()).await;
        match tried.unwrap_or_else(|_| {
            Err(CsiError::Api(format!(
                "no answer within {ATTEMPT_TIMEOUT:?}"
            )))
        }) {
            Ok(()) => return Ok(()),
            Err(e) => {
                debug!(err = %e, "{what}");
                errors.push(e.to_string());
            }
        }
        if let Some(pause) = pause {
            tokio::time::sleep(*pause).await;
        }
    }
    Err(CsiError::Api(format!(
        "error {what}: timed out waiting for the condition; caused by: [{}]",
        errors.join(", ")
    )))
}

/// The Node's annotation as a map; an unreadable one is an error, as upstream refuses to
/// overwrite what it cannot read.
fn node_ids(node: &Node) -> Result<BTreeMap<String, String>, String> {
    let raw = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_ID_ANNOTATION))
        .map(String::as_str)
        .unwrap_or("");
    if raw.is_empty() {
        return Ok(BTreeMap::new());
    }
    serde_json::from_str(raw).map_err(|e| {
        format!("failed to parse node's {NODE_ID_ANNOTATION:?} annotation value ({raw:?}) err={e}")
    })
}

/// The merge patch that records `driver`'s node ID and topology labels, None when the Node
/// has them already. The resourceVersion makes a concurrent change a conflict, not a loss.
fn node_patch_installing(
    node: &Node,
    driver: &str,
    info: &NodeInfo,
) -> Result<Option<Value>, String> {
    let mut ids = node_ids(node)?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    for (k, v) in &info.topology {
        if let Some(current) = labels.get(k)
            && current != v
        {
            return Err(format!(
                "detected topology value collision: driver reported {k:?}:{v:?} but existing label is {k:?}:{current:?}"
            ));
        }
    }
    let id_changed = ids.get(driver) != Some(&info.node_id);
    let new_labels: BTreeMap<&String, &String> = info
        .topology
        .iter()
        .filter(|(k, _)| !labels.contains_key(*k))
        .collect();
    if !id_changed && new_labels.is_empty() {
        return Ok(None);
    }
    ids.insert(driver.to_string(), info.node_id.clone());
    let mut meta = json!({"resourceVersion": node.metadata.resource_version});
    if id_changed {
        let encoded = serde_json::to_string(&ids).map_err(|e| e.to_string())?;
        meta["annotations"] = json!({ NODE_ID_ANNOTATION: encoded });
    }
    if !new_labels.is_empty() {
        meta["labels"] = json!(new_labels);
    }
    Ok(Some(json!({ "metadata": meta })))
}

/// The merge patch that takes `driver` out of the annotation (the whole annotation when it
/// was the last), None when it is not there.
fn node_patch_uninstalling(node: &Node, driver: &str) -> Result<Option<Value>, String> {
    let mut ids = node_ids(node)?;
    if ids.remove(driver).is_none() {
        return Ok(None);
    }
    let value = if ids.is_empty() {
        Value::Null
    } else {
        Value::String(serde_json::to_string(&ids).map_err(|e| e.to_string())?)
    };
    Ok(Some(json!({"metadata": {
        "resourceVersion": node.metadata.resource_version,
        "annotations": { NODE_ID_ANNOTATION: value },
    }})))
}

/// Puts `driver`'s entry in CSINode (last, as upstream appends it); false when the entry
/// there already has the same node ID and topology keys.
fn install_in_csinode(csinode: &mut CSINode, driver: &str, info: &NodeInfo) -> bool {
    let keys: BTreeSet<&String> = info.topology.keys().collect();
    let drivers = &mut csinode.spec.drivers;
    if let Some(existing) = drivers.iter().find(|d| d.name == driver)
        && existing.node_id == info.node_id
        && existing
            .topology_keys
            .iter()
            .flatten()
            .collect::<BTreeSet<_>>()
            == keys
    {
        return false;
    }
    drivers.retain(|d| d.name != driver);
    let allocatable = if info.max_volumes > 0 {
        let count = i32::try_from(info.max_volumes).unwrap_or_else(|_| {
            warn!(
                driver,
                max = info.max_volumes,
                "Exceeded max supported attach limit value, truncating it to {}",
                i32::MAX
            );
            i32::MAX
        });
        Some(VolumeNodeResources { count: Some(count) })
    } else {
        None
    };
    drivers.push(CSINodeDriver {
        name: driver.to_string(),
        node_id: info.node_id.clone(),
        topology_keys: Some(keys.into_iter().cloned().collect()),
        allocatable,
    });
    true
}

fn uninstall_from_csinode(csinode: &mut CSINode, driver: &str) -> bool {
    let before = csinode.spec.drivers.len();
    csinode.spec.drivers.retain(|d| d.name != driver);
    csinode.spec.drivers.len() != before
}

/// Sets the migrated-plugins annotation; false when it already says the same.
fn set_migration_annotation(csinode: &mut CSINode) -> bool {
    let annotations = csinode.metadata.annotations.get_or_insert_default();
    let current: BTreeSet<&str> = annotations
        .get(MIGRATED_PLUGINS_ANNOTATION)
        .map(|v| v.split(',').filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let wanted: BTreeSet<&str> = MIGRATED_PLUGINS.split(',').collect();
    if current == wanted {
        return false;
    }
    annotations.insert(
        MIGRATED_PLUGINS_ANNOTATION.to_string(),
        MIGRATED_PLUGINS.to_string(),
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotation: Option<&str>, labels: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.resource_version = Some("7".into());
        if let Some(a) = annotation {
            n.metadata.annotations = Some([(NODE_ID_ANNOTATION.to_string(), a.to_string())].into());
        }
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n
    }

    fn info(id: &str, topology: &[(&str, &str)], max: i64) -> NodeInfo {
        NodeInfo {
            node_id: id.into(),
            max_volumes: max,
            topology: topology
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn install_adds_the_node_id_and_new_topology_labels() {
        let n = node(Some(r#"{"other.csi":"n-0"}"#), &[("zone", "a")]);
        let patch = node_patch_installing(
            &n,
            "my.csi",
            &info("n-1", &[("zone", "a"), ("rack", "r1")], 0),
        )
        .unwrap()
        .unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(
            patch["metadata"]["annotations"][NODE_ID_ANNOTATION],
            r#"{"my.csi":"n-1","other.csi":"n-0"}"#
        );
        assert_eq!(patch["metadata"]["labels"], json!({"rack": "r1"}));
        // Once recorded, there is nothing to patch.
        let done = node(Some(r#"{"my.csi":"n-1"}"#), &[("zone", "a")]);
        assert_eq!(
            node_patch_installing(&done, "my.csi", &info("n-1", &[("zone", "a")], 0)).unwrap(),
            None
        );
    }

    #[test]
    fn install_refuses_a_topology_collision_and_an_unreadable_annotation() {
        let n = node(None, &[("zone", "a")]);
        let e = node_patch_installing(&n, "my.csi", &info("n-1", &[("zone", "b")], 0)).unwrap_err();
        assert!(e.contains("topology value collision"), "{e}");
        let bad = node(Some("{not json"), &[]);
        let e = node_patch_installing(&bad, "my.csi", &info("n-1", &[], 0)).unwrap_err();
        assert!(e.contains("failed to parse node's"), "{e}");
    }

    #[test]
    fn uninstall_drops_the_entry_then_the_annotation() {
        let two = node(Some(r#"{"a.csi":"1","b.csi":"2"}"#), &[]);
        let patch = node_patch_uninstalling(&two, "a.csi").unwrap().unwrap();
        assert_eq!(
            patch["metadata"]["annotations"][NODE_ID_ANNOTATION],
            r#"{"b.csi":"2"}"#
        );
        let one = node(Some(r#"{"b.csi":"2"}"#), &[]);
        let patch = node_patch_uninstalling(&one, "b.csi").unwrap().unwrap();
        assert!(patch["metadata"]["annotations"][NODE_ID_ANNOTATION].is_null());
        assert_eq!(node_patch_uninstalling(&one, "a.csi").unwrap(), None);
    }

    #[test]
    fn csinode_entries_are_replaced_only_when_they_change() {
        let mut c = CSINode::default();
        let i = info("n-1", &[("zone", "a")], 12);
        assert!(install_in_csinode(&mut c, "my.csi", &i));
        assert!(!install_in_csinode(&mut c, "my.csi", &i));
        let d = &c.spec.drivers[0];
        assert_eq!(d.topology_keys.as_deref(), Some(&["zone".to_string()][..]));
        assert_eq!(d.allocatable.as_ref().and_then(|a| a.count), Some(12));
        assert!(install_in_csinode(&mut c, "my.csi", &info("n-2", &[], 0)));
        assert_eq!(c.spec.drivers.len(), 1);
        assert!(c.spec.drivers[0].allocatable.is_none());
        assert!(uninstall_from_csinode(&mut c, "my.csi"));
        assert!(!uninstall_from_csinode(&mut c, "my.csi"));
    }

    #[test]
    fn the_migration_annotation_is_set_once() {
        let mut c = CSINode::default();
        assert!(set_migration_annotation(&mut c));
        assert!(!set_migration_annotation(&mut c));
        let value = &c.metadata.annotations.as_ref().unwrap()[MIGRATED_PLUGINS_ANNOTATION];
        assert!(
            value.starts_with("kubernetes.io/aws-ebs,kubernetes.io/azure-disk"),
            "{value}"
        );
    }
}
