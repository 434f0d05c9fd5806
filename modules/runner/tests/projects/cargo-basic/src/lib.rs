//! A crate with one passing and one failing test, for the sandbox tests.

pub fn add(a: i32, b: i32) -> i32 {
    a + b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_small_numbers() {
        assert_eq!(add(2, 2), 4);
    }

    #[test]
    fn fails_on_purpose() {
        assert_eq!(add(2, 2), 5, "two and two make four");
    }
}
