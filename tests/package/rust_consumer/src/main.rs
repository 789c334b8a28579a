// Loads the installed libeldr, checks its version against the crate's (both
// eldr.h's) and routes one footprint on a fitted table.
fn main() -> eldr::Result<()> {
    eldr::ensure_abi()?;
    assert_eq!(eldr::version(), eldr::VERSION);
    let (layers, experts, n) = (2u32, 8u32, 16usize);
    let mut prefill = vec![0i16; n * (layers * experts) as usize];
    for (i, cell) in prefill.iter_mut().enumerate() {
        let expert = (i % experts as usize) as u32;
        let request = i / (layers * experts) as usize;
        *cell = if (expert < experts / 2) == (request % 2 == 0) {
            4
        } else {
            0
        };
    }
    let calibration = eldr::Calibration {
        prefill: &prefill,
        decode: None,
        n: n as u64,
        layers,
        experts,
        top_k: 2,
    };
    let table = eldr::Table::fit(&calibration, &eldr::FitOptions::new(2))?;
    let router = eldr::Router::new(&table, &eldr::RouterOptions::default())?;
    let footprint = eldr::Footprint::new(&prefill[..(layers * experts) as usize], layers, experts)?;
    let worker = router.route(&footprint)?.worker;
    assert!(worker == 0 || worker == 1);
    println!(
        "rust consumer: eldr {} routed to worker {}",
        eldr::version(),
        worker
    );
    Ok(())
}
