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

/// Words of each of the 4 tasks' prompts: task `t` of the workload is a
/// domain whose prompts use its own words.
pub const DOMAIN_WORDS: [[&str; 4]; 4] = [
    ["integral", "derivative", "matrix", "theorem"],
    ["function", "compile", "pointer", "class"],
    ["court", "statute", "contract", "plaintiff"],
    ["patient", "dose", "symptom", "diagnosis"],
];

/// A prompt of task `task`: a shared system prompt, the domain's words, filler.
pub fn domain_text(task: u32, variant: u32) -> String {
    let mut s = String::from("You are a helpful assistant. Answer the question. ");
    for i in 0..6 {
        s.push_str(DOMAIN_WORDS[task as usize][((i + variant) % 4) as usize]);
        s.push(' ');
    }
    s.push_str(&format!("please and thank you {}", variant));
    s
}

/// The same as token ids: boilerplate ids, the domain's ids, one noise id.
pub fn domain_tokens(task: u32, variant: u32) -> Vec<u32> {
    let mut t = vec![1, 2, 3, 4, 5];
    t.extend((0..8).map(|i| 100 * (task + 1) + (i * 7 + variant) % 10));
    t.push(9000 + variant);
    t
}

/// `fitted_table(workers)` with a predictor fitted on `per_task` text and
/// `per_task` token-id prompts of each of the 4 tasks, each with a footprint
/// of its task.
pub fn predictor_table(workers: u32, per_task: u32) -> eldr::Table {
    let table = fitted_table(workers);
    let mut rng = Rng::new(23);
    let mut texts = Vec::new();
    let mut ids = Vec::new();
    let mut footprints = Vec::new();
    for task in 0..4 {
        for v in 0..per_task {
            texts.push(domain_text(task, v));
            ids.push(domain_tokens(task, v));
            footprints.extend(footprint(&mut rng, task, 4));
            footprints.extend(footprint(&mut rng, task, 4));
        }
    }
    let mut prompts = Vec::new();
    for (text, tokens) in texts.iter().zip(&ids) {
        prompts.push(eldr::Prompt::Text(text));
        prompts.push(eldr::Prompt::Tokens(tokens));
    }
    let (with_predictor, skipped) = table
        .fit_predictor(&prompts, &footprints, &eldr::PredictorOptions::default())
        .expect("fit_predictor");
    assert_eq!(skipped, 0);
    with_predictor
}

/// The worker `table` routes task `task`'s footprints to (its best cluster).
pub fn task_worker(table: &eldr::Table, task: u32) -> i32 {
    let counts = footprint(&mut Rng::new(1000 + task as u64), task, 4);
    let scores = table
        .scores(&eldr::Footprint::new(&counts, LAYERS, EXPERTS).unwrap())
        .unwrap();
    let best = (0..scores.len())
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
        .unwrap();
    table.worker_ids().unwrap()[best]
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
        Daemon::start_with(binary, tag, &fitted_table(workers))
    }

    /// Starts eldrd with `table` and waits until a client can open.
    pub fn start_with(binary: &Path, tag: &str, table: &eldr::Table) -> Daemon {
        Daemon::start_with_args(binary, tag, table, &[])
    }

    /// The same with more eldrd arguments.
    pub fn start_with_args(
        binary: &Path,
        tag: &str,
        table: &eldr::Table,
        extra: &[&str],
    ) -> Daemon {
        let dir = TempDir::new(tag);
        let table_path = dir.path().join("table.eldr");
        table.save(&table_path).expect("save table");
        let instance = format!("rs-{}-{}", tag, std::process::id());
        let child = Command::new(binary)
            .arg("--instance")
            .arg(&instance)
            .arg("--table")
            .arg(&table_path)
            .args(["--log-level", "warn", "--metrics-port", "0"])
            .args(extra)
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
