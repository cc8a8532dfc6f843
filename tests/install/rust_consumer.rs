// The C API (memest/memest_c.h) from Rust, against an installed memest: load a model, estimate it
// at batch 32, check that a freed result is refused as a bad handle. Built by tests/install/run.sh
// with plain rustc (Debian's), linked with -l memest.
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

#[repr(C)]
pub struct Model {
    _private: [u8; 0],
}
#[repr(C)]
pub struct Estimator {
    _private: [u8; 0],
}
#[repr(C)]
pub struct EstimateResult {
    _private: [u8; 0],
}

const OK: c_int = 0;
const BAD_HANDLE: c_int = 100;

extern "C" {
    fn memest_c_abi_version() -> c_int;
    fn memest_c_last_error() -> *const c_char;
    fn memest_model_load_file(path: *const c_char, out: *mut *mut Model) -> c_int;
    fn memest_model_free(model: *mut Model) -> c_int;
    fn memest_estimator_new(backend: *const c_char, out: *mut *mut Estimator) -> c_int;
    fn memest_estimator_free(estimator: *mut Estimator) -> c_int;
    fn memest_estimate(
        estimator: *const Estimator,
        model: *const Model,
        options_json: *const c_char,
        out: *mut *mut EstimateResult,
    ) -> c_int;
    fn memest_result_peak_device(result: *const EstimateResult, out: *mut u64) -> c_int;
    fn memest_result_free(result: *mut EstimateResult) -> c_int;
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(memest_c_last_error()).to_string_lossy().into_owned() }
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: rust_consumer MODEL.onnx");
    let path = CString::new(path).unwrap();
    let backend = CString::new("analytical").unwrap();
    let options = CString::new("{\"batch\": 32}").unwrap();
    let mut model: *mut Model = std::ptr::null_mut();
    let mut estimator: *mut Estimator = std::ptr::null_mut();
    let mut result: *mut EstimateResult = std::ptr::null_mut();
    let mut peak: u64 = 0;
    unsafe {
        assert_eq!(memest_c_abi_version(), 1);
        if memest_model_load_file(path.as_ptr(), &mut model) != OK
            || memest_estimator_new(backend.as_ptr(), &mut estimator) != OK
            || memest_estimate(estimator, model, options.as_ptr(), &mut result) != OK
            || memest_result_peak_device(result, &mut peak) != OK
        {
            eprintln!("error: {}", last_error());
            std::process::exit(3);
        }
        assert_eq!(memest_result_free(result), OK);
        assert_eq!(memest_result_free(result), BAD_HANDLE);
        assert_eq!(memest_estimator_free(estimator), OK);
        assert_eq!(memest_model_free(model), OK);
    }
    println!("rust: peak {} bytes", peak);
    std::process::exit(if peak > 0 { 0 } else { 4 });
}
