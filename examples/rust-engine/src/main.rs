//! eldr Rust engine example: what examples/c-engine does, in Rust. For each
//! request's prefill footprint (from an int16 (N, L, E) .npy file), ask the
//! node's eldrd which decode worker should take it.
//!
//!   eldr-rust-engine --instance NAME --footprints prefill.npy [--timeout-ms 1000]
//!                    [--open-timeout-ms 2000] [--prefix ID_PREFIX] [--limit N]
//!
//! Prints `<request id> -> worker <w> similarity <s> band <b>` per request and
//! completes each at once (a real engine completes when the decode ends).
//! Exit status: 0 if every request was routed, 1 otherwise, 2 on bad usage.

mod npy;

use std::process::ExitCode;
use std::time::Duration;

struct Options {
    instance: String,
    footprints: String,
    prefix: String,
    timeout: Duration,
    open_timeout: Duration,
    limit: usize,
}

const USAGE: &str = "usage: eldr-rust-engine --instance NAME --footprints FILE.npy \
[--timeout-ms MS] [--open-timeout-ms MS] [--prefix ID_PREFIX] [--limit N]";

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        instance: String::new(),
        footprints: String::new(),
        prefix: format!("rs{}", std::process::id()),
        timeout: Duration::from_millis(1000),
        open_timeout: Duration::from_millis(2000),
        limit: usize::MAX,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{}", USAGE);
            std::process::exit(0);
        }
        let value = it.next().ok_or_else(|| format!("{} needs a value", flag))?;
        let millis = || {
            value
                .parse::<u32>()
                .map(|v| Duration::from_millis(v as u64))
                .map_err(|_| format!("{}: {:?} is not a number of milliseconds", flag, value))
        };
        match flag.as_str() {
            "--instance" => o.instance = value.clone(),
            "--footprints" => o.footprints = value.clone(),
            "--prefix" => o.prefix = value.clone(),
            "--timeout-ms" => o.timeout = millis()?,
            "--open-timeout-ms" => o.open_timeout = millis()?,
            "--limit" => o.limit = value.parse().map_err(|_| format!("--limit: {:?}", value))?,
            _ => return Err(format!("unknown option {}", flag)),
        }
    }
    if o.instance.is_empty() || o.footprints.is_empty() {
        return Err("--instance and --footprints are required".into());
    }
    if o.prefix.is_empty() || o.prefix.len() > 100 {
        return Err("--prefix must be 1..100 bytes".into());
    }
    Ok(o)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("eldr-rust-engine: {}\n{}", e, USAGE);
            return ExitCode::from(2);
        }
    };
    let file = match npy::read(&options.footprints) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("eldr-rust-engine: {}", e);
            return ExitCode::from(1);
        }
    };
    let client_options = eldr::ClientOptions {
        open_timeout: options.open_timeout,
        ..Default::default()
    };
    // Client::open checks the library's ABI first.
    let client = match eldr::Client::open(&options.instance, &client_options) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("eldr-rust-engine: open: {}", e);
            return ExitCode::from(1);
        }
    };

    let cells = file.layers as usize * file.experts as usize;
    let n = file.requests.min(options.limit);
    let mut failed = 0usize;
    for (i, counts) in file.counts.chunks_exact(cells).take(n).enumerate() {
        let id = format!("{}-{}", options.prefix, i);
        let routed = eldr::Footprint::new(counts, file.layers, file.experts)
            .and_then(|fp| client.route(&id, &fp, options.timeout));
        match routed {
            Ok(d) => {
                println!(
                    "{} -> worker {} similarity {:.4} band {}",
                    id, d.worker, d.similarity, d.band_size
                );
                if let Err(e) = client.complete(&id, 0) {
                    eprintln!("eldr-rust-engine: complete {}: {}", id, e);
                    failed += 1;
                }
            }
            Err(e) => {
                eprintln!("eldr-rust-engine: {}: {}", id, e);
                failed += 1;
            }
        }
    }
    if failed > 0 {
        eprintln!("eldr-rust-engine: {} of {} requests failed", failed, n);
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
