//! Shared by the tests and the benchmark: a deterministic synthetic workload
//! with task structure (each task prefers its own experts), and a private
//! eldrd instance for the sidecar tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const LAYERS: u32 = 8;
pub const EXPERTS: u32 = 32;
pub const TOP_K: u32 = 2;
pub const TOKENS: u32 = 64;

/// xorshift64*: reproducible without any crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }
}

/// One request of task `task` (of `tasks`): every token picks TOP_K distinct
/// experts per layer, 85% of picks inside the task's slice of experts.
pub fn footprint(rng: &mut Rng, task: u32, tasks: u32) -> Vec<i16> {
    let slice = EXPERTS / tasks;
    let mut counts = vec![0i16; (LAYERS * EXPERTS) as usize];
    for layer in 0..LAYERS {
        let row = &mut counts[(layer * EXPERTS) as usize..((layer + 1) * EXPERTS) as usize];
        for _ in 0..TOKENS {
            let mut picked = [u32::MAX; TOP_K as usize];
            for k in 0..TOP_K as usize {
                loop {
                    let e = if rng.below(100) < 85 {
                        (task * slice + (layer + rng.below(slice)) % slice) % EXPERTS
                    } else {
                        rng.below(EXPERTS)
                    };
                    if !picked.contains(&e) {
                        picked[k] = e;
                        break;
                    }
                }
                row[picked[k] as usize] += 1;
            }
        }
    }
    counts
}

/// `n` requests cycling over `tasks` tasks, concatenated, plus their tasks.
pub fn workload(n: u32, tasks: u32, seed: u64) -> (Vec<i16>, Vec<u32>) {
    let mut rng = Rng::new(seed);
    let mut all = Vec::with_capacity((n * LAYERS * EXPERTS) as usize);
    let mut labels = Vec::with_capacity(n as usize);
    for i in 0..n {
        let task = i % tasks;
        all.extend(footprint(&mut rng, task, tasks));
        labels.push(task);
    }
    (all, labels)
}

/// A table fitted on a 4-task workload for `workers` workers.
pub fn fitted_table(workers: u32) -> eldr::Table {
    let (prefill, _) = workload(200, 4, 7);
    let data = eldr::Calibration {
        prefill: &prefill,
        decode: None,
        n: 200,
        layers: LAYERS,
        experts: EXPERTS,
        top_k: TOP_K,
    };
    let mut options = eldr::FitOptions::new(workers);
    options.select_layers = false;
    options.threads = 1;
    eldr::Table::fit(&data, &options).expect("fit")
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "eldr-rs-{}-{}-{}",
            tag,
            std::process::id(),
            Instant::now().elapsed().as_nanos()
                ^ Rng::new(std::process::id() as u64).next_u64() as u128
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The eldrd binary: $ELDRD (set by ctest). None when absent: the sidecar
/// tests are then skipped, loudly.
pub fn eldrd_binary() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("ELDRD")?);
    if path.is_file() {
        Some(path)
    } else {
        None
    }
}

/// eldrd on a private instance, stopped (SIGTERM, then kill) on drop.
pub struct Daemon {
    pub instance: String,
    child: Child,
    _dir: TempDir,
}

impl Daemon {
    /// Starts eldrd with a freshly fitted table and waits until a client can open.
    pub fn start(binary: &Path, tag: &str, workers: u32) -> Daemon {
        let dir = TempDir::new(tag);
        let table_path = dir.path().join("table.eldr");
        fitted_table(workers).save(&table_path).expect("save table");
        let instance = format!("rs-{}-{}", tag, std::process::id());
        let child = Command::new(binary)
            .arg("--instance")
            .arg(&instance)
            .arg("--table")
            .arg(&table_path)
            .args(["--log-level", "warn", "--metrics-port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn eldrd");
        let mut daemon = Daemon {
            instance,
            child,
            _dir: dir,
        };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("eldrd exited during start: {}", status);
            }
            let options = eldr::ClientOptions {
                open_timeout: Duration::from_millis(200),
                ..eldr::ClientOptions::default()
            };
            match eldr::Client::open(&self.instance, &options) {
                Ok(_) => return,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("eldrd not ready after 20 s: {}", e),
            }
        }
    }

    pub fn client(&self) -> eldr::Client {
        eldr::Client::open(&self.instance, &eldr::ClientOptions::default()).expect("client open")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM for a graceful shutdown; kill if it does not stop in 10 s.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
