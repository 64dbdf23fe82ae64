//! The sandbox process of a pod: it holds the pod's namespaces open and does nothing else.
//!
//! Running as PID 1 of a PID namespace it also inherits orphans, so it reaps them to keep
//! the process table clean. SIGINT and SIGTERM end it with status 0 so that a runtime's
//! graceful stop is not reported as a failure.

use std::io::Write;

const VERSION: &str = env!("CARGO_PKG_VERSION");

extern "C" fn on_stop(signal: libc::c_int) {
    let msg: &[u8] = if signal == libc::SIGINT {
        b"pause: SIGINT, exiting\n"
    } else {
        b"pause: SIGTERM, exiting\n"
    };
    // Only async-signal-safe calls in here: write(2) and _exit(2).
    unsafe {
        libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len());
        libc::_exit(0);
    }
}

extern "C" fn on_child(_signal: libc::c_int) {
    // One SIGCHLD may stand for several exits, so drain every finished child.
    unsafe {
        while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
    }
}

fn install(signal: libc::c_int, handler: extern "C" fn(libc::c_int), flags: libc::c_int) -> bool {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        action.sa_flags = flags;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut()) == 0
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    if let Some(arg) = args.next() {
        if arg == "-v" || arg == "--version" {
            println!("pause (kubelet-rs) {VERSION}");
            return;
        }
        eprintln!("usage: pause [-v]");
        std::process::exit(2);
    }

    let ok = install(libc::SIGINT, on_stop, 0)
        && install(libc::SIGTERM, on_stop, 0)
        && install(libc::SIGCHLD, on_child, libc::SA_NOCLDSTOP | libc::SA_RESTART);
    if !ok {
        let _ = writeln!(std::io::stderr(), "pause: cannot install signal handlers");
        std::process::exit(1);
    }
    if std::process::id() != 1 {
        let _ = writeln!(
            std::io::stderr(),
            "pause: not PID 1, orphans of this namespace will not be reaped here"
        );
    }

    loop {
        // pause(2) only returns after a handled signal (SIGCHLD); wait for the next one.
        unsafe {
            libc::pause();
        }
    }
}
