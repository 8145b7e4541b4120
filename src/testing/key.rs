//! Who a request is from: the API key, else the client address.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use http::header::HeaderName;
use http::HeaderMap;

/// The identity the server limits by: each key has its own bucket.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ClientKey {
    /// The value of the API key header (non-UTF-8 bytes replaced by
    /// `U+FFFD`).
    ApiKey(String),
    /// The client address: the peer's, or the one `X-Forwarded-For` names
    /// at the configured position.
    Ip(IpAddr),
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientKey::ApiKey(key) => write!(f, "key:{key}"),
            ClientKey::Ip(ip) => write!(f, "ip:{ip}"),
        }
    }
}

const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The key for a request with `headers` from `peer`.
///
/// A non-empty `api_key` header wins (the first one if repeated). Otherwise,
/// with `hops` trusted proxies in front, the client is the `hops`-th
/// `X-Forwarded-For` entry from the right: each trusted proxy appended the
/// address it saw, so entries further left were written by the client and
/// prove nothing. When the list is shorter than `hops`, is not ASCII, or the
/// chosen entry is not an address, the request did not come through the
/// proxies as configured and the peer address is used.
pub(crate) fn client_key(
    headers: &HeaderMap,
    peer: IpAddr,
    api_key: &HeaderName,
    hops: usize,
) -> ClientKey {
    if let Some(value) = headers.get(api_key) {
        let key = String::from_utf8_lossy(value.as_bytes());
        let key = key.trim();
        if !key.is_empty() {
            return ClientKey::ApiKey(key.to_owned());
        }
    }
    ClientKey::Ip(forwarded_for(headers, hops).unwrap_or(peer))
}

fn forwarded_for(headers: &HeaderMap, hops: usize) -> Option<IpAddr> {
    if hops == 0 {
        return None;
    }
    // Repeated header lines form one list, in order (RFC 9110 §5.3).
    let mut entries = Vec::new();
    for line in headers.get_all(FORWARDED_FOR) {
        entries.extend(line.to_str().ok()?.split(',').map(str::trim));
    }
    let index = entries.len().checked_sub(hops)?;
    parse_address(entries.get(index)?)
}

/// An address as proxies write it: `192.0.2.1`, `2001:db8::1`,
/// `[2001:db8::1]`, or any of them with a port.
fn parse_address(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')?
                .strip_suffix(']')?
                .parse::<IpAddr>()
                .ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn key(lines: &[&[u8]], hops: usize) -> ClientKey {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(
                FORWARDED_FOR,
                HeaderValue::from_bytes(line).expect("test header"),
            );
        }
        client_key(&headers, PEER, &HeaderName::from_static("x-api-key"), hops)
    }

    fn ip(s: &str) -> ClientKey {
        ClientKey::Ip(s.parse().expect("test address"))
    }

    #[test]
    fn api_key_wins() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static(" alice "));
        headers.insert(FORWARDED_FOR, HeaderValue::from_static("192.0.2.7"));
        let name = HeaderName::from_static("x-api-key");
        assert_eq!(
            client_key(&headers, PEER, &name, 1),
            ClientKey::ApiKey("alice".into())
        );
        headers.insert("x-api-key", HeaderValue::from_static("  "));
        assert_eq!(client_key(&headers, PEER, &name, 1), ip("192.0.2.7"));
    }

    #[test]
    fn forwarded_for_counts_from_the_right() {
        let chain: &[&[u8]] = &[b"6.6.6.6, 192.0.2.1", b"10.0.0.1"];
        assert_eq!(key(chain, 0), ClientKey::Ip(PEER));
        assert_eq!(key(chain, 1), ip("10.0.0.1"));
        assert_eq!(key(chain, 2), ip("192.0.2.1"));
        assert_eq!(key(chain, 3), ip("6.6.6.6"));
        assert_eq!(key(chain, 4), ClientKey::Ip(PEER));
    }

    #[test]
    fn odd_entries_fall_back_to_the_peer() {
        assert_eq!(key(&[b"192.0.2.1:4711"], 1), ip("192.0.2.1"));
        assert_eq!(key(&[b"[2001:db8::1]:80"], 1), ip("2001:db8::1"));
        assert_eq!(key(&[b"[2001:db8::1]"], 1), ip("2001:db8::1"));
        assert_eq!(key(&[b"unknown"], 1), ClientKey::Ip(PEER));
        assert_eq!(key(&[b"1.2.3.4,"], 1), ClientKey::Ip(PEER));
        assert_eq!(key(&[b"\xff1.2.3.4"], 1), ClientKey::Ip(PEER));
        assert_eq!(key(&[], 1), ClientKey::Ip(PEER));
    }
}
