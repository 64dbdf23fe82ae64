//! Just enough HPACK (RFC 7541) to rewrite a client's request headers: a decoder that keeps
//! the client's dynamic table, and an encoder that writes every field as a plain literal, so
//! the server's decoder never needs a dynamic table of its own.

use std::collections::VecDeque;

use super::huffman;

/// Entries with their RFC names, numbered from 1.
const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The HTTP/2 default SETTINGS_HEADER_TABLE_SIZE; the servers we front never raise it.
pub const DEFAULT_TABLE_SIZE: usize = 4096;
/// Per-entry overhead the RFC adds to name and value lengths.
const ENTRY_OVERHEAD: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HpackError {
    #[error("header block ends inside a field")]
    Truncated,
    #[error("integer too large")]
    IntegerOverflow,
    #[error("invalid index {0}")]
    InvalidIndex(usize),
    #[error("Huffman: {0}")]
    Huffman(&'static str),
    #[error("table size update to {0} exceeds {DEFAULT_TABLE_SIZE}")]
    TableSize(usize),
    #[error("table size update after a header field")]
    LateTableSizeUpdate,
    #[error("header list larger than {0} bytes")]
    TooLarge(usize),
}

/// One decoded field; `sensitive` is the never-indexed flag, which the re-encoding keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
    pub sensitive: bool,
}

/// The decoding side of one connection: its dynamic table lives as long as the connection.
#[derive(Debug)]
pub struct Decoder {
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
    max_list_size: usize,
}

impl Decoder {
    /// `max_list_size` bounds the decoded size of one block (names + values + 32 per field).
    pub fn new(max_list_size: usize) -> Self {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: DEFAULT_TABLE_SIZE,
            max_list_size,
        }
    }

    pub fn decode(&mut self, mut block: &[u8]) -> Result<Vec<Field>, HpackError> {
        let mut fields = Vec::new();
        let mut list_size = 0usize;
        while let Some(&first) = block.first() {
            let field = if first & 0x80 != 0 {
                let index = read_int(&mut block, 7)?;
                let (name, value) = self.entry(index)?;
                Field {
                    name: name.to_vec(),
                    value: value.to_vec(),
                    sensitive: false,
                }
            } else if first & 0x40 != 0 {
                let field = self.literal(&mut block, 6, false)?;
                self.insert(field.name.clone(), field.value.clone());
                field
            } else if first & 0x20 != 0 {
                if !fields.is_empty() {
                    return Err(HpackError::LateTableSizeUpdate);
                }
                let size = read_int(&mut block, 5)?;
                if size > DEFAULT_TABLE_SIZE {
                    return Err(HpackError::TableSize(size));
                }
                self.max_size = size;
                self.evict_to(size);
                continue;
            } else {
                let sensitive = first & 0x10 != 0;
                self.literal(&mut block, 4, sensitive)?
            };
            list_size += field.name.len() + field.value.len() + ENTRY_OVERHEAD;
            if list_size > self.max_list_size {
                return Err(HpackError::TooLarge(self.max_list_size));
            }
            fields.push(field);
        }
        Ok(fields)
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            1..=61 => {
                let (n, v) = STATIC_TABLE[index - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => index
                .checked_sub(62)
                .and_then(|i| self.table.get(i))
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(HpackError::InvalidIndex(index)),
        }
    }

    fn literal(&self, block: &mut &[u8], prefix: u8, sensitive: bool) -> Result<Field, HpackError> {
        let index = read_int(block, prefix)?;
        let name = if index == 0 {
            read_string(block)?
        } else {
            self.entry(index)?.0.to_vec()
        };
        let value = read_string(block)?;
        Ok(Field {
            name,
            value,
            sensitive,
        })
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        // An entry larger than the table empties it and is not kept (RFC 7541 4.4).
        self.evict_to(self.max_size.saturating_sub(size));
        if size <= self.max_size {
            self.size += size;
            self.table.push_front((name, value));
        }
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.table.pop_back() {
                Some((n, v)) => self.size -= n.len() + v.len() + ENTRY_OVERHEAD,
                None => break,
            }
        }
    }
}

