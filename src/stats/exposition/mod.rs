//! The Prometheus views of the statistics: /metrics/resource from the Summary and
//! /metrics/cadvisor from a full collection, in the text format of [`crate::metrics::text`].

pub mod cadvisor;
pub mod resource;
