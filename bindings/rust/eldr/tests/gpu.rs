//! GPU footprints through the safe API, without a GPU: the errors a build
//! without CUDA or a machine without a device gives, and the constants. The
//! kernels are checked against the CPU reference by the C++ GPU suites
//! (cuda/check_gpu.sh).

use eldr::{gpu_error, status, CudaStream, GpuFootprints, GpuOptions};

fn device_present() -> bool {
    // SAFETY: no arguments, no state.
    unsafe { eldr::sys::eldr_gpu_available() }
}

#[test]
fn without_a_device_new_is_an_error_naming_cuda() {
    if device_present() {
        return; // a device is present: the C++ GPU suites cover it
    }
    let err = GpuFootprints::new(&GpuOptions::new(48, 128, 8, 1024)).unwrap_err();
    assert!(
        err.status() == status::CUDA || err.status() == status::UNSUPPORTED,
        "{}",
        err
    );
    assert!(err.message().to_lowercase().contains("cuda"), "{}", err);
}

#[test]
fn bad_options_are_refused_before_any_device_is_touched() {
    let mut options = GpuOptions::new(48, 128, 8, 1024);
    options.block_size = 0;
    let err = GpuFootprints::new(&options).unwrap_err();
    if err.status() == status::UNSUPPORTED {
        return; // a build without CUDA refuses every call alike
    }
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    assert!(err.message().contains("block_size"), "{}", err);
}

#[test]
fn defaults_and_constants_match_the_c_header() {
    let options = GpuOptions::new(48, 128, 8, 1024);
    assert_eq!(
        (
            options.block_size,
            options.max_requests_per_step,
            options.device
        ),
        (16, 256, 0)
    );
    assert_eq!(
        [
            gpu_error::EXPERT_ID,
            gpu_error::SLOT,
            gpu_error::BLOCK_ROW,
            gpu_error::FOOTPRINT,
            gpu_error::BLOCK_ID
        ],
        [1, 2, 4, 8, 16]
    );
    assert!(CudaStream::LEGACY_DEFAULT.as_raw().is_null());
}
