//! Reading one container log file for /containerLogs, chunk by chunk, as upstream's
//! kuberuntime log reader does: tail from the end of the file, skip lines before `since`,
//! prefix timestamps, stop at `limitBytes`, and with `follow` keep reading while the container
//! runs, moving to the new file when the log is rotated.
//!
//! Only the current file is read, never the rotated `<log>.<time>[.gz]` ones: upstream's
//! reader does the same, so a rotation drops older lines from what `kubectl logs` shows.
//!
//! Errors after the response has started cannot change its status; like upstream, their text
//! becomes the end of the body.

use std::convert::Infallible;
use std::future::Future;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use tokio::fs::File;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use super::cri_format::{self, Format, Message, Stream as LogStream};
use super::options::ReadOptions;

/// Output is handed to the body in pieces of about this size.
const CHUNK: usize = 32 * 1024;
/// A line longer than this (no newline in sight) is cut, so a broken file cannot make one
/// request hold it all in memory. The runtime splits lines at 16 KiB by default.
const MAX_LINE: usize = 4 * 1024 * 1024;
/// How often a follower looks at the file for new data or a rotation.
const POLL: Duration = Duration::from_millis(100);
/// How often a follower asks whether the container still runs (upstream: every second).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// Block size when searching backwards for the tail's first line.
const TAIL_BLOCK: u64 = 32 * 1024;

/// The log at `path` as a body stream. `running` is asked (about once a second, only with
/// `follow`) whether the container still runs; once it says no, the rest of the file is sent
/// and the stream ends. Dropping the stream stops everything: nothing runs in the background.
pub fn log_stream<F, Fut>(
    path: PathBuf,
    opts: ReadOptions,
    running: F,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let reader = LogReader::new(path, opts, running);
    futures::stream::unfold(reader, |mut r| async move {
        r.next_chunk().await.map(|b| (Ok(b), r))
    })
}

enum Flow {
    Continue,
    Stop,
}

/// A follower's progress through a rotation. The kubelet renames the log and asks the runtime
/// to reopen it; the runtime creates the new file and only a moment later moves its writes
/// there, so lines written in that moment land in the old file.
#[derive(Clone, Copy)]
enum Switch {
    /// The path names the file being read.
    None,
    /// The path names a new file that is still empty.
    Seen,
    /// The new file has data: read the old one to its end, then move.
    Drain,
}

struct Open {
    reader: BufReader<File>,
    /// Device and inode, to notice that the path now names another file.
    ident: (u64, u64),
    /// Bytes consumed so far, to notice that the file grew.
    offset: u64,
}

struct LogReader<F> {
    path: PathBuf,
    opts: ReadOptions,
    file: Option<Open>,
    format: Option<Format>,
    remaining_bytes: Option<u64>,
    /// Lines still to send when a tail is asked for without follow.
    remaining_lines: Option<u64>,
    /// The line being read, until its newline arrives.
    pending: Vec<u8>,
    out: Vec<u8>,
    /// False once the container was seen not running: read to the end, then stop.
    running_seen: bool,
    /// How far a rotation of the followed file has got.
    switch: Switch,
    last_status: Option<Instant>,
    running: F,
    done: bool,
}

