use super::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out.to_vec()
}

fn raw(s: &str) -> Vec<u8> {
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

/// A request as grpc C-core encodes it: `:authority` (static name 1) added to the dynamic
/// table with the percent-encoded socket path; a Huffman-coded custom value.
fn first_block() -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    b.push(0x44); // :path, incremental indexing
    b.extend(raw("/v1.PodResourcesLister/List"));
    b.push(0x41); // :authority, incremental indexing
    b.extend(raw("var%2Flib%2Fkubelet%2Fpod-resources%2Fkubelet.sock"));
    b.push(0x40);
    b.extend(raw("x-site"));
    // "www.example.com", Huffman-coded (RFC 7541 C.4.1).
    b.extend([
        0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
    ]);
    b
}

/// The next request: everything from the dynamic table (x-site 62, :authority 63, :path 64).
fn second_block() -> Vec<u8> {
    vec![0x83, 0x86, 0xc0, 0xbf, 0xbe]
}

fn client_stream() -> Vec<u8> {
    let mut s = PREFACE.to_vec();
    s.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0x10, 0])); // SETTINGS
    s.extend(frame(0x8, 0, 0, &[0, 0, 0x10, 0])); // WINDOW_UPDATE
    // HEADERS with padding and priority.
    let mut p = vec![3];
    p.extend([0, 0, 0, 0, 15]);
    p.extend(first_block());
    p.extend([0, 0, 0]);
    s.extend(frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &p));
    s.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
    // The second request's block split over a HEADERS and a CONTINUATION.
    let b = second_block();
    s.extend(frame(HEADERS, 0, 3, &b[..2]));
    s.extend(frame(CONTINUATION, END_HEADERS, 3, &b[2..]));
    s.extend(frame(0x0, END_STREAM, 3, &[0, 0, 0, 0, 0]));
    s
}

#[derive(Debug, PartialEq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    assert!(bytes.starts_with(PREFACE));
    bytes = &bytes[PREFACE.len()..];
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        out.push(Frame {
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes(bytes[5..9].try_into().unwrap()),
            payload: bytes[9..9 + len].to_vec(),
        });
        bytes = &bytes[9 + len..];
    }
    out
}

fn run(input: &[u8], chunk: usize) -> Result<(Vec<u8>, u64), RewriteError> {
    let mut r = Rewriter::default();
    let mut pending = BytesMut::new();
    let mut out = BytesMut::new();
    for piece in input.chunks(chunk) {
        pending.extend_from_slice(piece);
        r.process(&mut pending, &mut out)?;
    }
    assert!(pending.is_empty(), "left unconsumed: {pending:?}");
    Ok((out.to_vec(), r.rewritten))
}

fn fields(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
    d.decode(block)
        .unwrap()
        .into_iter()
        .map(|f| {
            (
                String::from_utf8(f.name).unwrap(),
                String::from_utf8(f.value).unwrap(),
            )
        })
        .collect()
}

#[test]
fn bad_authorities_become_localhost_and_everything_else_passes_unchanged() {
    let input = client_stream();
    let (whole, n) = run(&input, input.len()).unwrap();
    assert_eq!(n, 2);
    // Split anywhere, the output is the same.
    for chunk in [1, 2, 7, 9, 10, 100] {
        assert_eq!(run(&input, chunk).unwrap().0, whole, "chunks of {chunk}");
    }
    let got = frames(&whole);
    let want_in = frames(&input);
    assert_eq!(got.len(), want_in.len() - 1, "CONTINUATION merged: {got:?}");
    // SETTINGS, WINDOW_UPDATE and DATA are byte for byte what the client sent.
    assert_eq!(got[0], want_in[0]);
    assert_eq!(got[1], want_in[1]);
    assert_eq!(got[3], want_in[3]);
    assert_eq!(got[5], want_in[6]);

    let mut d = Decoder::new(1 << 20);
    let h1 = &got[2];
    assert_eq!((h1.kind, h1.stream), (HEADERS, 1));
    assert_eq!(
        h1.flags,
        END_HEADERS | PRIORITY,
        "padding dropped, priority kept"
    );
    assert_eq!(h1.payload[..5], [0, 0, 0, 0, 15]);
    let want = vec![
        (":method".to_string(), "POST".to_string()),
        (":scheme".into(), "http".into()),
        (":path".into(), "/v1.PodResourcesLister/List".into()),
        (":authority".into(), "localhost".into()),
        ("x-site".into(), "www.example.com".into()),
    ];
    assert_eq!(fields(&mut d, &h1.payload[5..]), want);
    let h3 = &got[4];
    assert_eq!((h3.kind, h3.flags, h3.stream), (HEADERS, END_HEADERS, 3));
    assert_eq!(fields(&mut d, &h3.payload), want);
}

