//! Just enough DER to read a certificate's validity window and subject, split a certificate
//! into the parts its signature covers and, in tests, read a CSR's subject. Extensions are
//! read with x509-parser (see pki.rs).

use jiff::Timestamp;

/// One tag-length-value element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tlv<'a> {
    pub tag: u8,
    pub body: &'a [u8],
}

pub(crate) const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The first element of `input` and what follows it; `None` on malformed or truncated input.
pub(crate) fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((
        Tlv {
            tag,
            body: &rest[..len],
        },
        &rest[len..],
    ))
}

/// The first element of `input` whole (tag and length included) and what follows it: the
/// bytes a signature covers.
pub(crate) fn read_raw(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_, rest) = read(input)?;
    let len = input.len() - rest.len();
    Some((&input[..len], rest))
}

/// All elements inside a constructed element's body.
pub(crate) fn children(mut body: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let (tlv, rest) = read(body)?;
        out.push(tlv);
        body = rest;
    }
    Some(out)
}

/// notBefore and notAfter of a DER certificate.
pub(crate) fn validity(cert: &[u8]) -> Option<(Timestamp, Timestamp)> {
    let (cert, _) = read(cert).filter(|(t, _)| t.tag == SEQUENCE)?;
    let (tbs, _) = read(cert.body).filter(|(t, _)| t.tag == SEQUENCE)?;
    let fields = children(tbs.body)?;
    // The version is an optional explicit [0] tag ahead of the serial number.
    let skip = usize::from(fields.first()?.tag == 0xa0);
    // serial, signature algorithm, issuer, then validity.
    let window = fields.get(skip + 3).filter(|t| t.tag == SEQUENCE)?;
    let times = children(window.body)?;
    match times.as_slice() {
        [a, b] => Some((time(a)?, time(b)?)),
        _ => None,
    }
}

fn time(tlv: &Tlv<'_>) -> Option<Timestamp> {
    let text = std::str::from_utf8(tlv.body).ok()?;
    let digits = text.strip_suffix('Z')?;
    let full = match tlv.tag {
        // Two-digit years: 50..99 are 19xx, per RFC 5280.
        UTC_TIME if digits.len() == 12 => {
            let yy: u32 = digits.get(..2)?.parse().ok()?;
            let century = if yy >= 50 { "19" } else { "20" };
            format!("{century}{digits}")
        }
        GENERALIZED_TIME if digits.len() == 14 => digits.to_string(),
        _ => return None,
    };
    if !full.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &full[..4],
        &full[4..6],
        &full[6..8],
        &full[8..10],
        &full[10..12],
        &full[12..14]
    );
    iso.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_truncated_input() {
        assert!(read(&[0x30, 0x05, 0x01]).is_none());
        assert!(read(&[0x30]).is_none());
        assert!(validity(b"not a certificate").is_none());
    }

    #[test]
    fn reads_long_lengths() {
        let mut data = vec![0x04, 0x81, 200];
        data.extend(std::iter::repeat_n(7u8, 200));
        let (tlv, rest) = read(&data).unwrap();
        assert_eq!(tlv.body.len(), 200);
        assert!(rest.is_empty());
    }

    #[test]
    fn parses_both_time_forms() {
        let utc = Tlv {
            tag: UTC_TIME,
            body: b"491231235959Z",
        };
        assert_eq!(time(&utc).unwrap().to_string(), "2049-12-31T23:59:59Z");
        let old = Tlv {
            tag: UTC_TIME,
            body: b"700101000000Z",
        };
        assert_eq!(time(&old).unwrap().as_second(), 0);
        let gen_time = Tlv {
            tag: GENERALIZED_TIME,
            body: b"20500101000000Z",
        };
        assert_eq!(time(&gen_time).unwrap().to_string(), "2050-01-01T00:00:00Z");
    }
}