impl<F, Fut> LogReader<F>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    fn new(path: PathBuf, opts: ReadOptions, running: F) -> Self {
        LogReader {
            remaining_bytes: opts.limit_bytes,
            remaining_lines: opts.tail.filter(|_| !opts.follow),
            path,
            opts,
            file: None,
            format: None,
            pending: Vec::new(),
            out: Vec::new(),
            running_seen: true,
            switch: Switch::None,
            last_status: None,
            running,
            done: false,
        }
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        if self.file.is_none()
            && let Err(msg) = self.open_first().await
        {
            tracing::warn!(path = %self.path.display(), err = %msg, "Cannot read container log");
            self.done = true;
            return Some(Bytes::from(msg));
        }
        loop {
            if self.remaining_lines == Some(0) {
                return self.finish();
            }
            if let Err(e) = self.read_line().await {
                self.fail(format!(
                    "failed to read log file {:?}: {e}",
                    self.path.display()
                ));
                return self.finish();
            }
            if self.pending.last() == Some(&b'\n') || self.pending.len() >= MAX_LINE {
                let line = std::mem::take(&mut self.pending);
                if let Flow::Stop = self.handle_line(&line) {
                    return self.finish();
                }
                if self.out.len() >= CHUNK {
                    return Some(Bytes::from(std::mem::take(&mut self.out)));
                }
                continue;
            }
            // End of the file, perhaps in the middle of a line.
            if !self.opts.follow {
                if !self.pending.is_empty() {
                    let line = std::mem::take(&mut self.pending);
                    tracing::debug!(path = %self.path.display(), "Incomplete line in log file");
                    self.handle_line(&line);
                }
                return self.finish();
            }
            if !self.out.is_empty() {
                return Some(Bytes::from(std::mem::take(&mut self.out)));
            }
            match self.switch {
                Switch::Drain => {
                    self.switch = Switch::None;
                    if let Err(msg) = self.reopen().await {
                        self.fail(msg);
                        return self.finish();
                    }
                    continue;
                }
                Switch::Seen => match self.other_file_len().await {
                    // The runtime writes to the new file only once it has let go of the
                    // old one, so the old one's end is final now: read it once more.
                    Some(len) if len > 0 => {
                        self.switch = Switch::Drain;
                        continue;
                    }
                    Some(_) => {}
                    // Renamed back (the runtime could not reopen): still our file.
                    None => self.switch = Switch::None,
                },
                Switch::None => {
                    if self.other_file_len().await.is_some() {
                        // The runtime may still write to the old file for a while after
                        // the new one appears; keep reading the old one until then.
                        self.switch = Switch::Seen;
                        continue;
                    }
                }
            }
            if !self.running_seen {
                return self.finish();
            }
            self.wait().await;
        }
    }

    fn finish(&mut self) -> Option<Bytes> {
        self.done = true;
        (!self.out.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.out)))
    }

    fn fail(&mut self, msg: String) {
        tracing::warn!(path = %self.path.display(), err = %msg, "Container log stream ended");
        self.out.extend_from_slice(msg.as_bytes());
    }

    /// Resolves symlinks (the runtime's log path may be one), opens, and seeks to the tail.
    async fn open_first(&mut self) -> Result<(), String> {
        let resolved = tokio::fs::canonicalize(&self.path).await.map_err(|e| {
            format!(
                "failed to try resolving symlinks in path {:?}: {e}",
                self.path.display()
            )
        })?;
        self.path = resolved;
        let path = self.path.clone();
        let tail = self.opts.tail;
        let opened = tokio::task::spawn_blocking(move || open_at_tail(&path, tail))
            .await
            .map_err(|e| format!("failed to open log file: {e}"))??;
        self.file = Some(opened);
        Ok(())
    }

    /// Moves to the file now at the path. A path with no file yet keeps the old one.
    async fn reopen(&mut self) -> Result<(), String> {
        let path = self.path.clone();
        let opened = tokio::task::spawn_blocking(move || open_at_tail(&path, None))
            .await
            .map_err(|e| format!("failed to open log file: {e}"))?;
        match opened {
            Ok(new) => {
                if !self.pending.is_empty() {
                    // The old file ended mid-line and will not grow any more.
                    let line = std::mem::take(&mut self.pending);
                    self.handle_line(&line);
                }
                tracing::debug!(path = %self.path.display(), "Following the rotated container log");
                self.file = Some(new);
                Ok(())
            }
            Err(_) if !self.path.exists() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Appends to `pending` up to and including the next newline, or to the end of the file.
    async fn read_line(&mut self) -> std::io::Result<()> {
        let Some(open) = self.file.as_mut() else {
            return Ok(());
        };
        loop {
            let buf = open.reader.fill_buf().await?;
            if buf.is_empty() {
                return Ok(());
            }
            let room = MAX_LINE.saturating_sub(self.pending.len());
            let window = &buf[..buf.len().min(room)];
            let (take, complete) = match window.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (window.len(), false),
            };
            self.pending.extend_from_slice(&window[..take]);
            open.reader.consume(take);
            open.offset += take as u64;
            if complete || self.pending.len() >= MAX_LINE {
                return Ok(());
            }
        }
    }

    fn handle_line(&mut self, line: &[u8]) -> Flow {
        let format = match self.format {
            Some(f) => f,
            None => match cri_format::detect(line) {
                Some(f) => *self.format.insert(f),
                None => {
                    self.fail(format!(
                        "failed to get parse function: unsupported log format: {:?}",
                        String::from_utf8_lossy(line)
                    ));
                    return Flow::Stop;
                }
            },
        };
        let msg = match cri_format::parse(format, line) {
            Ok(m) => m,
            Err(err) => {
                tracing::warn!(path = %self.path.display(), %err, "Failed when parsing line in log file");
                return Flow::Continue;
            }
        };
        let flow = self.write(&msg);
        if let Some(n) = self.remaining_lines.as_mut() {
            *n = n.saturating_sub(1);
        }
        flow
    }

    fn write(&mut self, msg: &Message<'_>) -> Flow {
        if self.opts.since.is_some_and(|since| msg.timestamp < since) {
            return Flow::Continue;
        }
        if let LogStream::Other(s) = &msg.stream {
            self.fail(format!("unexpected stream type {s:?}"));
            return Flow::Stop;
        }
        let prefix = self.opts.timestamps.then(|| {
            let mut p = cri_format::format_timestamp(msg.timestamp, msg.offset_seconds);
            p.push(' ');
            p
        });
        let parts = [prefix.as_deref().unwrap_or("").as_bytes(), &msg.content];
        for part in parts {
            let take = match self.remaining_bytes {
                Some(rem) => part.len().min(usize::try_from(rem).unwrap_or(usize::MAX)),
                None => part.len(),
            };
            self.out.extend_from_slice(&part[..take]);
            if let Some(rem) = self.remaining_bytes.as_mut() {
                *rem -= take as u64;
                if *rem == 0 {
                    return Flow::Stop;
                }
            }
        }
        Flow::Continue
    }

    /// The size of the file the path names, when that is not the file being read.
    async fn other_file_len(&mut self) -> Option<u64> {
        let open = self.file.as_ref()?;
        let m = tokio::fs::metadata(&self.path).await.ok()?;
        ((m.dev(), m.ino()) != open.ident).then_some(m.len())
    }

    /// True when waiting should end for the rotation: the new file appeared, or it got its
    /// first data while the old one is still being read.
    async fn switch_moved(&mut self) -> bool {
        match self.switch {
            Switch::None => self.other_file_len().await.is_some(),
            Switch::Seen => self.other_file_len().await.is_some_and(|n| n > 0),
            Switch::Drain => true,
        }
    }

    async fn grew(&mut self) -> bool {
        let Some(open) = self.file.as_ref() else {
            return false;
        };
        match open.reader.get_ref().metadata().await {
            Ok(m) => m.len() > open.offset,
            Err(_) => false,
        }
    }

    /// Waits for new data, a rotation, or a second to pass; asks whether the container still
    /// runs when a second has passed since the last time.
    async fn wait(&mut self) {
        let now = Instant::now();
        if self
            .last_status
            .is_none_or(|t| now.duration_since(t) >= STATUS_EVERY)
        {
            self.last_status = Some(now);
            if !(self.running)().await {
                self.running_seen = false;
                return;
            }
        }
        let deadline = now + STATUS_EVERY;
        loop {
            tokio::time::sleep(POLL).await;
            if self.grew().await || self.switch_moved().await || Instant::now() >= deadline {
                return;
            }
        }
    }
}

