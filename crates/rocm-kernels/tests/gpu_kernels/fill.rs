//! `fill` against its CPU reference.

use rocm_kernels::fill::{fill_f32, fill_reference};
use rocm_testkit::{Rng, Tolerance, assert_close, gpu_test};

#[test]
fn fill_writes_every_element_at_awkward_sizes() {
    let gpu = gpu_test!();
    let mut rng = Rng::new(0xf111);
    for n in [1, 7, 127, 255, 257, 4097, 1_000_003] {
        let value = rng.uniform(-1e3, 1e3) as f32;
        let mut out = gpu.stream().alloc::<f32>(n).unwrap();
        out.poison().unwrap();
        fill_f32(&mut out, value).unwrap();
        let mut expected = vec![f32::NAN; n];
        fill_reference(&mut expected, value);
        assert_close(&out.to_vec().unwrap(), &expected, Tolerance::EXACT);
    }
}

#[test]
fn fill_of_an_empty_buffer_is_a_no_op() {
    let gpu = gpu_test!();
    let mut out = gpu.stream().alloc::<f32>(0).unwrap();
    fill_f32(&mut out, 1.0).unwrap();
}
