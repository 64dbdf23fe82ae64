//! tcpSocket probes: success when a connection opens within the timeout.

use std::time::Duration;

use super::Outcome;

pub async fn run(host: &str, port: u16, timeout: Duration) -> (Outcome, String) {
    let addr = super::join_host_port(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_stream)) => (Outcome::Success, String::new()),
        Ok(Err(e)) => (Outcome::Failure, format!("dial tcp {addr}: {e}")),
        Err(_) => (Outcome::Failure, format!("dial tcp {addr}: i/o timeout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_port_succeeds_closed_port_fails() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (ok, _) = run("127.0.0.1", port, Duration::from_secs(1)).await;
        assert_eq!(ok, Outcome::Success);
        drop(listener);
        let (bad, why) = run("127.0.0.1", port, Duration::from_secs(1)).await;
        assert_eq!(bad, Outcome::Failure);
        assert!(why.starts_with("dial tcp 127.0.0.1:"), "{why}");
    }
}
