fn main() -> anyhow::Result<()> {
    Ok(())
}