/// An integer with an N-bit prefix (RFC 7541 5.1); the prefix bits of the first byte that
/// are not part of it are the caller's.
fn read_int(block: &mut &[u8], prefix: u8) -> Result<usize, HpackError> {
    let (&first, rest) = block.split_first().ok_or(HpackError::Truncated)?;
    *block = rest;
    let mask = (1usize << prefix) - 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let (&byte, rest) = block.split_first().ok_or(HpackError::Truncated)?;
        *block = rest;
        // Nothing legitimate in a header block comes near 2^28.
        if shift > 21 {
            return Err(HpackError::IntegerOverflow);
        }
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

fn read_string(block: &mut &[u8]) -> Result<Vec<u8>, HpackError> {
    let huffman_coded = block.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = read_int(block, 7)?;
    if block.len() < len {
        return Err(HpackError::Truncated);
    }
    let (raw, rest) = block.split_at(len);
    *block = rest;
    if huffman_coded {
        let mut out = Vec::with_capacity(len * 8 / 5);
        huffman::decode(raw, &mut out)?;
        Ok(out)
    } else {
        Ok(raw.to_vec())
    }
}

fn write_int(out: &mut Vec<u8>, flags: u8, prefix: u8, value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    write_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Encodes fields as literals without indexing (never indexed where the client said so),
/// with literal names and no Huffman coding: stateless, so any decoder reads it.
pub fn encode(fields: &[Field], out: &mut Vec<u8>) {
    for f in fields {
        out.push(if f.sensitive { 0x10 } else { 0x00 });
        write_string(out, &f.name);
        write_string(out, &f.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn pairs(fields: &[Field]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|f| {
                (
                    String::from_utf8_lossy(&f.name).into_owned(),
                    String::from_utf8_lossy(&f.value).into_owned(),
                )
            })
            .collect()
    }

    fn p(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn decodes_the_rfc_request_sequence_with_huffman_and_a_dynamic_table() {
        // RFC 7541 C.4: three requests on one connection.
        let mut d = Decoder::new(1 << 16);
        let first = d
            .decode(&hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"))
            .unwrap();
        assert_eq!(
            pairs(&first),
            p(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        let second = d.decode(&hex("8286 84be 5886 a8eb 1064 9cbf")).unwrap();
        assert_eq!(
            pairs(&second),
            p(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        let third = d
            .decode(&hex(
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ))
            .unwrap();
        assert_eq!(
            pairs(&third),
            p(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.size, 164);
    }

    #[test]
    fn decodes_the_rfc_literal_examples() {
        let mut d = Decoder::new(1 << 16);
        // C.2.3: never indexed.
        let f = d
            .decode(&hex("1008 7061 7373 776f 7264 0673 6563 7265 74"))
            .unwrap();
        assert_eq!(pairs(&f), p(&[("password", "secret")]));
        assert!(f[0].sensitive);
        // C.2.2: without indexing, indexed name.
        let f = d
            .decode(&hex("040c 2f73 616d 706c 652f 7061 7468"))
            .unwrap();
        assert_eq!(pairs(&f), p(&[(":path", "/sample/path")]));
        assert!(d.table.is_empty());
    }

    #[test]
    fn eviction_and_table_size_updates_follow_the_rfc() {
        let mut d = Decoder::new(1 << 16);
        // A size update to 0 then a literal with incremental indexing: nothing is kept.
        let f = d.decode(&hex("20 4001 6101 62")).unwrap();
        assert_eq!(pairs(&f), p(&[("a", "b")]));
        assert!(d.table.is_empty());
        // Back to 34 bytes: one 34-byte entry fits, a second evicts the first.
        d.decode(&hex("3f03 4001 6101 62")).unwrap();
        assert_eq!(d.size, 34);
        d.decode(&hex("4001 6301 64")).unwrap();
        assert_eq!(d.table.len(), 1);
        let f = d.decode(&hex("be")).unwrap();
        assert_eq!(pairs(&f), p(&[("c", "d")]));
        assert_eq!(d.decode(&hex("bf")), Err(HpackError::InvalidIndex(63)));
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        let mut d = Decoder::new(1 << 16);
        for (block, want) in [
            ("80", HpackError::InvalidIndex(0)),
            ("ff", HpackError::Truncated),
            ("ffffffffffffff", HpackError::IntegerOverflow),
            ("4005 6162", HpackError::Truncated),
            ("3fe9 26", HpackError::TableSize(5000)),
            ("82 20", HpackError::LateTableSizeUpdate),
        ] {
            assert_eq!(d.decode(&hex(block)), Err(want), "{block}");
        }
        let mut small = Decoder::new(40);
        assert_eq!(
            small.decode(&hex("0001 6101 62 0001 6301 64")),
            Err(HpackError::TooLarge(40))
        );
    }

    #[test]
    fn encoded_fields_decode_to_the_same_fields() {
        let long = "v".repeat(300);
        let fields: Vec<Field> = [(":authority", "localhost", false), ("x", &long, true)]
            .iter()
            .map(|(n, v, s)| Field {
                name: n.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
                sensitive: *s,
            })
            .collect();
        let mut out = Vec::new();
        encode(&fields, &mut out);
        let mut d = Decoder::new(1 << 16);
        assert_eq!(d.decode(&out).unwrap(), fields);
        assert!(d.table.is_empty());
    }
}
