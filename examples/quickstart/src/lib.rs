//! A tiny statistics crate with a bug, for Nuvira's quickstart.

/// The arithmetic mean of `xs`, or `None` when `xs` is empty.
pub fn average(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let sum: f64 = xs.iter().sum();
    Some(sum / (xs.len() - 1) as f64)
}

/// The largest value of `xs`, or `None` when `xs` is empty.
pub fn maximum(xs: &[f64]) -> Option<f64> {
    xs.iter().copied().reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn average_of_nothing_is_none() {
        assert_eq!(average(&[]), None);
    }

    #[test]
    fn average_of_three_numbers() {
        assert_eq!(average(&[1.0, 2.0, 6.0]), Some(3.0));
    }

    #[test]
    fn maximum_picks_the_largest() {
        assert_eq!(maximum(&[1.0, 7.5, 3.0]), Some(7.5));
    }
}
