//! The `make-checkpoint` binary: see the library's documentation.

fn main() -> anyhow::Result<()> {
    tgi_make_checkpoint::cli_main()
}
