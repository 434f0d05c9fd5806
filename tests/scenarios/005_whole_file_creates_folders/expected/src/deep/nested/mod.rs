pub fn nested() -> u8 {
    7
}