#[test]
fn a_valid_authority_is_left_alone() {
    let mut block = vec![0x83, 0x86, 0x44];
    block.extend(raw("/x"));
    block.push(0x01);
    block.extend(raw("[::]:50051"));
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
    let (out, n) = run(&input, 3).unwrap();
    assert_eq!(n, 0);
    let got = frames(&out);
    assert_eq!(got[0].flags, END_HEADERS | END_STREAM);
    let f = fields(&mut Decoder::new(1 << 20), &got[0].payload);
    assert_eq!(f[3], (":authority".into(), "[::]:50051".into()));
}

#[test]
fn a_block_larger_than_a_frame_goes_out_as_headers_and_continuations() {
    let mut block = vec![0x83, 0x86, 0x01];
    block.extend(raw("/a/socket"));
    for i in 0..40 {
        block.push(0x00);
        block.extend(raw(&format!("x-{i}")));
        // 1000-byte value: length 1000 with a 7-bit prefix.
        block.extend([0x7f, 0xe9, 0x06]);
        block.extend(std::iter::repeat_n(b'v', 1000));
    }
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 5, &block));
    let (out, n) = run(&input, 4096).unwrap();
    assert_eq!(n, 1);
    let got = frames(&out);
    assert!(got.len() >= 3, "{} frames", got.len());
    assert!(got.iter().all(|f| f.payload.len() <= MAX_FRAME));
    assert_eq!(got[0].kind, HEADERS);
    assert_eq!(got[0].flags & END_HEADERS, 0);
    assert!(
        got[1..]
            .iter()
            .all(|f| f.kind == CONTINUATION && f.stream == 5)
    );
    assert_eq!(got.last().unwrap().flags, END_HEADERS);
    let joined: Vec<u8> = got.iter().flat_map(|f| f.payload.clone()).collect();
    let f = fields(&mut Decoder::new(1 << 20), &joined);
    assert_eq!(f.len(), 43);
    assert_eq!(f[2], (":authority".into(), "localhost".into()));
}

#[test]
fn protocol_errors_close_the_connection_instead_of_guessing() {
    let with = |frames_after: Vec<Vec<u8>>| {
        let mut input = PREFACE.to_vec();
        frames_after.into_iter().for_each(|f| input.extend(f));
        run(&input, input.len())
    };
    assert!(matches!(
        with(vec![frame(CONTINUATION, END_HEADERS, 1, &[0x82])]),
        Err(RewriteError::StrayContinuation(1))
    ));
    assert!(matches!(
        with(vec![frame(HEADERS, 0, 1, &[0x82]), frame(0x0, 0, 1, &[0]),]),
        Err(RewriteError::Interleaved {
            got: 0,
            stream: 1,
            open: 1
        })
    ));
    assert!(matches!(
        with(vec![frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82])]),
        Err(RewriteError::ShortHeaders(1))
    ));
    assert!(matches!(
        with(vec![frame(HEADERS, END_HEADERS, 1, &[0x80])]),
        Err(RewriteError::Hpack(1, HpackError::InvalidIndex(0)))
    ));
    let mut huge = BytesMut::new();
    frame_header(&mut huge, MAX_BLOCK + 1, HEADERS, 0, 1);
    assert!(matches!(
        with(vec![huge.to_vec()]),
        Err(RewriteError::BlockTooLarge(1))
    ));
}
