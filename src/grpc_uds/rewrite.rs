//! The client-to-server half of an HTTP/2 connection, rewritten on the fly so that a
//! `:authority` the server's HTTP/2 library would refuse becomes `localhost`.
//!
//! grpc C-core (Python, C++, Ruby clients) sends the percent-encoded socket path as the
//! authority of a unix-socket target, grpc-java and others the bare path; h2 rejects both
//! with RST_STREAM PROTOCOL_ERROR, while upstream's Go server ignores the authority. Frames
//! other than HEADERS and CONTINUATION pass through untouched; header blocks are decoded with
//! the client's dynamic table and re-encoded statelessly (see `hpack`).

use bytes::{Buf, BytesMut};

use super::hpack::{self, Decoder, Field, HpackError};

/// The client connection preface (RFC 9113 3.4), passed through as it is.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Every HTTP/2 peer accepts frames of this size (the SETTINGS_MAX_FRAME_SIZE minimum).
const MAX_FRAME: usize = 16_384;
/// Bounds on one header block: far above what h2 itself accepts (16 KiB of headers by
/// default), so a request the server would refuse politely still reaches it.
const MAX_BLOCK: usize = 256 * 1024;
const MAX_LIST: usize = 1024 * 1024;
/// What grpc-go's unix resolver sends, and what upstream's kubelet presents to runtimes.
pub const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error("header block of stream {0}: {1}")]
    Hpack(u32, #[source] HpackError),
    #[error("frame type {got:#x} on stream {stream} inside the header block of stream {open}")]
    Interleaved { got: u8, stream: u32, open: u32 },
    #[error("CONTINUATION on stream {0} without a header block")]
    StrayContinuation(u32),
    #[error("HEADERS frame of stream {0} is shorter than its padding and priority")]
    ShortHeaders(u32),
    #[error("header block of stream {0} exceeds {MAX_BLOCK} bytes")]
    BlockTooLarge(u32),
}

#[derive(Debug)]
enum State {
    Preface {
        left: usize,
    },
    FrameHeader,
    /// Payload bytes of a frame that is passed through.
    Passthrough {
        left: usize,
    },
    /// A HEADERS or CONTINUATION frame, collected whole.
    Block {
        kind: u8,
        flags: u8,
        stream: u32,
        len: usize,
    },
}

/// A header block being collected across HEADERS and CONTINUATION frames.
#[derive(Debug)]
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

#[derive(Debug)]
pub struct Rewriter {
    state: State,
    decoder: Decoder,
    open: Option<OpenBlock>,
    /// How many authorities were replaced (for a log line and tests).
    pub rewritten: u64,
}

impl Default for Rewriter {
    fn default() -> Self {
        Rewriter {
            state: State::Preface { left: PREFACE_LEN },
            decoder: Decoder::new(MAX_LIST),
            open: None,
            rewritten: 0,
        }
    }
}

