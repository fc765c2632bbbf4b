//! Selects the build variant: `CUDECOMP_BUILD_CPU_ONLY=ON` (or 1/TRUE/YES) builds the CPU
//! variant (NumPy arrays), anything else the GPU variant (CUDA arrays).

fn main() {
    println!("cargo:rerun-if-env-changed=CUDECOMP_BUILD_CPU_ONLY");
    println!("cargo::rustc-check-cfg=cfg(cpu_only)");
    let v = std::env::var("CUDECOMP_BUILD_CPU_ONLY").unwrap_or_default();
    if matches!(v.to_ascii_uppercase().as_str(), "ON" | "1" | "TRUE" | "YES") {
        println!("cargo:rustc-cfg=cpu_only");
    }
}
