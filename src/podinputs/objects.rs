//! The key/value data of the configMaps and secrets that volumes project into files.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

pub fn secret_data(secret: Secret) -> HashMap<String, Vec<u8>> {
    let mut data: HashMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    data
}

pub fn config_map_data(cm: ConfigMap) -> HashMap<String, Vec<u8>> {
    let mut data: HashMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.unwrap_or_default() {
        data.insert(k, v.0);
    }
    data
}
