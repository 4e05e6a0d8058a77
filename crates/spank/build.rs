//! Generates the SPANK bindings from the installed `<slurm/spank.h>`.
//!
//! The plugin must be built against the headers of the Slurm it is loaded into: slurmd refuses a
//! spank plugin whose `plugin_version` differs in major.minor from its own `SLURM_VERSION_NUMBER`.
//! So the version is taken from the header, never written down here.
//!
//! `SLURM_INCLUDE_DIR` points at the directory that holds `slurm/spank.h` (default `/usr/include`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    spank::generate();
}

mod spank {
    use std::path::{Path, PathBuf};

    const HINT: &str = "install the Debian packages libslurm-dev and libclang-dev \
        (or set SLURM_INCLUDE_DIR to the directory holding slurm/spank.h), \
        or build everything but the plugin: cargo build --workspace --exclude gpu-mem-quota-spank";

    pub(crate) fn generate() {
        let include = std::env::var_os("SLURM_INCLUDE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/include"));
        let header = include.join("slurm/spank.h");
        if !header.is_file() {
            fail(&format!("{} not found: {HINT}", header.display()));
        }
        println!("cargo:rerun-if-changed={}", header.display());
        println!(
            "cargo:rerun-if-changed={}",
            include.join("slurm/slurm_version.h").display()
        );

        let builder = bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_type("spank_t")
            .allowlist_type("spank_option")
            .allowlist_type("spank_context")
            .allowlist_type("spank_item")
            .allowlist_function("spank_option_register")
            .allowlist_function("spank_option_getopt")
            .allowlist_function("spank_context")
            .allowlist_function("spank_get_item")
            .allowlist_function("spank_getenv")
            .allowlist_function("spank_setenv")
            .allowlist_function("spank_unsetenv")
            .allowlist_function("spank_strerror")
            .allowlist_function("slurm_info")
            .allowlist_function("slurm_error")
            .allowlist_function("slurm_verbose")
            .allowlist_function("slurm_debug")
            .allowlist_var("SLURM_VERSION_NUMBER")
            .allowlist_var("ESPANK_.*")
            .constified_enum_module("spank_context")
            .constified_enum_module("spank_item")
            .layout_tests(false);

        // bindgen panics when it cannot load libclang; turn that into the one sentence an admin needs.
        std::panic::set_hook(Box::new(|_| {}));
        let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
        let _ = std::panic::take_hook();
        let bindings = match generated {
            Ok(Ok(bindings)) => bindings,
            Ok(Err(e)) => fail(&format!(
                "bindgen could not read {}: {e}: {HINT}",
                header.display()
            )),
            Err(_) => fail(&format!("libclang could not be loaded for bindgen: {HINT}")),
        };
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        write(&out.join("spank_bindings.rs"), &bindings.to_string());
    }

    fn write(path: &Path, text: &str) {
        if let Err(e) = std::fs::write(path, text) {
            fail(&format!("cannot write {}: {e}", path.display()));
        }
    }

    fn fail(sentence: &str) -> ! {
        eprintln!("gpu-mem-quota build: {sentence}");
        println!("cargo:warning=gpu-mem-quota build: {sentence}");
        std::process::exit(1);
    }
}
