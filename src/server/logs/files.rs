//! GET /logs/ and /logs/{*path}: the node's log directory, served the way upstream's kubelet
//! serves it (Go's file server over /var/log/): files as they are, directories as a `<pre>`
//! list of links, a directory asked for without its trailing slash redirected (301) to it.
//!
//! Unlike Go's file server, nothing outside the root is reachable: `..` is refused and a
//! symlink that resolves outside the root is forbidden.

use std::io::ErrorKind;
use std::path::Path;
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;

use super::LogsError;

/// Files are sent in pieces of this size.
const CHUNK: usize = 64 * 1024;
/// How much of a file decides its type when its name does not.
const SNIFF_LEN: usize = 512;

/// `/logs` has the directory's form only with a trailing slash.
pub async fn to_slash(uri: Uri) -> Response {
    redirect("/logs/", &uri)
}

pub async fn serve(root: &Path, rel: &str, uri: &Uri) -> Response {
    match try_serve(root, rel, uri).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn try_serve(root: &Path, rel: &str, uri: &Uri) -> Result<Response, LogsError> {
    // Go's file server sends any .../index.html to its directory.
    if uri.path().ends_with("/index.html") {
        return Ok(redirect("./", uri));
    }
    let segments = clean(rel)?;
    let root = tokio::fs::canonicalize(root).await.map_err(open_error)?;
    let target = tokio::fs::canonicalize(segments.iter().fold(root.clone(), |p, s| p.join(s)))
        .await
        .map_err(open_error)?;
    if !target.starts_with(&root) {
        tracing::warn!(path = %rel, "Refused a /logs path that leaves the log directory");
        return Err(LogsError::FileForbidden);
    }
    let meta = tokio::fs::metadata(&target).await.map_err(open_error)?;
    let slash = uri.path().ends_with('/');
    let base = segments.last().map_or("/", String::as_str);
    if meta.is_dir() && !slash {
        return Ok(redirect(&format!("{base}/"), uri));
    }
    if !meta.is_dir() && slash {
        return Ok(redirect(&format!("../{base}"), uri));
    }
    if meta.is_dir() {
        if let Ok(index) = tokio::fs::canonicalize(target.join("index.html")).await
            && index.starts_with(&root)
            && let Ok(m) = tokio::fs::metadata(&index).await
            && m.is_file()
        {
            return file(&index, &m).await;
        }
        return listing(&target, meta.modified().ok()).await;
    }
    file(&target, &meta).await
}

/// The path's segments without empty ones and `.`; `..` is refused outright.
fn clean(rel: &str) -> Result<Vec<String>, LogsError> {
    let mut out = Vec::new();
    for seg in rel.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(LogsError::FileNotFound),
            s if s.contains('\0') => return Err(LogsError::FileNotFound),
            s => out.push(s.to_string()),
        }
    }
    Ok(out)
}

fn open_error(e: std::io::Error) -> LogsError {
    match e.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory => LogsError::FileNotFound,
        ErrorKind::PermissionDenied => LogsError::FileForbidden,
        _ => {
            tracing::warn!(err = %e, "Cannot open a /logs path");
            LogsError::FileInternal
        }
    }
}

/// A relative redirect, keeping the query, as Go's file server sends it (no body).
fn redirect(to: &str, uri: &Uri) -> Response {
    let location = match uri.query() {
        Some(q) if !q.is_empty() => format!("{to}?{q}"),
        _ => to.to_string(),
    };
    match HeaderValue::from_str(&location) {
        Ok(v) => (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, v)]).into_response(),
        Err(_) => LogsError::FileNotFound.into_response(),
    }
}

async fn listing(dir: &Path, modified: Option<SystemTime>) -> Result<Response, LogsError> {
    let dir = dir.to_path_buf();
    let entries = tokio::task::spawn_blocking(move || read_dir_sorted(&dir))
        .await
        .map_err(|_| LogsError::ReadDir)?
        .map_err(|e| {
            tracing::warn!(err = %e, "http: error reading directory");
            LogsError::ReadDir
        })?;
    let mut html = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for (name, is_dir) in entries {
        let shown = if is_dir { format!("{name}/") } else { name };
        html.push_str(&format!(
            "<a href=\"{}\">{}</a>\n",
            href(&shown),
            escape_html(&shown)
        ));
    }
    html.push_str("</pre>\n");
    let mut resp = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    set_last_modified(&mut resp, modified);
    Ok(resp)
}

