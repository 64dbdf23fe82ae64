//! grpc probes: `grpc.health.v1.Health/Check` on the pod's port; SERVING is success.

use std::time::Duration;

use http::uri::PathAndQuery;

use super::Outcome;

/// grpc.health.v1.HealthCheckRequest (field numbers from the published health protocol).
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// grpc.health.v1.HealthCheckResponse.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

fn status_name(status: i32) -> &'static str {
    match status {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNRECOGNIZED",
    }
}

async fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Result<i32, String> {
    let addr = super::join_host_port(host, port);
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(timeout)
        .timeout(timeout)
        .user_agent(super::http::user_agent())
        .map_err(|e| e.to_string())?;
    let channel = endpoint.connect().await.map_err(|e| {
        format!(
            "timeout: failed to connect service {addr:?} within {}: {e}",
            crate::config::GoDuration(timeout)
        )
    })?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| e.to_string())?;
    let req = tonic::Request::new(HealthCheckRequest {
        service: service.to_string(),
    });
    let path = PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    match grpc.unary(req, path, codec).await {
        Ok(resp) => Ok(resp.into_inner().status),
        Err(s) if s.code() == tonic::Code::Unimplemented => Err(format!(
            "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            s.message()
        )),
        Err(s) => Err(format!(
            "health rpc probe failed: rpc error: code = {:?} desc = {}",
            s.code(),
            s.message()
        )),
    }
}

pub async fn run(host: &str, port: u16, service: &str, timeout: Duration) -> (Outcome, String) {
    match tokio::time::timeout(timeout, check(host, port, service, timeout)).await {
        Ok(Ok(1)) => (Outcome::Success, String::new()),
        Ok(Ok(other)) => (
            Outcome::Failure,
            format!(
                "service unhealthy (responded with {:?})",
                status_name(other)
            ),
        ),
        Ok(Err(e)) => (Outcome::Failure, e),
        Err(_) => (
            Outcome::Failure,
            format!(
                "timeout: health rpc did not complete within {}",
                crate::config::GoDuration(timeout)
            ),
        ),
    }
}
