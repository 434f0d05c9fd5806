//! Docker sandbox overhead (being written).
fn main() {}