/// Names with whether they are directories (a symlink is not, as in Go's listing), sorted.
fn read_dir_sorted(dir: &Path) -> std::io::Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
    }
    out.sort();
    Ok(out)
}

/// A name as a relative URL path: percent-escapes what Go's url.URL escapes in a path, and
/// a `./` in front when a colon would read as a scheme.
fn href(name: &str) -> String {
    let mut out = String::new();
    if name
        .split('/')
        .next()
        .is_some_and(|first| first.contains(':'))
    {
        out.push_str("./");
    }
    for b in name.bytes() {
        let keep = b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b);
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn set_last_modified(resp: &mut Response, modified: Option<SystemTime>) {
    let Some(ts) = modified.and_then(|m| jiff::Timestamp::try_from(m).ok()) else {
        return;
    };
    if ts == jiff::Timestamp::UNIX_EPOCH {
        return;
    }
    let text = ts.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
    if let Ok(v) = HeaderValue::from_str(&text) {
        resp.headers_mut().insert(header::LAST_MODIFIED, v);
    }
}

/// The file, streamed: only the first bytes (for its type) are read before the answer.
async fn file(path: &Path, meta: &std::fs::Metadata) -> Result<Response, LogsError> {
    let mut f = tokio::fs::File::open(path).await.map_err(open_error)?;
    let len = meta.len();
    let mut head = vec![0u8; SNIFF_LEN.min(usize::try_from(len).unwrap_or(SNIFF_LEN))];
    let mut filled = 0;
    while filled < head.len() {
        match f.read(&mut head[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) => return Err(open_error(e)),
        }
    }
    head.truncate(filled);
    let content_type = type_by_extension(path).unwrap_or_else(|| sniff(&head));
    // The length is fixed at what the file had when asked for: a growing log is cut there.
    let rest = f.take(len.saturating_sub(filled as u64));
    let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(head))]);
    let body = futures::stream::unfold(rest, |mut r| async move {
        let mut buf = vec![0u8; CHUNK];
        match r.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), r))
            }
            Err(e) => Some((Err(e), r)),
        }
    });
    let mut resp = Response::new(Body::from_stream(futures::StreamExt::chain(first, body)));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    set_last_modified(&mut resp, meta.modified().ok());
    Ok(resp)
}

fn type_by_extension(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "htm" | "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "xml" => "text/xml; charset=utf-8",
        "txt" => "text/plain; charset=utf-8",
        "gz" => "application/gzip",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// Text unless it has bytes text never has, as Go's content sniffing decides for logs.
fn sniff(head: &[u8]) -> &'static str {
    if head.starts_with(&[0x1f, 0x8b, 0x08]) {
        return "application/x-gzip";
    }
    let binary = head
        .iter()
        .any(|b| matches!(b, 0x00..=0x08 | 0x0b | 0x0e..=0x1a | 0x1c..=0x1f));
    if binary {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning_refuses_dot_dot() {
        assert_eq!(clean("a/./b//c/").unwrap(), ["a", "b", "c"]);
        assert_eq!(clean("").unwrap(), Vec::<String>::new());
        assert!(clean("a/../../etc/passwd").is_err());
        assert!(clean("..").is_err());
    }

    #[test]
    fn hrefs_escape_like_go() {
        assert_eq!(href("pods/"), "pods/");
        assert_eq!(href("a b?#%.log"), "a%20b%3F%23%25.log");
        assert_eq!(href("c:d"), "./c:d");
        assert_eq!(escape_html("<a&'\">"), "&lt;a&amp;&#39;&#34;&gt;");
    }

    #[test]
    fn types() {
        assert_eq!(sniff(b"hello\n"), "text/plain; charset=utf-8");
        assert_eq!(sniff(&[0, 1, 2]), "application/octet-stream");
        assert_eq!(
            type_by_extension(Path::new("x/messages.gz")),
            Some("application/gzip")
        );
        assert_eq!(type_by_extension(Path::new("syslog")), None);
    }
}