impl Rewriter {
    /// Consumes what it can of `input` (a partial frame stays there for the next call) and
    /// appends the bytes to hand to the server to `out`.
    pub fn process(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<(), RewriteError> {
        loop {
            match self.state {
                State::Preface { left } | State::Passthrough { left } => {
                    let n = left.min(input.len());
                    out.extend_from_slice(&input.split_to(n));
                    let left = left - n;
                    if left > 0 {
                        self.state = match self.state {
                            State::Preface { .. } => State::Preface { left },
                            _ => State::Passthrough { left },
                        };
                        return Ok(());
                    }
                    self.state = State::FrameHeader;
                }
                State::FrameHeader => {
                    if input.len() < FRAME_HEADER_LEN {
                        return Ok(());
                    }
                    let len = usize::from(input[0]) << 16
                        | usize::from(input[1]) << 8
                        | usize::from(input[2]);
                    let kind = input[3];
                    let flags = input[4];
                    let stream =
                        u32::from_be_bytes([input[5], input[6], input[7], input[8]]) & 0x7fff_ffff;
                    match (kind, &self.open) {
                        (CONTINUATION, Some(open)) if open.stream == stream => {}
                        (CONTINUATION, None) => {
                            return Err(RewriteError::StrayContinuation(stream));
                        }
                        (HEADERS, None) => {}
                        (got, Some(open)) => {
                            return Err(RewriteError::Interleaved {
                                got,
                                stream,
                                open: open.stream,
                            });
                        }
                        (_, None) => {
                            out.extend_from_slice(&input.split_to(FRAME_HEADER_LEN));
                            self.state = State::Passthrough { left: len };
                            continue;
                        }
                    }
                    if len > MAX_BLOCK {
                        return Err(RewriteError::BlockTooLarge(stream));
                    }
                    input.advance(FRAME_HEADER_LEN);
                    self.state = State::Block {
                        kind,
                        flags,
                        stream,
                        len,
                    };
                }
                State::Block {
                    kind,
                    flags,
                    stream,
                    len,
                } => {
                    if input.len() < len {
                        return Ok(());
                    }
                    let payload = input.split_to(len);
                    self.state = State::FrameHeader;
                    self.collect(kind, flags, stream, &payload)?;
                    if flags & END_HEADERS != 0 {
                        self.finish(out)?;
                    }
                }
            }
        }
    }

    fn collect(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> Result<(), RewriteError> {
        if kind == CONTINUATION {
            let open = self
                .open
                .as_mut()
                .ok_or(RewriteError::StrayContinuation(stream))?;
            if open.fragment.len() + payload.len() > MAX_BLOCK {
                return Err(RewriteError::BlockTooLarge(stream));
            }
            open.fragment.extend_from_slice(payload);
            return Ok(());
        }
        let short = || RewriteError::ShortHeaders(stream);
        let mut body = payload;
        let mut pad = 0usize;
        if flags & PADDED != 0 {
            let (&p, rest) = body.split_first().ok_or_else(short)?;
            pad = usize::from(p);
            body = rest;
        }
        let priority = if flags & PRIORITY != 0 {
            let (p, rest) = body.split_first_chunk::<5>().ok_or_else(short)?;
            body = rest;
            Some(*p)
        } else {
            None
        };
        let fragment = body
            .get(..body.len().checked_sub(pad).ok_or_else(short)?)
            .ok_or_else(short)?;
        self.open = Some(OpenBlock {
            stream,
            end_stream: flags & END_STREAM != 0,
            priority,
            fragment: fragment.to_vec(),
        });
        Ok(())
    }

    fn finish(&mut self, out: &mut BytesMut) -> Result<(), RewriteError> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let mut fields = self
            .decoder
            .decode(&open.fragment)
            .map_err(|e| RewriteError::Hpack(open.stream, e))?;
        self.rewritten += replace_bad_authority(&mut fields);
        let mut block = Vec::with_capacity(open.fragment.len() * 2);
        hpack::encode(&fields, &mut block);
        write_frames(out, &open, &block);
        Ok(())
    }
}

/// Replaces an `:authority` that is not a valid URI authority; a valid one stays as sent.
fn replace_bad_authority(fields: &mut [Field]) -> u64 {
    let mut n = 0;
    for f in fields.iter_mut().filter(|f| f.name == b":authority") {
        if http::uri::Authority::try_from(f.value.as_slice()).is_err() {
            f.value = REPLACEMENT_AUTHORITY.to_vec();
            n += 1;
        }
    }
    n
}

/// One HEADERS frame and as many CONTINUATIONs as the block needs, none above `MAX_FRAME`.
fn write_frames(out: &mut BytesMut, open: &OpenBlock, block: &[u8]) {
    let priority = open.priority.as_ref().map(|p| &p[..]).unwrap_or(&[]);
    let first_room = MAX_FRAME - priority.len();
    let (first, mut rest) = block.split_at(block.len().min(first_room));
    let mut flags = 0;
    if open.end_stream {
        flags |= END_STREAM;
    }
    if open.priority.is_some() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    frame_header(
        out,
        priority.len() + first.len(),
        HEADERS,
        flags,
        open.stream,
    );
    out.extend_from_slice(priority);
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME));
        rest = tail;
        let flags = if rest.is_empty() { END_HEADERS } else { 0 };
        frame_header(out, chunk.len(), CONTINUATION, flags, open.stream);
        out.extend_from_slice(chunk);
    }
}

fn frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

#[cfg(test)]
mod tests;
