//! Cost of one `eldr_router_route` through the safe Rust binding, through the
//! raw FFI declaration, and from a C loop, on the same router and footprint.
//!
//!   cargo run --release --offline -p eldr-bench [-- ROUNDS ITERATIONS]
//!
//! Prints the median ns per call of each and the binding's extra cost.

#[path = "../../eldr/tests/common/mod.rs"]
mod common;

use std::time::Instant;

extern "C" {
    fn eldr_bench_route_loop(
        router: *mut eldr::sys::eldr_router_t,
        counts: *const i16,
        layers: u32,
        experts: u32,
        iterations: u64,
        failed: *mut i32,
    ) -> u64;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() -> Result<(), eldr::Error> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let rounds = *args.first().unwrap_or(&15) as usize;
    let iterations = *args.get(1).unwrap_or(&20_000);

    let table = common::fitted_table(8);
    let router = eldr::Router::new(&table, &eldr::RouterOptions::default())?;
    let counts = common::footprint(&mut common::Rng::new(3), 1, 4);
    let fp = eldr::Footprint::new(&counts, common::LAYERS, common::EXPERTS)?;

    let (mut c_ns, mut raw_ns, mut safe_ns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        // C loop.
        let mut failed = 0;
        // SAFETY: valid router; counts holds LAYERS*EXPERTS values.
        let ns = unsafe {
            eldr_bench_route_loop(
                router.as_raw(),
                counts.as_ptr(),
                common::LAYERS,
                common::EXPERTS,
                iterations,
                &mut failed,
            )
        };
        assert_eq!(failed, 0, "C loop failed: {}", eldr::status_name(failed));
        c_ns.push(ns as f64 / iterations as f64);

        // Raw FFI from Rust.
        let start = Instant::now();
        let mut decision = std::mem::MaybeUninit::<eldr::sys::eldr_decision_t>::zeroed();
        // SAFETY: init writes the whole struct.
        unsafe { eldr::sys::eldr_decision_init(decision.as_mut_ptr()) };
        for _ in 0..iterations {
            // SAFETY: as above; the decision is initialised.
            let s = unsafe {
                eldr::sys::eldr_router_route(
                    router.as_raw(),
                    counts.as_ptr(),
                    common::LAYERS,
                    common::EXPERTS,
                    std::ptr::null(),
                    0,
                    decision.as_mut_ptr(),
                )
            };
            assert_eq!(s, 0);
        }
        raw_ns.push(start.elapsed().as_nanos() as f64 / iterations as f64);

        // Safe binding.
        let start = Instant::now();
        for _ in 0..iterations {
            std::hint::black_box(router.route(&fp)?);
        }
        safe_ns.push(start.elapsed().as_nanos() as f64 / iterations as f64);
    }
    let (c, raw, safe) = (median(c_ns), median(raw_ns), median(safe_ns));
    println!(
        "route [{}x{}], {} workers, {} rounds x {} calls: C {:.1} ns, Rust raw FFI {:.1} ns, \
         Rust safe {:.1} ns, extra vs C {:+.1} ns",
        common::LAYERS,
        common::EXPERTS,
        8,
        rounds,
        iterations,
        c,
        raw,
        safe,
        safe - c
    );
    Ok(())
}
