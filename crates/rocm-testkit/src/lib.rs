//! The GPU test kit: what makes rocmforge's GPU tests isolated, leak-checked and correct in
//! parallel.
//!
//! ```no_run
//! #[test]
//! fn doubles() {
//!     let gpu = rocm_testkit::gpu_test!(); // skips (or fails under ROCMFORGE_REQUIRE_GPU=1) without a GPU
//!     let x = gpu.stream().upload(&[1.0f32, 2.0]).unwrap();
//!     assert_eq!(x.to_vec().unwrap(), [1.0, 2.0]);
//! } // end of scope: its stream is synchronised, and any byte it allocated still live fails the test
//! ```
//!
//! `docs/testing.md` explains each rule and why it exists.

mod compare;
mod fixture;
mod memory;
mod random;
mod scope;

pub use compare::{Comparison, Tolerance, assert_close, compare, max_abs_diff, relative_l2};
pub use fixture::{GpuUnavailable, REQUIRE_GPU_ENV, SANITIZER_ENV, gpu_backend, require_gpu, sanitizer};
pub use memory::{BUDGET_WAIT_ENV, DEFAULT_TEST_MEMORY, DEFAULT_WAIT, JOBS_PER_GPU_ENV};
pub use random::Rng;
pub use scope::{GpuTest, LeakReport};

/// Opens a [`GpuTest`] scope for the current test, or returns from the test when no GPU is
/// present (after printing one line saying why). With `ROCMFORGE_REQUIRE_GPU=1` a missing GPU
/// fails the test instead. The test's device memory comes from the device's budget shared by
/// every test process ([`DEFAULT_TEST_MEMORY`], or declared: `gpu_test!(memory = 16 << 30)`).
#[macro_export]
macro_rules! gpu_test {
    () => {
        match $crate::GpuTest::begin() {
            ::std::option::Option::Some(scope) => scope,
            ::std::option::Option::None => return,
        }
    };
    (memory = $bytes:expr) => {
        match $crate::GpuTest::begin_with_memory($bytes) {
            ::std::option::Option::Some(scope) => scope,
            ::std::option::Option::None => return,
        }
    };
}