fn open_at_tail(path: &Path, tail: Option<u64>) -> Result<Open, String> {
    let fail = |e: std::io::Error| format!("failed to open log file {:?}: {e}", path.display());
    let mut f = std::fs::File::open(path).map_err(fail)?;
    let meta = f.metadata().map_err(fail)?;
    let start = match tail {
        Some(n) => tail_start(&mut f, n).map_err(|e| {
            format!(
                "failed to tail {n} lines of log file {:?}: {e}",
                path.display()
            )
        })?,
        None => 0,
    };
    f.seek(SeekFrom::Start(start)).map_err(|e| {
        format!(
            "failed to seek {start} in log file {:?}: {e}",
            path.display()
        )
    })?;
    Ok(Open {
        reader: BufReader::new(File::from_std(f)),
        ident: (meta.dev(), meta.ino()),
        offset: start,
    })
}

/// Where the last `n` complete lines start; an unterminated last line is not counted but
/// comes along. Reads backwards block by block, so only one block is in memory.
fn tail_start(f: &mut std::fs::File, n: u64) -> std::io::Result<u64> {
    let size = f.seek(SeekFrom::End(0))?;
    // The start is just after the (n+1)-th newline from the end.
    let mut wanted = n + 1;
    let mut right = size;
    let mut buf = vec![0u8; TAIL_BLOCK as usize];
    while right > 0 {
        let left = right.saturating_sub(TAIL_BLOCK);
        let len = (right - left) as usize;
        f.seek(SeekFrom::Start(left))?;
        f.read_exact(&mut buf[..len])?;
        for (i, b) in buf[..len].iter().enumerate().rev() {
            if *b == b'\n' {
                wanted -= 1;
                if wanted == 0 {
                    return Ok(left + i as u64 + 1);
                }
            }
        }
        right = left;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    const T1: &str = "2024-01-01T00:00:01.000000001Z";
    const T2: &str = "2024-01-01T00:00:02Z";
    const T3: &str = "2024-01-01T00:00:03.5Z";

    fn sample() -> String {
        format!("{T1} stdout F one\n{T2} stderr P tw\n{T2} stderr F o\n{T3} stdout F three\n")
    }

    fn write_file(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    async fn never() -> bool {
        panic!("asked whether the container runs without follow");
    }

    async fn read(path: PathBuf, opts: ReadOptions) -> String {
        let chunks: Vec<_> = log_stream(path, opts, never).collect().await;
        let bytes: Vec<u8> = chunks
            .into_iter()
            .flat_map(|c| c.unwrap_or_else(|e| match e {}).to_vec())
            .collect();
        String::from_utf8(bytes).unwrap()
    }

    #[tokio::test]
    async fn raw_content_with_partials_joined() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &sample());
        assert_eq!(read(p, ReadOptions::default()).await, "one\ntwo\nthree\n");
    }

    #[tokio::test]
    async fn tail_counts_file_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &sample());
        let tail = |n| ReadOptions {
            tail: Some(n),
            ..Default::default()
        };
        assert_eq!(read(p.clone(), tail(1)).await, "three\n");
        // Like upstream, a fragment is a line of its own for tailLines.
        assert_eq!(read(p.clone(), tail(2)).await, "o\nthree\n");
        assert_eq!(read(p.clone(), tail(0)).await, "");
        assert_eq!(read(p, tail(100)).await, "one\ntwo\nthree\n");
    }

    #[test]
    fn tail_start_positions() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "x", "a\nb\nc");
        let mut f = std::fs::File::open(&p).unwrap();
        assert_eq!(tail_start(&mut f, 0).unwrap(), 4);
        assert_eq!(tail_start(&mut f, 1).unwrap(), 2);
        assert_eq!(tail_start(&mut f, 2).unwrap(), 0);
        assert_eq!(tail_start(&mut f, 9).unwrap(), 0);
        // Across block boundaries.
        let long: String = (0..20_000).map(|i| format!("{i}\n")).collect();
        let p = write_file(dir.path(), "y", &long);
        let mut f = std::fs::File::open(&p).unwrap();
        let start = tail_start(&mut f, 3).unwrap() as usize;
        assert_eq!(&long[start..], "19997\n19998\n19999\n");
    }

    #[tokio::test]
    async fn since_skips_older_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &sample());
        let opts = ReadOptions {
            since: Some(T2.parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(read(p, opts).await, "two\nthree\n");
    }

    #[tokio::test]
    async fn timestamps_prefix_every_fragment() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &sample());
        let opts = ReadOptions {
            timestamps: true,
            ..Default::default()
        };
        assert_eq!(
            read(p, opts).await,
            "2024-01-01T00:00:01.000000001Z one\n\
             2024-01-01T00:00:02.000000000Z tw2024-01-01T00:00:02.000000000Z o\n\
             2024-01-01T00:00:03.500000000Z three\n"
        );
    }

    #[tokio::test]
    async fn limit_bytes_cuts_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &sample());
        let limit = |n, timestamps| ReadOptions {
            limit_bytes: Some(n),
            timestamps,
            ..Default::default()
        };
        assert_eq!(read(p.clone(), limit(6, false)).await, "one\ntw");
        assert_eq!(read(p.clone(), limit(4, false)).await, "one\n");
        assert_eq!(read(p.clone(), limit(10, true)).await, "2024-01-01");
        assert_eq!(read(p, limit(1000, false)).await, "one\ntwo\nthree\n");
    }

    #[tokio::test]
    async fn bad_lines_are_skipped_but_a_bad_first_line_ends_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(
            dir.path(),
            "0.log",
            &format!("{T1} stdout F a\nnot a log line\n{T2} stdin F x\n{T3} stdout F b"),
        );
        // The unterminated last line is still read, as upstream does without follow.
        assert_eq!(read(p, ReadOptions::default()).await, "a\nb");
        let p = write_file(dir.path(), "1.log", &format!("garbage\n{T1} stdout F a\n"));
        let out = read(p, ReadOptions::default()).await;
        assert!(
            out.starts_with("failed to get parse function: unsupported log format"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn missing_file_is_reported_in_the_body() {
        let dir = tempfile::tempdir().unwrap();
        let out = read(dir.path().join("nope.log"), ReadOptions::default()).await;
        assert!(out.contains("failed to try resolving symlinks"), "{out}");
    }

    #[tokio::test]
    async fn symlinked_log_is_followed_to_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let real = write_file(dir.path(), "real.log", &format!("{T1} stdout F linked\n"));
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(read(link, ReadOptions::default()).await, "linked\n");
    }

    #[tokio::test]
    async fn large_files_come_in_several_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (0..5000)
            .map(|i| format!("{T1} stdout F line {i}\n"))
            .collect();
        let p = write_file(dir.path(), "0.log", &body);
        let chunks: Vec<_> = log_stream(p, ReadOptions::default(), never).collect().await;
        assert!(chunks.len() > 1, "one chunk for {} lines", 5000);
        let total: usize = chunks
            .iter()
            .map(|c| c.as_ref().map_or(0, |b| b.len()))
            .sum();
        let expected: usize = (0..5000).map(|i| format!("line {i}\n").len()).sum();
        assert_eq!(total, expected);
    }

    fn append(path: &Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    async fn next_text<S>(s: &mut S) -> Option<String>
    where
        S: Stream<Item = Result<Bytes, Infallible>> + Unpin,
    {
        tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .expect("no output within 5s")
            .map(|b| String::from_utf8(b.unwrap_or_else(|e| match e {}).to_vec()).unwrap())
    }

    fn following() -> ReadOptions {
        ReadOptions {
            follow: true,
            ..Default::default()
        }
    }

    /// Adds chunks to `got` until it holds `needle`.
    async fn read_until<S>(s: &mut S, got: &mut String, needle: &str)
    where
        S: Stream<Item = Result<Bytes, Infallible>> + Unpin,
    {
        while !got.contains(needle) {
            *got += &next_text(s).await.expect("lines around the rotation");
        }
    }

    /// A follower that reads until the container "stops", through a rotation.
    #[tokio::test]
    async fn follow_appends_and_rotation_until_the_container_stops() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &format!("{T1} stdout F first\n"));
        let running = Arc::new(AtomicBool::new(true));
        let flag = running.clone();
        let opts = following();
        let mut stream = Box::pin(log_stream(p.clone(), opts, move || {
            let r = flag.load(Ordering::SeqCst);
            async move { r }
        }));
        let mut got = next_text(&mut stream).await.expect("first chunk");

        // Appended data, in two writes that split a line.
        append(&p, &format!("{T2} stdout F sec"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        append(&p, "ond\n");
        got += &next_text(&mut stream).await.expect("appended line");

        // Rotation the way the kubelet does it: rename, then the runtime writes a last line
        // to the old file before it opens a new one.
        let rotated = dir.path().join("0.log.20240101-000003");
        std::fs::rename(&p, &rotated).unwrap();
        append(&rotated, &format!("{T2} stdout F late in old\n"));
        append(&p, &format!("{T3} stdout F in new\n"));
        read_until(&mut stream, &mut got, "in new").await;

        // The container's last words come before it is seen stopped.
        append(&p, &format!("{T3} stdout F last\n"));
        running.store(false, Ordering::SeqCst);
        while let Some(more) = next_text(&mut stream).await {
            got += &more;
        }
        assert_eq!(got, "first\nsecond\nlate in old\nin new\nlast\n");
    }

    /// containerd creates the new file before it moves its writes there: lines that land in
    /// the old file after the new one appears are still read, before the new file's.
    #[tokio::test]
    async fn follow_reads_the_old_file_until_the_new_one_gets_data() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &format!("{T1} stdout F first\n"));
        let opts = following();
        let mut stream = Box::pin(log_stream(p.clone(), opts, || async { true }));
        let mut got = next_text(&mut stream).await.expect("first chunk");

        let rotated = dir.path().join("0.log.20240101-000003");
        std::fs::rename(&p, &rotated).unwrap();
        std::fs::File::create(&p).unwrap();
        // Several polls pass with the new file empty.
        let _ = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
        append(&rotated, &format!("{T2} stdout F late in old\n"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        append(&rotated, &format!("{T2} stdout F later in old\n"));
        append(&p, &format!("{T3} stdout F in new\n"));
        read_until(&mut stream, &mut got, "in new").await;
        assert_eq!(got, "first\nlate in old\nlater in old\nin new\n");
    }

    #[tokio::test]
    async fn follow_with_tail_starts_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &sample());
        let opts = ReadOptions {
            follow: true,
            tail: Some(1),
            ..Default::default()
        };
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            log_stream(p, opts, || async { false }).collect::<Vec<_>>(),
        )
        .await
        .expect("a follower of a stopped container must end");
        let text: String = out
            .into_iter()
            .map(|b| String::from_utf8(b.unwrap_or_else(|e| match e {}).to_vec()).unwrap())
            .collect();
        assert_eq!(text, "three\n");
    }

    /// Dropping the body mid-follow leaves nothing behind that keeps asking the runtime.
    #[tokio::test]
    async fn dropping_a_follower_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_file(dir.path(), "0.log", &format!("{T1} stdout F x\n"));
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let opts = following();
        let mut s = Box::pin(log_stream(p, opts, move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { true }
        }));
        assert!(s.next().await.is_some());
        // Let it wait at the end of the file for a while, then hang up.
        let _ = tokio::time::timeout(Duration::from_millis(1200), s.next()).await;
        let before = asked.load(Ordering::SeqCst);
        assert!(before >= 1, "the follower never asked about the container");
        drop(s);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(asked.load(Ordering::SeqCst), before);
    }
}
