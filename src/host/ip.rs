//! The node's own addresses.

use std::net::IpAddr;

/// The node's IP: the first `--node-ip`, else the address of the interface holding the
/// default route. Connecting a UDP socket only selects a route; no packet is sent.
pub fn detect_node_ip(configured: &[IpAddr]) -> String {
    if let Some(ip) = configured.first() {
        return ip.to_string();
    }
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").and_then(|s| {
        s.connect("192.0.2.1:9")?;
        s.local_addr()
    });
    match probe {
        Ok(addr) if !addr.ip().is_unspecified() => addr.ip().to_string(),
        _ => "127.0.0.1".into(),
    }
}

/// Addresses the self-signed serving certificate names: `--node-ip` and the detected node IP.
pub fn serving_ips(configured: &[IpAddr], detected: &str) -> Vec<IpAddr> {
    let mut ips = configured.to_vec();
    if let Ok(ip) = detected.parse::<IpAddr>()
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    ips
}
