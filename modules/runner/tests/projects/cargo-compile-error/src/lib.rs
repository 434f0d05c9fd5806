//! A crate whose tests do not compile, for the sandbox tests.

pub fn add(a: i32, b: i32) -> i32 {
    a + b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn does_not_compile() {
        let total: i32 = "four";
        assert_eq!(add(2, 2), total);
    }
}
