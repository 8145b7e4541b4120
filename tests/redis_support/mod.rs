//! A real `redis-server` per test: started on a free port, stopped on drop.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Poll `read` until it gives `want`, for at most 10 s (tokio's clock):
/// a test on the real clock waits for a state, never for a time.
pub async fn until_reads<T: PartialEq + std::fmt::Debug>(
    mut read: impl AsyncFnMut() -> T,
    want: T,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = read().await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {got:?}, waiting for {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Start `redis-server` on `port` on loopback, in the foreground, keeping
/// nothing on disk, with whatever else `more` adds to its command line (a
/// cluster node's settings).
pub fn spawn_redis_server(port: u16, more: impl FnOnce(&mut Command)) -> Child {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    more(&mut command);
    command
        .spawn()
        .expect("redis-server must be installed (Debian package redis-server) to run these tests")
}

/// A `redis-server` child process; killed (and reaped) on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// Start a server on a free port and wait until it answers there. A
    /// port found free may be taken before the server binds it (by another
    /// test's server among others): the child then exits, and another
    /// port is tried.
    pub fn start() -> RedisServer {
        for _ in 0..10 {
            let mut server = RedisServer {
                child: None,
                port: free_port(),
            };
            if server.try_spawn() {
                return server;
            }
        }
        panic!("redis-server did not come up on any of ten free ports");
    }

    /// Start a server on `port` and wait until it answers there.
    pub fn start_on(port: u16) -> RedisServer {
        let mut server = RedisServer { child: None, port };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        assert!(
            self.try_spawn(),
            "redis-server on port {} did not come up",
            self.port
        );
    }

    /// Spawn a server on the port and wait until it is this child that
    /// answers there (its `INFO`'s `process_id`), not another test's server
    /// on the same port, which a PING alone would take for it (its end
    /// would then break this test's connections). False when the child
    /// exits first (the port was taken) or does not answer in 10 s.
    fn try_spawn(&mut self) -> bool {
        let mut child = spawn_redis_server(self.port, |_| {});
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if pid_on(self.port) == Some(child.id()) {
                self.child = Some(child);
                return true;
            }
            if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:port/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kill the server (SIGKILL: no shutdown, no goodbye to clients).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same port, with an empty dataset.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Freeze the server (SIGSTOP): connections stay open, nothing answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Undo [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let status = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status()
                .expect("run kill");
            assert!(status.success(), "kill {signal} {pid} failed");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL ends a frozen server too.
        self.kill();
    }
}

/// The process id of the `redis-server` answering on `port`, if one does
/// (`INFO server`'s `process_id`).
fn pid_on(port: u16) -> Option<u32> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    stream
        .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(at) = text.find("process_id:") {
            let rest = &text[at + "process_id:".len()..];
            if let Some(end) = rest.find("\r\n") {
                return rest[..end].trim().parse().ok();
            }
        }
    }
}

/// Each bucket in a task of its own until `deadline`: try, and on a refusal
/// sleep exactly the wait given. Returns how many tokens were granted in
/// all. (Several tasks may share one bucket: pass it more than once.)
pub async fn grant_until(
    buckets: Vec<std::sync::Arc<reqwest_pace::redis::RedisTokenBucket>>,
    deadline: tokio::time::Instant,
) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    let granted = std::sync::Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for bucket in buckets {
        let granted = std::sync::Arc::clone(&granted);
        handles.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < deadline {
                match bucket.try_acquire(1).await {
                    Ok(()) => {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(reqwest_pace::Error::NotYet { wait, .. }) => tokio::time::sleep(wait).await,
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    granted.load(Ordering::Relaxed)
}

/// A plain multiplexed connection to `server`, for a test's own commands.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
